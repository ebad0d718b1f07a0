// SPDX-License-Identifier: Apache-2.0
// The table both tools build the tgs controller's flags from: one flag per setting, each naming
// a distinct member, and a value set through the table reaches the controller's settings.
#include "tgs/rate/tgs_rate_control_settings.hpp"

#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace
