// SPDX-License-Identifier: Apache-2.0
// Tests of the interposer/node ABI arithmetic: the packed launch counter and the allowance rules.
#include <gtest/gtest.h>

#include "node_abi.hpp"

namespace cabi = tgs::cuda::abi;

TEST(PackedCounter, DecodesLaunchesAndBlocksAcrossCarries) {
  // Start just below a carry out of the block field, so the sum crosses it.
  const std::uint64_t before = cabi::block_mask - 5;
  std::uint64_t counter = before;
  for (int i = 0; i < 3; ++i) counter += cabi::pack_launch(4);
  EXPECT_EQ(cabi::unpack_delta(before, counter), (cabi::counter_delta{12, 3}));
}

TEST(PackedCounter, DecodesAcrossWrapOfTheWholeWord) {
  const std::uint64_t before = UINT64_MAX - cabi::launch_unit;  // wraps after two launches
  std::uint64_t counter = before;
  for (int i = 0; i < 7; ++i) counter += cabi::pack_launch(1000);
  EXPECT_EQ(cabi::unpack_delta(before, counter), (cabi::counter_delta{7000, 7}));
}

TEST(PackedCounter, ClampsHugeGrids) {
  EXPECT_EQ(cabi::unpack_delta(0, cabi::pack_launch(UINT64_MAX)).blocks, cabi::max_blocks_per_launch);
}

TEST(Allowance, PassesOnlyWhileEarlierBlocksAreWithinIt) {
  EXPECT_TRUE(cabi::within_allowance(0, 1));
  EXPECT_FALSE(cabi::within_allowance(1, 1));
  EXPECT_FALSE(cabi::within_allowance(5, 1));  // behind: in debt
  // Modular: an allowance just past the wrap of the 40-bit space is ahead of a position before it.
  EXPECT_TRUE(cabi::within_allowance(cabi::block_mask - 2, 3));
  EXPECT_FALSE(cabi::within_allowance(3, cabi::block_mask - 2));
}

TEST(Allowance, RefillStartsFromUseWhenUnderBudget) {
  // Used 100 of an allowance of 500: unused budget does not pile up.
  EXPECT_EQ(cabi::refill_allowance(500, 100, 50), 150u);
}

TEST(Allowance, RefillAddsToAllowanceWhenInDebt) {
  // Used 800 (a large grid overdrew, or launches wait) of 500: the budget adds to the allowance.
  EXPECT_EQ(cabi::refill_allowance(500, 800, 50), 550u);
  EXPECT_EQ(cabi::refill_allowance(500, 500, 50), 550u);
}

TEST(Allowance, PassedBlocksStopAtTheAllowance) {
  EXPECT_EQ(cabi::passed_blocks(100, 500), 100u);
  EXPECT_EQ(cabi::passed_blocks(800, 500), 500u);
}
