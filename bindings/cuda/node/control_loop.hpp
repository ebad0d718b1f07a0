// SPDX-License-Identifier: Apache-2.0
/// @file
/// `gpu_control_loop`: tgs-node's driver of one GPU's rate controller. It reads the jobs' packed
/// launch counters, steps the controller when it asked to be revisited or a job came or went, and
/// refills the opportunistic jobs' block allowances every budget window.
///
/// The loop owns no clock: its caller passes the instant (tgs-node maps its steady clock to
/// `tgs::instant`; tests pass any instants they like), so the same controller type a simulation
/// ran is the one that throttles a real job, stepped the same way.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "node_abi.hpp"
#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"

namespace tgs::cuda::node {

/// What the loop reports about one job (for `tgs-node status`).
struct job_report {
  std::uint32_t id = 0;
  job_class cls = job_class::production;
  double blocks_per_s = 0;    ///< thread blocks launched, over the last rate period
  double launches_per_s = 0;  ///< kernel launches, over the last rate period
  double sync_wait_fraction = 0;  ///< of the last rate period, time blocked in synchronisation calls
  /// Of the last rate period, the time it had unfinished GPU work (its activity sampler: a
  /// production job beside an opportunistic one); empty while it was not sampled.
  std::optional<double> gpu_busy_fraction;
  std::optional<std::uint64_t> budget_blocks;  ///< per budget window; empty = unthrottled
  /// Mean time inside the driver's launch call of the launches the job timed (one in
  /// `abi::launch_time_sample_every`) over the last rate period, in microseconds; empty when it
  /// timed none (an idle job, or an interposer that predates the sample).
  std::optional<double> launch_call_us;
};

/// Drives one GPU's `Controller` against the jobs' shared-memory segments.
///
/// ```cpp
/// gpu_control_loop<tgs::tgs_rate_control> loop{tgs::tgs_rate_control{{}}, now};
/// loop.add_job(1, tgs::job_class::production, segment, now);
/// tgs::instant next = loop.run(now, heartbeat_ns);  // call again no later than `next`
/// ```
template <RateController Controller>
class gpu_control_loop {
 public:
  /// How often per-job rates for status are recomputed.
  static constexpr duration rate_period = std::chrono::seconds{1};

  gpu_control_loop(Controller controller, instant now)
      : controller_(std::move(controller)), last_step_(now), rate_time_(now) {}

  /// How many of an opportunistic job's launches may be unfinished at once when the decision
  /// asks for no gap filling (the operator's `--max-inflight-launches`; 0: no bound). Under gap
  /// filling the decision's bound applies, no larger than this one when it is set.
  std::uint32_t operator_inflight_bound = 0;
  /// The period, in microseconds, at which production jobs sample their GPU activity while an
  /// opportunistic job shares the GPU (the operator's `--activity-sample-us`).
  std::uint32_t sample_period_us = abi::default_sample_period_us;

  /// Adds a job (an arrival: the controller is stepped at once). `segment` must outlive the job.
  /// `marks_wait`: its synchronisation marks carry its wait (`abi::register_flag_marks_wait`).
  void add_job(std::uint32_t id, job_class cls, abi::job_segment* segment, instant now, bool marks_wait = false) {
    const std::uint64_t counter = segment->launch_counter.load(std::memory_order_acquire);
    job j{.id = id, .cls = cls, .segment = segment, .step_counter = counter,
          .passed = counter & abi::block_mask, .rate_counter = counter};
    j.marks_wait = marks_wait;
    j.sync_wait_ns = j.step_sync_wait_ns = segment->sync_wait_ns.load(std::memory_order_relaxed);
    j.busy_ns = j.step_busy_ns = segment->gpu_busy_ns.load(std::memory_order_relaxed);
    j.samples = j.step_samples = segment->activity_samples.load(std::memory_order_relaxed);
    j.timed_launches = segment->timed_launches.load(std::memory_order_relaxed);
    j.timed_launch_ns = segment->timed_launch_ns.load(std::memory_order_relaxed);
    if (cls == job_class::opportunistic) {
      // Held until the first decision, which the arrival step makes right away.
      segment->allowance.store(counter & abi::block_mask, std::memory_order_release);
      j.passed = counter & abi::block_mask;
    } else {
      segment->allowance.store((counter + abi::unthrottled_lead) & abi::block_mask, std::memory_order_release);
    }
    jobs_.push_back(j);
    step(now);
    refill();  // the newcomer's allowance, and everyone's new split of the budget, apply now
  }

