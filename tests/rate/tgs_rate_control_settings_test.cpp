// SPDX-License-Identifier: Apache-2.0
// The table both tools build the tgs controller's flags from: one flag per setting, each naming
// a distinct member, and a value set through the table reaches the controller's settings.
#include "tgs/rate/tgs_rate_control_settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <variant>

namespace {

TEST(TgsRateControlSettings, FlagsAreUniqueLowerCaseWordsJoinedByDashes) {
  std::set<std::string_view> seen;
  for (const auto& s : tgs::tgs_rate_control_settings) {
    EXPECT_TRUE(seen.insert(s.flag).second) << s.flag;
    EXPECT_FALSE(s.help.empty()) << s.flag;
    EXPECT_TRUE(s.help.starts_with("tgs: ")) << s.flag;
    for (char c : s.flag) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '-') << s.flag;
    EXPECT_NE(s.flag.front(), '-') << s.flag;
  }
}

TEST(TgsRateControlSettings, EverySettingReachesItsOwnMember) {
  // Change each member through the table in a fresh config: exactly one member of the table then
  // differs from the defaults, so no two flags set the same member.
  for (const auto& s : tgs::tgs_rate_control_settings) {
    tgs::tgs_rate_control::config cfg;
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(cfg.*member)>;
          if constexpr (std::is_same_v<T, bool>) {
            cfg.*member = !(cfg.*member);
          } else {
            cfg.*member = cfg.*member + T{1};
          }
        },
        s.member);
    int differing = 0;
    for (const auto& other : tgs::tgs_rate_control_settings) {
      std::visit([&](auto member) { differing += cfg.*member != tgs::tgs_rate_control::config{}.*member; },
                 other.member);
    }
    EXPECT_EQ(differing, 1) << s.flag;
  }
}

TEST(TgsRateControlSettings, AValueSetThroughTheTableReachesTheController) {
  tgs::tgs_rate_control::config cfg;
  for (const auto& s : tgs::tgs_rate_control_settings) {
    if (s.flag == "rate-smoothing") cfg.*std::get<double tgs::tgs_rate_control::config::*>(s.member) = 0.5;
    if (s.flag == "min-budget") cfg.*std::get<std::uint64_t tgs::tgs_rate_control::config::*>(s.member) = 7;
  }
  const tgs::tgs_rate_control c{cfg};
  EXPECT_DOUBLE_EQ(c.settings().rate_smoothing, 0.5);
  EXPECT_EQ(c.settings().min_budget, 7u);
}

TEST(TgsRateControlSettings, TheRefreshFlagsReachTheControllerAndArePlainOptions) {
  tgs::tgs_rate_control::config cfg;
  tgs::tgs_rate_control_flag_values extra;
  EXPECT_TRUE(tgs::set_tgs_rate_control_value(cfg, extra, "refresh-every-windows", 30));
  EXPECT_TRUE(tgs::set_tgs_rate_control_value(cfg, extra, "refresh-windows", 4));
  EXPECT_TRUE(tgs::set_tgs_rate_control_value(cfg, extra, "refresh-weight", 0.25));
  const tgs::tgs_rate_control c{cfg};
  EXPECT_EQ(c.settings().refresh_every_windows, 30);
  EXPECT_EQ(c.settings().refresh_windows, 4);
  EXPECT_DOUBLE_EQ(c.settings().refresh_weight, 0.25);
  // Each takes a value (an option with its default shown), not a switch.
  for (std::string_view flag : {"refresh-every-windows", "refresh-windows", "refresh-weight"}) {
    const auto& table = tgs::tgs_rate_control_settings;
    const auto* s = std::find_if(table.begin(), table.end(),
                                 [&](const auto& setting) { return setting.flag == flag; });
    ASSERT_NE(s, tgs::tgs_rate_control_settings.end()) << flag;
    EXPECT_FALSE(std::holds_alternative<bool tgs::tgs_rate_control::config::*>(s->member)) << flag;
  }
  // A value the controller refuses names its field when the controller is built.
  EXPECT_TRUE(tgs::set_tgs_rate_control_value(cfg, extra, "refresh-weight", 1.5));
  EXPECT_THROW(tgs::tgs_rate_control{cfg}, tgs::config_error);
}

// A stand-in for the command line: the flags it names were given, `count` times each.
struct given_option {
  int n = 0;
  [[nodiscard]] int count() const noexcept { return n; }
};
struct given_flags {
  std::map<std::string, given_option> given;
  [[nodiscard]] const given_option* get_option_no_throw(const std::string& name) const noexcept {
    const auto it = given.find(name);
    return it == given.end() ? nullptr : &it->second;
  }
};

TEST(TgsRateControlPresets, TheFirstIsTheDefaultAndChangesNothing) {
  const tgs::tgs_rate_control_flag_values defaults;
  EXPECT_EQ(tgs::tgs_rate_control_presets.front().name, defaults.preset);
  EXPECT_TRUE(tgs::tgs_rate_control_presets.front().values.empty());
  tgs::tgs_rate_control::config cfg;
  tgs::tgs_rate_control_flag_values extra;
  tgs::apply_tgs_rate_control_preset(given_flags{}, cfg, extra);
  extra.apply(cfg);
  tgs::tgs_rate_control::config plain;
  tgs::tgs_rate_control_flag_values{}.apply(plain);
  EXPECT_EQ(cfg.dead_band, plain.dead_band);
  EXPECT_EQ(cfg.budget_window, plain.budget_window);
  EXPECT_EQ(cfg.production_window, plain.production_window);
  EXPECT_EQ(cfg.sync_wait_correction, plain.sync_wait_correction);
}

