// SPDX-License-Identifier: Apache-2.0
/// @file
/// The tunable settings of `tgs_rate_control::config` as command lines name them: one table that
/// every tool builds its flags from (`tgs-node` on real GPUs, `tgs-sim pairs` in simulation), so
/// one name means one setting everywhere and a setting added here reaches both.
///
/// The table holds names, help and member pointers only; it includes no CLI library.
/// `add_tgs_rate_control_flags` adds the table and `--cap-floor` (one flag for both cap floors)
/// to any command line with CLI11's interface. The two windows are durations given in ms, and
/// each tool says what its windows apply to, so each tool adds those flags itself and
/// `tgs_rate_control_flag_values::apply` converts them.
///
/// ```cpp
/// tgs::tgs_rate_control::config cfg;
/// tgs::tgs_rate_control_flag_values extra;  // windows in ms, cap floor
/// app.add_option("--production-window-ms", extra.production_window_ms, "...");
/// tgs::add_tgs_rate_control_flags(app, cfg, extra);
/// app.parse(argc, argv);
/// extra.apply(cfg);
/// ```
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "tgs/core/units.hpp"
#include "tgs/rate/tgs_rate_control.hpp"

namespace tgs {

/// One setting: its flag name (without the leading dashes), its help and the member it sets. A
/// `bool` member is a switch (present: true); the others take a value, which the config's own
/// validation checks when the controller is built.
struct tgs_rate_control_setting {
  using config = tgs_rate_control::config;
  std::string_view flag;
  std::string_view help;
  std::variant<double config::*, int config::*, std::uint64_t config::*, bool config::*> member;
};

/// Every plain setting, in the order the tools list them.
inline constexpr std::array tgs_rate_control_settings{
    tgs_rate_control_setting{"profile-windows", "tgs: minimum profiling windows",
                             &tgs_rate_control::config::profile_windows},
    tgs_rate_control_setting{"max-profile-windows", "tgs: maximum profiling windows",
                             &tgs_rate_control::config::max_profile_windows},
    tgs_rate_control_setting{"initial-budget", "tgs: first budget, blocks per budget window",
                             &tgs_rate_control::config::initial_budget},
    tgs_rate_control_setting{"warmup-windows", "tgs: control windows before the idle rules apply",
                             &tgs_rate_control::config::warmup_windows},
    tgs_rate_control_setting{"dead-band", "tgs: dead band around the production rate",
                             &tgs_rate_control::config::dead_band},
    tgs_rate_control_setting{
        "rate-smoothing",
        "tgs: weight of the previous production rate in a moving average (the released code's alpha, "
        "0); raise it for production jobs whose launch rate is noisy",
        &tgs_rate_control::config::rate_smoothing},
    tgs_rate_control_setting{
        "noise-band-multiple",
        "tgs: widen the dead band to this multiple of the production rate's noise measured while "
        "profiling (0: the released fixed band)",
        &tgs_rate_control::config::noise_band_multiple},
    tgs_rate_control_setting{"max-noise-band", "tgs: upper bound of the widened dead band",
                             &tgs_rate_control::config::max_noise_band},
    tgs_rate_control_setting{
        "min-budget", "tgs: the budget never falls below this many blocks per budget window (released code 0)",
        &tgs_rate_control::config::min_budget},
    tgs_rate_control_setting{
        "sync-wait-correction",
        "tgs: correct the production job's rate for its own host-side noise with the time it waits in "
        "synchronisation calls (where the jobs report those waits: on real GPUs through the "
        "interposer; the simulator reports none)",
        &tgs_rate_control::config::sync_wait_correction},
    tgs_rate_control_setting{
        "max-rate-from-profile-mean",
        "tgs: take the production job's standalone rate R as the mean of its profiling windows and "
        "keep it in control (the released code takes the largest mean of two adjacent windows and "
        "lets R rise: near the top of a noisy job's range)",
        &tgs_rate_control::config::max_rate_from_profile_mean},
    tgs_rate_control_setting{
        "slowdown-only",
        "tgs: only a production rate below R counts as a deviation (the released code also cuts the "
        "budget while the production job runs faster than R; with R fixed by --sync-wait-correction "
        "that holds back the opportunistic job whenever the production job sped up after profiling)",
        &tgs_rate_control::config::slowdown_only},
    // The released code's growth constants, for opportunistic jobs whose block rate is far from
    // the production job's (a DLRM-like job launches many cheap blocks: docs/results/gpu-memory.md).
    tgs_rate_control_setting{
        "additive-increase",
        "tgs: budget increase per control step in congestion avoidance, as a fraction of the "
        "production rate (released code 0.00025)",
        &tgs_rate_control::config::additive_increase},
    tgs_rate_control_setting{"multiplicative-decrease",
                             "tgs: budget decrease per control step above the dead band, as a fraction of the budget",
                             &tgs_rate_control::config::multiplicative_decrease},
    tgs_rate_control_setting{"reset-band-multiple",
                             "tgs: a slowdown of this many dead bands restarts slow start (released code 3)",
                             &tgs_rate_control::config::reset_band_multiple},
    // The released code caps the budget at 3x the opportunistic job's rate but never below 2^32
    // (2^40 in slow start), so a budget that grew past what the job launches stays far above it,
    // and each 8% decrease takes dozens of windows to bind (docs/results/gpu-memory.md).
    tgs_rate_control_setting{
        "cap-rate-multiple",
        "tgs: the budget is capped at this multiple of the opportunistic job's launch rate, or at "
        "--cap-floor if that is larger (released code 3)",
        &tgs_rate_control::config::cap_rate_multiple},
};

/// The settings that are not plain members, in the units command lines give them.
struct tgs_rate_control_flag_values {
  double production_window_ms =
      std::chrono::duration<double, std::milli>(tgs_rate_control::config{}.production_window).count();
  double budget_window_ms =
      std::chrono::duration<double, std::milli>(tgs_rate_control::config{}.budget_window).count();
  /// Floor of both budget caps, blocks per budget window; 0 keeps the released floors.
  std::uint64_t cap_floor = 0;