  /// Removes a job (a departure: its share goes back to the others at once).
  void remove_job(std::uint32_t id, instant now) {
    std::erase_if(jobs_, [id](const job& j) { return j.id == id; });
    step(now);
    refill();  // the leaver's share goes to the others now, not at the end of the window
  }

  /// Runs what is due at `now`: the controller's step when its `revisit_at` has come, budget
  /// refills when a budget window has passed. Returns the instant it next has work.
  instant run(instant now, std::uint64_t heartbeat_ns) noexcept {
    for (job& j : jobs_) j.segment->heartbeat_ns.store(heartbeat_ns, std::memory_order_release);
    if (decision_.revisit_at <= now) step(now);
    if (next_refill_ <= now) {
      refill();
      // Catch up without bursting: a late wake-up starts the next window from now.
      next_refill_ = std::max(next_refill_ + decision_.budget_window, now);
    }
    if (now - rate_time_ >= rate_period) update_rates(now);
    return std::min(decision_.revisit_at, has_opportunistic() ? next_refill_ : never);
  }

  /// Holds an opportunistic job (or lets it go again): while a production job is on the GPU a held
  /// job's allowance is not refilled, so its launches wait, and it takes no part of the budget.
  /// Without a production job it runs as the others do.
  void hold(std::uint32_t id, bool held) noexcept {
    for (job& j : jobs_) {
      if (j.id == id && j.cls == job_class::opportunistic) j.held = held;
    }
    apply_gap_fill();
    refill();
  }
  [[nodiscard]] bool held(std::uint32_t id) const noexcept {
    return std::any_of(jobs_.begin(), jobs_.end(), [&](const job& j) { return j.id == id && holding(j); });
  }

  /// How much of its time the production job's host waits for its GPU (blocked in synchronisation
  /// calls), smoothed over its last rate periods; empty before `min_wait_periods` of them. A job
  /// whose host waits most of the time is GPU-bound; one that waits little is bound by its host.
  /// It is measured with or without a co-runner (the interposer times every synchronisation).
  [[nodiscard]] std::optional<double> production_gpu_wait() const noexcept {
    for (const job& j : jobs_) {
      if (j.cls == job_class::production && j.wait_periods >= min_wait_periods) return j.wait_average;
    }
    return std::nullopt;
  }
  /// Rate periods the production job's wait is measured over before it counts.
  static constexpr int min_wait_periods = 3;

  [[nodiscard]] const rate_decision& decision() const noexcept { return decision_; }
  [[nodiscard]] const Controller& controller() const noexcept { return controller_; }
  [[nodiscard]] std::size_t job_count() const noexcept { return jobs_.size(); }

  /// Per-job rates and budgets, for status.
  [[nodiscard]] std::vector<job_report> report() const {
    std::vector<job_report> out;
    out.reserve(jobs_.size());
    for (const job& j : jobs_) {
      job_report r{j.id, j.cls, j.blocks_per_s, j.launches_per_s, j.sync_wait_fraction, j.gpu_busy_fraction,
                   std::nullopt, j.launch_call_us};
      if (j.cls == job_class::opportunistic) r.budget_blocks = holding(j) ? std::optional<std::uint64_t>{0} : per_job_budget();
      out.push_back(r);
    }
    return out;
  }

 private:
  struct job {
    std::uint32_t id;
    job_class cls;
    abi::job_segment* segment;
    std::uint64_t step_counter;  ///< packed counter at the previous controller step
    std::uint64_t passed;        ///< blocks through the gate at the previous step (opportunistic)
    std::uint64_t rate_counter;  ///< packed counter at the previous rate update
    double blocks_per_s = 0;
    double launches_per_s = 0;
    std::uint64_t sync_wait_ns = 0;  ///< the segment's sync wait at the previous rate update
    double sync_wait_fraction = 0;
    std::uint64_t step_sync_wait_ns = 0;  ///< the segment's sync wait at the previous step
    std::uint64_t timed_launches = 0;     ///< the segment's timed launches at the previous rate update
    std::uint64_t timed_launch_ns = 0;    ///< and their driver time
    std::optional<double> launch_call_us = std::nullopt;
    std::uint64_t busy_ns = 0;       ///< the segment's GPU busy time at the previous rate update
    std::uint64_t samples = 0;       ///< and its activity samples
    std::optional<double> gpu_busy_fraction = std::nullopt;
    std::uint64_t step_busy_ns = 0;  ///< the segment's GPU busy time at the previous step
    std::uint64_t step_samples = 0;  ///< and its activity samples
    /// The latest synchronisation mark the controller saw (a production job's), and whether it
    /// was made while the job was sampled (a start for the next).
    std::optional<abi::sync_mark> mark = std::nullopt;
    bool mark_sampled = false;
    /// Held by the node (`hold`): an opportunistic job that launches nothing beside production.
    bool held = false;
    /// Its marks carry its wait (`abi::sync_mark::wait_ns`).
    bool marks_wait = false;
    /// The sync-wait fraction smoothed over rate periods (`production_gpu_wait`), and how many.
    double wait_average = 0;
    int wait_periods = 0;
  };

