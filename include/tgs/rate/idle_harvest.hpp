// SPDX-License-Identifier: Apache-2.0
/// @file
/// `idle_harvest`: gives the opportunistic job the GPU time the production job leaves idle, and
/// decides from the production job's GPU-side speed, which its host-side jitter does not move.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/arithmetic.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// Where `idle_harvest` is.
enum class harvest_phase : std::uint8_t {
  /// No pair to control: the opportunistic job runs unthrottled.
  inactive,
  /// Measuring the production job's GPU-side speed with the opportunistic job held.
  reference,
  /// Harvesting: the opportunistic job fills the production job's idle gaps (and runs a share
  /// beside its busy periods when that costs nothing measurable).
  harvesting,
};

[[nodiscard]] constexpr std::string_view to_string(harvest_phase p) noexcept {
  switch (p) {
    case harvest_phase::inactive: return "inactive";
    case harvest_phase::reference: return "reference";
    case harvest_phase::harvesting: return "harvesting";
  }
  return "unknown";
}

/// Idle-time harvesting: the opportunistic job runs while the production job has no work on the
/// GPU, and, while that costs the production job nothing measurable, a share beside it.
///
/// **Why this signal.** On real GPUs the released TGS controller reads the production job's
/// launch rate, which moves ±10% from second to second with the job's host side (a Python-bound
/// loop) while nothing slows it; its 3% band reads that as contention and starves the
/// opportunistic job (docs/results/rate-control.md). This controller reads the production job's
/// *GPU-side speed* instead: thread blocks per second of the time it had unfinished work on the
/// GPU (`job_activity::gpu_busy`, which the production job's interposer samples by querying its
/// streams). A slower host side launches fewer blocks but keeps the GPU just as busy per block;
/// an opportunistic kernel the production job has to wait for makes each block take longer. The
/// blocks are counted between the production job's synchronisations where it makes any
/// (`job_activity::synced_blocks`): a training job launches each iteration in a burst, so a
/// fixed window's count moves by one iteration in the ten or twenty a window holds (±5–10% on an
/// H100), more than the slowdown the controller must see.
///
/// **Mechanism** (`rate_decision::fill_gaps`, carried out by the interposers): an opportunistic
/// launch passes while the production job has had no unfinished GPU work for `holdoff`, with at
/// most `max_inflight` of the opportunistic job's own launches unfinished, so a production job
/// that resumes waits for at most that many short kernels. Launches beside a busy production job
/// pass only within `opportunistic_budget`.
///
/// **Control**, once per `period` while both classes are present:
/// 1. *Reference.* On an arrival the opportunistic job is held for `reference_windows` active
///    windows (after one that lets its queued work drain) and the production job's GPU-side
///    speed S0 is their median. Windows in which the production job is idle do not count; the
///    opportunistic job runs freely in them.
/// 2. *Harvest.* Each active window gives a speed S (smoothed by `smoothing`). A slowdown
///    1 − S/S0 above `target_slowdown` tightens, first the share beside busy periods (halved,
///    then none), then the gap gate (`holdoff` doubled, `max_inflight` lowered). A slowdown
///    below half the target loosens in the opposite order, the share growing ×1.5 up to
///    `cap_demand_multiple` times what the opportunistic job launches. So the share grows in
///    proportion to demand within seconds and backs off within one window.
/// 3. *Refresh.* Every `refresh_every_windows` windows the opportunistic job is held again and
///    S0 measured anew, and a smoothed speed above S0 by more than the target for
///    `reference_windows` windows in a row becomes S0. A production job's GPU-side speed can
///    drift (another phase of training, clocks), and a stale S0 would read the drift as
///    contention. One fast window does not raise S0: S0 would climb to the top of the
///    window-to-window spread, and every ordinary window would then read as a slowdown.
///
/// Without a GPU-side signal (`gpu_busy` empty: an interposer too old to sample it) the gate
/// stays at its initial setting and no share is granted beside busy periods: gap filling alone,
/// which cannot starve the opportunistic job the way a misread launch rate does.
///
/// ```cpp
/// tgs::idle_harvest c{{}};
/// auto d = c.step({.now = tgs::epoch, .window = {},
///                  .production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
/// assert(d.opportunistic_budget == 0u && !d.fill_gaps);  // an arrival: the reference is measured
/// ```
class idle_harvest {
 public:
  struct config {
    /// Step period: the span of one speed sample. Our choice: 500 ms holds several iterations
    /// of a typical training job (so the kernel mix of a window is representative) and lets a
    /// tightening act within one window of a slowdown.
    duration period = std::chrono::milliseconds{500};
    /// Active windows the reference speed S0 is measured over (after one discarded window). Our
    /// choice: 3, the fewest whose median ignores one outlying window.
    int reference_windows = 3;
    /// The production job's largest tolerated loss of GPU-side speed. Our choice: 3%, so that
    /// with the interposer's cost and run-to-run spread the job stays at or above 0.95 of alone.
    double target_slowdown = 0.03;
    /// Weight of the previous speed in the smoothed speed, in [0, 1).
    double smoothing = 0.5;
    /// A window in which the production job had unfinished GPU work for less than this share of
    /// the time says nothing about its speed: it counts as idle.
    double min_busy_fraction = 0.02;
    /// Gap gate at the start of harvesting: how long the production job must have been idle.
    duration initial_holdoff = std::chrono::microseconds{200};
    /// The gate is never stricter than this.
    duration max_holdoff = std::chrono::milliseconds{20};
    /// Below this the gate opens fully (holdoff 0).
    duration min_holdoff = std::chrono::microseconds{25};
    /// The opportunistic job's unfinished launches at the start, and at most.
    std::uint32_t initial_inflight = 2;
    std::uint32_t max_inflight = 4;
    /// The first share beside busy periods, blocks per budget window.
    std::uint64_t initial_budget = 1'000;
    /// The share beside busy periods is at most this multiple of what the opportunistic job
    /// launched per budget window in the latest window.
    double cap_demand_multiple = 3.0;
    /// Refill period of the share.
    duration budget_window = std::chrono::milliseconds{10};
    /// Windows between reference refreshes (0: never).
    int refresh_every_windows = 120;
  };

