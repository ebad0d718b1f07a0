// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `hard_limit`: per-class limits, the capacity check, no eviction, config errors.
#include "tgs/memory/hard_limit.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "tgs/core/config_error.hpp"

namespace {

using namespace tgs::literals;
using tgs::allocation_request;
using tgs::allocation_verdict;
using tgs::bytes;
using tgs::hard_limit;
using tgs::job_class;
using tgs::job_memory;
using tgs::memory_observation;

memory_observation on_40_gib(std::optional<job_memory> production,
                             std::optional<job_memory> opportunistic,
                             std::optional<allocation_request> request) {
  memory_observation obs;
  obs.capacity = 40_GiB;
  obs.production = production;
  obs.opportunistic = opportunistic;
  obs.request = request;
  return obs;
}

TEST(HardLimit, DeniesAllocationBeyondLimit) {
  hard_limit policy{{}};  // 20 GiB each on 40 GiB
  const auto d = policy.step(on_40_gib(job_memory{5_GiB, 5_GiB}, job_memory{19_GiB, 19_GiB},
                                       allocation_request{job_class::opportunistic, 2_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(HardLimit, GrantsAllocationUpToTheLimitInDeviceMemory) {
  hard_limit policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{5_GiB, 5_GiB}, job_memory{18_GiB, 18_GiB},
                                       allocation_request{job_class::opportunistic, 2_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
}

TEST(HardLimit, LimitsTheProductionJobToo) {
  hard_limit policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{19_GiB, 19_GiB}, std::nullopt,
                                       allocation_request{job_class::production, 2_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(HardLimit, SplitsCapacityByProductionFraction) {
  hard_limit policy{{.production_fraction = 0.75}};
  EXPECT_EQ(policy.limit(job_class::production, 40_GiB), 30_GiB);
  EXPECT_EQ(policy.limit(job_class::opportunistic, 40_GiB), 10_GiB);
  // The two shares always add up to the capacity, even when it does not divide evenly.
  const bytes odd{1'000'000'007};
  EXPECT_EQ(policy.limit(job_class::production, odd) + policy.limit(job_class::opportunistic, odd),
            odd);
}

TEST(HardLimit, ExplicitLimitsOverrideTheFraction) {
  hard_limit policy{
      {.production_fraction = 0.5, .production_limit = 32_GiB, .opportunistic_limit = 6_GiB}};
  EXPECT_EQ(policy.limit(job_class::production, 40_GiB), 32_GiB);
  EXPECT_EQ(policy.limit(job_class::opportunistic, 40_GiB), 6_GiB);
  // An explicit limit above the capacity is clamped to it.
  EXPECT_EQ(policy.limit(job_class::production, 16_GiB), 16_GiB);
}

TEST(HardLimit, DeniesBeyondCapacityEvenWithinTheJobsLimit) {
  hard_limit policy{{.production_limit = 30_GiB, .opportunistic_limit = 30_GiB}};
  // The opportunistic job is within its 30 GiB, but 25 + 14 + 2 > 40.
  const auto d = policy.step(on_40_gib(job_memory{25_GiB, 25_GiB}, job_memory{14_GiB, 14_GiB},
                                       allocation_request{job_class::opportunistic, 2_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(HardLimit, NeverEvicts) {
  hard_limit policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{20_GiB, 20_GiB}, job_memory{20_GiB, 20_GiB},
                                       allocation_request{job_class::production, 1_GiB}));
  EXPECT_EQ(d.opportunistic_resident_limit, bytes::max());
  EXPECT_TRUE(d.production_pinned);
  EXPECT_EQ(d.revisit_at, tgs::never);
}

TEST(HardLimit, TellsEachClassItsOwnLimitAsItsMemory) {
  hard_limit policy{{.production_fraction = 0.75}};
  const auto d = policy.step(on_40_gib(job_memory{1_GiB, 1_GiB}, std::nullopt, std::nullopt));
  EXPECT_EQ(d.production_view, 30_GiB);
  EXPECT_EQ(d.opportunistic_view, 10_GiB);
}

TEST(HardLimit, RejectsFractionOutsideTheOpenUnitInterval) {
  for (double bad : {0.0, 1.0, 1.5, -0.25, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    try {
      hard_limit policy{{.production_fraction = bad}};
      ADD_FAILURE() << "accepted production_fraction " << bad;
    } catch (const tgs::config_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("hard_limit"), std::string::npos) << what;
      EXPECT_NE(what.find("production_fraction"), std::string::npos) << what;
    }
  }
}

TEST(HardLimit, ErrorMessageShowsTheRejectedValue) {
  try {
    hard_limit policy{{.production_fraction = 1.5}};
    ADD_FAILURE() << "accepted production_fraction 1.5";
  } catch (const tgs::config_error& e) {
    EXPECT_STREQ(e.what(), "hard_limit: production_fraction must be in (0, 1), got 1.5");
  }
}

TEST(HardLimit, RejectsZeroExplicitLimits) {
  EXPECT_THROW((hard_limit{{.production_limit = 0_GiB}}), tgs::config_error);
  try {
    hard_limit policy{{.opportunistic_limit = 0_GiB}};
    ADD_FAILURE() << "accepted opportunistic_limit 0";
  } catch (const tgs::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("opportunistic_limit"), std::string::npos) << e.what();
  }
}

}  // namespace
