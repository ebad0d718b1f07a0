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
/// A preset (`--tgs-preset`, `tgs_rate_control_presets`) names a setting that was measured as a
/// whole; it fills in the flags the command line leaves out, so `--tgs-preset host-bound
/// --dead-band 0.05` is that setting with a 5% band.
///
/// ```cpp
/// tgs::tgs_rate_control::config cfg;
/// tgs::tgs_rate_control_flag_values extra;  // windows in ms, cap floor, preset
/// app.add_option("--production-window-ms", extra.production_window_ms, "...");
/// tgs::add_tgs_rate_control_flags(app, cfg, extra);
/// app.parse(argc, argv);
/// tgs::apply_tgs_rate_control_preset(app, cfg, extra);
/// extra.apply(cfg);
/// ```
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <locale>
#include <span>
#include <sstream>
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
    // A reference refresh: R is otherwise measured once per arrival, and a host-bound production
    // job's standalone rate drifts after that.
    tgs_rate_control_setting{
        "refresh-every-windows",
        "tgs: measure R again after this many control windows (and after each refresh), "
        "holding the opportunistic job for --refresh-windows production windows; the budget "
        "resumes where it was (0: never, the released code)",
        &tgs_rate_control::config::refresh_every_windows},
    tgs_rate_control_setting{
        "refresh-windows",
        "tgs: production windows one refresh holds the opportunistic job for, at least 2: the "
        "first lets its queued kernels drain and is discarded, the others measure R",
        &tgs_rate_control::config::refresh_windows},
    tgs_rate_control_setting{
        "refresh-weight",
        "tgs: how far one refresh moves R towards the rate it measured, in (0, 1] (with "
        "--sync-wait-correction the host time per block moves as far)",
        &tgs_rate_control::config::refresh_weight},
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
  /// The named preset (`tgs_rate_control_presets`) that fills in every setting the command line
  /// leaves out; `apply_tgs_rate_control_preset` applies it.
  std::string preset = "released";

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

/// One value of a preset: a flag of `tgs_rate_control_settings`, or one of the flags of
/// `tgs_rate_control_flag_values` (`production-window-ms`, `budget-window-ms`, `cap-floor`), and its
/// value (a switch: 1 for on).
struct tgs_rate_control_preset_value {
  std::string_view flag;
  double value;
};

/// A named set of settings, so that a setting measured as a whole is one flag (`--tgs-preset`).
struct tgs_rate_control_preset {
  std::string_view name;
  std::string_view help;
  std::span<const tgs_rate_control_preset_value> values;
};

/// The setting that met both targets beside host-bound production jobs on H100s
/// (docs/results/gpu-memory.md, "The 6% band on two more machines"): R corrected for the
/// production job's own host-side noise (C), only slowdowns counted, a dead band wide enough for
/// the corrected rate's noise (2-5% there), faster growth, a budget cap near what the
/// opportunistic job launches, 5 ms budget windows, and 1 s production windows with 10-20 of them
/// to profile, as those runs had.
inline constexpr std::array tgs_rate_control_host_bound_values{
    tgs_rate_control_preset_value{"sync-wait-correction", 1},
    tgs_rate_control_preset_value{"slowdown-only", 1},
    tgs_rate_control_preset_value{"dead-band", 0.06},
    tgs_rate_control_preset_value{"additive-increase", 0.001},
    tgs_rate_control_preset_value{"cap-rate-multiple", 2},
    tgs_rate_control_preset_value{"cap-floor", 20000},
    tgs_rate_control_preset_value{"budget-window-ms", 5},
    tgs_rate_control_preset_value{"production-window-ms", 1000},
    tgs_rate_control_preset_value{"profile-windows", 10},
    tgs_rate_control_preset_value{"max-profile-windows", 20},
};

/// Every preset; the first is the default and changes nothing.
inline constexpr std::array tgs_rate_control_presets{
    tgs_rate_control_preset{"released", "the paper's released controller, the defaults", {}},
    tgs_rate_control_preset{
        "host-bound",
        "for production jobs whose launch rate varies from second to second with their host side "
        "(data loading, Python)",
        tgs_rate_control_host_bound_values},
};

