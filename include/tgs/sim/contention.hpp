// SPDX-License-Identifier: Apache-2.0
/// @file
/// The GPU-pair model: given two jobs' standalone profiles on one GPU, how the GPU's mechanism
/// (time slicing, MPS, MIG, unified memory) shares it, and any rate cap, the throughput of each
/// relative to running alone. No parameter belongs to a pair or to a job: a job is its profile,
/// the GPU is its `gpu_contention` (docs/simulator/contention-model.md).
///
/// A job with busy fraction b needs b of the GPU's time per unit of its throughput: its kernels
/// run while its host side prepares the next ones, so a job that gets less GPU time than it
/// needs slows in proportion, and one that gets its need keeps its speed.
///
/// - **Time slicing** divides the GPU's time max-min fairly between the jobs' demands: a job that
///   needs less than half gets what it needs, the other the rest; two that need more get half
///   each. Each unit of GPU time a co-runner takes also costs a job `switch_loss` of its own
///   (context switches, refilled caches), and each co-runner kernel that lands in the job's busy
///   stretch delays it by what the kernel and a switch (`overrun_switch_s`) overrun its next
///   idle gap (the gap overrun).
/// - **MPS** runs both jobs' kernels side by side with more room in all (`mps_capacity`); the
///   opportunistic job keeps at least its thread share of what it needs, and the production job
///   the rest; `mps_switch_loss` plays the part of the switch loss. With the opportunistic client
///   at below-normal dispatch priority the production job's demand is served first and the
///   opportunistic job takes what room is left; each unit of its share costs the production job
///   `mps_priority_loss` (its kernels wait for opportunistic blocks already resident), which a
///   launch cap on the opportunistic job lowers with that share.
/// - **MIG** gives each job its slice: no interaction, the slice's fewer SMs stretch its GPU time
///   by 1 + slice_sensitivity x (1/f - 1).
/// - **Memory** adds to a job's iteration, and to its GPU time (its kernels wait on the pages):
///   pages streamed over the host link, or thrashing in oversubscribed shared unified memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// One side of a GPU pair at an instant.
struct pair_side {
  const model_profile* profile = nullptr;  ///< null: no job on this side
  bool running = false;                     ///< present, not paused, allowed to run
  double sm_fraction = 1.0;                 ///< share of the SMs it may use (MIG slice, MPS threads)
  /// An MPS client at below-normal dispatch priority (meaningful for the opportunistic side).
  bool below_normal = false;
  /// Extra time per iteration from memory, in standalone iterations; the job's kernels hold the
  /// GPU while they wait on the pages, so it is GPU time as well.
  double memory_extra = 0;
  /// Extra GPU time per iteration its kernels wait for another job's unfinished launches (gap
  /// filling), in standalone iterations.
  double gpu_wait = 0;
  double overhead = 0;                      ///< interposer overhead fraction (host time)
  std::optional<double> max_blocks_per_second{};  ///< launch budget; empty: unthrottled
};

/// The solution of the pair model at an instant.
struct pair_rates {
  double production = 0;     ///< throughput relative to alone
  double opportunistic = 0;  ///< throughput relative to alone
  /// Share of wall time the job has unfinished work on the GPU (running or waiting for it): what
  /// an interposer that samples the job's streams reports as `job_activity::gpu_busy`.
  double production_occupancy = 0;
  double opportunistic_occupancy = 0;
  /// Share of the GPU's time each job's kernels run.
  double production_share = 0;
  double opportunistic_share = 0;
};

