// SPDX-License-Identifier: Apache-2.0
// Tests of the production job's sampling rule (intercept/activity_sampler.hpp): what one sample
// counts as unfinished work and as busy time, and the period the sampler keeps to.
#include <gtest/gtest.h>

#include <cstdint>

#include "activity_sampler.hpp"

namespace {

using tgs::cuda::intercept::max_sample_gap_ns;
using tgs::cuda::intercept::sample_activity;
using tgs::cuda::intercept::sample_period_ns;

TEST(ActivitySample, AStreamWithUnfinishedWorkIsBusyForTheIntervalSinceThePreviousSample) {
  const auto s = sample_activity(/*launched=*/false, /*unqueried_streams=*/false, /*not_ready=*/true, 1'000, 51'000);
  EXPECT_TRUE(s.pending);
  EXPECT_EQ(s.busy_ns, 50'000u);
}

TEST(ActivitySample, LaunchesWhoseQueriedStreamsAreDoneLeaveTheGpuIdle) {
  // A host side that launches between every two samples, on streams the sampler queries, whose
  // kernels are done by the sample: the GPU is idle, whatever the launch rate.
  const auto s = sample_activity(/*launched=*/true, /*unqueried_streams=*/false, /*not_ready=*/false, 0, 50'000);
  EXPECT_FALSE(s.pending);
  EXPECT_EQ(s.busy_ns, 0u);
}

TEST(ActivitySample, ALaunchCountsAsWorkWhenItMayHaveGoneToAStreamNoQueryReaches) {
  const auto s = sample_activity(/*launched=*/true, /*unqueried_streams=*/true, /*not_ready=*/false, 0, 50'000);
  EXPECT_TRUE(s.pending);
  EXPECT_EQ(s.busy_ns, 50'000u);
  EXPECT_FALSE(sample_activity(false, true, false, 0, 50'000).pending) << "no launch, no pending query: idle";
}

TEST(ActivitySample, OneSampleCountsAtMostOneGapOfBusyTime) {
  const auto long_pause = sample_activity(false, false, true, 0, 10 * max_sample_gap_ns);
  EXPECT_EQ(long_pause.busy_ns, max_sample_gap_ns);
  const auto clock_back = sample_activity(false, false, true, 2'000, 1'000);
  EXPECT_TRUE(clock_back.pending);
  EXPECT_EQ(clock_back.busy_ns, 0u) << "a time that went backwards adds nothing";
}

TEST(ActivitySample, ThePeriodTheNodeAsksForIsKeptWithinTheSamplersRange) {
  EXPECT_EQ(sample_period_ns(50), 50'000u);
  EXPECT_EQ(sample_period_ns(1), 10'000u) << "faster than a thread can keep up";
  EXPECT_EQ(sample_period_ns(1u << 30), 1'000'000u) << "slower than a gate's freshness allows";
}

}  // namespace
