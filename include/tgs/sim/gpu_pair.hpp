// SPDX-License-Identifier: Apache-2.0
/// @file
/// The GPU-pair simulation: one production and one opportunistic job on one GPU, with the real
/// rate-control and memory policy objects stepped over virtual time.
///
/// Between events the jobs' rates are constant (the contention model's solution for the current
/// decisions), so the run advances from event to event: a controller's `revisit_at`, a job's
/// arrival, pause, resume or completion, the end of an eviction. TGS's profiling, slow start and
/// back-off therefore emerge from `tgs_rate_control` itself, window by window.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <utility>
#include <variant>
#include <vector>

#include "tgs/memory/concepts.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/sim/contention.hpp"

namespace tgs::sim {

/// A job of a pair run.
struct pair_job {
  const model_profile* profile = nullptr;  ///< null: no job of this class
  instant arrival = epoch;
  /// Work in standalone iterations; empty: the job runs until the end of the run.
  std::optional<double> iterations{};
  /// Phases during which the job is idle (launches nothing), as [start, end) pairs.
  std::vector<std::pair<instant, instant>> idle;
};

/// What to simulate.
struct pair_spec {
  pair_job production;
  pair_job opportunistic;
  /// The GPU type, with its mechanism parameters (`gpu_profile::contention`).
  gpu_profile gpu;
  /// The memory budget the memory policy enforces (the card's memory unless configured lower).
  bytes memory_budget{};
  /// Whether the jobs run under tgs's interposer (they pay the GPU type's interposer overhead).
  bool interposed = false;
  /// Relative standard deviation of the launch counts a controller observes per step, for both
  /// jobs. Empty (the default): each job's own host jitter (`model_profile::jitter`, its 1 s
  /// launch rate's spread alone), as a real controller sees it. Host jitter is not white noise
  /// (a host-bound job's 4 s windows move as much as its 1 s ones,
  /// docs/results/host-interference.md), so it is applied at every window length as measured.
  std::optional<double> observation_noise{};
  /// Seed of the observation noise: a run is a pure function of its spec.
  std::uint64_t seed = 1;
  /// Fraction by which the production job's standalone speed falls, linearly from the start of
  /// the run to `run_for` (0: steady, as the paper's means). Unlike `observation_noise` this is
  /// real: the job makes fewer iterations and launches fewer blocks, as a host-bound training job
  /// whose CPU side slows does (docs/results/host-interference.md: the launched rate 5-11% below the R
  /// profiled at the start, beside an opportunistic job held to a few percent of its rate). Its
  /// throughput relative to alone is taken against an alone job that drifts the same way, so
  /// only a controller that compares it with a rate from earlier in the run reads the drift as
  /// a slowdown. In [0, 1).
  double production_drift = 0;
  duration run_for = std::chrono::seconds{600};
  /// Throughput is averaged over [warmup, run_for): TGS needs ~50 s to converge.
  duration warmup = std::chrono::seconds{60};
};

/// What a pair run measured.
struct pair_outcome {
  /// Mean throughput relative to alone over the measurement window, while the job was present.
  double production = 0;
  double opportunistic = 0;
  /// Completion instants of jobs with finite work.
  std::optional<instant> production_end{};
  std::optional<instant> opportunistic_end{};
  /// The memory policy refused the opportunistic job (co-location did not fit).
  bool opportunistic_refused = false;
  /// Bytes evicted from and restored to the GPU over the run.
  bytes evicted{};
  bytes restored{};
  /// Events processed (segments of constant rate).
  std::uint64_t segments = 0;
};

/// One segment of constant rates, for timelines. Observers see every segment in order.
struct pair_segment {
  instant start;
  instant end;
  pair_rates rates;
  std::optional<std::uint64_t> opportunistic_budget{};
  duration budget_window;
};

/// The default observer: records nothing and costs nothing.
struct no_pair_observer {
  void on_segment(const pair_segment&) noexcept {}
};

namespace detail {
/// A standard normal deviate from a 64-bit generator, by Box–Muller on explicitly converted
/// uniforms, so a seed gives the same sequence with every standard library.
inline double standard_normal(std::mt19937_64& rng) noexcept {
  constexpr double two_pi = 6.283185307179586;
  const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

inline bool idle_at(const pair_job& job, instant t) noexcept {
  return std::any_of(job.idle.begin(), job.idle.end(),
                     [t](const auto& phase) { return phase.first <= t && t < phase.second; });
}

/// The next idle-phase boundary strictly after t, or `never`.
inline instant next_idle_change(const pair_job& job, instant t) noexcept {
  instant next = never;
  for (const auto& [a, b] : job.idle) {
    if (a > t) next = std::min(next, a);
    if (b > t) next = std::min(next, b);
  }
  return next;
}

inline double sm_fraction(const gpu_share& share, job_class c) noexcept {
  if (const auto* mps = std::get_if<mps_partition>(&share)) {
    return c == job_class::production ? mps->production_threads : mps->opportunistic_threads;
  }
  if (const auto* mig = std::get_if<mig_partition>(&share)) {
    const int slices = c == job_class::production ? mig->production_slices : mig->opportunistic_slices;
    return static_cast<double>(slices) / static_cast<double>(std::max(1, mig->total_slices));
  }
  return 1.0;
}

inline compute_mode mode_of(const gpu_share& share) noexcept {
  if (std::holds_alternative<mps_partition>(share)) return compute_mode::mps;
  if (std::holds_alternative<mig_partition>(share)) return compute_mode::mig;
  return compute_mode::time_slicing;
}
}  // namespace detail

/// Runs one pair with a rate controller and a memory policy (taken by value: a run owns its
/// policies' state). `Observer` receives every segment; the default records nothing.
///
/// ```cpp
/// auto out = tgs::sim::run_pair(spec, tgs::tgs_rate_control{{}}, tgs::transparent_unified_memory{{}});
/// ```
template <RateController Controller, MemoryPolicy Memory, typename Observer = no_pair_observer>
pair_outcome run_pair(const pair_spec& spec, Controller controller, Memory memory,
                      Observer&& observer = Observer{}) {
  struct side_state {
    const pair_job* job;
    job_class cls;
    bool present = false;
    bool done = false;
    double progress = 0;         // standalone iterations completed
    double window_blocks = 0;    // blocks launched since the controller's last step
    double window_iterations = 0;
    double window_busy = 0;      // seconds it had unfinished GPU work since then
    double measured = 0;         // integral of relative throughput over the measurement window
    double measured_time = 0;    // seconds present in the measurement window
  };
  side_state prod{&spec.production, job_class::production};
  side_state opp{&spec.opportunistic, job_class::opportunistic};

  pair_outcome out;
  const instant end = epoch + spec.run_for;
  const instant measure_from = epoch + spec.warmup;
  instant now = epoch;
  instant last_step = epoch;
  rate_decision decision{};
  bool step_due = true;
  memory_decision mem{};
  bytes opp_resident{};
  instant opp_stalled_until = epoch;
  std::mt19937_64 rng(spec.seed);
  const gpu_contention& contention = spec.gpu.contention;
  constexpr duration drift_step = std::chrono::seconds{1};

  auto observe_memory = [&](std::optional<allocation_request> request) {
    memory_observation obs{.now = now, .capacity = spec.memory_budget};
    if (prod.present) obs.production = job_memory{prod.job->profile->footprint, prod.job->profile->footprint};
    if (opp.present) obs.opportunistic = job_memory{opp.job->profile->footprint, opp_resident};
    obs.request = request;
    return obs;
  };
  // Carries a memory decision out: evictions and restores stall the opportunistic job while its
  // pages cross the host link.
  auto apply_memory = [&](const memory_decision& d) {
    mem = d;
    if (!opp.present) return;
    const bytes room = prod.present && d.production_pinned
                           ? spec.memory_budget - prod.job->profile->footprint
                           : spec.memory_budget;
    const bytes target = std::min({opp.job->profile->footprint, room, d.opportunistic_resident_limit});
    if (target == opp_resident) return;
    const bytes moved = target > opp_resident ? target - opp_resident : opp_resident - target;
    (target > opp_resident ? out.restored : out.evicted) += moved;
    opp_resident = target;
    const double seconds = static_cast<double>(moved.count()) / (spec.gpu.host_link_gbps * 1e9);
    opp_stalled_until = std::max(opp_stalled_until, now + from_seconds(seconds));
  };
  auto arrive = [&](side_state& s) {
    if (s.job->profile == nullptr || s.present || s.done || s.job->arrival > now) return;
    const memory_decision d = memory.step(
        observe_memory(allocation_request{s.cls, s.job->profile->footprint}));
    if (d.verdict == allocation_verdict::deny_out_of_memory) {
      s.done = true;
      if (s.cls == job_class::opportunistic) out.opportunistic_refused = true;
      return;
    }
    s.present = true;
    if (s.cls == job_class::opportunistic) opp_resident = s.job->profile->footprint;
    apply_memory(d);
    step_due = true;
  };
  auto depart = [&](side_state& s) {
    s.present = false;
    s.done = true;
    (s.cls == job_class::production ? out.production_end : out.opportunistic_end) = now;
    apply_memory(memory.step(observe_memory(std::nullopt)));
    step_due = true;
  };

  while (now < end) {
    arrive(prod);
    arrive(opp);
    if (step_due || now >= decision.revisit_at) {
      const double window_s = to_seconds(now - last_step);
      auto activity = [&](const side_state& s) -> std::optional<job_activity> {
        if (!s.present) return std::nullopt;
        // Host-side jitter moves how much a job launches in a window, and its GPU busy time with
        // it: a window with fewer launches also keeps the GPU busy for less time.
        // A job cannot keep the GPU busy for longer than the window, so its launches cannot
        // rise past what that allows either.
        const double sd = spec.observation_noise.value_or(s.job->profile->jitter);
        double jitter = std::max(0.0, 1.0 + sd * detail::standard_normal(rng));
        if (s.window_busy > 0) jitter = std::min(jitter, window_s / s.window_busy);
        job_activity a{.blocks_launched =
                           static_cast<std::uint64_t>(s.window_blocks * jitter + 0.5)};
        a.gpu_busy = from_seconds(s.window_busy * jitter);
        if (s.window_iterations > 1e-9) {
          a.mean_iteration_time = from_seconds(window_s / s.window_iterations);
        }
        return a;
      };
      decision = controller.step(rate_observation{.now = now,
                                                  .window = now - last_step,
                                                  .production = activity(prod),
                                                  .opportunistic = activity(opp)});
      last_step = now;
      prod.window_blocks = opp.window_blocks = 0;
      prod.window_iterations = opp.window_iterations = 0;
      prod.window_busy = opp.window_busy = 0;
      step_due = false;
      if (mem.revisit_at <= now) apply_memory(memory.step(observe_memory(std::nullopt)));
    }

    // Rates for the segment that starts now.
    const compute_mode mode = detail::mode_of(decision.share);
    const auto* turn = std::get_if<exclusive_turn>(&decision.share);
    auto side = [&](const side_state& s) {
      pair_side p{.profile = s.present ? s.job->profile : nullptr};
      p.running = s.present && !detail::idle_at(*s.job, now) &&
                  (turn == nullptr || turn->holder == s.cls);
      p.sm_fraction = detail::sm_fraction(decision.share, s.cls);
      if (const auto* mps = std::get_if<mps_partition>(&decision.share); mps != nullptr && s.cls == job_class::opportunistic) {
        p.below_normal = mps->opportunistic_below_normal;
      }
      p.overhead = spec.interposed && s.present ? contention.interposer_overhead : 0;
      return p;
    };
    pair_side ps = side(prod);
    pair_side os = side(opp);
    if (opp.present && now < opp_stalled_until) os.running = false;
    if (decision.opportunistic_budget) {
      const double window = std::max(to_seconds(decision.budget_window), 1e-9);
      os.max_blocks_per_second = static_cast<double>(*decision.opportunistic_budget) / window;
    }
    const memory_placement placement = mem.production_pinned ? memory_placement::production_pinned
                                                             : memory_placement::shared_unified;
    const memory_effect me = memory_cost(mode, placement, spec.memory_budget,
                                         spec.gpu.host_link_gbps, contention, ps, os,
                                         mem.opportunistic_resident_limit);
    ps.memory_extra = me.production_extra;
    os.memory_extra = me.opportunistic_extra;
    pair_rates rates = solve_pair(mode, contention, ps, os);
    if (decision.fill_gaps && mode == compute_mode::time_slicing && opp.present && os.running) {
      // The budget bounds the share beside busy periods (solved above); gap filling adds what
      // the production job's idle time holds, and the waits its resumes cost it.
      const gap_effect gap = gap_fill_effect(contention, ps, os, rates.production_occupancy,
                                             decision.fill_gaps->holdoff,
                                             decision.fill_gaps->max_inflight);
      ps.gpu_wait = gap.production_wait;
      rates = solve_pair(mode, contention, ps, os);
      const double alone = 1.0 / (1.0 + os.memory_extra + os.overhead);
      const double gap_x = std::min(gap.opportunistic, std::max(0.0, alone - rates.opportunistic));
      rates.opportunistic += gap_x;
      const double gap_share = gap_x * (opp.job->profile->busy_fraction + os.memory_extra);
      rates.opportunistic_share += gap_share;
      rates.opportunistic_occupancy = std::min(1.0, rates.opportunistic_occupancy + gap_share);
    }

    // The segment ends at the next event.
    instant next = std::min(end, decision.revisit_at);
    if (mem.revisit_at > now) next = std::min(next, mem.revisit_at);
    for (const side_state* s : {&prod, &opp}) {
      if (s->job->profile == nullptr || s->done) continue;
      if (!s->present && s->job->arrival > now) next = std::min(next, s->job->arrival);
      next = std::min(next, detail::next_idle_change(*s->job, now));
    }
    if (opp.present && opp_stalled_until > now) next = std::min(next, opp_stalled_until);
    // The production job's standalone speed (`pair_spec::production_drift`), held for the
    // segment: with drift a segment lasts at most `drift_step` (a policy that never revisits
    // would otherwise hold the speed of its first instant), so the line is followed within
    // drift x drift_step / run_for, and a completion computed at this speed is exact.
    const double drift = 1.0 - spec.production_drift * to_seconds(now - epoch) /
                                   std::max(to_seconds(spec.run_for), 1e-9);
    auto speed_of = [&](const side_state& s) { return s.cls == job_class::production ? drift : 1.0; };
    auto completion = [&](const side_state& s, double x) -> instant {
      if (!s.present || !s.job->iterations || x <= 0) return never;
      const double left = std::max(0.0, *s.job->iterations - s.progress);
      const double seconds = left * to_seconds(s.job->profile->iteration_time) / (x * speed_of(s));
      // Beyond the end of policy time (int64 nanoseconds) the conversion would be undefined:
      // such a job does not finish in this run.
      if (!(seconds < to_seconds(never - now) - 1.0)) return never;
      // Round up so the job has really finished when the event fires.
      return now + std::chrono::ceil<duration>(std::chrono::duration<double>(seconds));
    };
    next = std::min({next, completion(prod, rates.production), completion(opp, rates.opportunistic)});
    if (spec.production_drift > 0) next = std::min(next, now + drift_step);
    if (next <= now) next = now + duration{1};

    observer.on_segment(pair_segment{now, next, rates, decision.opportunistic_budget,
                                     decision.budget_window});
    ++out.segments;
    const double dt = to_seconds(next - now);
    auto advance = [&](side_state& s, double x, double occupancy) {
      if (!s.present) return;
      s.window_busy += occupancy * dt;
      const double iterations = speed_of(s) * x * dt / to_seconds(s.job->profile->iteration_time);
      s.progress += iterations;
      s.window_iterations += iterations;
      s.window_blocks += iterations * s.job->profile->blocks_per_iteration;
      if (next > measure_from) {
        const double overlap = to_seconds(next - std::max(now, measure_from));
        s.measured += x * overlap;
        s.measured_time += overlap;
      }
    };
    advance(prod, rates.production, rates.production_occupancy);
    advance(opp, rates.opportunistic, rates.opportunistic_occupancy);
    now = next;
    for (side_state* s : {&prod, &opp}) {
      if (s->present && s->job->iterations && s->progress >= *s->job->iterations - 1e-9) depart(*s);
    }
  }
  out.production = prod.measured_time > 0 ? prod.measured / prod.measured_time : 0;
  out.opportunistic = opp.measured_time > 0 ? opp.measured / opp.measured_time : 0;
  return out;
}

}  // namespace tgs::sim