namespace detail {

/// What one side needs of the GPU, from its profile.
struct side_need {
  bool on = false;
  double gpu_time = 0;  ///< GPU time per unit of throughput (standalone iterations)
  double best = 0;      ///< throughput it reaches with all the GPU time it needs (caps included)
  [[nodiscard]] double demand() const noexcept { return best * gpu_time; }
};

inline side_need need_of(const pair_side& s) noexcept {
  side_need n;
  if (s.profile == nullptr || !s.running) return n;
  n.on = true;
  const double b = std::clamp(s.profile->busy_fraction, 1e-6, 1.0);
  const double f = std::clamp(s.sm_fraction, 1e-6, 1.0);
  const double stretch = 1.0 + std::max(0.0, s.profile->slice_sensitivity) * (1.0 / f - 1.0);
  n.gpu_time = b * stretch + s.memory_extra + s.gpu_wait;
  // A slice's slowdown, memory stalls and host-side overhead lengthen the iteration itself.
  n.best = 1.0 / ((1.0 - b) + n.gpu_time + s.overhead);
  if (s.max_blocks_per_second) {
    const double cap = *s.max_blocks_per_second / std::max(s.profile->blocks_per_second(), 1e-9);
    n.best = std::min(n.best, std::max(cap, 0.0));
  }
  return n;
}

/// Max-min fair shares of a capacity between two demands.
inline std::pair<double, double> fair_shares(double a, double b, double capacity) noexcept {
  if (a + b <= capacity) return {a, b};
  const double half = 0.5 * capacity;
  if (a <= half) return {a, capacity - a};
  if (b <= half) return {capacity - b, b};
  return {half, half};
}

}  // namespace detail

/// Solves the pair model. A side that is absent or not running has throughput 0 and takes no GPU
/// time. Deterministic; allocation-free.
///
/// ```cpp
/// auto r = tgs::sim::solve_pair(tgs::sim::compute_mode::time_slicing, gpu.contention, prod, opp);
/// ```
[[nodiscard]] inline pair_rates solve_pair(compute_mode mode, const gpu_contention& gpu,
                                           const pair_side& production,
                                           const pair_side& opportunistic) noexcept {
  const detail::side_need p = detail::need_of(production);
  const detail::side_need o = detail::need_of(opportunistic);
  double sp = p.on ? p.demand() : 0.0;
  double so = o.on ? o.demand() : 0.0;
  double loss = 0;
  double production_loss = -1;  // < 0: `loss`
  if (p.on && o.on) {
    switch (mode) {
      case compute_mode::time_slicing:
        std::tie(sp, so) = detail::fair_shares(sp, so, 1.0);
        loss = gpu.switch_loss;
        break;
      case compute_mode::mps: {
        if (opportunistic.below_normal) {
          // Dispatch priority: the production client's blocks go first; the opportunistic job
          // has the room they leave, and its resident blocks cost the production job.
          sp = std::min(sp, gpu.mps_capacity);
          so = std::min(so, std::max(0.0, gpu.mps_capacity - sp));
          loss = gpu.mps_switch_loss;
          production_loss = std::isnan(gpu.mps_priority_loss) ? gpu.mps_switch_loss : gpu.mps_priority_loss;
          break;
        }
        // The thread cap keeps the opportunistic job's kernels on a fraction of the SMs: it keeps
        // that fraction of what it needs whatever the production job does, and more only where
        // the production job leaves room.
        const double floor = std::clamp(opportunistic.sm_fraction, 0.0, 1.0) * so;
        so = std::min(so, std::max(floor, gpu.mps_capacity - sp));
        sp = std::min(sp, gpu.mps_capacity - so);
        loss = gpu.mps_switch_loss;
        break;
      }
      case compute_mode::mig:
        break;  // separate slices: nothing shared
    }
  }
  pair_rates r;
  // Two jobs collide where both want the GPU at once: in proportion to the co-runner's share and
  // to the job's own busy fraction (a job with idle gaps leaves room the co-runner takes freely).
  // A job held to its share has already waited for the co-runner: gap overruns (below) bound its
  // rate on their own, not on top of the share (two GPU-bound jobs split the GPU with no loss).
  auto rate_with = [](double side_loss, const detail::side_need& n, double share, double other, double overrun) {
    if (!n.on) return 0.0;
    const double collide = 1.0 + side_loss * other * std::min(1.0, n.gpu_time);
    return std::min(std::min(n.best, share / n.gpu_time) / collide, n.best / (collide + overrun));
  };
  auto rate = [&](const detail::side_need& n, double share, double other, double overrun) {
    return rate_with(loss, n, share, other, overrun);
  };
  r.production = rate_with(production_loss >= 0 ? production_loss : loss, p, sp, so, 0.0);
  r.opportunistic = rate(o, so, sp, 0.0);
  if (mode == compute_mode::time_slicing && p.on && o.on && gpu.overrun_switch_s > 0) {
    // Gap overrun: each kernel the co-runner launches after an idle gap takes the GPU for its
    // length and a context switch. Landing in a job's busy stretch (its busy fraction of the
    // time), it delays the job by what its own next idle gap cannot absorb. So a busy job with
    // short gaps beside a light job with many launches loses much, the light one little
    // (docs/results/time-slicing.md). The co-runner's launches follow its rate: a few damped
    // steps to the fixed point.
    const auto delay = [&](const pair_side& self, const pair_side& other_side) {
      return std::max(0.0, other_side.profile->kernel_seconds() + gpu.overrun_switch_s -
                               self.profile->gap_seconds());
    };
    const auto arrivals = [](const pair_side& s) {
      return s.profile->gaps_per_iteration / std::max(to_seconds(s.profile->iteration_time), 1e-9);
    };
    const double bp = std::clamp(production.profile->busy_fraction, 0.0, 1.0);
    const double bo = std::clamp(opportunistic.profile->busy_fraction, 0.0, 1.0);
    const double to_p = arrivals(opportunistic) * bp * delay(production, opportunistic);
    const double to_o = arrivals(production) * bo * delay(opportunistic, production);
    double xp = r.production;
    double xo = r.opportunistic;
    for (int i = 0; i < 40; ++i) {
      const double np = 0.5 * xp + 0.5 * rate(p, sp, so, to_p * xo);
      const double no = 0.5 * xo + 0.5 * rate(o, so, sp, to_o * np);
      const bool settled = std::abs(np - xp) + std::abs(no - xo) < 1e-12;
      xp = np;
      xo = no;
      if (settled) break;
    }
    r.production = xp;
    r.opportunistic = xo;
  }
  r.production_share = p.on ? r.production * p.gpu_time : 0.0;
  r.opportunistic_share = o.on ? r.opportunistic * o.gpu_time : 0.0;
  // A job waiting for the GPU still has work on it: its pending time stretches with the
  // co-runner's share (time slicing and MPS), and cannot pass the wall time.
  const double wait = mode == compute_mode::mig ? 0.0 : 1.0;
  r.production_occupancy = std::min(1.0, r.production_share * (1.0 + wait * r.opportunistic_share));
  r.opportunistic_occupancy =
      std::min(1.0, r.opportunistic_share * (1.0 + wait * r.production_share));
  return r;
}

