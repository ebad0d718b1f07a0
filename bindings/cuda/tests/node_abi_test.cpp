// SPDX-License-Identifier: Apache-2.0
// Tests of the interposer/node ABI arithmetic: the packed launch counter and the allowance rules.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

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

TEST(SyncMark, ReadsTheLatestMarkWhole) {
  cabi::job_segment seg{};
  EXPECT_EQ(cabi::read_sync_mark(seg)->seq, 0u) << "no mark yet: the start of the count";
  cabi::write_sync_mark(seg, 4'000, 9'000, 1);
  cabi::write_sync_mark(seg, 5'000, 11'000, 2);
  const auto m = cabi::read_sync_mark(seg);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->seq, 4u);
  EXPECT_EQ(m->blocks, 5'000u);
  EXPECT_EQ(m->busy_ns, 11'000u);
  EXPECT_EQ(m->ns, 2u);
}

TEST(SyncMark, AMarkBeingWrittenIsNeitherReadNorOverwritten) {
  cabi::job_segment seg{};
  cabi::write_sync_mark(seg, 1, 2, 3);
  seg.sync_mark_seq.store(3);  // another thread mid-mark (or one that died there)
  EXPECT_FALSE(cabi::read_sync_mark(seg));
  cabi::write_sync_mark(seg, 7, 8, 9);
  EXPECT_EQ(seg.sync_mark_seq.load(), 3u) << "the writer already at work keeps its mark";
  EXPECT_EQ(seg.sync_mark_blocks.load(), 1u);
}

TEST(GapFillAllowance, AWaitingLaunchIsNotTakenForOneThatPassed) {
  // 500 blocks passed through the allowance, a 100-block launch waits (its blocks are counted).
  const std::uint64_t used = 600;
  const std::uint64_t a = cabi::gap_fill_allowance(/*allowance=*/500, used, /*gap_passed_to=*/0, /*budget=*/0);
  EXPECT_EQ(a, 500u);
  EXPECT_FALSE(cabi::within_allowance(500, a)) << "a zero budget keeps the waiting launch waiting";
  EXPECT_TRUE(cabi::within_allowance(500, cabi::gap_fill_allowance(500, used, 0, 1)));
}

TEST(GapFillAllowance, WhatPassedInGapsIsNoDebt) {
  // The allowance stopped at 500; launches to 900 passed in gaps; one from 900 waits.
  EXPECT_EQ(cabi::gap_fill_allowance(500, 1'000, 900, 0), 900u);
  EXPECT_EQ(cabi::gap_fill_allowance(500, 1'000, 900, 250), 1'150u);
  EXPECT_EQ(cabi::passed_position(1'000, 500, 900), 900u);
}

TEST(GapFillAllowance, AGapPositionOutsideWhatWasLaunchedIsIgnored) {
  // The job writes gap_passed_to: beyond its launches, or behind what passed, it counts for nothing.
  EXPECT_EQ(cabi::gap_fill_allowance(500, 1'000, 5'000'000, 0), 500u);
  EXPECT_EQ(cabi::gap_fill_allowance(500, 1'000, 100, 0), 500u);
  EXPECT_EQ(cabi::gap_fill_allowance(2'000, 1'000, 900, 10), 1'010u) << "all passed: start from what was used";
}

TEST(GapFillAllowance, WorksAcrossTheWrapOfTheBlockSpace) {
  const std::uint64_t near_end = cabi::block_mask - 99;  // 100 blocks before the wrap
  const std::uint64_t used = 400;                         // 500 blocks later, past the wrap
  const std::uint64_t gap_to = 300;
  EXPECT_EQ(cabi::gap_fill_allowance(near_end, used, gap_to, 50), 350u);
}

TEST(MpsClient, OnlyWellFormedSettingsAreApplied) {
  using tgs::cuda::abi::mps_client;
  using tgs::cuda::abi::valid_mps_client;
  EXPECT_TRUE(valid_mps_client(mps_client{}));  // not a client: nothing to apply
  mps_client m;
  m.client = 1;
  std::snprintf(m.pipe_directory, sizeof(m.pipe_directory), "/run/tgs/mps/gpu0/pipe");
  m.priority = 1;
  m.active_thread_percentage = 30;
  EXPECT_TRUE(valid_mps_client(m));
  mps_client bad = m;
  bad.priority = 2;
  EXPECT_FALSE(valid_mps_client(bad));
  bad = m;
  bad.active_thread_percentage = 101;
  EXPECT_FALSE(valid_mps_client(bad));
  bad = m;
  bad.pipe_directory[0] = 'r';  // relative
  EXPECT_FALSE(valid_mps_client(bad));
  bad = m;
  bad.pipe_directory[5] = '\n';
  EXPECT_FALSE(valid_mps_client(bad));
  bad = m;
  std::memset(bad.pipe_directory, 'a', sizeof(bad.pipe_directory));  // no NUL within the array
  bad.pipe_directory[0] = '/';
  EXPECT_FALSE(valid_mps_client(bad));
  bad = m;
  bad.client = 7;
  EXPECT_FALSE(valid_mps_client(bad));
}
