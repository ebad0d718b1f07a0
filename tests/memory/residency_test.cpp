// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `plan_residency`: smallest first, partial residency in granules, stability and
/// monotonicity (checked over random allocation sets), for both ways of splitting the limit.
#include "tgs/memory/residency.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace tgs::literals;
using tgs::bytes;
using tgs::managed_allocation;
using tgs::plan_residency;
using tgs::residency_split;

bytes total(const std::vector<bytes>& plan) {
  bytes sum;
  for (const bytes b : plan) sum += b;
  return sum;
}

/// A random case for the property tests: up to 11 allocations from a few KiB to a few GiB, some
/// of equal size (20 MiB), orders in any sequence, and a limit from 0 to 1.25 times their sum.
struct random_case {
  std::vector<managed_allocation> allocs;
  bytes sum;
  bytes limit;
};

random_case draw_case(std::mt19937_64& rng) {
  random_case c;
  c.allocs.resize(rng() % 12);
  for (managed_allocation& a : c.allocs) {
    const std::uint64_t size = (rng() % 4 == 0) ? (20ULL << 20) : (std::uint64_t{1} << (12 + rng() % 21)) + rng() % 4096;
    a = {bytes{size}, rng() % 8};
    c.sum += a.size;
  }
  c.limit = bytes{c.sum.count() == 0 ? 0 : rng() % (c.sum.count() + c.sum.count() / 4 + 1)};
  return c;
}

TEST(PlanResidency, EverythingStaysWhenItFits) {
  const std::vector<managed_allocation> allocs{{3_GiB, 1}, {20_MiB, 2}, {1_GiB, 3}};
  EXPECT_EQ(plan_residency(allocs, 5_GiB, 2_MiB), (std::vector<bytes>{3_GiB, 20_MiB, 1_GiB}));
  EXPECT_EQ(plan_residency(allocs, bytes::max(), 2_MiB), (std::vector<bytes>{3_GiB, 20_MiB, 1_GiB}));
}

TEST(PlanResidency, SmallAllocationsStayAndTheBoundaryOneKeepsWholeGranules) {
  // A DLRM-like job: two 2 GiB tables allocated first, then its dense weights and activations.
  const std::vector<managed_allocation> allocs{{2_GiB, 1}, {2_GiB, 2}, {20_MiB, 3}, {64_MiB, 4}, {2_MiB, 5}};
  const std::vector<bytes> plan = plan_residency(allocs, 3_GiB, 2_MiB);
  // 86 MiB of small allocations whole, the older table whole, the newer one in 2 MiB granules.
  EXPECT_EQ(plan, (std::vector<bytes>{2_GiB, 938_MiB, 20_MiB, 64_MiB, 2_MiB}));
  EXPECT_EQ(total(plan), 3_GiB);
}

TEST(PlanResidency, TheUnfilledRestIsLessThanAGranule) {
  const std::vector<managed_allocation> allocs{{10_MiB, 1}, {100_MiB, 2}};
  const std::vector<bytes> plan = plan_residency(allocs, 10_MiB + 5_MiB, 2_MiB);
  EXPECT_EQ(plan, (std::vector<bytes>{10_MiB, 4_MiB}));
  // A granule of zero counts bytes.
  EXPECT_EQ(plan_residency(allocs, 15_MiB, 0_B), (std::vector<bytes>{10_MiB, 5_MiB}));
}

TEST(PlanResidency, AllocationsSmallerThanAGranuleAreWholeOrOnHost) {
  const std::vector<managed_allocation> allocs{{1_MiB, 1}, {1_MiB, 2}, {1_MiB, 3}};
  EXPECT_EQ(plan_residency(allocs, 2_MiB + 512_KiB, 2_MiB), (std::vector<bytes>{1_MiB, 1_MiB, 0_B}));
}

TEST(PlanResidency, AmongEqualSizesTheOlderStays) {
  // The newest allocation (order 1 is the oldest) goes first, whatever the index order.
  const std::vector<managed_allocation> allocs{{20_MiB, 9}, {20_MiB, 1}, {20_MiB, 5}};
  EXPECT_EQ(plan_residency(allocs, 40_MiB, 2_MiB), (std::vector<bytes>{0_B, 20_MiB, 20_MiB}));
}