/// The preset called `name`, or null.
[[nodiscard]] inline const tgs_rate_control_preset* find_tgs_rate_control_preset(std::string_view name) noexcept {
  for (const tgs_rate_control_preset& p : tgs_rate_control_presets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

/// "released, host-bound": the names an error lists.
[[nodiscard]] inline std::string tgs_rate_control_preset_names() {
  std::string names;
  for (const tgs_rate_control_preset& p : tgs_rate_control_presets) {
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  return names;
}

/// The preset as the flags it stands for ("--sync-wait-correction --dead-band 0.06 ..."), which
/// `--help` shows, so the help cannot disagree with the values.
[[nodiscard]] inline std::string tgs_rate_control_preset_flags(const tgs_rate_control_preset& preset) {
  std::string flags;
  for (const tgs_rate_control_preset_value& v : preset.values) {
    if (!flags.empty()) flags += ' ';
    flags += "--" + std::string(v.flag);
    const bool is_switch = std::any_of(tgs_rate_control_settings.begin(), tgs_rate_control_settings.end(),
                                       [&](const tgs_rate_control_setting& s) {
                                         return s.flag == v.flag && std::holds_alternative<bool tgs_rate_control::config::*>(s.member);
                                       });
    if (is_switch) continue;
    std::ostringstream value;  // shortest form: 0.06, 20000; a decimal point whatever the locale
    value.imbue(std::locale::classic());
    value << v.value;
    flags += ' ' + value.str();
  }
  return flags;
}

/// Sets the setting named `flag` to `value` (a switch is on for any value but 0). Returns false
/// for a name that is no setting.
inline bool set_tgs_rate_control_value(tgs_rate_control::config& cfg, tgs_rate_control_flag_values& extra,
                                       std::string_view flag, double value) noexcept {
  if (flag == "production-window-ms") {
    extra.production_window_ms = value;
    return true;
  }
  if (flag == "budget-window-ms") {
    extra.budget_window_ms = value;
    return true;
  }
  if (flag == "cap-floor") {
    extra.cap_floor = static_cast<std::uint64_t>(value);
    return true;
  }
  for (const tgs_rate_control_setting& setting : tgs_rate_control_settings) {
    if (setting.flag != flag) continue;
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(cfg.*member)>;
          if constexpr (std::is_same_v<T, bool>) {
            cfg.*member = value != 0.0;
          } else {
            cfg.*member = static_cast<T>(value);
          }
        },
        setting.member);
    return true;
  }
  return false;
}

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
  std::string presets;
  for (const tgs_rate_control_preset& p : tgs_rate_control_presets) {
    presets += (presets.empty() ? "" : "; ") + std::string(p.name) + ": " + std::string(p.help);
    if (!p.values.empty()) presets += ", " + tgs_rate_control_preset_flags(p);
  }
  app.add_option("--tgs-preset", extra.preset,
                 "tgs: a named setting that fills in every tgs flag the command line leaves out (" + presets + ")")
      ->check(
          [](const std::string& name) -> std::string {
            if (find_tgs_rate_control_preset(name) != nullptr) return {};
            return "unknown preset \"" + name + "\" (known: " + tgs_rate_control_preset_names() + ")";
          },
          "{" + tgs_rate_control_preset_names() + "}")
      ->capture_default_str();
}

/// Writes preset `extra.preset`'s values into `cfg` and `extra`, except those whose flag the
/// command line (or a config file) gave: an explicit flag always wins over the preset. Call it
/// after parsing and before `extra.apply(cfg)`. `App` is anything with CLI11's
/// `get_option_no_throw(name)` returning an option with `count()`; a value whose flag the tool does
/// not have is still applied.
template <typename App>
void apply_tgs_rate_control_preset(const App& app, tgs_rate_control::config& cfg,
                                   tgs_rate_control_flag_values& extra) {
  const tgs_rate_control_preset* preset = find_tgs_rate_control_preset(extra.preset);
  if (preset == nullptr) return;  // the option's check refused it already
  for (const tgs_rate_control_preset_value& v : preset->values) {
    const auto* given = app.get_option_no_throw("--" + std::string(v.flag));
    if (given != nullptr && given->count() > 0) continue;
    set_tgs_rate_control_value(cfg, extra, v.flag, v.value);
  }
}

}  // namespace tgs
