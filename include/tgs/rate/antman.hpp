// SPDX-License-Identifier: Apache-2.0
/// @file
/// `antman`: a model of AntMan's framework-level control (Xiao et al., OSDI'20), which delays an
/// opportunistic job's operators when the resource-guarantee job's iteration time rises.
#pragma once

#include <array>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/arithmetic.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// AntMan ("AntMan: Dynamic Scaling on GPU Clusters for Deep Learning", OSDI'20) runs inside the
/// DL framework. Its GPU operator manager (§3, dynamic scaling of computation) can hold an
/// opportunistic job's operators back before they are issued, and its local coordinator (§4)
/// watches the resource-guarantee job's training performance and shrinks the opportunistic job's
/// GPU share when that performance drops, growing it again when there is headroom. The
/// resource-guarantee job is our production job.
///
/// We model that loop over `production->mean_iteration_time`, stepping every `period`:
/// - **Baseline.** On an arrival (either class joins the other) the opportunistic job is held
///   (budget 0) and the baseline is the minimum mean iteration time over the first
///   `baseline_periods` periods that report one. Afterwards it keeps falling to any lower
///   observation, so it stays the production job's best (least disturbed) iteration time.
/// - **Control.** Then the opportunistic job starts at `initial_budget` blocks per
///   `budget_window`. Each period with an iteration time: above baseline × (1 + `tolerance`) the
///   budget is multiplied by `decrease_factor`, otherwise `increase_step` is added (AIMD, as
///   the operator manager's delay is tightened and relaxed).
/// - **No iteration time** (an interposer-only driver, or a period in which the production job
///   finished no iteration): the budget is left unchanged, and the baseline stays unlearned,
///   so without a framework AntMan never releases the opportunistic job and degenerates to
///   `exclusive`. We choose this conservative fall-back because AntMan's guarantee rests on the
///   framework's own performance signal; guessing one would model a different system.
///
/// The mechanism is the paper's; every number in `config` is our modelling choice (the paper
/// does not publish the coordinator's constants), documented beside it.
///
/// ```cpp
/// tgs::antman c{{}};
/// auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
/// assert(d.opportunistic_budget == 0u);  // learning the baseline
/// ```
class antman {
 public:
  struct config {
    /// Control period. Our choice: 1 s, several training iterations of the paper's models, so a
    /// period's mean iteration time is meaningful.
    duration period = std::chrono::seconds{1};
    /// Periods with an iteration time that form the baseline. Our choice: 5, as TGS profiles for
    /// `PROFILE_TIME` = 5 windows.
    int baseline_periods = 5;
    /// Allowed slowdown of the production job. Our choice: 5%, the order of the slowdown the TGS
    /// evaluation reports for AntMan's resource-guarantee jobs.
    double tolerance = 0.05;
    /// Budget when control starts. Our choice: TGS's `LIMIT_INITIALIZER` (20000) for
    /// comparability.
    std::uint64_t initial_budget = 20'000;
    /// Multiplicative decrease on a violation. Our choice: halve (classic AIMD).
    double decrease_factor = 0.5;
    /// Additive increase per calm period. Our choice: TGS's `RATE_MIN` (1000 blocks).
    std::uint64_t increase_step = 1'000;
    /// Refill period of the budget. Our choice: TGS's 50 ms, so one interposer enforces both.
    duration budget_window = std::chrono::milliseconds{50};
  };