  /// The production job's blocks, wall time and wait between its previous mark and its latest,
  /// when it synchronised since the previous step, and its busy time between them when it was
  /// sampled throughout (`busy_whole` false otherwise: blocks and busy time must cover the same
  /// span; `wait_whole` the same for the wait, which an older interposer does not mark). The job
  /// writes the marks: a forged pair misleads only the controller's reading of the job itself,
  /// and is bounded to keep the sums finite.
  static void add_synced(job& j, job_activity& side, bool& busy_whole, bool& wait_whole) noexcept {
    const std::optional<abi::sync_mark> m = abi::read_sync_mark(*j.segment);
    if (!m || (j.mark && m->seq == j.mark->seq)) return;
    const std::optional<abi::sync_mark> previous = std::exchange(j.mark, m);
    const bool from_sampled =
        std::exchange(j.mark_sampled, j.segment->sample_activity.load(std::memory_order_relaxed) != 0);
    // Marks without a time (an interposer before sync_mark_ns) span nothing.
    if (!previous || previous->ns == 0 || m->ns <= previous->ns) return;
    constexpr std::uint64_t longest_ns = 3'600'000'000'000;  // an hour between two marks
    side.synced_blocks = side.synced_blocks.value_or(0) + abi::block_distance(previous->blocks, m->blocks);
    side.synced_span = side.synced_span.value_or(duration::zero()) +
                       duration{static_cast<std::int64_t>(std::min(m->ns - previous->ns, longest_ns))};
    if (j.marks_wait && m->wait_ns >= previous->wait_ns) {
      // Never more than the span: a forged wait must not read as a loss beyond the window.
      const std::uint64_t waited = std::min({m->wait_ns - previous->wait_ns, m->ns - previous->ns, longest_ns});
      side.synced_sync_wait = side.synced_sync_wait.value_or(duration::zero()) +
                              duration{static_cast<std::int64_t>(waited)};
    } else {
      wait_whole = false;
    }
    // The first mark of a sampling is only a start for the busy time.
    if (!from_sampled || m->busy_ns < previous->busy_ns) {
      busy_whole = false;
      return;
    }
    const std::uint64_t busy = std::min(m->busy_ns - previous->busy_ns, longest_ns);
    side.synced_gpu_busy = side.synced_gpu_busy.value_or(duration::zero()) +
                           duration{static_cast<std::int64_t>(busy)};
  }

  /// The time a job blocked in synchronisation calls between two readings of its counter,
  /// bounded by the time that passed: the counter is the job's to write, and a forged value must
  /// not reach the controller as a wait longer than the window (or a negative one).
  static duration bounded_wait(std::uint64_t before, std::uint64_t after, duration window) noexcept {
    if (after < before || window <= duration::zero()) return duration::zero();
    const std::uint64_t limit = static_cast<std::uint64_t>(window.count());
    return duration{static_cast<std::int64_t>(std::min(after - before, limit))};
  }

  [[nodiscard]] bool has_opportunistic() const noexcept {
    return std::any_of(jobs_.begin(), jobs_.end(), [](const job& j) { return j.cls == job_class::opportunistic; });
  }
  [[nodiscard]] bool has_production() const noexcept {
    return std::any_of(jobs_.begin(), jobs_.end(), [](const job& j) { return j.cls == job_class::production; });
  }
  /// Whether `j` is held now: the node holds it and a production job is on the GPU.
  [[nodiscard]] bool holding(const job& j) const noexcept { return j.held && has_production(); }

  /// The decision's budget split evenly across the opportunistic jobs not held (empty = unthrottled).
  [[nodiscard]] std::optional<std::uint64_t> per_job_budget() const noexcept {
    if (!decision_.opportunistic_budget) return std::nullopt;
    const auto n = static_cast<std::uint64_t>(std::count_if(jobs_.begin(), jobs_.end(), [&](const job& j) {
      return j.cls == job_class::opportunistic && !holding(j);
    }));
    // Keep the allowance arithmetic inside the 40-bit block space (see node_abi.hpp).
    return std::min(*decision_.opportunistic_budget / std::max<std::uint64_t>(n, 1), abi::unthrottled_lead);
  }