TEST(PlanResidency, ANewSmallAllocationDisplacesOnlyTheTailOfALargerOne) {
  std::vector<managed_allocation> allocs{{4_GiB, 1}, {20_MiB, 2}};
  const std::vector<bytes> before = plan_residency(allocs, 3_GiB, 2_MiB);
  allocs.push_back({20_MiB, 3});
  const std::vector<bytes> after = plan_residency(allocs, 3_GiB, 2_MiB);
  EXPECT_EQ(after[1], before[1]);  // the older small one stays
  EXPECT_EQ(after[2], 20_MiB);     // the new one is resident
  EXPECT_EQ(before[0] - after[0], 20_MiB);  // at the cost of 20 MiB of the large one's tail
}

TEST(PlanResidency, NothingResidentUnderAZeroLimitAndNoAllocationsIsFine) {
  const std::vector<managed_allocation> allocs{{1_GiB, 1}, {1_MiB, 2}};
  EXPECT_EQ(plan_residency(allocs, 0_B, 2_MiB), (std::vector<bytes>{0_B, 0_B}));
  EXPECT_TRUE(plan_residency({}, 1_GiB, 2_MiB).empty());
}

// Properties over random sets: within the limit, each entry a whole allocation or whole granules
// of it, less than a granule unfilled, monotone in the limit, and smallest-first (no allocation is
// short while a larger one, or an equal newer one, has bytes on the GPU).
TEST(PlanResidency, RandomSetsKeepEveryProperty) {
  std::mt19937_64 rng{20261122};
  const bytes granule = 2_MiB;
  for (int round = 0; round < 500; ++round) {
    const auto [allocs, sum, limit] = draw_case(rng);
    const std::vector<bytes> plan = plan_residency(allocs, limit, granule);
    ASSERT_EQ(plan.size(), allocs.size());
    EXPECT_LE(total(plan), limit);
    if (sum > limit) {
      EXPECT_LT((limit - total(plan)).count(), granule.count());
    }
    for (std::size_t i = 0; i < allocs.size(); ++i) {
      EXPECT_LE(plan[i], allocs[i].size);
      EXPECT_TRUE(plan[i] == allocs[i].size || plan[i].count() % granule.count() == 0);
      for (std::size_t j = 0; j < allocs.size(); ++j) {
        const bool j_after_i = allocs[j].size > allocs[i].size ||
                               (allocs[j].size == allocs[i].size && allocs[j].order > allocs[i].order);
        if (j_after_i && plan[i] < allocs[i].size) {
          EXPECT_EQ(plan[j], 0_B) << "round " << round;
        }
      }
    }
    const bytes higher = limit + bytes{rng() % (1ULL << 31)};
    const std::vector<bytes> more = plan_residency(allocs, higher, granule);
    for (std::size_t i = 0; i < allocs.size(); ++i) EXPECT_GE(more[i], plan[i]) << "round " << round;
  }
}

TEST(PlanResidencyEven, EveryLargeAllocationKeepsTheSamePrefix) {
  // The DLRM-like job of the test above: the small allocations whole, each table half of the rest.
  const std::vector<managed_allocation> allocs{{2_GiB, 1}, {2_GiB, 2}, {20_MiB, 3}, {64_MiB, 4}, {2_MiB, 5}};
  const std::vector<bytes> plan = plan_residency(allocs, 3_GiB, 2_MiB, residency_split::even);
  // 2986 MiB for the tables: 1492 MiB each in 2 MiB granules, and the 2 MiB left to the older.
  EXPECT_EQ(plan, (std::vector<bytes>{1494_MiB, 1492_MiB, 20_MiB, 64_MiB, 2_MiB}));
  EXPECT_EQ(total(plan), 3_GiB);
}

TEST(PlanResidencyEven, TheDocumentedExample) {
  const std::vector<managed_allocation> allocs{{8_GiB, 1}, {64_MiB, 2}, {8_GiB, 3}};
  EXPECT_EQ(plan_residency(allocs, 10_GiB, 2_MiB, residency_split::even),
            (std::vector<bytes>{5088_MiB, 64_MiB, 5088_MiB}));
  EXPECT_EQ(plan_residency(allocs, 10_GiB, 2_MiB), (std::vector<bytes>{8_GiB, 64_MiB, 1984_MiB}));
}

