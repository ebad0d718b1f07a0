// SPDX-License-Identifier: Apache-2.0
/// @file
/// Standalone profiles of GPU types and training jobs, with where each number comes from, and
/// the mechanism parameters of a GPU type that the GPU-pair model reads.
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"

namespace tgs::sim {

/// Where a number of a profile comes from.
enum class provenance : std::uint8_t {
  /// Measured on that GPU type (a harness profile row, or an alone rate of docs/results).
  measured,
  /// Stated in the TGS paper (NSDI'23).
  paper,
  /// Our estimate by a stated rule (docs/simulator/profiles.md), to be replaced by a measurement.
  estimate,
  /// Inferred by the global fit from the measured pairs of that GPU type (`tgs-sim fit`), until a
  /// profile run measures it.
  fitted,
};

/// The letter a table uses for each provenance: m, p, e, f.
[[nodiscard]] constexpr char provenance_letter(provenance p) noexcept {
  switch (p) {
    case provenance::measured: return 'm';
    case provenance::paper: return 'p';
    case provenance::estimate: return 'e';
    case provenance::fitted: return 'f';
  }
  return '?';
}

[[nodiscard]] constexpr std::string_view to_string(provenance p) noexcept {
  switch (p) {
    case provenance::measured: return "measured";
    case provenance::paper: return "paper";
    case provenance::estimate: return "estimate";
    case provenance::fitted: return "fitted";
  }
  return "unknown";
}

/// How kernels of two jobs share the SMs. The same vocabulary the rate controllers state their
/// mechanism in (`RegisteredRateController`).
using compute_mode = sharing_mechanism;
inline constexpr std::size_t compute_mode_count = 3;

/// The mechanism parameters of one GPU type: what is left of the pair model once the jobs'
/// profiles are known (docs/simulator/contention-model.md). Each is a property of the GPU and its
/// driver, not of a job or a pair; `tgs-sim fit` fits the ones marked so globally, over all the
/// measured pairs of the GPU type.
struct gpu_contention {
  /// Time slicing: each unit of GPU time the co-runner takes also costs a job this much of its
  /// own time (context switches, refilled caches and TLBs). Fitted.
  double switch_loss = 0.3;
  /// MPS: the same for two clients whose kernels run side by side (shared caches, memory
  /// bandwidth). Fitted.
  double mps_switch_loss = 0.2;
  /// MPS: the GPU time (in units of one job keeping the SMs busy) two clients can use together;
  /// above 1 because one client's kernels fill SMs the other's leave idle. Fitted.
  double mps_capacity = 1.2;
  /// MPS with the opportunistic client at below-normal dispatch priority: what each unit of the
  /// opportunistic job's GPU share costs the production job (its kernels wait for the
  /// opportunistic blocks already on the SMs, which MPS does not preempt). Fitted where priority
  /// cells were measured; NaN (unmeasured) takes `mps_switch_loss`, the same loss as without
  /// priority.
  double mps_priority_loss = std::numeric_limits<double>::quiet_NaN();
  /// Shared unified memory oversubscribed (both jobs' pages compete): extra time per iteration,
  /// in standalone iterations, of a job once the overflow passes `thrash_knee`, per compute mode.
  /// Fitted where a measured pair oversubscribed the card (the paper's A100 pairs); 0 elsewhere.
  std::array<double, compute_mode_count> thrash{};
  /// The interposer's cost: extra iteration time, as a fraction, of a job under tgs's hooks.
  /// Measured as 0.0% on an H100 and 0.3% on an H200 (docs/results/rate-control.md); the paper
  /// reports up to 4.5% on its A100.
  double interposer_overhead = 0;
  /// Time slicing, gap overrun: the context switch, in seconds, that a co-runner's kernel adds to
  /// its own length when it lands in a job's busy stretch (docs/results/time-slicing.md). Fitted
  /// on GPU types whose profiles measure kernels and idle gaps; 0 (no overrun) elsewhere.
  double overrun_switch_s = 0;
  /// What a context switch costs a job whose kernel waits behind the co-runner's, in seconds
  /// (gap filling: the wait of a production job that resumes). Estimate.
  double context_switch_s = 25e-6;
  /// Share of a resuming production job's wait that reaches its iteration time (a job bound by
  /// its host side hides a late kernel until its next synchronisation). Estimate until measured
  /// idle-harvest pairs fit it.
  double gap_exposure = 0.5;
};

/// A GPU type: what the contention and memory models need of the card.
struct gpu_profile {
  std::string name;            ///< e.g. "a100-40gb"
  bytes memory{};              ///< the card's memory
  double host_link_gbps = 25;  ///< host<->GPU bandwidth (GB/s) that evicted pages cross
  int mig_slices = 7;          ///< compute slices of a full MIG partition; 0: no MIG
  gpu_contention contention{};
};

/// The fields of a model profile that carry a provenance, in table order.
enum class profile_field : std::uint8_t {
  iteration_time,
  busy_fraction,
  kernels_per_iteration,
  blocks_per_iteration,
  gaps_per_iteration,
  jitter,
  slice_sensitivity,
  footprint,
  hot_set,
};
inline constexpr std::size_t profile_field_count = 9;

/// The column name of a profile field in models.csv.
[[nodiscard]] constexpr std::string_view to_string(profile_field f) noexcept {
  constexpr std::array<std::string_view, profile_field_count> names{
      "iteration_ms", "busy_fraction", "kernels_per_iteration", "blocks_per_iteration",
      "gaps_per_iteration", "jitter", "slice_sensitivity", "footprint_gib", "hot_gib"};
  return names[static_cast<std::size_t>(f)];
}

/// A training job running alone on one GPU type.
struct model_profile {
  std::string model;                 ///< e.g. "resnet50"
  std::string gpu;                   ///< the GPU type this row describes
  int batch_size = 0;
  duration iteration_time{};         ///< standalone iteration time
  /// Share of wall time the job has kernels running when it runs alone (its GPU demand).
  double busy_fraction = 0;
  double kernels_per_iteration = 0;  ///< kernel launches per iteration
  double blocks_per_iteration = 0;   ///< thread blocks launched per iteration (TGS's signal)
  /// Idle gaps of the GPU per iteration when the job runs alone: its idle time, (1 - b) x the
  /// iteration time, comes in this many gaps.
  double gaps_per_iteration = 0;
  /// Relative standard deviation of the job's launch rate over 1 s windows, alone: its host-side
  /// jitter, which a controller that counts launches reads as contention.
  double jitter = 0;
  /// How the job's GPU time stretches on a fraction f of the SMs (a MIG slice, an MPS thread
  /// cap): by 1 + slice_sensitivity x (1/f - 1). 1: its kernels fill the GPU; 0: they fit anywhere.
  double slice_sensitivity = 0;
  bytes footprint{};                 ///< memory the job allocates
  /// Bytes its steps read or write in its memory per iteration: what crosses the host link per
  /// iteration for the share of its footprint that is not resident.
  bytes hot_set{};
  std::array<provenance, profile_field_count> origin{};  ///< each field's provenance
  std::string source;                ///< where the numbers come from, in words

