// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `transparent_unified_memory`: eviction under oversubscription, restore when the
/// production job leaves or frees memory, pinned production memory, the reserve.
#include "tgs/memory/transparent_unified_memory.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace {

using namespace tgs::literals;
using tgs::allocation_request;
using tgs::allocation_verdict;
using tgs::bytes;
using tgs::job_class;
using tgs::job_memory;
using tgs::memory_observation;
using tgs::transparent_unified_memory;

// A 40 GiB budget with no reserve keeps the arithmetic in these tests readable.
transparent_unified_memory no_reserve() {
  return transparent_unified_memory{{.reserve = 0_GiB}};
}

memory_observation on_40_gib(std::optional<job_memory> production,
                             std::optional<job_memory> opportunistic,
                             std::optional<allocation_request> request = std::nullopt) {
  memory_observation obs;
  obs.capacity = 40_GiB;
  obs.production = production;
  obs.opportunistic = opportunistic;
  obs.request = request;
  return obs;
}

TEST(TransparentUnifiedMemory, EvictsOpportunisticWhenOversubscribed) {
  const auto d =
      no_reserve().step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 20_GiB}));
  // 30 + 20 > 40: only 10 GiB of the opportunistic job may stay on the GPU.
  EXPECT_EQ(d.opportunistic_resident_limit, 10_GiB);
  EXPECT_FALSE(d.verdict.has_value());
  EXPECT_EQ(d.revisit_at, tgs::never);
}

TEST(TransparentUnifiedMemory, DoesNotEvictWhenBothFit) {
  const auto d =
      no_reserve().step(on_40_gib(job_memory{15_GiB, 15_GiB}, job_memory{20_GiB, 20_GiB}));
  EXPECT_EQ(d.opportunistic_resident_limit, 25_GiB);
  EXPECT_GE(d.opportunistic_resident_limit, 20_GiB);
}

TEST(TransparentUnifiedMemory, RestoresOpportunisticWhenProductionLeaves) {
  auto policy = no_reserve();
  const auto before = policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 8_GiB}));
  ASSERT_EQ(before.opportunistic_resident_limit, 10_GiB);
  const auto after = policy.step(on_40_gib(std::nullopt, job_memory{20_GiB, 8_GiB}));
  EXPECT_EQ(after.opportunistic_resident_limit, bytes::max());
}

TEST(TransparentUnifiedMemory, RestoresOpportunisticWhenProductionFreesMemory) {
  auto policy = no_reserve();
  const auto before =
      policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 10_GiB}));
  const auto after = policy.step(on_40_gib(job_memory{12_GiB, 12_GiB}, job_memory{20_GiB, 10_GiB}));
  EXPECT_EQ(before.opportunistic_resident_limit, 10_GiB);
  EXPECT_EQ(after.opportunistic_resident_limit, 28_GiB);
}

TEST(TransparentUnifiedMemory, ProductionMemoryIsPinned) {
  auto policy = no_reserve();
  const memory_observation cases[] = {
      on_40_gib(std::nullopt, std::nullopt),
      on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 20_GiB}),
      on_40_gib(job_memory{10_GiB, 10_GiB}, std::nullopt,
                allocation_request{job_class::production, 5_GiB}),
      on_40_gib(job_memory{10_GiB, 10_GiB}, job_memory{35_GiB, 30_GiB},
                allocation_request{job_class::opportunistic, 5_GiB}),
  };
  for (const auto& obs : cases) EXPECT_TRUE(policy.step(obs).production_pinned);
}

