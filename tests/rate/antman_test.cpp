// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of the `antman` model: baseline learning, AIMD on the production job's iteration
/// time, and the conservative fall-back without iteration times.
#include <string>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate/antman.hpp"

namespace tgs::test {
namespace {

using antman_feed = feed<antman>;

/// Arrival and `baseline_periods` periods at `iteration`, so control has just started.
antman_feed in_control(duration iteration = 100ms, const antman::config& cfg = {}) {
  antman_feed f{antman{cfg}};
  f.arrive();
  for (int i = 0; i < cfg.baseline_periods; ++i) f.step(iterating(iteration), blocks(0), 1s);
  return f;
}

TEST(Antman, HoldsOpportunisticWhileLearningTheBaseline) {
  antman_feed f{antman{{}}};
  EXPECT_EQ(f.arrive().opportunistic_budget, std::optional<std::uint64_t>{0});
  for (int i = 0; i < 4; ++i) {
    const rate_decision d = f.step(iterating(100ms), blocks(0), 1s);
    EXPECT_EQ(d.opportunistic_budget, std::optional<std::uint64_t>{0}) << "period " << i;
    EXPECT_EQ(d.revisit_at, f.now + 1s);
  }
  EXPECT_FALSE(f.controller.baseline().has_value());
  EXPECT_EQ(f.step(iterating(100ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{20'000});
}

TEST(Antman, BaselineIsTheMinimumLearnedIterationTime) {
  antman_feed f{antman{{}}};
  f.arrive();
  for (duration t : {120ms, 101ms, 130ms, 99ms, 110ms}) f.step(iterating(t), blocks(0), 1s);
  EXPECT_EQ(f.controller.baseline(), std::optional<duration>{99ms});
}

TEST(Antman, SlowedProductionHalvesTheBudget) {
  antman_feed f = in_control();
  // 6% slower than the 100 ms baseline exceeds the 5% tolerance.
  EXPECT_EQ(f.step(iterating(106ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{10'000});
  EXPECT_EQ(f.step(iterating(106ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{5'000});
}

TEST(Antman, CalmProductionGrowsTheBudgetAdditively) {
  antman_feed f = in_control();
  // 4% slower is within tolerance.
  EXPECT_EQ(f.step(iterating(104ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{21'000});
  EXPECT_EQ(f.step(iterating(100ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{22'000});
}

TEST(Antman, MissingIterationTimeKeepsTheBudget) {
  antman_feed f = in_control();
  f.step(iterating(106ms), blocks(0), 1s);  // 10000
  EXPECT_EQ(f.step(blocks(1'000), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{10'000});
}

TEST(Antman, WithoutIterationTimesTheOpportunisticJobStaysHeld) {
  antman_feed f{antman{{}}};
  f.arrive();
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(f.step(blocks(1'000'000), blocks(0), 1s).opportunistic_budget,
              std::optional<std::uint64_t>{0});
  }
  EXPECT_FALSE(f.controller.baseline().has_value());
}

TEST(Antman, AbsentProductionUnthrottlesAndArrivalRelearns) {
  antman_feed f = in_control();
  const rate_decision gone = f.step(std::nullopt, blocks(5), 1s);
  EXPECT_FALSE(gone.opportunistic_budget.has_value());
  EXPECT_EQ(gone.revisit_at, never);
  EXPECT_EQ(f.step(iterating(100ms), blocks(0), 1s).opportunistic_budget,
            std::optional<std::uint64_t>{0});
  EXPECT_FALSE(f.controller.baseline().has_value());
}

TEST(Antman, RejectsInvalidSettingsNamingTheField) {
  const auto message = [](antman::config cfg) -> std::string {
    try {
      antman c{cfg};
    } catch (const config_error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(message({.period = 0s}).find("antman: period must be positive"), std::string::npos);
  EXPECT_NE(message({.baseline_periods = 0}).find("antman: baseline_periods"), std::string::npos);
  EXPECT_NE(message({.tolerance = 0.0}).find("antman: tolerance"), std::string::npos);
  EXPECT_NE(message({.decrease_factor = 1.0}).find("antman: decrease_factor"), std::string::npos);
  EXPECT_NE(message({.increase_step = 0}).find("antman: increase_step"), std::string::npos);
}

}  // namespace
}  // namespace tgs::test
