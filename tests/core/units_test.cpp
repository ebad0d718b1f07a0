// SPDX-License-Identifier: Apache-2.0
// Tests of the vocabulary types: time conversions, byte arithmetic and names.
#include "tgs/core/units.hpp"

#include <gtest/gtest.h>

#include "tgs/core/config_error.hpp"

namespace tgs {
namespace {

using namespace std::chrono_literals;
using namespace tgs::literals;

TEST(Time, SecondsRoundTripToTheNanosecond) {
  EXPECT_EQ(from_seconds(1.5), 1500ms);
  EXPECT_EQ(from_seconds(1e-9), 1ns);
  EXPECT_DOUBLE_EQ(to_seconds(250ms), 0.25);
  EXPECT_EQ(from_seconds(to_seconds(123456789ns)), 123456789ns);
}

TEST(Time, InstantsAreStrongAndOrdered) {
  const instant a = epoch + 5s;
  const instant b = a + 50ms;
  EXPECT_LT(a, b);
  EXPECT_EQ(b - a, 50ms);
  EXPECT_LT(b, never);
  static_assert(!std::is_convertible_v<double, instant>, "no double seconds in interfaces");
  // A 100-day trace in nanoseconds is far from overflow.
  EXPECT_LT(epoch + std::chrono::hours{24 * 100}, never);
}

TEST(Bytes, SubtractionSaturatesAtZero) {
  EXPECT_EQ(4_GiB - 1_GiB, 3_GiB);
  EXPECT_EQ(1_GiB - 4_GiB, 0_B);
  bytes b = 10_MiB;
  b -= 20_MiB;
  EXPECT_EQ(b, 0_B);
}

TEST(Bytes, LiteralsAndGib) {
  EXPECT_EQ((1_KiB).count(), 1024U);
  EXPECT_EQ((2_MiB).count(), 2U << 20);
  EXPECT_DOUBLE_EQ((3_GiB).gib(), 3.0);
  EXPECT_EQ(from_gib(1.5), 1536_MiB);
  EXPECT_LT(1_GiB, 2_GiB);
}

TEST(JobClass, HasNames) {
  EXPECT_EQ(to_string(job_class::production), "production");
  EXPECT_EQ(to_string(job_class::opportunistic), "opportunistic");
}

TEST(ConfigError, RequireThrowsWithTheMessage) {
  EXPECT_NO_THROW(require(true, "unused"));
  try {
    require(false, "tgs_rate_control: dead_band must be in (0, 1), got 1.5");
    FAIL() << "require(false) did not throw";
  } catch (const config_error& e) {
    EXPECT_STREQ(e.what(), "tgs_rate_control: dead_band must be in (0, 1), got 1.5");
  }
}

}  // namespace
}  // namespace tgs
