// SPDX-License-Identifier: Apache-2.0
/// @file
/// The tunable settings of `tgs_rate_control::config` as command lines name them: one table that
/// every tool builds its flags from (`tgs-node` on real GPUs, `tgs-sim pairs` in simulation), so
/// one name means one setting everywhere and a setting added here reaches both.
///
/// The table holds names, help and member pointers only; it knows nothing of any CLI library.
/// The two windows (durations, given in ms on command lines) and the pair of cap floors (one flag
/// sets both) are not plain members, so each tool adds those itself.
///
/// ```cpp
/// tgs::tgs_rate_control::config cfg;
/// for (const tgs::tgs_rate_control_setting& s : tgs::tgs_rate_control_settings) {
///   std::visit([&](auto member) { use(s.flag, s.help, cfg.*member); }, s.member);
/// }
/// ```
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <variant>

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

}  // namespace tgs
