// SPDX-License-Identifier: Apache-2.0
/// @file
/// `priority_share`: the opportunistic job as a below-normal-priority MPS client, under a launch
/// cap that tightens only when the production job is measurably slower than its own reference.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/arithmetic.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// Where `priority_share` is.
enum class priority_share_phase : std::uint8_t {
  /// No pair to control: the opportunistic job runs uncapped; a production job alone is measured.
  inactive,
  /// Measuring the production job's reference speed with the opportunistic job at its floor.
  reference,
  /// Both jobs run; the cap (or none) follows the production job's speed.
  sharing,
};

[[nodiscard]] constexpr std::string_view to_string(priority_share_phase p) noexcept {
  switch (p) {
    case priority_share_phase::inactive: return "inactive";
    case priority_share_phase::reference: return "reference";
    case priority_share_phase::sharing: return "sharing";
  }
  return "unknown";
}

/// Priority sharing: both jobs are MPS clients, the opportunistic one at below-normal dispatch
/// priority, and the opportunistic job's launches pass under a cap that starts open and closes
/// only as far as the production job's measured speed asks.
///
/// **Why MPS with priority.** Time slicing gives the opportunistic job only the production job's
/// idle time, and on current GPUs a training job leaves almost none (gaps of about 20 us, none in a
/// GPU-bound job: docs/results/time-slicing.md). Under MPS both jobs' kernels run at once, and at
/// below-normal priority the opportunistic client's blocks are dispatched only where the
/// production client has none waiting. On an H100 (docs/results/priority-sharing.md) that kept a
/// host-bound production job whole beside an opportunistic job at full speed, and left a GPU-bound
/// one at 0.93 of its alone speed: priority orders dispatch, not the SMs' shared caches, memory
/// bandwidth and in-flight blocks, so some loss remains.
///
/// **Why a launch cap, and why adaptive.** That remaining loss is removed by capping the
/// opportunistic job's thread blocks per window (a thread-percentage cap did not move it), and the
/// cap that keeps production at 0.95 differs per pair and per phase of a job: no cap for a light
/// production job, about a quarter of the opportunistic job's alone rate beside ResNet-50 b256.
///
/// **Control**, once per `period`:
/// 1. *Reference.* While the production job runs alone, its speed is sampled every window and the
///    latest `reference_windows` samples are its reference: their mean and their spread, which is
///    the speed's own noise (host jitter, iteration quantisation). An opportunistic job that
///    arrives then starts uncapped. Without such samples (the production job arrived beside a
///    running opportunistic job) the opportunistic job is held at its floor while they are
///    measured.
/// 2. *Test.* While both run, the windows since the latest change of cap (after one discarded
///    transition window, at most `evidence_windows`) are compared with the reference by a
///    one-sided two-sample test on the pooled variance: the production job is *hurt* when its
///    mean speed is below the reference's `1 - tolerated_slowdown` by more than `confidence_z`
///    standard errors. Hurt tightens the cap (uncapped: to `tighten_factor` of what the
///    opportunistic job launched; capped: by that factor), never below the floor. A whole block of
///    `evidence_windows` windows whose mean is at or above that level loosens it by
///    `loosen_factor` (a probe), and lifts it once it exceeds what the opportunistic job launched
///    uncapped. Anything between keeps the cap. So the cap settles where the production job runs
///    at the tolerated level, tightening needs evidence beyond the noise, and a false alarm is
///    undone by the next block. So a host-bound production job whose speed moves ±15% window to window
///    is never read as slowed by a few percent it did not lose, and a GPU-bound one whose speed
///    moves ±1% is protected at a few percent.
/// 3. *Refresh.* Every `refresh_every_windows` windows the opportunistic job is held at its floor
///    for `refresh_windows` windows (after one discarded): samples that agree with the reference
///    join it, and samples that differ beyond the noise replace it, so drift of the production
///    job's speed (another phase, clocks) is not read as contention. Windows faster than the
///    reference beyond the noise while uncapped replace it at once.
///
/// A window in which the production job launched nothing (idle, or paused) gives no sample and
/// changes nothing: when it resumes it finds the cap it left, so it is not slowed while the
/// controller learns again.
///
/// The speed is the production job's thread blocks per second of wall time between its
/// synchronisations (`job_activity::synced_blocks` over `synced_span`): whole iterations, host and
/// GPU together, which is what its user sees. Without synchronisation marks it is the window's
/// launched blocks over the window.
///
/// **The GPU-wait signal** (`gpu_wait_signal`, the default). A host-bound job's speed moves 8–15% from one
/// second to the next with its own host side, and a test on that speed cannot tell a 5% loss
/// from it within seconds. What an opportunistic job takes is GPU time: beside it each of the
/// production job's blocks keeps the GPU busy longer, whatever its host side does; and the job
/// loses wall time only where it then waits longer for its GPU work. With this setting a window's
/// sample is the wall time lost, as a fraction of the window: the lesser of the extra busy time
/// and the extra wait beyond the reference's per block (blocks × per-block reference subtracted
/// from the window's busy time and from its wait), between the job's synchronisations
/// (`synced_gpu_busy`, `synced_sync_wait`); the test runs on 1 − that fraction against the
/// reference's own. Host jitter moves a window's blocks and wall time, not the busy time or the
/// wait per block, so the noise left is the GPU's own. The lesser of the two because each alone
/// misreads one kind of job: a host-bound PyTorch job's kernels run while its host prepares the
/// next ones, so kernels stretched by a co-runner keep the GPU busier per block without costing
/// it time (on an H200 the busy time alone read a 7.5–11% loss of a job that ran at 1.07 of
/// alone, docs/results/noise-detection.md); a GPU-bound job whose host side speeds up waits
/// longer at the same speed. Without a marked wait (an older interposer) the busy time alone is
/// read, which overstates and so errs towards protecting the job; without the busy time there is
/// no sample. A production job is sampled only while an opportunistic job shares its GPU, so the
/// reference is taken with the opportunistic job held at its floor (`reference` phase) on every
/// arrival.
///
/// ```cpp
/// tgs::priority_share c{{}};
/// auto d = c.step({.now = tgs::epoch, .window = {}, .production = {}, .opportunistic = tgs::job_activity{}});
/// assert(!d.opportunistic_budget);  // no production job: uncapped
/// assert(std::get<tgs::mps_partition>(d.share).opportunistic_below_normal);
/// ```
class priority_share {
 public:
  /// At most this many samples in the reference and in the evidence.
  static constexpr int max_samples = 64;
  /// Fewest windows the test compares with the reference: fewer have no spread worth the name.
  static constexpr int min_evidence = 4;