TEST(TransparentUnifiedMemory, GrantsProductionInDeviceMemory) {
  const auto d = no_reserve().step(on_40_gib(job_memory{10_GiB, 10_GiB}, std::nullopt,
                                             allocation_request{job_class::production, 5_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
}

TEST(TransparentUnifiedMemory, GrantsOpportunisticInManagedMemoryEvenBeyondCapacity) {
  const auto d = no_reserve().step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 10_GiB},
                                             allocation_request{job_class::opportunistic, 30_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_managed);
  EXPECT_EQ(d.opportunistic_resident_limit, 10_GiB);
}

TEST(TransparentUnifiedMemory, ProductionAllocationEvictsOpportunisticFirst) {
  // 20 + 18 fit in 40; granting 10 more to production leaves the opportunistic job 10 GiB.
  const auto d = no_reserve().step(on_40_gib(job_memory{20_GiB, 20_GiB}, job_memory{18_GiB, 18_GiB},
                                             allocation_request{job_class::production, 10_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
  EXPECT_EQ(d.opportunistic_resident_limit, 10_GiB);
}

TEST(TransparentUnifiedMemory, UnmovableOpportunisticMemoryOnlyWithinItsResidentLimit) {
  // Production holds 30 of 40: the opportunistic job may keep 10 resident and holds 6 there. A
  // pool or cuMemCreate allocation cannot be evicted later, so it must fit now.
  allocation_request fits{job_class::opportunistic, 4_GiB};
  fits.movable = false;
  allocation_request too_big{job_class::opportunistic, 5_GiB};
  too_big.movable = false;
  const auto policy = no_reserve();
  EXPECT_EQ(policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{8_GiB, 6_GiB}, fits)).verdict,
            allocation_verdict::grant_device);
  EXPECT_EQ(policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{8_GiB, 6_GiB}, too_big)).verdict,
            allocation_verdict::deny_out_of_memory);
  // Alone on the GPU the opportunistic job may fill the budget, not more.
  allocation_request whole{job_class::opportunistic, 40_GiB};
  whole.movable = false;
  EXPECT_EQ(policy.step(on_40_gib(std::nullopt, std::nullopt, whole)).verdict, allocation_verdict::grant_device);
  whole.size = 41_GiB;
  EXPECT_EQ(policy.step(on_40_gib(std::nullopt, std::nullopt, whole)).verdict,
            allocation_verdict::deny_out_of_memory);
}

TEST(TransparentUnifiedMemory, FirstProductionAllocationCapsOpportunistic) {
  // The driver may ask before it reports the arriving production job.
  const auto d = no_reserve().step(on_40_gib(std::nullopt, job_memory{30_GiB, 30_GiB},
                                             allocation_request{job_class::production, 25_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
  EXPECT_EQ(d.opportunistic_resident_limit, 15_GiB);
}

TEST(TransparentUnifiedMemory, DeniesProductionThatAloneExceedsTheBudget) {
  const auto d = no_reserve().step(on_40_gib(job_memory{38_GiB, 38_GiB}, job_memory{1_GiB, 1_GiB},
                                             allocation_request{job_class::production, 3_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
  // The denied bytes are not counted: the limit follows what production actually holds.
  EXPECT_EQ(d.opportunistic_resident_limit, 2_GiB);
}

TEST(TransparentUnifiedMemory, GrantsProductionThatExactlyFillsTheBudget) {
  const auto d = no_reserve().step(on_40_gib(job_memory{38_GiB, 38_GiB}, job_memory{1_GiB, 1_GiB},
                                             allocation_request{job_class::production, 2_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
  EXPECT_EQ(d.opportunistic_resident_limit, 0_GiB);
}

TEST(TransparentUnifiedMemory, ReserveDefaultsToOneGiBAndShrinksTheBudget) {
  transparent_unified_memory policy{{}};
  EXPECT_EQ(policy.settings().reserve, 1_GiB);
  const auto d = policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{20_GiB, 20_GiB}));
  EXPECT_EQ(d.opportunistic_resident_limit, 9_GiB);
  const auto denied = policy.step(on_40_gib(job_memory{38_GiB, 38_GiB}, std::nullopt,
                                            allocation_request{job_class::production, 2_GiB}));
  EXPECT_EQ(denied.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(TransparentUnifiedMemory, ResidentLimitSaturatesAtZero) {
  // The production job holds more than the budget (it grew before the budget was lowered).
  const auto d = no_reserve().step(on_40_gib(job_memory{45_GiB, 40_GiB}, job_memory{5_GiB, 0_GiB}));
  EXPECT_EQ(d.opportunistic_resident_limit, 0_GiB);
}

TEST(TransparentUnifiedMemory, ReserveAboveCapacityLeavesNothingToAllocate) {
  transparent_unified_memory policy{{.reserve = 64_GiB}};
  const auto d = policy.step(on_40_gib(job_memory{0_GiB, 0_GiB}, job_memory{5_GiB, 5_GiB},
                                       allocation_request{job_class::production, 1_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
  EXPECT_EQ(d.opportunistic_resident_limit, 0_GiB);
}

}  // namespace