  /// Observes every job since the previous step and steps the controller.
  void step(instant now) noexcept {
    rate_observation obs;
    bool synced_busy_whole = true;
    bool synced_wait_whole = true;
    obs.now = now;
    obs.window = now - last_step_;
    for (job& j : jobs_) {
      const std::uint64_t counter = j.segment->launch_counter.load(std::memory_order_acquire);
      abi::counter_delta d = abi::unpack_delta(j.step_counter, counter);
      if (j.cls == job_class::opportunistic) {
        // Blocks that passed the gate (through the allowance or in a gap), not those still waiting.
        const std::uint64_t passed =
            abi::passed_position(counter & abi::block_mask, j.segment->allowance.load(std::memory_order_acquire),
                                 j.segment->gap_passed_to.load(std::memory_order_acquire));
        d.blocks = abi::block_distance(j.passed, passed);
        j.passed = passed;
      }
      j.step_counter = counter;
      const std::uint64_t waited = j.segment->sync_wait_ns.load(std::memory_order_relaxed);
      const duration sync_wait = bounded_wait(j.step_sync_wait_ns, waited, obs.window);
      j.step_sync_wait_ns = waited;
      std::optional<job_activity>& side = j.cls == job_class::production ? obs.production : obs.opportunistic;
      if (!side) side = job_activity{};
      side->blocks_launched += d.blocks;
      side->launches += d.launches;
      side->sync_wait = side->sync_wait.value_or(duration::zero()) + sync_wait;
      // GPU busy time only from a job whose sampler ran in the window: a job that took no sample
      // (not asked, an older interposer) says nothing, which is not the same as being idle.
      const std::uint64_t busy = j.segment->gpu_busy_ns.load(std::memory_order_relaxed);
      const std::uint64_t samples = j.segment->activity_samples.load(std::memory_order_relaxed);
      if (samples != j.step_samples) {
        side->gpu_busy = side->gpu_busy.value_or(duration::zero()) + bounded_wait(j.step_busy_ns, busy, obs.window);
      }
      j.step_busy_ns = busy;
      j.step_samples = samples;
      if (j.cls == job_class::production) add_synced(j, *side, synced_busy_whole, synced_wait_whole);
    }
    // Busy time or wait over only part of the marked span would make a speed of mismatched parts.
    if (obs.production && !synced_busy_whole) obs.production->synced_gpu_busy.reset();
    if (obs.production && !synced_wait_whole) obs.production->synced_sync_wait.reset();
    last_step_ = now;
    const rate_decision previous = decision_;
    decision_ = controller_.step(obs);
    if (decision_.budget_window <= duration::zero()) decision_.budget_window = std::chrono::milliseconds{50};
    apply_gap_fill();
    if (decision_.opportunistic_budget != previous.opportunistic_budget ||
        decision_.budget_window != previous.budget_window || next_refill_ == never) {
      // A new budget applies now, not at the end of the current window.
      refill();
      next_refill_ = now + decision_.budget_window;
    }
  }

  /// Carries the decision's gap filling to the jobs: the opportunistic jobs' gate and launch
  /// window, and whether the production jobs sample their GPU activity (only while an
  /// opportunistic job shares the GPU: alone, a production job's sampler stays asleep).
  void apply_gap_fill() noexcept {
    const bool shared = has_opportunistic();
    for (job& j : jobs_) {
      abi::job_segment& seg = *j.segment;
      if (j.cls == job_class::production) {
        // A mark made before the job was sampled counts blocks without their busy time: a
        // sampling that (re)starts measures from its first new mark.
        if (!shared) j.mark_sampled = false;
        seg.sample_activity.store(shared ? sample_period_us : 0, std::memory_order_relaxed);
        continue;
      }
      std::uint32_t bound = operator_inflight_bound;
      if (decision_.fill_gaps && !holding(j)) {
        const std::uint32_t asked = std::clamp<std::uint32_t>(decision_.fill_gaps->max_inflight, 1, abi::max_launch_window);
        bound = bound == 0 ? asked : std::min(bound, asked);
        const auto holdoff = static_cast<std::uint64_t>(std::max(decision_.fill_gaps->holdoff, duration::zero()).count());
        seg.gap_holdoff_ns.store(holdoff, std::memory_order_relaxed);
      }
      seg.max_inflight_launches.store(bound, std::memory_order_relaxed);
      seg.gap_fill.store(decision_.fill_gaps && !holding(j) ? 1 : 0, std::memory_order_release);
    }
  }