  /// Writes these into `cfg`. Durations round to the nanosecond, so the defaults come back
  /// exactly (5000 ms is the released 5 s, 50 ms the released 50 ms).
  void apply(tgs_rate_control::config& cfg) const noexcept {
    cfg.production_window = from_seconds(production_window_ms / 1e3);
    cfg.budget_window = from_seconds(budget_window_ms / 1e3);
    if (cap_floor > 0) {
      cfg.slow_start_cap_floor = cap_floor;
      cfg.congestion_cap_floor = cap_floor;
    }
  }
};

/// Adds a flag per table entry (a switch for a `bool` member, an option showing its default
/// otherwise) and `--cap-floor` to `app`. `App` is anything with CLI11's `add_flag` and
/// `add_option(...)->capture_default_str()`; taking it as a template keeps this header free of
/// the CLI library, which only the tools link.
template <typename App>
void add_tgs_rate_control_flags(App& app, tgs_rate_control::config& cfg, tgs_rate_control_flag_values& extra) {
  for (const tgs_rate_control_setting& setting : tgs_rate_control_settings) {
    const std::string flag = "--" + std::string(setting.flag);
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<std::remove_reference_t<decltype(cfg.*member)>, bool>) {
            app.add_flag(flag, cfg.*member, std::string(setting.help));
          } else {
            app.add_option(flag, cfg.*member, std::string(setting.help))->capture_default_str();
          }
        },
        setting.member);
  }
  app.add_option("--cap-floor", extra.cap_floor,
                 "tgs: floor of that cap, blocks per budget window (0: the released code's 2^32, and 2^40 in "
                 "slow start)");
}

}  // namespace tgs
