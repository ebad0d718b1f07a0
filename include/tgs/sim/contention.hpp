// SPDX-License-Identifier: Apache-2.0
/// @file
/// The GPU-pair contention model: given two jobs on one GPU, how they share its SMs and memory,
/// and any rate cap, the throughput of each relative to running alone.
///
/// The model (docs/simulator/contention-model.md) splits a job's standalone iteration into a GPU
/// phase (busy fraction b) and the rest (1 - b). Sharing stretches the GPU phase by
///   s_i = base_i + sensitivity_i * b_j^aggressor_exponent * occupancy_j^occupancy_exponent
/// where occupancy_j = b_j * s_j * x_j is the share of wall time the co-runner's kernels hold the
/// GPU, and base_i is 1 on the whole GPU or 1 + slice_sensitivity_i * (1/f - 1) on a fraction f
/// of the SMs. Memory adds `extra` standalone iterations (thrashing, or pages streamed over the
/// host link). The relative throughput is x_i = 1 / ((1 - b_i) + b_i s_i + extra_i + overhead_i),
/// capped by a launch budget. The coupled equations are solved by damped fixed-point iteration.
/// The interference stretch is bounded by the largest the fitted data implies for the model, and
/// on shared SMs the pair's kernel work is bounded by the GPU's (work conservation).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// One side of a GPU pair at an instant.
struct pair_side {
  const model_profile* profile = nullptr;  ///< null: no job on this side
  const model_contention* params = nullptr;
  bool running = false;                     ///< present, not paused, allowed to run
  double sm_fraction = 1.0;                 ///< share of the SMs it may use (MIG slice, MPS threads)
  double memory_extra = 0;                  ///< extra time per iteration from memory, in iterations
  /// Extra time per iteration its kernels wait on the GPU for another job's unfinished launches
  /// (gap filling), in standalone iterations: GPU busy time, unlike `overhead`.
  double gpu_wait = 0;
  double overhead = 0;                      ///< interposer overhead fraction
  std::optional<double> max_blocks_per_second{};  ///< launch budget; empty: unthrottled
};

/// The solution of the pair model at an instant.
struct pair_rates {
  double production = 0;     ///< throughput relative to alone
  double opportunistic = 0;  ///< throughput relative to alone
  double production_occupancy = 0;     ///< share of wall time its kernels hold the GPU
  double opportunistic_occupancy = 0;  ///< share of wall time its kernels hold the GPU
};

namespace detail {
inline double aggressor_weight(double busy, double exponent) noexcept {
  return std::pow(std::clamp(busy, 0.0, 1.0), exponent);
}

inline double slice_base(const pair_side& side, compute_mode mode) noexcept {
  const double f = std::clamp(side.sm_fraction, 1e-6, 1.0);
  return 1.0 + side.params->slice_sensitivity[static_cast<std::size_t>(mode)] * (1.0 / f - 1.0);
}

/// Throughput of `self` given the co-runner's weighted occupancy, and its own occupancy.
inline std::pair<double, double> side_rate(const pair_side& self, compute_mode mode,
                                           double co_runner_pressure) noexcept {
  const double b = self.profile->busy_fraction;
  const auto m = static_cast<std::size_t>(mode);
  // Additive, as fitted: a slice's own slowdown and the co-runner's interference add up.
  const double stretch =
      slice_base(self, mode) +
      std::min(self.params->sensitivity[m] * co_runner_pressure, self.params->max_interference[m]);
  const double gpu_time = b * stretch + self.gpu_wait;
  const double per_iteration = (1.0 - b) + gpu_time + self.memory_extra + self.overhead;
  double x = 1.0 / per_iteration;
  if (self.max_blocks_per_second) {
    const double cap = *self.max_blocks_per_second / self.profile->blocks_per_second();
    x = std::min(x, std::max(cap, 0.0));
  }
  return {x, gpu_time * x};
}
}  // namespace detail

