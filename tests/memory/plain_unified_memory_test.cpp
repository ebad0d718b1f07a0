// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `plain_unified_memory`: managed memory for both jobs, no pinning, no cap.
#include "tgs/memory/plain_unified_memory.hpp"

#include <gtest/gtest.h>

namespace {

using namespace tgs::literals;
using tgs::allocation_request;
using tgs::allocation_verdict;
using tgs::bytes;
using tgs::job_class;
using tgs::job_memory;
using tgs::memory_observation;
using tgs::plain_unified_memory;

memory_observation oversubscribed(job_class requester) {
  memory_observation obs;
  obs.capacity = 40_GiB;
  obs.production = job_memory{30_GiB, 25_GiB};
  obs.opportunistic = job_memory{25_GiB, 15_GiB};
  obs.request = allocation_request{requester, 20_GiB};
  return obs;
}

TEST(PlainUnifiedMemory, GrantsManagedMemoryToBothClasses) {
  plain_unified_memory policy{{}};
  EXPECT_EQ(policy.step(oversubscribed(job_class::production)).verdict,
            allocation_verdict::grant_managed);
  EXPECT_EQ(policy.step(oversubscribed(job_class::opportunistic)).verdict,
            allocation_verdict::grant_managed);
}

TEST(PlainUnifiedMemory, MemoryThatCannotBeManagedStaysDeviceMemory) {
  plain_unified_memory policy{{}};
  memory_observation obs = oversubscribed(job_class::opportunistic);
  obs.request->movable = false;
  EXPECT_EQ(policy.step(obs).verdict, allocation_verdict::grant_device);
}

TEST(PlainUnifiedMemory, ProductionIsNotPinned) {
  plain_unified_memory policy{{}};
  EXPECT_FALSE(policy.step(oversubscribed(job_class::production)).production_pinned);
  EXPECT_FALSE(policy.step(memory_observation{}).production_pinned);
}

TEST(PlainUnifiedMemory, LeavesResidencyToTheDriver) {
  plain_unified_memory policy{{}};
  const auto d = policy.step(oversubscribed(job_class::opportunistic));
  EXPECT_EQ(d.opportunistic_resident_limit, bytes::max());
  EXPECT_EQ(d.revisit_at, tgs::never);
}

}  // namespace