TEST(TgsRateControlPresets, EveryValueNamesASettingAndEveryPresetIsValid) {
  std::set<std::string_view> names;
  for (const auto& p : tgs::tgs_rate_control_presets) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_FALSE(p.help.empty()) << p.name;
    EXPECT_EQ(tgs::find_tgs_rate_control_preset(p.name), &p);
    tgs::tgs_rate_control::config cfg;
    tgs::tgs_rate_control_flag_values extra;
    for (const auto& v : p.values) {
      EXPECT_TRUE(tgs::set_tgs_rate_control_value(cfg, extra, v.flag, v.value)) << p.name << ": " << v.flag;
      // --help lists every value, so it says what the preset sets.
      EXPECT_NE(tgs::tgs_rate_control_preset_flags(p).find("--" + std::string(v.flag)), std::string::npos)
          << p.name << ": " << v.flag;
    }
    extra.apply(cfg);
    EXPECT_NO_THROW(tgs::tgs_rate_control{cfg}) << p.name;  // the config's own validation
  }
  EXPECT_EQ(tgs::find_tgs_rate_control_preset("nope"), nullptr);
  EXPECT_EQ(tgs::tgs_rate_control_preset_names(), "released, host-bound");
  tgs::tgs_rate_control::config cfg;
  tgs::tgs_rate_control_flag_values extra;
  EXPECT_FALSE(tgs::set_tgs_rate_control_value(cfg, extra, "dead-bands", 0.1));
}

TEST(TgsRateControlPresets, HelpShowsThePresetAsTheFlagsItStandsFor) {
  // The command of docs/results/gpu-memory.md's band6 calls, in the preset's order.
  EXPECT_EQ(tgs::tgs_rate_control_preset_flags(*tgs::find_tgs_rate_control_preset("host-bound")),
            "--sync-wait-correction --slowdown-only --dead-band 0.06 --additive-increase 0.001 "
            "--cap-rate-multiple 2 --cap-floor 20000 --budget-window-ms 5 --production-window-ms 1000 "
            "--profile-windows 10 --max-profile-windows 20");
  EXPECT_EQ(tgs::tgs_rate_control_preset_flags(tgs::tgs_rate_control_presets.front()), "");
}

TEST(TgsRateControlPresets, HostBoundIsTheSettingMeasuredOnTheGpu) {
  // The flags of docs/results/gpu-memory.md's band6 calls (memory.sh adds the windows).
  tgs::tgs_rate_control::config cfg;
  tgs::tgs_rate_control_flag_values extra;
  extra.preset = "host-bound";
  tgs::apply_tgs_rate_control_preset(given_flags{}, cfg, extra);
  extra.apply(cfg);
  EXPECT_TRUE(cfg.sync_wait_correction);
  EXPECT_TRUE(cfg.slowdown_only);
  EXPECT_DOUBLE_EQ(cfg.dead_band, 0.06);
  EXPECT_DOUBLE_EQ(cfg.additive_increase, 0.001);
  EXPECT_EQ(cfg.cap_rate_multiple, 2u);
  EXPECT_EQ(cfg.slow_start_cap_floor, 20000u);
  EXPECT_EQ(cfg.congestion_cap_floor, 20000u);
  EXPECT_EQ(cfg.budget_window, std::chrono::milliseconds{5});
  EXPECT_EQ(cfg.production_window, std::chrono::seconds{1});
  EXPECT_EQ(cfg.profile_windows, 10);
  EXPECT_EQ(cfg.max_profile_windows, 20);
  // What it leaves alone keeps the released value. The refresh is not part of the measured
  // setting, so the preset leaves it off.
  EXPECT_EQ(cfg.refresh_every_windows, 0);
  EXPECT_EQ(cfg.multiplicative_decrease, tgs::tgs_rate_control::config{}.multiplicative_decrease);
  EXPECT_EQ(cfg.rate_smoothing, tgs::tgs_rate_control::config{}.rate_smoothing);
}

TEST(TgsRateControlPresets, AFlagTheCommandLineGaveWinsOverThePreset) {
  tgs::tgs_rate_control::config cfg;
  tgs::tgs_rate_control_flag_values extra;
  extra.preset = "host-bound";
  // As parsed: --dead-band 0.05 --budget-window-ms 50 set the values before the preset applies.
  cfg.dead_band = 0.05;
  extra.budget_window_ms = 50;
  given_flags flags;
  flags.given["--dead-band"].n = 1;
  flags.given["--budget-window-ms"].n = 1;
  flags.given["--additive-increase"].n = 0;  // a flag the tool has but the command line left out
  tgs::apply_tgs_rate_control_preset(flags, cfg, extra);
  extra.apply(cfg);
  EXPECT_DOUBLE_EQ(cfg.dead_band, 0.05);
  EXPECT_EQ(cfg.budget_window, std::chrono::milliseconds{50});
  EXPECT_DOUBLE_EQ(cfg.additive_increase, 0.001);
  EXPECT_TRUE(cfg.sync_wait_correction);
}

}  // namespace