  struct config {
    /// Step period: the span of one speed sample. Our choice: 500 ms holds several iterations of
    /// a typical training job, and a change of cap shows within two windows.
    duration period = std::chrono::milliseconds{500};
    /// Samples of the production job alone kept as its reference (the latest ones). Our choice:
    /// 16, eight seconds: the reference's own error is then a quarter of the window-to-window
    /// spread, and every test leans on it.
    int reference_windows = 16;
    /// Fewest reference samples the test runs with.
    int min_reference_windows = 3;
    /// Windows the reference is measured over at a refresh (after one discarded). Our choice: 4,
    /// so a refresh holds the opportunistic job at its floor for 2.5 s of every minute.
    int refresh_windows = 4;
    /// Most recent windows the test compares with the reference.
    int evidence_windows = 6;
    /// The production job's loss the controller tolerates beyond the noise. Our choice: 4%, so
    /// that with the interposer's cost the job stays at or above 0.95 of alone.
    double tolerated_slowdown = 0.04;
    /// Standard errors a difference must exceed to count (one-sided). Our choice: 2.33 (99%):
    /// the test runs every window, so a 95% test would raise a false alarm every few seconds.
    double confidence_z = 2.33;
    /// A hurt production job's cap: this fraction of the current one.
    double tighten_factor = 0.7;
    /// An unhurt production job's cap: this multiple of the current one.
    double loosen_factor = 1.2;
    /// The cap never falls below this fraction of what the opportunistic job launched uncapped.
    double floor_fraction = 0.05;
    /// Nor below this many blocks per budget window.
    std::uint64_t min_budget_blocks = 64;
    /// Refill period of the cap. Our default: the 50 ms window of the TGS interposer.
    duration budget_window = std::chrono::milliseconds{50};
    /// Windows between reference refreshes while both jobs run (0: never).
    int refresh_every_windows = 120;
    /// Tests in a row that find the production job hurt with the cap already at its floor before
    /// the decision says it is unprotected (`rate_decision::production_unprotected`). Our choice:
    /// 2, five seconds at the defaults, so one unlucky test does not move a job.
    int unprotected_tests = 2;
    /// Read the production job's loss from the GPU time it waits for per block instead of its
    /// speed (see the class comment). On by default: on an H200, at 3-5 runs per pair, it kept
    /// production where the speed signal did and gave a host-bound production job's co-runner
    /// 0.86-1.01 of its rate where the speed signal gave 0.00-0.61
    /// (docs/results/dominance.md). `false` reads the speed.
    bool gpu_wait_signal = true;
  };