/// Solves the pair model. A side that is absent or not running has throughput 0 and exerts no
/// pressure. Deterministic; allocation-free.
///
/// ```cpp
/// auto r = tgs::sim::solve_pair(tgs::sim::compute_mode::time_slicing, gpu_params, prod, opp);
/// ```
[[nodiscard]] inline pair_rates solve_pair(compute_mode mode, const gpu_contention& gpu,
                                           const pair_side& production,
                                           const pair_side& opportunistic) noexcept {
  const bool p_on = production.running && production.profile != nullptr;
  const bool o_on = opportunistic.running && opportunistic.profile != nullptr;
  const double exponent = gpu.aggressor_exponent[static_cast<std::size_t>(mode)];
  const double occupancy_exponent = gpu.occupancy_exponent[static_cast<std::size_t>(mode)];
  pair_rates r;
  double occ_p = 0;
  double occ_o = 0;
  // Damped fixed-point iteration: each side's rate falls as the other's occupancy rises, so the
  // map is monotone and damping by 1/2 converges; 200 rounds reach 1e-12 for every profile seen.
  for (int round = 0; round < 200; ++round) {
    const double pressure_on_p =
        o_on ? detail::aggressor_weight(opportunistic.profile->busy_fraction, exponent) *
                   std::pow(occ_o, occupancy_exponent)
             : 0;
    const double pressure_on_o =
        p_on ? detail::aggressor_weight(production.profile->busy_fraction, exponent) *
                   std::pow(occ_p, occupancy_exponent)
             : 0;
    auto [xp, op] = p_on ? detail::side_rate(production, mode, pressure_on_p)
                         : std::pair<double, double>{0, 0};
    auto [xo, oo] = o_on ? detail::side_rate(opportunistic, mode, pressure_on_o)
                         : std::pair<double, double>{0, 0};
    const double next_p = round == 0 ? op : 0.5 * (occ_p + op);
    const double next_o = round == 0 ? oo : 0.5 * (occ_o + oo);
    const bool settled = std::abs(next_p - occ_p) < 1e-13 && std::abs(next_o - occ_o) < 1e-13;
    occ_p = next_p;
    occ_o = next_o;
    r = {xp, xo, op, oo};
    if (settled && round > 0) break;
  }
  // Work conservation: sharing one set of SMs (time slicing, MPS), the two jobs together cannot
  // do more kernel work per second than one job keeping the GPU fully busy.
  if (mode != compute_mode::mig && p_on && o_on) {
    const double work = production.profile->busy_fraction * r.production +
                        opportunistic.profile->busy_fraction * r.opportunistic;
    const double limit = gpu.max_pair_work[static_cast<std::size_t>(mode)];
    if (work > limit) {
      const double scale = limit / work;
      r = {r.production * scale, r.opportunistic * scale, r.production_occupancy * scale,
           r.opportunistic_occupancy * scale};
    }
  }
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
/// holds the GPU `production_occupancy` of the time; its idle time comes in exponentially
/// distributed gaps of mean g (`gpu_contention::gaps_per_iteration`), so the share of idle time
/// past the holdoff is exp(-holdoff / g). The opportunistic job needs b_o of its own time on the
/// GPU per unit of throughput. Each gap it entered ends with the production job waiting for its
/// unfinished launches (`gap_kernel_wait_s` each, the last one half done on average), of which
/// `gap_exposure` reaches the production job's iteration.
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
  const double bp = production.profile->busy_fraction;
  const double idle = std::clamp(1.0 - production_occupancy, 0.0, 1.0);
  const double iteration_s = to_seconds(production.profile->iteration_time);
  const double gap_s =
      std::max((1.0 - bp) * iteration_s / std::max(gpu.gaps_per_iteration, 1e-9), 1e-9);
  const double usable = idle * std::exp(-to_seconds(holdoff) / gap_s);
  e.opportunistic = std::min(1.0, usable / bo);
  // Gaps entered per second: the idle time used, over a gap's mean length past the holdoff
  // (memoryless: a gap that outlasted the holdoff lasts g more on average).
  const double used = e.opportunistic * bo;
  const double entered_per_s = used / gap_s;
  const double wait_s = gpu.gap_kernel_wait_s * (static_cast<double>(std::max<std::uint32_t>(max_inflight, 1)) - 0.5);
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
  /// Production pinned; the opportunistic job keeps at most `resident_limit` on the GPU and
  /// streams the rest of its hot set over the host link every iteration (TGS §5).
  production_pinned,
  /// Both jobs' pages compete in unified memory; under oversubscription both thrash.
  shared_unified,
};

/// Memory model: the extra time oversubscription costs each side (see the file comment).
/// `production_fraction`/`opportunistic_fraction` are the jobs' memory shares under MIG (their
/// slices' memory); 1 otherwise, where the jobs share `capacity`.
[[nodiscard]] inline memory_effect memory_cost(compute_mode mode, memory_placement placement,
                                               bytes capacity, double link_gbps,
                                               const pair_side& production,
                                               const pair_side& opportunistic,
                                               bytes opportunistic_resident_limit) noexcept {
  memory_effect e;
  const bool p_on = production.profile != nullptr;
  const bool o_on = opportunistic.profile != nullptr;
  const auto m = static_cast<std::size_t>(mode);
  const double cap = static_cast<double>(capacity.count());
  if (cap <= 0) return e;
  if (mode == compute_mode::mig) {
    // MIG slices own their memory: each job only competes with itself.
    auto own = [&](const pair_side& s) {
      const double slice_cap = cap * s.sm_fraction;
      const double over =
          std::max(0.0, static_cast<double>(s.profile->footprint.count()) - slice_cap) / slice_cap;
      return s.params->thrash[m] * thrash_pressure(over);
    };
    if (p_on) e.production_extra = own(production);
    if (o_on) e.opportunistic_extra = own(opportunistic);
    return e;
  }
  if (placement == memory_placement::production_pinned) {
    if (!o_on) return e;
    const bytes room = p_on ? capacity - production.profile->footprint : capacity;
    const bytes resident =
        std::min({opportunistic.profile->footprint, room, opportunistic_resident_limit});
    e.opportunistic_resident = resident;
    const bytes streamed = opportunistic.profile->hot_set - resident;
    const double seconds = static_cast<double>(streamed.count()) / (link_gbps * 1e9);
    e.opportunistic_extra = seconds / to_seconds(opportunistic.profile->iteration_time);
    return e;
  }
  const double total = (p_on ? static_cast<double>(production.profile->footprint.count()) : 0) +
                       (o_on ? static_cast<double>(opportunistic.profile->footprint.count()) : 0);
  const double pressure = thrash_pressure(std::max(0.0, total - cap) / cap);
  if (p_on) e.production_extra = production.params->thrash[m] * pressure;
  if (o_on) e.opportunistic_extra = opportunistic.params->thrash[m] * pressure;
  return e;
}

}  // namespace tgs::sim