  /// Starts a new budget window for every opportunistic job and wakes its waiting launches.
  /// Under gap filling the launches that passed in gaps ran beside no production work: they are
  /// not a debt, so each window starts from the furthest launch known passed.
  void refill() noexcept {
    const std::optional<std::uint64_t> budget = per_job_budget();
    for (job& j : jobs_) {
      if (j.cls != job_class::opportunistic) continue;
      abi::job_segment& seg = *j.segment;
      const std::uint64_t used = seg.launch_counter.load(std::memory_order_acquire) & abi::block_mask;
      const std::uint64_t allowance = seg.allowance.load(std::memory_order_relaxed);
      // A held job gets nothing: its launches wait at the gate.
      const std::uint64_t grant = holding(j) ? 0 : budget.value_or(abi::unthrottled_lead);
      seg.allowance.store(decision_.fill_gaps
                              ? abi::gap_fill_allowance(allowance, used,
                                                        seg.gap_passed_to.load(std::memory_order_acquire), grant)
                              : abi::refill_allowance(allowance, used, grant),
                          std::memory_order_release);
      seg.budget_blocks.store(holding(j) ? 0 : budget.value_or(UINT64_MAX), std::memory_order_relaxed);
      seg.budget_window_ns.store(static_cast<std::uint64_t>(decision_.budget_window.count()), std::memory_order_relaxed);
      seg.refill_generation.fetch_add(1, std::memory_order_release);
      // Not FUTEX_PRIVATE: the waiters are in the job's process.
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seg.refill_generation), FUTEX_WAKE, INT_MAX, nullptr,
                nullptr, 0);
    }
  }

  void update_rates(instant now) noexcept {
    const double seconds = to_seconds(now - rate_time_);
    for (job& j : jobs_) {
      const std::uint64_t counter = j.segment->launch_counter.load(std::memory_order_acquire);
      const abi::counter_delta d = abi::unpack_delta(j.rate_counter, counter);
      j.blocks_per_s = static_cast<double>(d.blocks) / seconds;
      j.launches_per_s = static_cast<double>(d.launches) / seconds;
      j.rate_counter = counter;
      const std::uint64_t waited = j.segment->sync_wait_ns.load(std::memory_order_relaxed);
      j.sync_wait_fraction = to_seconds(bounded_wait(j.sync_wait_ns, waited, now - rate_time_)) / seconds;
      j.sync_wait_ns = waited;
      // Smoothed over about three periods: one period of a host-bound job moves by 8-15%.
      if (j.cls == job_class::production) {
        j.wait_average = j.wait_periods == 0 ? j.sync_wait_fraction : 0.7 * j.wait_average + 0.3 * j.sync_wait_fraction;
        ++j.wait_periods;
      }
      // The count is read before the time: a launch that adds between the two loads lands its
      // time in this period and its count in the next, a bias of one sample at most.
      const std::uint64_t timed = j.segment->timed_launches.load(std::memory_order_relaxed);
      const std::uint64_t timed_ns = j.segment->timed_launch_ns.load(std::memory_order_relaxed);
      // A count or a time that went backwards was not written by an interposer: no sample.
      j.launch_call_us = timed > j.timed_launches && timed_ns >= j.timed_launch_ns
                             ? std::optional<double>(static_cast<double>(timed_ns - j.timed_launch_ns) / 1e3 /
                                                     static_cast<double>(timed - j.timed_launches))
                             : std::nullopt;
      j.timed_launches = timed;
      j.timed_launch_ns = timed_ns;
      const std::uint64_t busy = j.segment->gpu_busy_ns.load(std::memory_order_relaxed);
      const std::uint64_t samples = j.segment->activity_samples.load(std::memory_order_relaxed);
      j.gpu_busy_fraction = samples != j.samples ? std::optional<double>(
                                                       to_seconds(bounded_wait(j.busy_ns, busy, now - rate_time_)) / seconds)
                                                 : std::nullopt;
      j.busy_ns = busy;
      j.samples = samples;
    }
    rate_time_ = now;
  }

  Controller controller_;
  rate_decision decision_{};
  std::vector<job> jobs_;
  instant last_step_;
  instant next_refill_ = never;
  instant rate_time_;
};

}  // namespace tgs::cuda::node
