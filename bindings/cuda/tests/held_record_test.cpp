// SPDX-License-Identifier: Apache-2.0
// The record of held processes (`<socket>.paused`): what a node writes it reads back, both
// versions, and every other text is refused with the line that is wrong.
#include "held_record.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using tgs::cuda::node::format_held_record;
using tgs::cuda::node::held_entries;
using tgs::cuda::node::parse_held_record;

TEST(HeldRecord, WhatIsWrittenIsReadBack) {
  const held_entries entries{{4242, 123456, "/system.slice/job.scope"}, {4343, 99, ""},
                             {77, 1, "/kubepods/pod 1/with space"}};
  const std::string text = format_held_record(entries);
  EXPECT_EQ(text.rfind("tgs-node paused v2\n", 0), 0U) << text;
  std::string why;
  const auto read = parse_held_record(text, why);
  ASSERT_TRUE(read) << why;
  EXPECT_EQ(*read, entries);
}

TEST(HeldRecord, AnEmptyRecordAndAFirstVersionOneAreRead) {
  std::string why;
  const auto none = parse_held_record("tgs-node paused v2\n", why);
  ASSERT_TRUE(none) << why;
  EXPECT_TRUE(none->empty());
  // v1 has no cgroups: a third field there is not one.
  const auto v1 = parse_held_record("tgs-node paused v1\n12 34\n", why);
  ASSERT_TRUE(v1) << why;
  EXPECT_EQ(*v1, (held_entries{{12, 34, ""}}));
  EXPECT_FALSE(parse_held_record("tgs-node paused v1\n12 34 /a\n", why));
}

TEST(HeldRecord, AnythingElseIsRefusedSayingWhichLine) {
  for (const auto& [text, expected] : std::initializer_list<std::pair<std::string, std::string>>{
           {"", "does not start with"},
           {"tgs-node paused v3\n12 34\n", "does not start with"},
           {"tgs-node paused v2\n12 34", "line 2"},
           {"tgs-node paused v2\n12 34\nx 1\n", "line 3"},
           {"tgs-node paused v2\n1 34\n", "line 2"},                      // pid 1 is never held
           {"tgs-node paused v2\n4194305 34\n", "line 2"},                // beyond the largest pid
           {"tgs-node paused v2\n12 -34\n", "line 2"},
           {"tgs-node paused v2\n12 34 relative\n", "line 2"},            // a cgroup is absolute
           {"tgs-node paused v2\n12 34 /a/../b\n", "line 2"},             // and never climbs
           {"tgs-node paused v2\n12 34 \n", "line 2"},                    // an empty cgroup
           {"tgs-node paused v2\n12 34 /a\x01\n", "line 2"},              // or an unprintable one
           {"tgs-node paused v2\n12 99999999999999999999999\n", "line 2"}}) {
    std::string why;
    EXPECT_FALSE(parse_held_record(text, why)) << text;
    EXPECT_NE(why.find(expected), std::string::npos) << text << ": " << why;
  }
}

}  // namespace
