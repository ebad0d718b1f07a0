// SPDX-License-Identifier: Apache-2.0
/// @file
/// `tgs_rate_control`: the adaptive rate control of TGS (NSDI'23 §4, Algorithm 1), with the
/// constants and rules of the released code (`hijack/src/low_priority_hijack_call.c`).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/arithmetic.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// Where `tgs_rate_control` is in Algorithm 1.
enum class tgs_phase : std::uint8_t {
  /// Measuring the production job's maximum rate R. On an arrival the opportunistic job is held
  /// (budget 0) until the first control window; a re-profile from the control phase keeps the
  /// current budget, as the released code does.
  profiling,
  /// The budget grows by x1.5 (+1) per window while the production rate stays in the dead band.
  slow_start,
  /// The budget moves additively up and multiplicatively down around the dead band.
  congestion_avoidance,
  /// The opportunistic job runs unthrottled: the production job is idle or absent, or there is
  /// no opportunistic job to throttle.
  unthrottled,
};

[[nodiscard]] constexpr std::string_view to_string(tgs_phase p) noexcept {
  switch (p) {
    case tgs_phase::profiling: return "profiling";
    case tgs_phase::slow_start: return "slow_start";
    case tgs_phase::congestion_avoidance: return "congestion_avoidance";
    case tgs_phase::unthrottled: return "unthrottled";
  }
  return "unknown";
}

/// TGS adaptive rate control: throttles the opportunistic job's thread-block launches so the
/// production job keeps its standalone rate (NSDI'23 §4, Algorithm 1). This is the paper's
/// reference: `tgs-sim pairs` reproduces the paper's table with it. It decides from the production
/// job's launch rate alone, which on real GPUs moves with the job's host side as much as with
/// contention (docs/results/rate-control.md); `idle_harvest` is the controller that decides from
/// GPU-side signals instead.
///
/// The production job's rate is the number of thread blocks it launched per production window
/// (5 s). While both classes are on the GPU the controller is stepped once per production window
/// and answers a budget of thread blocks per 50 ms for the opportunistic job:
///
/// 1. **Profiling.** On an arrival (either class joins the other) the opportunistic job is held
///    and R is estimated for at least `profile_windows` windows with the released code's
///    estimator: the largest mean of two adjacent entries of a window of the last five rates,
///    accepted when it is within ±5% of the estimate, otherwise the estimate moves 2.5% towards
///    it and profiling goes on (`limit_manager`, `shift_window`).
/// 2. **Control.** The first control window sets the budget to 20,000 blocks and enters slow
///    start. Then, per window: slow start multiplies the budget by 1.5 (+1) while the production
///    rate is within the 3% dead band of R and divides it by 1.5 into congestion avoidance when it
///    leaves; congestion avoidance adds max(0.025%·R, 1000) or removes max(8%, 1000) with the
///    code's sign hysteresis; a deviation of 9% or more returns to slow start with the budget ÷10;
///    20 consecutive windows at 12% or more lower R by 20%, return to slow start and halve the
///    budget (`update_rate_limit`). R keeps tracking the estimator: within ±10% it may rise,
///    beyond ±20% the controller re-profiles (`limit_manager`).
/// 3. **Idle production.** After a warm-up of 15 control windows, if the production job launched
///    fewer than 1,000 blocks in 3 or more of the last 5 windows the opportunistic job is
///    unthrottled; with exactly 2 such windows the budget restarts at 20,000 in slow start, which
///    throttles the opportunistic job again within 3 windows of the production job resuming.
///
/// Where a policy value type must differ from the released code, the difference is a documented
/// default (see docs/policies/rate-control.md):
/// - An arrival re-profiles R from scratch instead of taking an initial R from the production
///   side (its `rate_watcher`): the policy sees only this GPU's observations.
/// - `max_profile_windows` bounds profiling. The code keeps profiling while the window estimate
///   equals R, which on a perfectly steady rate (a fluid simulator) never ends.
/// - `freeze_max_rate_while_idle`: R is not re-estimated from a window holding an idle sample.
///   In the code a long idle drags R towards 1 block and into a re-profile that keeps the
///   unthrottled budget, so a resuming production job is not throttled for many windows.
/// - The code's function-static `sign` and `max_diff_counter` are per-controller state, reset
///   on an arrival.
///
/// Unthrottled is reported as an empty `opportunistic_budget`; `budget()` still holds the
/// code's internal "huge" limit (max(3 × the opportunistic rate, 2^32), at most 10^14), which the
/// arithmetic continues from exactly as the code does.
///
/// ```cpp
/// tgs::tgs_rate_control c{{}};
/// tgs::rate_observation obs{.now = tgs::epoch, .window = {},
///                           .production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}};
/// tgs::rate_decision d = c.step(obs);  // an arrival: profiling starts, the opportunistic job is held
/// assert(d.opportunistic_budget == 0u && c.phase() == tgs::tgs_phase::profiling);
/// ```
class tgs_rate_control {
 public:
  /// The largest `rate_window_size` (the window lives inside the controller, so `step` never
  /// allocates).
  static constexpr int max_rate_window_size = 16;

  /// Settings; every default is the released code's constant, cited beside it.
  struct config {
    /// Span over which the production job's blocks are counted, and the controller's step period.
    /// Released code: `rate_monitor` (high priority) sleeps 5000 ms between counter reads.
    duration production_window = std::chrono::seconds{5};
    /// Refill period of the opportunistic budget. Released code: `rate_watcher` (low priority)
    /// resets the launch counter every 50 ms.
    duration budget_window = std::chrono::milliseconds{50};
    /// Budget set by the first control window and by the resume rule. Released code:
    /// `LIMIT_INITIALIZER = 20000`.
    std::uint64_t initial_budget = 20'000;
    /// Number of recent production rates the estimator keeps. Released code: `WINDOW_SIZE = 5`.
    int rate_window_size = 5;
    /// Minimum profiling windows. Released code: `PROFILE_TIME = 5` (with `PREWARM_TIME = 0`).
    int profile_windows = 5;
    /// Upper bound on one profiling run. Our modelling choice (the code has none): the code's
    /// loop continues while the newest estimate equals R, which a real (noisy) production rate
    /// stops doing within a window of `PROFILE_TIME`; a perfectly steady rate (a simulator) never
    /// does, so one window past the minimum bounds it. This gives the paper's 45–50 s from an
    /// arrival to a steady opportunistic rate (NSDI'23 §7); raise it to let the code's own stop
    /// rule act on noisy rates.
    int max_profile_windows = 6;
    /// Profiling accepts an estimate within this relative band. Released code: `limit_manager`,
    /// `max_delta >= -0.05 && max_delta <= 0.05`.
    double profile_tolerance = 0.05;
    /// Outside the band R moves to 97.5% (estimate above) or 102.5% (below) of the estimate.
    /// Released code: `limit_manager`, factors 0.975 and 1.025.
    double profile_step = 0.025;
    /// In control, R may rise to an estimate within this band. Released code: `limit_manager`,
    /// `max_delta >= -0.1 && max_delta <= 0.1`.
    double track_tolerance = 0.10;
    /// In control, an estimate beyond this band re-profiles. Released code: `limit_manager`,
    /// `max_delta > 0.2 || max_delta < -0.2` then `goto profile`.
    double reprofile_threshold = 0.20;
    /// Dead band around R. NSDI'23 §4 (Algorithm 1); released code: `update_rate_limit`,
    /// `threshold = 0.03`.
    double dead_band = 0.03;
    /// Slow-start growth factor, also the divisor on leaving slow start. Released code:
    /// `update_rate_limit`, `rate_limit * 1.5 + 1` and `rate_limit / 1.5`.
    double slow_start_factor = 1.5;
    /// Added after the multiplication in slow start (so a budget of 0 can grow). Released code:
    /// `update_rate_limit`, the `+ 1`.
    std::uint64_t slow_start_increment = 1;
    /// Congestion-avoidance increase as a fraction of R. Released code: `update_rate_limit`,
    /// `max_rate * 0.00025`.
    double additive_increase = 0.00025;
    /// Congestion-avoidance decrease as a fraction of the budget. Released code:
    /// `update_rate_limit`, `rate_limit * 0.08`.
    double multiplicative_decrease = 0.08;
    /// Smallest congestion-avoidance step. Released code: `RATE_MIN = 1000`.
    std::uint64_t min_step = 1'000;
    /// A deviation of this many dead bands returns to slow start. Released code:
    /// `update_rate_limit`, `delta >= 3. * threshold`.
    double reset_band_multiple = 3.0;
    /// Divisor of the budget on that return. Released code: `update_rate_limit`, `rate_limit /= 10`.
    std::uint64_t reset_divisor = 10;
    /// Deviation counted towards lowering R. Released code: `update_rate_limit`, `delta >= 0.12`.
    double decay_threshold = 0.12;
    /// Consecutive such windows that lower R. Released code: `max_diff_counter >= 20`.
    int decay_windows = 20;
    /// Factor applied to R then. Released code: `*p_max_rate *= 0.8`.
    double decay_factor = 0.8;
    /// Divisor of the budget then. Released code: `rate_limit /= 2`.
    std::uint64_t decay_budget_divisor = 2;
    /// A production window with fewer blocks than this is idle. Released code: `limit_manager`,
    /// `rate_window[i] < 1000`.
    std::uint64_t idle_blocks = 1'000;
    /// Idle windows (of the last `rate_window_size`) that unthrottle the opportunistic job.
    /// Released code: `num_zero <= WINDOW_SIZE / 5 * 2` keeps control, so 3 or more unthrottle.
    int unthrottle_idle_windows = 3;
    /// Exactly this many idle windows restart the budget at `initial_budget`. Released code:
    /// `num_zero == 2 && cnt > 15`.
    int reset_idle_windows = 2;
    /// Control windows before the idle rules apply. Released code: `cnt < 15` / `cnt > 15`.
    int warmup_windows = 15;
    /// Budget caps are at least this multiple of the opportunistic job's current rate (blocks per
    /// `budget_window`). Released code: `update_rate_limit`, `3 * g_current_rate[device]`.
    std::uint64_t cap_rate_multiple = 3;
    /// Floor of the slow-start cap. Released code: `update_rate_limit`, `1ll << 40`.
    std::uint64_t slow_start_cap_floor = std::uint64_t{1} << 40;
    /// Floor of the congestion-avoidance and idle caps. Released code: `65536LL * 65536LL`.
    std::uint64_t congestion_cap_floor = std::uint64_t{1} << 32;
    /// Absolute budget ceiling. Released code: `UPPER_LIMIT = 100000000000000LL`.
    std::uint64_t budget_ceiling = 100'000'000'000'000;
    /// Freeze R while any of the last `rate_window_size` windows is idle. Our deviation (see the
    /// class comment); `false` reproduces the released code.
    bool freeze_max_rate_while_idle = true;
  };

