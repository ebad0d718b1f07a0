// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of the sharing modes without feedback: `exclusive`, `co_execution`, `mps`, `mig`
/// and `token_bucket`.
#include <string>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate/co_execution.hpp"
#include "tgs/rate/exclusive.hpp"
#include "tgs/rate/mig.hpp"
#include "tgs/rate/mps.hpp"
#include "tgs/rate/token_bucket.hpp"

namespace tgs::test {
namespace {

rate_observation both() { return {epoch + 10s, 5s, blocks(1'000), blocks(1'000)}; }
rate_observation opportunistic_only() { return {epoch + 10s, 5s, std::nullopt, blocks(1'000)}; }
rate_observation production_only() { return {epoch + 10s, 5s, blocks(1'000), std::nullopt}; }

template <typename C, typename Config>
std::string rejection(const Config& cfg) {
  try {
    C c{cfg};
  } catch (const config_error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Exclusive, HoldsOpportunisticWhileProductionIsPresent) {
  exclusive c{{}};
  const rate_decision d = c.step(both());
  EXPECT_EQ(d.share, gpu_share{exclusive_turn{job_class::production}});
  EXPECT_EQ(d.opportunistic_budget, std::optional<std::uint64_t>{0});
  EXPECT_EQ(d.revisit_at, never);
  EXPECT_EQ(c.step(production_only()).opportunistic_budget, std::optional<std::uint64_t>{0});
}

TEST(Exclusive, UnthrottlesOpportunisticWithoutProduction) {
  exclusive c{{}};
  const rate_decision d = c.step(opportunistic_only());
  EXPECT_EQ(d.share, gpu_share{exclusive_turn{job_class::opportunistic}});
  EXPECT_FALSE(d.opportunistic_budget.has_value());
  EXPECT_EQ(d.revisit_at, never);
}

TEST(CoExecution, NeverThrottles) {
  co_execution c{{}};
  for (const auto& obs : {both(), opportunistic_only(), production_only()}) {
    const rate_decision d = c.step(obs);
    EXPECT_EQ(d.share, gpu_share{time_sliced{}});
    EXPECT_FALSE(d.opportunistic_budget.has_value());
    EXPECT_EQ(d.revisit_at, never);
  }
}

TEST(Mps, DefaultsToTheArtifactsThreadPercentages) {
  mps c{{}};
  const rate_decision d = c.step(both());
  EXPECT_EQ(d.share, (gpu_share{mps_partition{0.3, 0.7}}));
  EXPECT_FALSE(d.opportunistic_budget.has_value());
  EXPECT_EQ(d.revisit_at, never);
}

TEST(Mps, UsesConfiguredThreadPercentages) {
  mps c{{.production_threads = 1.0, .opportunistic_threads = 0.25}};
  EXPECT_EQ(c.step(both()).share, (gpu_share{mps_partition{1.0, 0.25}}));
}

TEST(Mps, CanRunTheOpportunisticClientAtBelowNormalPriority) {
  EXPECT_FALSE(std::get<mps_partition>(mps{{}}.step(both()).share).opportunistic_below_normal);
  mps c{{.production_threads = 1.0, .opportunistic_threads = 1.0, .opportunistic_below_normal = true}};
  EXPECT_EQ(c.step(both()).share, (gpu_share{mps_partition{1.0, 1.0, true}}));
}

TEST(Mps, RejectsThreadFractionsOutsideZeroToOne) {
  EXPECT_NE(rejection<mps>(mps::config{.production_threads = 0.0}).find(
                "mps: production_threads must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(rejection<mps>(mps::config{.opportunistic_threads = 1.5}).find(
                "mps: opportunistic_threads must be in (0, 1]"),
            std::string::npos);
  EXPECT_EQ(rejection<mps>(mps::config{.production_threads = 1.0, .opportunistic_threads = 1.0}),
            "accepted");
}

TEST(Mig, DefaultsToFourAndThreeOfSevenSlices) {
  mig c{{}};
  const rate_decision d = c.step(both());
  EXPECT_EQ(d.share, (gpu_share{mig_partition{4, 3, 7}}));
  EXPECT_FALSE(d.opportunistic_budget.has_value());
  EXPECT_EQ(d.revisit_at, never);
}

TEST(Mig, RejectsSlicesThatDoNotFit) {
  EXPECT_NE(rejection<mig>(mig::config{.production_slices = 5, .opportunistic_slices = 3})
                .find("mig: production_slices must be at most total_slices - opportunistic_slices"),
            std::string::npos);
  EXPECT_NE(rejection<mig>(mig::config{.opportunistic_slices = 0})
                .find("mig: opportunistic_slices must be at least 1"),
            std::string::npos);
  EXPECT_NE(rejection<mig>(mig::config{.production_slices = 0}).find("production_slices"),
            std::string::npos);
  EXPECT_EQ(rejection<mig>(mig::config{.production_slices = 3, .opportunistic_slices = 4}),
            "accepted");
}

TEST(TokenBucket, RefillsAtConfiguredRate) {
  token_bucket c{{.budget_blocks = 7'500, .budget_window = 20ms}};
  const rate_decision d = c.step(both());
  EXPECT_EQ(d.opportunistic_budget, std::optional<std::uint64_t>{7'500});
  EXPECT_EQ(d.budget_window, 20ms);
  EXPECT_EQ(d.revisit_at, never);
}

TEST(TokenBucket, IgnoresTheProductionJobsRate) {
  token_bucket c{{}};
  const auto busy = c.step({epoch + 5s, 5s, blocks(10'000'000), blocks(1)});
  const auto idle = c.step({epoch + 10s, 5s, blocks(0), blocks(1)});
  EXPECT_EQ(busy, idle);
  EXPECT_EQ(busy.opportunistic_budget, std::optional<std::uint64_t>{20'000});
}

TEST(TokenBucket, KeepsTheShareWithoutProductionUnlessReleaseIsSet) {
  token_bucket fixed{{}};
  EXPECT_EQ(fixed.step(opportunistic_only()).opportunistic_budget,
            std::optional<std::uint64_t>{20'000});
  token_bucket releasing{{.release_when_alone = true}};
  EXPECT_FALSE(releasing.step(opportunistic_only()).opportunistic_budget.has_value());
  EXPECT_EQ(releasing.step(both()).opportunistic_budget, std::optional<std::uint64_t>{20'000});
}

TEST(TokenBucket, RejectsEmptyShareAndWindow) {
  EXPECT_NE(rejection<token_bucket>(token_bucket::config{.budget_blocks = 0})
                .find("token_bucket: budget_blocks must be"),
            std::string::npos);
  EXPECT_NE(rejection<token_bucket>(token_bucket::config{.budget_window = 0ms})
                .find("token_bucket: budget_window must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace tgs::test