TEST(PlanResidencyEven, AMediumAllocationBelowTheShareStaysWhole) {
  // 900 MiB over three allocations: the 100 MiB one fits an equal share (300), then 400 each
  // for the two larger ones, which the 500 MiB one cannot take whole.
  const std::vector<managed_allocation> allocs{{100_MiB, 1}, {500_MiB, 2}, {2_GiB, 3}};
  EXPECT_EQ(plan_residency(allocs, 900_MiB, 2_MiB, residency_split::even),
            (std::vector<bytes>{100_MiB, 400_MiB, 400_MiB}));
}

TEST(PlanResidencyEven, TheRoundingRestGoesToTheOlderOneGranuleEach) {
  // 3 tables of 1 GiB under 1030 MiB: 342 MiB each (171 granules), 4 MiB over: 2 MiB more to
  // the two oldest.
  const std::vector<managed_allocation> allocs{{1_GiB, 3}, {1_GiB, 1}, {1_GiB, 2}};
  EXPECT_EQ(plan_residency(allocs, 1030_MiB, 2_MiB, residency_split::even),
            (std::vector<bytes>{342_MiB, 344_MiB, 344_MiB}));
}

TEST(PlanResidencyEven, EverythingStaysWhenItFitsAndNothingUnderZero) {
  const std::vector<managed_allocation> allocs{{3_GiB, 1}, {20_MiB, 2}, {1_GiB, 3}};
  EXPECT_EQ(plan_residency(allocs, 5_GiB, 2_MiB, residency_split::even),
            (std::vector<bytes>{3_GiB, 20_MiB, 1_GiB}));
  EXPECT_EQ(plan_residency(allocs, 0_B, 2_MiB, residency_split::even), (std::vector<bytes>{0_B, 0_B, 0_B}));
  EXPECT_TRUE(plan_residency({}, 1_GiB, 2_MiB, residency_split::even).empty());
}

TEST(PlanResidencyEven, NamesRoundTrip) {
  for (const residency_split s : {residency_split::in_order, residency_split::even}) {
    EXPECT_EQ(tgs::parse_residency_split(tgs::to_string(s)), s);
  }
  EXPECT_FALSE(tgs::parse_residency_split("in_order").has_value());
  EXPECT_FALSE(tgs::parse_residency_split("").has_value());
}

// Properties over random sets: within the limit, each entry a whole allocation or whole granules
// of it, less than a granule unfilled, monotone in the limit, and max-min fair to a granule: no
// allocation keeps two granules more than one that is partly resident (one granule of the
// rounding rest, and less than one where the rest makes an allocation whole).
TEST(PlanResidencyEven, RandomSetsKeepEveryProperty) {
  std::mt19937_64 rng{20261123};
  for (int round = 0; round < 2000; ++round) {
    const bytes granule{rng() % 3 == 0 ? 1 : (std::uint64_t{1} << (10 + rng() % 12))};
    const auto [allocs, sum, limit] = draw_case(rng);
    const std::vector<bytes> plan = plan_residency(allocs, limit, granule, residency_split::even);
    ASSERT_EQ(plan.size(), allocs.size());
    EXPECT_LE(total(plan), limit) << "round " << round;
    if (sum > limit) {
      EXPECT_LT((limit - total(plan)).count(), granule.count()) << "round " << round;
    } else {
      EXPECT_EQ(total(plan), sum) << "round " << round;
    }
    for (std::size_t i = 0; i < allocs.size(); ++i) {
      EXPECT_LE(plan[i], allocs[i].size);
      EXPECT_TRUE(plan[i] == allocs[i].size || plan[i].count() % granule.count() == 0) << "round " << round;
      if (plan[i] == allocs[i].size) continue;
      for (std::size_t j = 0; j < allocs.size(); ++j) {
        EXPECT_LT(plan[j], plan[i] + granule + granule) << "round " << round << ": " << i << " is partly resident";
      }
    }
    const bytes higher = limit + bytes{rng() % (1ULL << 31)};
    const std::vector<bytes> more = plan_residency(allocs, higher, granule, residency_split::even);
    for (std::size_t i = 0; i < allocs.size(); ++i) EXPECT_GE(more[i], plan[i]) << "round " << round;
  }
}

}  // namespace