/// What gap filling gives the opportunistic job and costs the production job.
struct gap_effect {
  /// The opportunistic job's throughput from the production job's idle time (relative to alone).
  double opportunistic = 0;
  /// Extra production GPU time per iteration, in standalone iterations, waiting behind
  /// opportunistic kernels when it resumes.
  double production_wait = 0;
};

/// Gap filling under time slicing: the opportunistic job may launch once the production job has
/// been idle for `holdoff`, with at most `max_inflight` launches unfinished. The production job
/// has work on the GPU `production_occupancy` of the time; its idle time comes in exponentially
/// distributed gaps whose mean is its profile's (`model_profile::gap_seconds`), so the share of
/// idle time past the holdoff is exp(-holdoff / gap). The opportunistic job needs b_o of its own
/// time on the GPU per unit of throughput. Each gap it entered ends with the production job
/// waiting for its unfinished launches: the last one half done on average, the others whole, a
/// kernel as long as the opportunistic job's mean kernel, plus a context switch; `gap_exposure`
/// of that wait reaches the production job's iteration.
[[nodiscard]] inline gap_effect gap_fill_effect(const gpu_contention& gpu, const pair_side& production,
                                                const pair_side& opportunistic,
                                                double production_occupancy, duration holdoff,
                                                std::uint32_t max_inflight) noexcept {
  gap_effect e;
  if (opportunistic.profile == nullptr || !opportunistic.running) return e;
  const double bo = std::max(opportunistic.profile->busy_fraction, 1e-6);
  if (production.profile == nullptr || !production.running) {
    e.opportunistic = 1.0;  // the whole GPU is one long gap
    return e;
  }
  const double idle = std::clamp(1.0 - production_occupancy, 0.0, 1.0);
  const double gap_s = std::max(production.profile->gap_seconds(), 1e-9);
  const double usable = idle * std::exp(-to_seconds(holdoff) / gap_s);
  e.opportunistic = std::min(1.0, usable / bo);
  // Gaps entered per second: the idle time used, over a gap's mean length past the holdoff
  // (memoryless: a gap that outlasted the holdoff lasts g more on average).
  const double used = e.opportunistic * bo;
  const double entered_per_s = used / gap_s;
  const double inflight = static_cast<double>(std::max<std::uint32_t>(max_inflight, 1));
  const double wait_s =
      opportunistic.profile->kernel_seconds() * (inflight - 0.5) + gpu.context_switch_s;
  // Seconds of delay per second of production wall time, as standalone iterations per iteration.
  e.production_wait = gpu.gap_exposure * entered_per_s * wait_s;
  return e;
}