  static constexpr std::string_view name = "tgs";
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  /// TGS's transparent unified memory (NSDI'23 §5).
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = true;
  static constexpr bool fixed_block_budget = false;
  /// The constants a user may want to move; the rest keep the released code's values.
  static constexpr std::array setting_table{
      setting<config>{"production-window-ms",
                      "span over which the production rate is counted, and the step period "
                      "(released code 5000)",
                      &config::production_window},
      setting<config>{"budget-window-ms",
                      "refill period of the opportunistic budget (released code 50)",
                      &config::budget_window},
      setting<config>{"profile-windows", "minimum profiling windows (released code 5)",
                      &config::profile_windows},
      setting<config>{"max-profile-windows", "maximum profiling windows",
                      &config::max_profile_windows},
      setting<config>{"initial-budget",
                      "first budget, blocks per budget window (released code 20000)",
                      &config::initial_budget},
      setting<config>{"warmup-windows",
                      "control windows before the idle rules apply (released code 15)",
                      &config::warmup_windows},
      setting<config>{"dead-band", "dead band around the production rate (released code 0.03)",
                      &config::dead_band},
      setting<config>{"additive-increase",
                      "budget increase per control window in congestion avoidance, as a fraction "
                      "of the production rate (released code 0.00025)",
                      &config::additive_increase},
      setting<config>{"multiplicative-decrease",
                      "budget decrease per control window outside the dead band, as a fraction "
                      "of the budget (released code 0.08)",
                      &config::multiplicative_decrease},
      setting<config>{"cap-rate-multiple",
                      "the budget is capped at this multiple of the opportunistic job's rate "
                      "(released code 3)",
                      &config::cap_rate_multiple},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit tgs_rate_control(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// One step of Algorithm 1 over the observation's window. See the class comment.
  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    if (!obs.production || !obs.opportunistic) {
      // Nothing to control: an absent production job leaves the GPU to the opportunistic job
      // (the code drops its rate-control flag when the production side disconnects).
      stage_ = stage::inactive;
      return decision();
    }
    if (stage_ == stage::inactive) {
      // Arrival: the observed window predates the pairing, so it is not a profiling sample.
      restart();
      next_revisit_ = rate_detail::later(obs.now, cfg_.production_window);
      return decision();
    }
    if (obs.window <= duration::zero()) {
      // A second step at the same instant (two job events at once) carries no new sample.
      if (next_revisit_ <= obs.now) {
        next_revisit_ = rate_detail::later(obs.now, cfg_.production_window);
      }
      return decision();
    }
    // The code floors the received count at 1 block (`recv_counter >= 1. ? recv_counter : 1.`).
    const double sample = std::max(
        rate_detail::per_period(obs.production->blocks_launched, obs.window, cfg_.production_window),
        1.0);
    if (stage_ == stage::profiling) {
      profile(sample);
    } else {
      const double opportunistic_rate = rate_detail::per_period(
          obs.opportunistic->blocks_launched, obs.window, cfg_.budget_window);
      control(sample, opportunistic_rate);
    }
    next_revisit_ = rate_detail::later(obs.now, cfg_.production_window);
    return decision();
  }

  /// The current phase of Algorithm 1.
  [[nodiscard]] tgs_phase phase() const noexcept {
    if (stage_ == stage::inactive) return tgs_phase::unthrottled;
    if (stage_ == stage::profiling || control_windows_ == 0) return tgs_phase::profiling;
    if (unthrottled_) return tgs_phase::unthrottled;
    return growth_ == growth::slow_start ? tgs_phase::slow_start
                                         : tgs_phase::congestion_avoidance;
  }

  /// The estimated maximum production rate R, in blocks per production window (0 before the
  /// first estimate).
  [[nodiscard]] double max_rate() const noexcept { return max_rate_; }

  /// The production rate of the latest window, in blocks per production window (0 before the
  /// first window after an arrival): set beside `max_rate()` it shows the deviation the dead band
  /// is compared with. Profiling and control both shift each sample into the estimator's window
  /// first, so its newest entry is that sample.
  [[nodiscard]] double last_sample() const noexcept { return window_[0]; }

  /// The internal budget (the code's `g_rate_limit`), blocks per `budget_window`. While
  /// `phase()` is `unthrottled` because the production job is idle this is the code's huge limit.
  [[nodiscard]] std::uint64_t budget() const noexcept {
    return static_cast<std::uint64_t>(budget_);
  }

  /// Control windows since the arrival (the code's `cnt`).
  [[nodiscard]] std::int64_t control_windows() const noexcept { return control_windows_; }

  /// Windows of the current profiling run (the code's `t`).
  [[nodiscard]] int profiled_windows() const noexcept { return profile_windows_; }

  /// The phase, R and the latest sample (both in blocks per second), and the budget.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("phase", to_string(phase()));
    const double per_second = 1.0 / to_seconds(cfg_.production_window);
    if (max_rate_ > 0.0) r.add("max_rate_blocks_per_s", max_rate_ * per_second);
    if (stage_ != stage::inactive && window_[0] > 0.0) {
      r.add("sample_blocks_per_s", window_[0] * per_second);
    }
    r.add("control_windows", control_windows_);
    return r;
  }