  /// What tgs-node measures of the job that its choice of mechanism reads (`tgs::choice_facts`)
  /// and the fields above do not give: the fraction of its time the job's host waits for its GPU
  /// as a production job alone, and its longest kernel span as an opportunistic job. Empty where
  /// never measured on this GPU type (sim/data/job_facts.csv has the measured ones): the
  /// simulator then passes the fact empty, as tgs-node does before it has measured it.
  std::optional<double> production_gpu_wait{};
  std::optional<duration> opportunistic_longest_span{};
  /// Where each of the two came from, in words; empty with the value.
  std::string production_gpu_wait_source{};
  std::string opportunistic_longest_span_source{};

  [[nodiscard]] provenance origin_of(profile_field f) const noexcept {
    return origin[static_cast<std::size_t>(f)];
  }

  /// Thread blocks per second when the job runs alone.
  [[nodiscard]] double blocks_per_second() const noexcept {
    return blocks_per_iteration / to_seconds(iteration_time);
  }
  /// Mean duration of one of its kernels, alone.
  [[nodiscard]] double kernel_seconds() const noexcept {
    return kernels_per_iteration > 0
               ? busy_fraction * to_seconds(iteration_time) / kernels_per_iteration
               : 0.0;
  }
  /// The same job on a host that runs it alone at `alone_it_per_s` iterations per second (the
  /// alone runs of the call that measured a pair): its kernels take the GPU time they take in
  /// this profile, and the host side stretches or shrinks to make up the iteration — a faster
  /// host leaves the GPU busier. The iteration never gets shorter than its GPU time (busy
  /// fraction 1). A rate that is not positive and finite leaves the profile as it is.
  [[nodiscard]] model_profile at_alone_rate(double alone_it_per_s) const {
    model_profile p = *this;
    if (!(alone_it_per_s > 0) || !std::isfinite(alone_it_per_s)) return p;
    const double gpu_seconds = busy_fraction * to_seconds(iteration_time);
    const double seconds = std::max(1.0 / alone_it_per_s, gpu_seconds);
    if (seconds <= 0) return p;
    p.iteration_time = from_seconds(seconds);
    p.busy_fraction = gpu_seconds / seconds;
    return p;
  }
  /// Mean length of one of its idle gaps, alone.
  [[nodiscard]] double gap_seconds() const noexcept {
    return gaps_per_iteration > 0
               ? (1.0 - busy_fraction) * to_seconds(iteration_time) / gaps_per_iteration
               : 0.0;
  }
};

}  // namespace tgs::sim