/// Oversubscription beyond which unified memory thrashes fully, as a share of the capacity.
/// Training jobs sweep their memory cyclically every iteration; under LRU-like replacement a
/// cyclic working set that overflows memory even slightly misses on nearly every access (the
/// LRU cliff), so the thrash cost rises steeply to its full value within a small overflow.
inline constexpr double thrash_knee = 0.05;

/// Thrash pressure in [0, 1] for a relative overflow (overflowing bytes / capacity).
[[nodiscard]] inline double thrash_pressure(double overflow) noexcept {
  return std::clamp(overflow / thrash_knee, 0.0, 1.0);
}

/// Extra iteration time (in standalone iterations) from memory, for each side.
struct memory_effect {
  double production_extra = 0;
  double opportunistic_extra = 0;
  bytes opportunistic_resident{};  ///< opportunistic bytes on the GPU (pinned placement only)
};

/// Memory placement as a memory policy's decision implies it.
enum class memory_placement : std::uint8_t {
  /// Production pinned; the opportunistic job keeps at most `resident_limit` on the GPU, and the
  /// share of its hot set that lies in the rest of its footprint crosses the host link every
  /// iteration (TGS §5: evicted pages are read where they are, not migrated back).
  production_pinned,
  /// Both jobs' pages compete in unified memory; under oversubscription both thrash.
  shared_unified,
};

/// Memory model: the extra time memory costs each side (see the file comment). Under MIG each
/// job's memory is its slice's share of `capacity`; otherwise the jobs share `capacity`.
[[nodiscard]] inline memory_effect memory_cost(compute_mode mode, memory_placement placement,
                                               bytes capacity, double link_gbps,
                                               const gpu_contention& gpu,
                                               const pair_side& production,
                                               const pair_side& opportunistic,
                                               bytes opportunistic_resident_limit) noexcept {
  memory_effect e;
  const bool p_on = production.profile != nullptr;
  const bool o_on = opportunistic.profile != nullptr;
  const double tau = gpu.thrash[static_cast<std::size_t>(mode)];
  const double cap = static_cast<double>(capacity.count());
  if (cap <= 0) return e;
  if (mode == compute_mode::mig) {
    // MIG slices own their memory: each job only competes with itself.
    auto own = [&](const pair_side& s) {
      const double slice_cap = cap * s.sm_fraction;
      const double over =
          std::max(0.0, static_cast<double>(s.profile->footprint.count()) - slice_cap) / slice_cap;
      return tau * thrash_pressure(over);
    };
    if (p_on) e.production_extra = own(production);
    if (o_on) e.opportunistic_extra = own(opportunistic);
    return e;
  }
  if (placement == memory_placement::production_pinned) {
    if (!o_on) return e;
    const bytes room = p_on ? capacity - production.profile->footprint : capacity;
    const bytes footprint = opportunistic.profile->footprint;
    const bytes resident = std::min({footprint, room, opportunistic_resident_limit});
    e.opportunistic_resident = resident;
    const double away = footprint.count() > 0
                            ? static_cast<double>((footprint - resident).count()) /
                                  static_cast<double>(footprint.count())
                            : 0.0;
    const double seconds =
        static_cast<double>(opportunistic.profile->hot_set.count()) * away / (link_gbps * 1e9);
    e.opportunistic_extra = seconds / to_seconds(opportunistic.profile->iteration_time);
    return e;
  }
  const double total = (p_on ? static_cast<double>(production.profile->footprint.count()) : 0) +
                       (o_on ? static_cast<double>(opportunistic.profile->footprint.count()) : 0);
  const double pressure = thrash_pressure(std::max(0.0, total - cap) / cap);
  if (p_on) e.production_extra = tau * pressure;
  if (o_on) e.opportunistic_extra = tau * pressure;
  return e;
}

}  // namespace tgs::sim