 private:
  enum class stage : std::uint8_t { inactive, profiling, control };
  enum class growth : std::uint8_t { slow_start, congestion_avoidance };
  static config validated(const config& c) {
    using rate_detail::check;
    constexpr std::string_view p = "tgs_rate_control";
    constexpr std::uint64_t limit = std::uint64_t{1} << 61;  // keeps every sum below 2^63
    check(c.production_window > duration::zero(), p, "production_window", "positive",
          c.production_window);
    check(c.budget_window > duration::zero(), p, "budget_window", "positive", c.budget_window);
    check(c.budget_ceiling >= 1 && c.budget_ceiling <= limit, p, "budget_ceiling",
          "in [1, 2^61]", c.budget_ceiling);
    check(c.initial_budget >= 1 && c.initial_budget <= c.budget_ceiling, p, "initial_budget",
          "in [1, budget_ceiling]", c.initial_budget);
    check(c.rate_window_size >= 2 && c.rate_window_size <= max_rate_window_size, p,
          "rate_window_size", "in [2, 16]", c.rate_window_size);
    check(c.profile_windows >= 1, p, "profile_windows", "at least 1", c.profile_windows);
    check(c.max_profile_windows >= c.profile_windows, p, "max_profile_windows",
          "at least profile_windows", c.max_profile_windows);
    check(c.profile_tolerance > 0.0 && c.profile_tolerance < 1.0, p, "profile_tolerance",
          "in (0, 1)", c.profile_tolerance);
    check(c.profile_step >= 0.0 && c.profile_step < 1.0, p, "profile_step", "in [0, 1)",
          c.profile_step);
    check(c.track_tolerance > 0.0 && c.track_tolerance < 1.0, p, "track_tolerance", "in (0, 1)",
          c.track_tolerance);
    check(c.reprofile_threshold >= c.track_tolerance && c.reprofile_threshold < 1.0, p,
          "reprofile_threshold", "in [track_tolerance, 1)", c.reprofile_threshold);
    check(c.dead_band > 0.0 && c.dead_band < 1.0, p, "dead_band", "in (0, 1)", c.dead_band);
    check(c.slow_start_factor > 1.0 && c.slow_start_factor <= 16.0, p, "slow_start_factor",
          "in (1, 16]", c.slow_start_factor);
    check(c.slow_start_increment <= limit, p, "slow_start_increment", "at most 2^61",
          c.slow_start_increment);
    check(c.additive_increase >= 0.0 && c.additive_increase < 1.0, p, "additive_increase",
          "in [0, 1)", c.additive_increase);
    check(c.multiplicative_decrease > 0.0 && c.multiplicative_decrease < 1.0, p,
          "multiplicative_decrease", "in (0, 1)", c.multiplicative_decrease);
    check(c.min_step >= 1 && c.min_step <= limit, p, "min_step", "in [1, 2^61]", c.min_step);
    check(c.reset_band_multiple >= 1.0 && c.reset_band_multiple * c.dead_band < 1.0, p,
          "reset_band_multiple", "at least 1 with reset_band_multiple * dead_band < 1",
          c.reset_band_multiple);
    check(c.reset_divisor >= 1 && c.reset_divisor <= limit, p, "reset_divisor", "in [1, 2^61]",
          c.reset_divisor);
    check(c.decay_threshold > 0.0 && c.decay_threshold < 1.0, p, "decay_threshold", "in (0, 1)",
          c.decay_threshold);
    check(c.decay_windows >= 1, p, "decay_windows", "at least 1", c.decay_windows);
    check(c.decay_factor > 0.0 && c.decay_factor < 1.0, p, "decay_factor", "in (0, 1)",
          c.decay_factor);
    check(c.decay_budget_divisor >= 1 && c.decay_budget_divisor <= limit, p,
          "decay_budget_divisor", "in [1, 2^61]", c.decay_budget_divisor);
    check(c.idle_blocks <= limit, p, "idle_blocks", "at most 2^61", c.idle_blocks);
    check(c.unthrottle_idle_windows >= 1 && c.unthrottle_idle_windows <= c.rate_window_size, p,
          "unthrottle_idle_windows", "in [1, rate_window_size]", c.unthrottle_idle_windows);
    check(c.reset_idle_windows >= 0 && c.reset_idle_windows < c.unthrottle_idle_windows, p,
          "reset_idle_windows", "in [0, unthrottle_idle_windows)", c.reset_idle_windows);
    check(c.warmup_windows >= 1, p, "warmup_windows", "at least 1", c.warmup_windows);
    check(c.cap_rate_multiple <= 1'000'000, p, "cap_rate_multiple", "at most 1000000",
          c.cap_rate_multiple);
    check(c.slow_start_cap_floor >= 1, p, "slow_start_cap_floor", "at least 1",
          c.slow_start_cap_floor);
    check(c.congestion_cap_floor >= 1, p, "congestion_cap_floor", "at least 1",
          c.congestion_cap_floor);
    return c;
  }