  static constexpr std::string_view name = "antman";
  static constexpr enforcement enforced_by = enforcement::framework;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = true;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"period-ms", "control period", &config::period},
      setting<config>{"baseline-periods", "periods with an iteration time that form the baseline",
                      &config::baseline_periods},
      setting<config>{"tolerance", "allowed slowdown of the production job", &config::tolerance},
      setting<config>{"initial-budget", "budget when control starts, blocks per budget window",
                      &config::initial_budget},
      setting<config>{"decrease-factor", "multiplicative decrease on a violation",
                      &config::decrease_factor},
      setting<config>{"increase-step", "additive increase per calm period, blocks",
                      &config::increase_step},
      setting<config>{"budget-window-ms", "refill period of the budget", &config::budget_window},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit antman(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    if (!obs.production || !obs.opportunistic) {
      stage_ = stage::inactive;
      return decision();
    }
    if (stage_ == stage::inactive) {
      stage_ = stage::learning;
      baseline_.reset();
      samples_ = 0;
      budget_ = 0;
      next_revisit_ = rate_detail::later(obs.now, cfg_.period);
      return decision();
    }
    if (obs.window > duration::zero()) {
      const std::optional<duration>& iteration = obs.production->mean_iteration_time;
      if (iteration && *iteration > duration::zero()) observe(*iteration);
      next_revisit_ = rate_detail::later(obs.now, cfg_.period);
    } else if (next_revisit_ <= obs.now) {
      next_revisit_ = rate_detail::later(obs.now, cfg_.period);
    }
    return decision();
  }

  /// The learned baseline iteration time, empty until learned.
  [[nodiscard]] std::optional<duration> baseline() const noexcept {
    if (stage_ == stage::control) return baseline_;
    return std::nullopt;
  }

  /// The current opportunistic budget, blocks per `budget_window`.
  [[nodiscard]] std::uint64_t budget() const noexcept { return budget_; }

  /// The stage, the learned baseline and the budget.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    switch (stage_) {
      case stage::inactive: r.add("phase", "inactive"); break;
      case stage::learning: r.add("phase", "learning"); break;
      case stage::control: r.add("phase", "control"); break;
    }
    if (const std::optional<duration> b = baseline()) r.add("baseline_iteration_s", to_seconds(*b));
    r.add("budget_blocks", static_cast<std::int64_t>(budget_));
    return r;
  }

 private:
  enum class stage : std::uint8_t { inactive, learning, control };

  static config validated(const config& c) {
    using rate_detail::check;
    constexpr std::string_view p = "antman";
    check(c.period > duration::zero(), p, "period", "positive", c.period);
    check(c.baseline_periods >= 1, p, "baseline_periods", "at least 1", c.baseline_periods);
    check(c.tolerance > 0.0 && c.tolerance < 10.0, p, "tolerance", "in (0, 10)", c.tolerance);
    check(c.initial_budget >= 1, p, "initial_budget", "at least 1", c.initial_budget);
    check(c.decrease_factor >= 0.0 && c.decrease_factor < 1.0, p, "decrease_factor", "in [0, 1)",
          c.decrease_factor);
    check(c.increase_step >= 1, p, "increase_step", "at least 1", c.increase_step);
    check(c.budget_window > duration::zero(), p, "budget_window", "positive", c.budget_window);
    return c;
  }

  void observe(duration iteration) noexcept {
    baseline_ = baseline_ ? std::min(*baseline_, iteration) : iteration;
    if (stage_ == stage::learning) {
      if (++samples_ >= cfg_.baseline_periods) {
        stage_ = stage::control;
        budget_ = cfg_.initial_budget;
      }
      return;
    }
    const double limit = to_seconds(*baseline_) * (1.0 + cfg_.tolerance);
    if (to_seconds(iteration) > limit) {
      budget_ = static_cast<std::uint64_t>(static_cast<double>(budget_) * cfg_.decrease_factor);
    } else {
      budget_ = rate_detail::saturating_add(budget_, cfg_.increase_step);
    }
  }

  [[nodiscard]] rate_decision decision() const noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.budget_window = cfg_.budget_window;
    if (stage_ == stage::inactive) {
      d.opportunistic_budget = std::nullopt;
      d.revisit_at = never;
    } else {
      d.opportunistic_budget = budget_;
      d.revisit_at = next_revisit_;
    }
    return d;
  }

  config cfg_;
  stage stage_ = stage::inactive;
  std::optional<duration> baseline_;
  int samples_ = 0;
  std::uint64_t budget_ = 0;
  instant next_revisit_ = never;
};

static_assert(RegisteredRateController<antman>);

}  // namespace tgs