  static constexpr std::string_view name = "idle-harvest";
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = true;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"period-ms", "step period: the span of one speed sample", &config::period},
      setting<config>{"reference-windows", "active windows the reference speed is measured over",
                      &config::reference_windows},
      setting<config>{"target-slowdown",
                      "the production job's largest tolerated loss of GPU-side speed",
                      &config::target_slowdown},
      setting<config>{"initial-holdoff-ms",
                      "how long the production job must have been idle before an opportunistic "
                      "launch, at the start",
                      &config::initial_holdoff},
      setting<config>{"max-holdoff-ms", "the strictest gap gate", &config::max_holdoff},
      setting<config>{"initial-inflight", "the opportunistic job's unfinished launches at the start",
                      &config::initial_inflight},
      setting<config>{"max-inflight", "the opportunistic job's unfinished launches at most",
                      &config::max_inflight},
      setting<config>{"initial-budget",
                      "first share beside the production job's busy periods, blocks per budget "
                      "window",
                      &config::initial_budget},
      setting<config>{"budget-window-ms", "refill period of that share", &config::budget_window},
      setting<config>{"refresh-every-windows",
                      "windows between measurements of the reference speed (0: never)",
                      &config::refresh_every_windows},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit idle_harvest(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    if (!obs.production || !obs.opportunistic) {
      stage_ = stage::inactive;
      return decision();
    }
    if (stage_ == stage::inactive) {
      start_reference(obs.now);
      holdoff_ = cfg_.initial_holdoff;
      inflight_ = cfg_.initial_inflight;
      budget_ = 0;
      reference_speed_ = 0.0;
      speed_ = 0.0;
      gpu_signal_ = true;
      return decision();
    }
    if (obs.window <= duration::zero()) {
      if (next_revisit_ <= obs.now) next_revisit_ = rate_detail::later(obs.now, cfg_.period);
      return decision();
    }
    next_revisit_ = rate_detail::later(obs.now, cfg_.period);
    demand_ = rate_detail::per_period(obs.opportunistic->blocks_launched, obs.window, cfg_.budget_window);
    const std::optional<double> speed = speed_of(*obs.production, obs.window);
    if (!obs.production->gpu_busy && obs.production->blocks_launched > 0) {
      // The production job's interposer reports no GPU-side signal: gap filling alone.
      gpu_signal_ = false;
      budget_ = 0;
      stage_ = stage::harvesting;
      return decision();
    }
    if (stage_ == stage::reference) {
      reference_window(speed);
      return decision();
    }
    ++since_refresh_;
    if (!speed) {
      // An idle production job, or no GPU-side signal: nothing to learn; the gate still stands.
      return decision();
    }
    speed_ = speed_ > 0.0 ? cfg_.smoothing * speed_ + (1.0 - cfg_.smoothing) * *speed : *speed;
    const double slowdown = 1.0 - speed_ / reference_speed_;
    // A reference that was low: the production job is faster than S0 window after window.
    faster_windows_ = slowdown < -cfg_.target_slowdown ? faster_windows_ + 1 : 0;
    if (faster_windows_ >= cfg_.reference_windows) {
      reference_speed_ = speed_;
      faster_windows_ = 0;
    }
    if (slowdown > cfg_.target_slowdown) {
      tighten();
    } else if (slowdown < 0.5 * cfg_.target_slowdown) {
      loosen();
    }
    if (cfg_.refresh_every_windows > 0 && since_refresh_ >= cfg_.refresh_every_windows) {
      start_reference(obs.now);
    }
    return decision();
  }

  [[nodiscard]] harvest_phase phase() const noexcept {
    switch (stage_) {
      case stage::inactive: return harvest_phase::inactive;
      case stage::reference: return harvest_phase::reference;
      case stage::harvesting: return harvest_phase::harvesting;
    }
    return harvest_phase::inactive;
  }
  /// The reference GPU-side speed S0, blocks per busy second (0 before it is measured).
  [[nodiscard]] double reference_speed() const noexcept { return reference_speed_; }
  /// The smoothed GPU-side speed S, blocks per busy second (0 before the first sample).
  [[nodiscard]] double speed() const noexcept { return speed_; }
  /// The current gap gate.
  [[nodiscard]] duration holdoff() const noexcept { return holdoff_; }
  [[nodiscard]] std::uint32_t max_inflight() const noexcept { return inflight_; }
  /// The share beside busy periods, blocks per budget window.
  [[nodiscard]] std::uint64_t budget() const noexcept { return budget_; }

  /// The phase, both speeds, the gate and the share.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("phase", to_string(phase()));
    if (reference_speed_ > 0.0) r.add("reference_blocks_per_busy_s", reference_speed_);
    if (speed_ > 0.0) r.add("blocks_per_busy_s", speed_);
    if (reference_speed_ > 0.0 && speed_ > 0.0) r.add("slowdown", 1.0 - speed_ / reference_speed_);
    if (window_speed_ > 0.0) r.add("window_blocks_per_busy_s", window_speed_);
    if (busy_fraction_ >= 0.0) r.add("production_busy_fraction", busy_fraction_);
    r.add("holdoff_us", std::chrono::duration<double, std::micro>(holdoff_).count());
    r.add("max_inflight", static_cast<std::int64_t>(inflight_));
    r.add("budget_blocks", static_cast<std::int64_t>(budget_));
    return r;
  }

 private:
  enum class stage : std::uint8_t { inactive, reference, harvesting };

  static config validated(const config& c) {
    using rate_detail::check;
    constexpr std::string_view p = "idle_harvest";
    check(c.period > duration::zero(), p, "period", "positive", c.period);
    check(c.reference_windows >= 1 && c.reference_windows <= 100, p, "reference_windows",
          "in [1, 100]", c.reference_windows);
    check(c.target_slowdown > 0.0 && c.target_slowdown < 0.5, p, "target_slowdown", "in (0, 0.5)",
          c.target_slowdown);
    check(c.smoothing >= 0.0 && c.smoothing < 1.0, p, "smoothing", "in [0, 1)", c.smoothing);
    check(c.min_busy_fraction >= 0.0 && c.min_busy_fraction < 1.0, p, "min_busy_fraction",
          "in [0, 1)", c.min_busy_fraction);
    check(c.max_holdoff > duration::zero() && c.max_holdoff <= std::chrono::seconds{10}, p,
          "max_holdoff", "in (0, 10 s]", c.max_holdoff);
    check(c.min_holdoff >= duration::zero() && c.min_holdoff <= c.max_holdoff, p, "min_holdoff",
          "in [0, max_holdoff]", c.min_holdoff);
    check(c.initial_holdoff >= duration::zero() && c.initial_holdoff <= c.max_holdoff, p,
          "initial_holdoff", "in [0, max_holdoff]", c.initial_holdoff);
    check(c.max_inflight >= 1 && c.max_inflight <= 256, p, "max_inflight", "in [1, 256]",
          c.max_inflight);
    check(c.initial_inflight >= 1 && c.initial_inflight <= c.max_inflight, p, "initial_inflight",
          "in [1, max_inflight]", c.initial_inflight);
    check(c.initial_budget >= 1 && c.initial_budget <= (std::uint64_t{1} << 40), p,
          "initial_budget", "in [1, 2^40]", c.initial_budget);
    check(c.cap_demand_multiple >= 1.0 && c.cap_demand_multiple <= 1000.0, p,
          "cap_demand_multiple", "in [1, 1000]", c.cap_demand_multiple);
    check(c.budget_window > duration::zero(), p, "budget_window", "positive", c.budget_window);
    check(c.refresh_every_windows >= 0, p, "refresh_every_windows", "at least 0 (0: never)",
          c.refresh_every_windows);
    return c;
  }

  /// Blocks per busy second over the window, or empty when the window says nothing about the
  /// production job's speed (no GPU-side signal, or too little GPU work in it).
  [[nodiscard]] std::optional<double> speed_of(const job_activity& a, duration window) noexcept {
    window_speed_ = 0.0;
    busy_fraction_ = -1.0;
    if (!a.gpu_busy) return std::nullopt;
    const double busy = to_seconds(std::clamp(*a.gpu_busy, duration::zero(), window));
    busy_fraction_ = busy / to_seconds(window);
    if (a.blocks_launched == 0 || busy < cfg_.min_busy_fraction * to_seconds(window) || busy <= 0.0) {
      return std::nullopt;
    }
    if (a.synced_blocks && a.synced_gpu_busy && *a.synced_blocks > 0 && *a.synced_gpu_busy > duration::zero()) {
      window_speed_ = static_cast<double>(*a.synced_blocks) / to_seconds(*a.synced_gpu_busy);
    } else {
      window_speed_ = static_cast<double>(a.blocks_launched) / busy;
    }
    return window_speed_;
  }

  void start_reference(instant now) noexcept {
    stage_ = stage::reference;
    reference_seen_ = 0;
    reference_count_ = 0;
    faster_windows_ = 0;
    since_refresh_ = 0;
    next_revisit_ = rate_detail::later(now, cfg_.period);
  }

  /// One window of the reference: the first active one drains the opportunistic job's queued
  /// work and is discarded; the next `reference_windows` active ones measure S0.
  void reference_window(std::optional<double> speed) noexcept {
    if (!speed) return;
    if (++reference_seen_ == 1) return;
    reference_speeds_[static_cast<std::size_t>(reference_count_++)] = *speed;
    if (reference_count_ < cfg_.reference_windows) return;
    const auto first = reference_speeds_.begin();
    const auto last = first + reference_count_;
    const auto middle = first + reference_count_ / 2;
    std::nth_element(first, middle, last);
    double measured = *middle;
    if (reference_count_ % 2 == 0) measured = 0.5 * (measured + *std::max_element(first, middle));
    reference_speed_ = measured;
    speed_ = measured;
    stage_ = stage::harvesting;
  }

  /// A slowdown beyond the target: the share beside busy periods goes first, then the gate.
  void tighten() noexcept {
    if (budget_ > 0) {
      budget_ = budget_ / 2 < cfg_.initial_budget ? 0 : budget_ / 2;
      return;
    }
    const duration doubled = holdoff_ < cfg_.min_holdoff ? cfg_.min_holdoff : holdoff_ * 2;
    holdoff_ = std::min(doubled, cfg_.max_holdoff);
    if (inflight_ > 1) --inflight_;
  }

  /// Room to spare: the gate opens first, then the share beside busy periods grows.
  void loosen() noexcept {
    if (inflight_ < cfg_.max_inflight || holdoff_ > duration::zero()) {
      if (inflight_ < cfg_.max_inflight) ++inflight_;
      holdoff_ = holdoff_ / 2 < cfg_.min_holdoff ? duration::zero() : holdoff_ / 2;
      return;
    }
    if (!gpu_signal_) return;
    const double cap = std::max(cfg_.cap_demand_multiple * demand_,
                                static_cast<double>(cfg_.initial_budget));
    const double grown = budget_ == 0 ? static_cast<double>(cfg_.initial_budget)
                                      : static_cast<double>(budget_) * 1.5;
    budget_ = static_cast<std::uint64_t>(std::min(grown, cap));
  }

  [[nodiscard]] rate_decision decision() const noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.budget_window = cfg_.budget_window;
    switch (stage_) {
      case stage::inactive:
        d.opportunistic_budget = std::nullopt;
        d.revisit_at = never;
        return d;
      case stage::reference:
        d.opportunistic_budget = 0;  // held: no gap launches either
        break;
      case stage::harvesting:
        d.opportunistic_budget = budget_;
        d.fill_gaps = gap_fill{holdoff_, inflight_};
        break;
    }
    d.revisit_at = next_revisit_;
    return d;
  }

  config cfg_;
  stage stage_ = stage::inactive;
  duration holdoff_{};
  std::uint32_t inflight_ = 1;
  std::uint64_t budget_ = 0;
  double reference_speed_ = 0.0;
  double speed_ = 0.0;
  double demand_ = 0.0;  // blocks the opportunistic job launched per budget window, latest window
  bool gpu_signal_ = true;
  int reference_seen_ = 0;
  int reference_count_ = 0;                     // reference windows measured so far
  std::array<double, 100> reference_speeds_{};  // their speeds (reference_windows <= 100)
  int faster_windows_ = 0;                      // windows in a row faster than S0 beyond the target
  double window_speed_ = 0.0;                   // the latest window's speed (0: none)
  double busy_fraction_ = -1.0;                 // the production job's busy share of it (< 0: none)
  std::int64_t since_refresh_ = 0;
  instant next_revisit_ = never;
};

static_assert(RegisteredRateController<idle_harvest>);

}  // namespace tgs