  void restart() noexcept {
    stage_ = stage::profiling;
    window_.fill(0.0);
    max_rate_ = 0.0;
    profile_windows_ = 0;
    keep_profiling_ = false;
    control_windows_ = 0;
    growth_ = growth::slow_start;
    sign_ = 0;
    decay_count_ = 0;
    budget_ = 0;  // `limit_manager`: `g_rate_limit[device] = 0` on a new production connection
    unthrottled_ = false;
  }

  /// `shift_window`: the largest mean of two adjacent entries of the window *before* `sample`
  /// enters it (the code's estimate lags one window), then shifts `sample` in.
  double shift(double sample) noexcept {
    const auto n = static_cast<std::size_t>(cfg_.rate_window_size);
    double best = 0.0;
    for (std::size_t i = n - 1; i > 0; --i) {
      best = std::max(best, (window_[i] + window_[i - 1]) / 2.0);
      window_[i] = window_[i - 1];
    }
    window_[0] = sample;
    return best;
  }

  [[nodiscard]] int idle_windows() const noexcept {
    const auto n = static_cast<std::size_t>(cfg_.rate_window_size);
    const auto idle = static_cast<double>(cfg_.idle_blocks);
    int count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (window_[i] < idle) ++count;
    }
    return count;
  }

  /// The profiling loop of `limit_manager`, one window per call.
  void profile(double sample) noexcept {
    const double estimate = shift(sample);
    ++profile_windows_;
    if (max_rate_ <= 0.0) {
      // No R yet (we re-profile from scratch): the first estimate is taken as it is.
      max_rate_ = estimate;
      keep_profiling_ = true;
    } else {
      const double deviation = (estimate - max_rate_) / max_rate_;
      if (deviation >= -cfg_.profile_tolerance && deviation <= cfg_.profile_tolerance) {
        max_rate_ = std::max(max_rate_, estimate);
        // The code compares with an integer `abs`, i.e. "within one block": keep profiling
        // while this window's estimate is the maximum so far.
        keep_profiling_ = std::abs(max_rate_ - estimate) < 1.0;
      } else if (deviation > cfg_.profile_tolerance) {
        max_rate_ = std::max(max_rate_, estimate * (1.0 - cfg_.profile_step));
        keep_profiling_ = true;
      } else {
        max_rate_ = std::min(max_rate_, estimate * (1.0 + cfg_.profile_step));
        keep_profiling_ = true;
      }
    }
    const bool minimum_done = profile_windows_ >= cfg_.profile_windows;
    const bool bounded = profile_windows_ >= cfg_.max_profile_windows;
    if (minimum_done && (!keep_profiling_ || bounded) && max_rate_ > 0.0) {
      stage_ = stage::control;
      keep_profiling_ = false;  // the code leaves its loop only with the flag clear
    }
  }

  /// The control loop of `limit_manager`, one window per call.
  void control(double sample, double opportunistic_rate) noexcept {
    const double estimate = shift(sample);
    const int idle = idle_windows();
    if (!(cfg_.freeze_max_rate_while_idle && idle > 0)) {
      const double deviation = (estimate - max_rate_) / max_rate_;
      if (deviation >= -cfg_.track_tolerance && deviation <= cfg_.track_tolerance) {
        max_rate_ = std::max(max_rate_, estimate);
      } else if (deviation > cfg_.reprofile_threshold || deviation < -cfg_.reprofile_threshold) {
        max_rate_ = deviation > 0.0 ? std::max(max_rate_, estimate * (1.0 - cfg_.profile_step))
                                    : std::min(max_rate_, estimate * (1.0 + cfg_.profile_step));
        // `goto profile`: the budget, the growth state and `cnt` carry over.
        stage_ = stage::profiling;
        profile_windows_ = 0;
        return;
      }
    }
    ++control_windows_;
    if (control_windows_ == 1) {
      start_slow(static_cast<std::int64_t>(cfg_.initial_budget));
      return;
    }
    const std::int64_t warmup = cfg_.warmup_windows;
    if (idle < cfg_.unthrottle_idle_windows || control_windows_ < warmup) {
      if (idle == cfg_.reset_idle_windows && control_windows_ > warmup) {
        start_slow(static_cast<std::int64_t>(cfg_.initial_budget));
      } else {
        update_budget(sample, opportunistic_rate);
      }
    } else {
      start_slow(cap(opportunistic_rate, cfg_.congestion_cap_floor));
      unthrottled_ = true;
    }
  }

  /// `init_rate_limit`: a new budget in slow start.
  void start_slow(std::int64_t budget) noexcept {
    budget_ = budget;
    growth_ = growth::slow_start;
    unthrottled_ = false;
  }

  /// min(UPPER_LIMIT, max(3 × the opportunistic job's current rate, floor)).
  [[nodiscard]] std::int64_t cap(double opportunistic_rate, std::uint64_t floor) const noexcept {
    const auto ceiling = static_cast<double>(cfg_.budget_ceiling);
    const double scaled =
        std::min(static_cast<double>(cfg_.cap_rate_multiple) * opportunistic_rate, ceiling);
    const auto rate_cap = static_cast<std::int64_t>(scaled);
    return std::min(static_cast<std::int64_t>(cfg_.budget_ceiling),
                    std::max(rate_cap, static_cast<std::int64_t>(floor)));
  }

  /// `update_rate_limit`: slow start, congestion avoidance and max-rate decay.
  void update_budget(double sample, double opportunistic_rate) noexcept {
    const double delta = std::abs(sample - max_rate_) / max_rate_;
    const double band = cfg_.dead_band;
    const auto min_step = static_cast<std::int64_t>(cfg_.min_step);
    const auto ceiling = static_cast<double>(cfg_.budget_ceiling);
    std::int64_t limit = budget_;
    switch (growth_) {
      case growth::slow_start:
        if (delta <= band) {
          const double grown = static_cast<double>(limit) * cfg_.slow_start_factor +
                               static_cast<double>(cfg_.slow_start_increment);
          limit = std::min(static_cast<std::int64_t>(std::min(grown, ceiling)),
                           cap(opportunistic_rate, cfg_.slow_start_cap_floor));
        } else {
          limit = static_cast<std::int64_t>(static_cast<double>(limit) / cfg_.slow_start_factor);
          sign_ = -1;
          growth_ = growth::congestion_avoidance;
        }
        break;
      case growth::congestion_avoidance: {
        // The code's hysteresis: after a decrease the band edge counts as inside, after an
        // increase it counts as outside.
        const bool inside = (sign_ == -1 && delta <= band) || (sign_ == 1 && delta < band);
        if (inside) {
          const auto step = static_cast<std::int64_t>(
              std::min(max_rate_ * cfg_.additive_increase, ceiling));
          limit += std::max(step, min_step);
          sign_ = 1;
        } else {
          const auto step = static_cast<std::int64_t>(static_cast<double>(limit) *
                                                      cfg_.multiplicative_decrease);
          limit -= std::max(step, min_step);
          sign_ = -1;
        }
        limit = std::min(limit, cap(opportunistic_rate, cfg_.congestion_cap_floor));
        if (delta >= cfg_.reset_band_multiple * band) {
          growth_ = growth::slow_start;
          limit /= static_cast<std::int64_t>(cfg_.reset_divisor);
        }
        break;
      }
    }
    if (delta >= cfg_.decay_threshold) {
      if (++decay_count_ >= cfg_.decay_windows) {
        max_rate_ *= cfg_.decay_factor;
        decay_count_ = 0;
        growth_ = growth::slow_start;
        limit /= static_cast<std::int64_t>(cfg_.decay_budget_divisor);
      }
    } else {
      decay_count_ = 0;
    }
    budget_ = std::max<std::int64_t>(limit, 0);
    unthrottled_ = false;
  }

  [[nodiscard]] rate_decision decision() const noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.budget_window = cfg_.budget_window;
    if (stage_ == stage::inactive) {
      d.opportunistic_budget = std::nullopt;
      d.revisit_at = never;
      return d;
    }
    d.opportunistic_budget =
        unthrottled_ ? std::nullopt : std::optional<std::uint64_t>{static_cast<std::uint64_t>(budget_)};
    d.revisit_at = next_revisit_;
    return d;
  }

  config cfg_;
  stage stage_ = stage::inactive;
  growth growth_ = growth::slow_start;
  std::array<double, max_rate_window_size> window_{};
  double max_rate_ = 0.0;
  int profile_windows_ = 0;
  bool keep_profiling_ = false;
  std::int64_t control_windows_ = 0;
  int sign_ = 0;
  int decay_count_ = 0;
  std::int64_t budget_ = 0;
  bool unthrottled_ = false;
  instant next_revisit_ = never;
};

static_assert(RegisteredRateController<tgs_rate_control>);

}  // namespace tgs