  static constexpr std::string_view name = "priority-share";
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::mps;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = true;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"period-ms", "step period: the span of one speed sample", &config::period},
      setting<config>{"reference-windows", "samples of the production job alone kept as its reference",
                      &config::reference_windows},
      setting<config>{"refresh-windows", "windows a refresh measures the reference over (one discarded)",
                      &config::refresh_windows},
      setting<config>{"evidence-windows", "most recent windows the test compares with the reference",
                      &config::evidence_windows},
      setting<config>{"tolerated-slowdown", "the production job's loss tolerated beyond its noise",
                      &config::tolerated_slowdown},
      setting<config>{"confidence-z", "standard errors a difference must exceed to count",
                      &config::confidence_z},
      setting<config>{"tighten-factor", "a hurt production job's cap, as a fraction of the current one",
                      &config::tighten_factor},
      setting<config>{"loosen-factor", "an unhurt production job's cap, as a multiple of the current one",
                      &config::loosen_factor},
      setting<config>{"floor-fraction",
                      "the lowest cap, as a fraction of what the opportunistic job launched uncapped",
                      &config::floor_fraction},
      setting<config>{"min-budget-blocks", "the lowest cap, blocks per budget window",
                      &config::min_budget_blocks},
      setting<config>{"budget-window-ms", "refill period of the cap", &config::budget_window},
      setting<config>{"refresh-every-windows", "windows between reference refreshes (0: never)",
                      &config::refresh_every_windows},
      setting<config>{"unprotected-tests",
                      "tests in a row that find production hurt at the floor before it is unprotected",
                      &config::unprotected_tests},
      setting<config>{"gpu-wait-signal",
                      "read production's loss from the GPU time it waits for per block (=false: from its speed)",
                      &config::gpu_wait_signal},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit priority_share(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    // A window shorter than half a period (a step on a job event) is too short to sample.
    const bool timed = obs.window * 2 >= cfg_.period;
    if (timed || next_revisit_ == never || next_revisit_ <= obs.now) {
      next_revisit_ = rate_detail::later(obs.now, cfg_.period);
    }
    if (!obs.production) {
      // No production job: its reference goes with it; the opportunistic job runs free.
      stage_ = stage::inactive;
      reference_.clear();
      busy_per_block_ = 0.0;
      wait_per_block_ = -1.0;
      if (timed && obs.opportunistic) note_demand(*obs.opportunistic, obs.window, true);
      return decision(false);
    }
    const std::optional<window_sample> sample = timed ? sample_of(*obs.production, obs.window) : std::nullopt;
    if (!obs.opportunistic) {
      stage_ = stage::inactive;
      if (sample) {
        push(reference_, *sample, cfg_.reference_windows);
        rebase();
      }
      return decision(true);
    }
    if (stage_ == stage::inactive) {
      // An arrival: share at once when the production job's speed alone is known.
      cap_.reset();
      uncapped_demand_ = 0.0;
      since_refresh_ = 0;
      have_point_ = false;
      slope_ = 0.0;
      if (reference_.count >= cfg_.min_reference_windows) {
        start_sharing();
      } else {
        start_reference();
      }
      return decision(true);
    }
    if (!timed) return decision(true);
    note_demand(*obs.opportunistic, obs.window, !cap_);
    if (stage_ == stage::reference) {
      if (sample && ++reference_seen_ > 1) push(fresh_, *sample, cfg_.reference_windows);
      // A production job that stays idle gives no samples: after three times the windows a
      // reference takes, sharing resumes with what was measured (nothing: the previous
      // reference), so an idle production job never holds the opportunistic one at its floor.
      if (reference_seen_ > cfg_.refresh_windows || ++reference_elapsed_ > 3 * (cfg_.refresh_windows + 1)) {
        adopt_fresh_reference();
        start_sharing();
      }
      return decision(true);
    }
    ++since_refresh_;
    if (sample) judge(*sample);
    if (cfg_.refresh_every_windows > 0 && since_refresh_ >= cfg_.refresh_every_windows) {
      since_refresh_ = 0;
      start_reference();
    }
    return decision(true);
  }

  [[nodiscard]] priority_share_phase phase() const noexcept {
    switch (stage_) {
      case stage::inactive: return priority_share_phase::inactive;
      case stage::reference: return priority_share_phase::reference;
      case stage::sharing: return priority_share_phase::sharing;
    }
    return priority_share_phase::inactive;
  }
  /// The cap, blocks per budget window; empty while uncapped.
  [[nodiscard]] std::optional<std::uint64_t> cap() const noexcept { return cap_; }
  /// The reference speed (mean of the reference samples), blocks per second; 0 before any.
  [[nodiscard]] double reference_speed() const noexcept { return reference_.mean(); }
  /// The mean speed of the windows since the latest change, blocks per second; 0 before any.
  [[nodiscard]] double recent_speed() const noexcept { return evidence_.mean(); }
  /// The latest test's statistic: (recent mean - tolerated level) / standard error; 0 when none.
  [[nodiscard]] double last_z() const noexcept { return last_z_; }

  /// The phase, the cap, the reference and the latest test.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("phase", to_string(phase()));
    r.add("budget_blocks", cap_ ? static_cast<std::int64_t>(*cap_) : std::int64_t{-1});
    if (reference_.count > 0) {
      // Under the GPU-wait signal the samples are relative speeds (about 1), not blocks/s.
      if (!cfg_.gpu_wait_signal) r.add("reference_blocks_per_s", reference_.mean());
      r.add("reference_cv", reference_.mean() > 0.0 ? std::sqrt(reference_.variance()) / reference_.mean() : 0.0);
    }
    if (evidence_.count > 0 && reference_.mean() > 0.0) {
      r.add("slowdown", 1.0 - evidence_.mean() / reference_.mean());
      r.add("z", last_z_);
    }
    if (cfg_.gpu_wait_signal) {
      r.add("signal", "gpu-wait");
      if (busy_per_block_ > 0.0) r.add("reference_gpu_ns_per_block", busy_per_block_ * 1e9);
      if (wait_per_block_ >= 0.0) r.add("reference_wait_ns_per_block", wait_per_block_ * 1e9);
      // The two readings the sample is the lesser of, over the latest evidence: what the busy
      // time alone and the wait alone would say the job lost.
      if (evidence_.count > 0 && busy_per_block_ > 0.0) {
        double busy = 0.0;
        double wait = 0.0;
        bool waits = wait_per_block_ >= 0.0;
        for (int i = 0; i < evidence_.count; ++i) {
          const window_sample& w = evidence_.window[static_cast<std::size_t>(i)];
          busy += (w.busy - w.blocks * busy_per_block_) / w.span / evidence_.count;
          wait += (w.wait - w.blocks * wait_per_block_) / w.span / evidence_.count;
          waits = waits && w.wait >= 0.0;
        }
        r.add("busy_loss", busy);
        if (waits) r.add("wait_loss", wait);
      }
    }
    if (uncapped_demand_ > 0.0) r.add("uncapped_demand_blocks", uncapped_demand_);
    return r;
  }

 private:
  enum class stage : std::uint8_t { inactive, reference, sharing };

  /// One window of the production job: its speed (blocks per second), and the blocks, GPU busy
  /// time, wait and wall time the GPU-wait signal reads (seconds; busy 0 and wait -1 when not
  /// known).
  struct window_sample {
    double speed = 0.0;
    double blocks = 0.0;
    double busy = 0.0;
    double wait = -1.0;
    double span = 0.0;
  };

  /// Up to `max_samples` samples (each window's value for the test, and the window it came
  /// from): the latest `limit` ones are kept.
  struct samples {
    std::array<double, max_samples> value{};
    std::array<window_sample, max_samples> window{};
    int count = 0;
    int next = 0;
    void clear() noexcept { count = next = 0; }
    void push(double x, const window_sample& w, int limit) noexcept {
      value[static_cast<std::size_t>(next)] = x;
      window[static_cast<std::size_t>(next)] = w;
      next = (next + 1) % limit;
      count = std::min(count + 1, limit);
    }
    [[nodiscard]] double mean() const noexcept {
      if (count == 0) return 0.0;
      double s = 0.0;
      for (int i = 0; i < count; ++i) s += value[static_cast<std::size_t>(i)];
      return s / count;
    }
    /// Sum of squared deviations from the mean.
    [[nodiscard]] double squares() const noexcept {
      const double m = mean();
      double s = 0.0;
      for (int i = 0; i < count; ++i) {
        const double d = value[static_cast<std::size_t>(i)] - m;
        s += d * d;
      }
      return s;
    }
    [[nodiscard]] double variance() const noexcept { return count > 1 ? squares() / (count - 1) : 0.0; }
  };

  static config validated(const config& c) {
    using rate_detail::check;
    constexpr std::string_view p = "priority_share";
    check(c.period > duration::zero(), p, "period", "positive", c.period);
    check(c.reference_windows >= 2 && c.reference_windows <= max_samples, p, "reference_windows", "in [2, 64]",
          c.reference_windows);
    check(c.min_reference_windows >= 2 && c.min_reference_windows <= c.reference_windows, p,
          "min_reference_windows", "in [2, reference_windows]", c.min_reference_windows);
    check(c.refresh_windows >= c.min_reference_windows && c.refresh_windows <= c.reference_windows, p,
          "refresh_windows", "in [min_reference_windows, reference_windows]", c.refresh_windows);
    check(c.evidence_windows >= min_evidence && c.evidence_windows <= max_samples, p, "evidence_windows", "in [4, 64]",
          c.evidence_windows);
    check(c.tolerated_slowdown >= 0.0 && c.tolerated_slowdown < 0.5, p, "tolerated_slowdown", "in [0, 0.5)",
          c.tolerated_slowdown);
    check(c.confidence_z > 0.0 && c.confidence_z <= 10.0, p, "confidence_z", "in (0, 10]", c.confidence_z);
    check(c.tighten_factor > 0.0 && c.tighten_factor < 1.0, p, "tighten_factor", "in (0, 1)", c.tighten_factor);
    check(c.loosen_factor > 1.0 && c.loosen_factor <= 10.0, p, "loosen_factor", "in (1, 10]", c.loosen_factor);
    check(c.floor_fraction >= 0.0 && c.floor_fraction < 1.0, p, "floor_fraction", "in [0, 1)", c.floor_fraction);
    check(c.min_budget_blocks >= 1 && c.min_budget_blocks <= (std::uint64_t{1} << 40), p, "min_budget_blocks",
          "in [1, 2^40]", c.min_budget_blocks);
    check(c.budget_window > duration::zero(), p, "budget_window", "positive", c.budget_window);
    check(c.refresh_every_windows >= 0, p, "refresh_every_windows", "at least 0 (0: never)",
          c.refresh_every_windows);
    check(c.unprotected_tests >= 1 && c.unprotected_tests <= 1000, p, "unprotected_tests", "in [1, 1000]",
          c.unprotected_tests);
    return c;
  }

  /// The production job's window: between its synchronisations where it made two in the
  /// window, else over the window; empty when it launched nothing, and under the GPU-wait signal
  /// when its busy time is not known.
  [[nodiscard]] std::optional<window_sample> sample_of(const job_activity& a, duration window) const noexcept {
    window_sample w;
    if (a.synced_blocks && a.synced_span && *a.synced_blocks > 0 && *a.synced_span > duration::zero()) {
      w.blocks = static_cast<double>(*a.synced_blocks);
      w.span = to_seconds(*a.synced_span);
      if (a.synced_gpu_busy) w.busy = to_seconds(*a.synced_gpu_busy);
      if (a.synced_sync_wait) w.wait = to_seconds(*a.synced_sync_wait);
    }
    if (w.blocks == 0.0 || (cfg_.gpu_wait_signal && !a.synced_gpu_busy)) {
      // The whole window: its launched blocks, and its busy time where the synced one is missing
      // (the window's wait does not match its blocks: a window ends mid-iteration).
      if (a.blocks_launched == 0) return std::nullopt;
      w.blocks = static_cast<double>(a.blocks_launched);
      w.span = to_seconds(window);
      w.busy = a.gpu_busy ? to_seconds(*a.gpu_busy) : 0.0;
      w.wait = -1.0;
      if (cfg_.gpu_wait_signal && !a.gpu_busy) return std::nullopt;
    }
    w.speed = w.blocks / w.span;
    return w;
  }

  /// The value the test compares: the speed, or under the GPU-wait signal 1 minus the fraction
  /// of the window lost: the lesser of the busy time and the wait beyond the reference's per
  /// block (the busy time alone where either wait is not known).
  [[nodiscard]] double value_of(const window_sample& w) const noexcept {
    if (!cfg_.gpu_wait_signal) return w.speed;
    double lost = w.busy - w.blocks * busy_per_block_;
    if (w.wait >= 0.0 && wait_per_block_ >= 0.0) lost = std::min(lost, w.wait - w.blocks * wait_per_block_);
    return 1.0 - lost / w.span;
  }
  void push(samples& to, const window_sample& w, int limit) const noexcept { to.push(value_of(w), w, limit); }

  /// Under the GPU-wait signal, the reference's busy time and wait per block from its windows
  /// (the wait only when every window has one), and every kept value again against them: called
  /// whenever the reference changes.
  void rebase() noexcept {
    if (!cfg_.gpu_wait_signal) return;
    double blocks = 0.0;
    double busy = 0.0;
    double wait = 0.0;
    bool waits = reference_.count > 0;
    for (int i = 0; i < reference_.count; ++i) {
      const window_sample& w = reference_.window[static_cast<std::size_t>(i)];
      blocks += w.blocks;
      busy += w.busy;
      wait += w.wait;
      waits = waits && w.wait >= 0.0;
    }
    busy_per_block_ = blocks > 0.0 ? busy / blocks : 0.0;
    wait_per_block_ = waits && blocks > 0.0 ? wait / blocks : -1.0;
    for (samples* set : {&reference_, &evidence_, &fresh_}) {
      for (int i = 0; i < set->count; ++i) {
        set->value[static_cast<std::size_t>(i)] = value_of(set->window[static_cast<std::size_t>(i)]);
      }
    }
  }

  /// What the opportunistic job launched per budget window; remembered while it ran uncapped.
  void note_demand(const job_activity& a, duration window, bool uncapped) noexcept {
    demand_ = rate_detail::per_period(a.blocks_launched, window, cfg_.budget_window);
    if (uncapped && demand_ > 0.0) {
      uncapped_demand_ = uncapped_demand_ > 0.0 ? 0.5 * (uncapped_demand_ + demand_) : demand_;
    }
  }

  [[nodiscard]] std::uint64_t floor() const noexcept {
    const double f = cfg_.floor_fraction * uncapped_demand_;
    return std::max(cfg_.min_budget_blocks, static_cast<std::uint64_t>(std::min(f, 1e12)));
  }

  void start_reference() noexcept {
    stage_ = stage::reference;
    fresh_.clear();
    reference_seen_ = 0;
    reference_elapsed_ = 0;
    evidence_.clear();
  }

  /// The samples of a reference measurement join the reference, or replace it when they differ
  /// from it beyond the noise (the production job's speed drifted): a reference of many windows
  /// is steadier than one of a few, and one that is wrong would be wrong for every test.
  void adopt_fresh_reference() noexcept {
    if (fresh_.count == 0) return;
    if (reference_.count >= 2 && fresh_.count >= 2) {
      const int n = reference_.count + fresh_.count;
      const double pooled = (reference_.squares() + fresh_.squares()) / (n - 2);
      const double se = std::max(std::sqrt(pooled * (1.0 / reference_.count + 1.0 / fresh_.count)),
                                 1e-6 * reference_.mean());
      if (std::abs(fresh_.mean() - reference_.mean()) / se <= cfg_.confidence_z) {
        for (int i = 0; i < fresh_.count; ++i) {
          const auto k = static_cast<std::size_t>(i);
          reference_.push(fresh_.value[k], fresh_.window[k], cfg_.reference_windows);
        }
        rebase();
        return;
      }
    }
    reference_ = fresh_;
    rebase();
  }

  void start_sharing() noexcept {
    stage_ = stage::sharing;
    hurt_at_floor_ = 0;
    evidence_.clear();
    skip_ = 1;
  }

  /// One window while both run: the test, and what it leads to.
  void judge(const window_sample& w) noexcept {
    if (skip_ > 0) {
      --skip_;  // the window a change took effect in shows neither the old cap nor the new one
      return;
    }
    push(evidence_, w, cfg_.evidence_windows);
    if (evidence_.count < min_evidence || reference_.count < 2) return;
    const double level = reference_.mean() * (1.0 - cfg_.tolerated_slowdown);
    const int nr = reference_.count;
    const int nc = evidence_.count;
    const double pooled = (reference_.squares() + evidence_.squares()) / (nr + nc - 2);
    // A floor on the standard error: two identical reference samples must not make every
    // difference significant.
    const double se = std::max(std::sqrt(pooled * (1.0 / nr + 1.0 / nc)), 1e-6 * reference_.mean());
    last_z_ = (evidence_.mean() - level) / se;
    const double faster_z = (evidence_.mean() - reference_.mean() * (1.0 + cfg_.tolerated_slowdown)) / se;
    if (last_z_ < -cfg_.confidence_z) {
      // Hurt with the cap at its floor already: tightening cannot help.
      hurt_at_floor_ = cap_ && *cap_ <= floor() ? hurt_at_floor_ + 1 : 0;
      tighten(se);
      return;
    }
    hurt_at_floor_ = 0;
    if (faster_z > cfg_.confidence_z && nc >= cfg_.evidence_windows && !cap_) {
      // Faster than the reference beyond doubt, uncapped: the reference was low. The evidence
      // becomes the reference, so a job that sped up is protected at its new speed.
      reference_ = evidence_;
      evidence_.clear();
      rebase();
    } else if (nc >= cfg_.evidence_windows && cap_) {
      // A whole block of windows at or above the tolerated level: probe a looser cap. Asking
      // for significance here too would leave a cap that one unlucky reference caused (a
      // reference high by chance reads every ordinary window as a small loss) standing for good.
      // For the same reason two whole blocks in a row below the level but not significantly so
      // probe as well: a real loss tightens again at once, with significance.
      if (last_z_ > 0.0 || ++inconclusive_blocks_ >= 2) {
        inconclusive_blocks_ = 0;
        loosen(se);
      } else {
        evidence_.clear();
      }
    }
  }

  void tighten(double se) noexcept {
    inconclusive_blocks_ = 0;
    retarget(true, se);
  }

  void loosen(double se) noexcept { retarget(false, se); }

  /// A new cap after a decided test. The first step from uncapped, and any step before two caps
  /// have shown how the production job's slowdown moves with the cap, is multiplicative
  /// (`tighten_factor`, `loosen_factor`). After that the step aims at the cap where the slowdown
  /// is the tolerated one, along the line through the latest two (cap, slowdown) points (a secant
  /// step), bounded to half or one and a half times the cap and moving at least 3%: a GPU-bound
  /// production job, whose speed moves by a fraction of a percent, is then held close to the
  /// tolerance instead of swinging between a cap too tight and one too loose.
  ///
  /// `se` is the standard error of the test behind the step, in the production job's speed: a
  /// slope is learnt only from two points whose slowdowns differ by more than twice their
  /// combined error. A jittery job's noise (a host-bound one moves ±10% a window) would otherwise
  /// read as a steep line, and a steep line makes every later loosening a small one.
  void retarget(bool tightening, double se) noexcept {
    const double from = cap_ ? static_cast<double>(*cap_) : std::max(demand_, uncapped_demand_);
    const double slowdown = 1.0 - evidence_.mean() / reference_.mean();
    const double slowdown_se = se / reference_.mean();
    if (have_point_ && std::abs(from - point_cap_) >= 0.05 * std::max(from, point_cap_) &&
        std::abs(slowdown - point_slowdown_) > 2.0 * std::hypot(slowdown_se, point_se_)) {
      const double slope = (slowdown - point_slowdown_) / (from - point_cap_);
      if (slope > 0.0 && std::isfinite(slope)) slope_ = slope_ > 0.0 ? 0.5 * (slope_ + slope) : slope;
    }
    have_point_ = true;
    point_cap_ = from;
    point_slowdown_ = slowdown;
    point_se_ = slowdown_se;
    double to = from * (tightening ? cfg_.tighten_factor : cfg_.loosen_factor);
    if (slope_ > 0.0) {
      to = from + (cfg_.tolerated_slowdown - slowdown) / slope_;
      to = tightening ? std::clamp(to, 0.5 * from, 0.97 * from) : std::clamp(to, 1.03 * from, 1.5 * from);
    }
    to = std::min(to, 1e12);
    // Past what the opportunistic job launched uncapped, a cap holds nothing back: lift it.
    if (!tightening && uncapped_demand_ > 0.0 && to >= uncapped_demand_) {
      cap_.reset();
    } else if (tightening) {
      cap_ = std::max(floor(), static_cast<std::uint64_t>(to));
    } else {
      cap_ = std::max(*cap_ + 1, static_cast<std::uint64_t>(to));
    }
    evidence_.clear();
    skip_ = 1;
  }

  [[nodiscard]] rate_decision decision(bool production) const noexcept {
    rate_decision d;
    d.share = mps_partition{1.0, 1.0, true};
    d.budget_window = cfg_.budget_window;
    switch (stage_) {
      case stage::inactive: d.opportunistic_budget = std::nullopt; break;
      case stage::reference: d.opportunistic_budget = floor(); break;
      case stage::sharing: d.opportunistic_budget = cap_; break;
    }
    d.revisit_at = production ? next_revisit_ : never;
    d.production_unprotected = stage_ == stage::sharing && hurt_at_floor_ >= cfg_.unprotected_tests;
    return d;
  }

  config cfg_;
  stage stage_ = stage::inactive;
  std::optional<std::uint64_t> cap_{};
  samples reference_{};
  samples evidence_{};
  double demand_ = 0.0;           // opportunistic blocks per budget window, latest window
  double uncapped_demand_ = 0.0;  // the same, smoothed over windows it ran uncapped
  double last_z_ = 0.0;
  samples fresh_{};               // the samples of a reference measurement under way
  bool have_point_ = false;       // the latest decided (cap, slowdown), for the secant step
  double point_cap_ = 0.0;
  double point_slowdown_ = 0.0;
  double point_se_ = 0.0;
  double slope_ = 0.0;            // slowdown per block of cap (0: not known yet)
  double busy_per_block_ = 0.0;   // the reference's GPU busy seconds per block (GPU-wait signal)
  double wait_per_block_ = -1.0;  // and its wait per block (-1: not known)
  int reference_seen_ = 0;        // windows with a sample in this reference (the first discarded)
  int reference_elapsed_ = 0;     // windows in this reference, with a sample or not
  int skip_ = 0;
  int inconclusive_blocks_ = 0;   // whole blocks in a row below the level, not significantly
  int hurt_at_floor_ = 0;         // significant losses in a row with the cap at its floor
  std::int64_t since_refresh_ = 0;
  instant next_revisit_ = never;
};

static_assert(RegisteredRateController<priority_share>);

}  // namespace tgs
