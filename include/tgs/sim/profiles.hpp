// SPDX-License-Identifier: Apache-2.0
/// @file
/// Standalone profiles of GPU types and training jobs, and the fitted contention parameters the
/// GPU-pair model reads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"

namespace tgs::sim {

/// A GPU type: what the contention and memory models need of the card.
struct gpu_profile {
  std::string name;            ///< e.g. "a100-40gb"
  bytes memory{};              ///< the card's memory
  double host_link_gbps = 25;  ///< host<->GPU bandwidth (GB/s) that evicted pages cross
  int mig_slices = 7;          ///< compute slices of a full MIG partition; 0: no MIG
};

/// A training job running alone on one GPU type.
struct model_profile {
  std::string model;                 ///< e.g. "resnet50"
  std::string gpu;                   ///< the GPU type this row was measured or estimated on
  int batch_size = 0;
  duration iteration_time{};         ///< standalone iteration time
  double busy_fraction = 0;          ///< share of wall time its kernels keep the SMs busy, alone
  double blocks_per_iteration = 0;   ///< thread blocks launched per iteration (TGS's signal)
  bytes footprint{};                 ///< memory the job allocates
  bytes hot_set{};                   ///< memory it touches every iteration
  std::string source;                ///< provenance of the numbers

  /// Thread blocks per second when the job runs alone.
  [[nodiscard]] double blocks_per_second() const noexcept {
    return blocks_per_iteration / to_seconds(iteration_time);
  }
};

/// How kernels of two jobs share the SMs; each has its own fitted parameters. The same
/// vocabulary the rate controllers state their mechanism in (`RegisteredRateController`).
using compute_mode = sharing_mechanism;
inline constexpr std::size_t compute_mode_count = 3;

/// Fitted contention parameters of one model on one GPU type (docs/simulator/contention-model.md).
struct model_contention {
  /// Interference sensitivity per compute mode: how much the job's GPU phase stretches per unit
  /// of the co-runner's weighted GPU occupancy.
  std::array<double, compute_mode_count> sensitivity{};
  /// Oversubscription (thrashing) sensitivity per compute mode, when pages are not pinned: extra
  /// iteration time, in standalone iterations, per unit of relative memory overflow.
  std::array<double, compute_mode_count> thrash{};
  /// How much the GPU phase stretches when the job gets a fraction f of the SMs, per compute
  /// mode (a MIG slice, an MPS active-thread share): stretch = 1 + slice_sensitivity * (1/f - 1).
  /// MPS limits threads, not SMs, so its value differs from MIG's.
  std::array<double, compute_mode_count> slice_sensitivity{};
  /// The largest interference stretch (s - base) the measurements imply for this model, per
  /// compute mode. The model is not extrapolated past the data it was fitted to: without this
  /// bound, two heavy jobs (never measured together) would each be predicted to crawl.
  std::array<double, compute_mode_count> max_interference{};
  /// Interposer overhead: extra iteration time, as a fraction, when the job runs under tgs's
  /// launch hooks (the TGS paper reports up to 4.5%).
  double interposer_overhead = 0;
};

/// Fitted parameters shared by all models on one GPU type.
struct gpu_contention {
  /// Aggressor exponent per compute mode: a co-runner with busy fraction b weighs b^exponent.
  /// Big-kernel jobs (high b) crowd a co-runner out far more than proportionally.
  std::array<double, compute_mode_count> aggressor_exponent{1, 1, 1};
  /// Occupancy exponent per compute mode: interference grows as occupancy^exponent. Above 1,
  /// a co-runner that holds the GPU rarely (a throttled opportunistic job) collides with the
  /// production job's kernels less than in proportion; a busy one collides more.
  std::array<double, compute_mode_count> occupancy_exponent{1, 1, 1};
  /// The most kernel work per second (Σ busy fraction × relative throughput) two jobs sharing
  /// the SMs were measured to do, per compute mode: the pair model never exceeds it (work
  /// conservation, with the measured slack: busy fractions are not exactly additive).
  std::array<double, compute_mode_count> max_pair_work{1, 1, 1};

  // Gap filling (`rate_decision::fill_gaps`, time slicing): the opportunistic job runs in the
  // production job's idle gaps, and a production job that resumes waits for the opportunistic
  // kernels still unfinished (docs/simulator/contention-model.md, "Gap filling"). Estimates until
  // fitted to measured pairs.
  /// Idle gaps per standalone iteration of a job: its idle time comes in this many gaps, so a
  /// gap lasts (1 - b) x iteration time / gaps_per_iteration on average, exponentially
  /// distributed.
  double gaps_per_iteration = 20;
  /// What one unfinished opportunistic launch costs a production job that resumes behind it:
  /// the rest of a short kernel and a context switch, in seconds.
  double gap_kernel_wait_s = 50e-6;
  /// Share of that wait that reaches the production job's iteration time (a job bound by its
  /// host side hides a late kernel until its next synchronisation).
  double gap_exposure = 0.5;
};

}  // namespace tgs::sim
