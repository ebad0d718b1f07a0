// SPDX-License-Identifier: Apache-2.0
// Tests of tgs-node's per-GPU memory loop: the memory policy's decisions carried to in-memory job
// segments (resident limits, views, verdicts), with the real policies of the core.
#include <gtest/gtest.h>

#include <memory>

#include "memory_loop.hpp"
#include "tgs/memory/any_memory_policy.hpp"

namespace cabi = tgs::cuda::abi;
using tgs::cuda::node::gpu_memory_loop;
using namespace tgs::literals;

namespace {

struct segment_deleter {
  void operator()(cabi::job_segment* s) const { delete s; }
};
using segment_ptr = std::unique_ptr<cabi::job_segment, segment_deleter>;

segment_ptr make_segment() { return segment_ptr{new cabi::job_segment{}}; }

constexpr tgs::instant t0 = tgs::epoch;

tgs::transparent_unified_memory tum_without_reserve() { return tgs::transparent_unified_memory{{.reserve = 0_GiB}}; }

TEST(MemoryLoop, ArrivalActivatesThePolicyWithoutACap) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_EQ(opp->memory_policy_active.load(), 1U);
  EXPECT_EQ(opp->resident_limit.load(), cabi::no_resident_limit);
  EXPECT_EQ(opp->view_total_bytes.load(), (20_GiB).count());
  EXPECT_EQ(opp->view_others_bytes.load(), 0U);
}

TEST(MemoryLoop, ArrivalTellsTheJobHowToSplitItsLimit) {
  gpu_memory_loop in_order{tum_without_reserve(), 20_GiB};
  gpu_memory_loop even{tum_without_reserve(), 20_GiB, tgs::residency_split::even};
  auto a = make_segment();
  auto b = make_segment();
  b->residency_split.store(7);  // whatever was there, the node's choice replaces it
  in_order.add_job(1, tgs::job_class::opportunistic, a.get(), t0);
  even.add_job(1, tgs::job_class::opportunistic, b.get(), t0);
  EXPECT_EQ(a->residency_split.load(), static_cast<std::uint32_t>(tgs::residency_split::in_order));
  EXPECT_EQ(b->residency_split.load(), static_cast<std::uint32_t>(tgs::residency_split::even));
  EXPECT_EQ(even.split(), tgs::residency_split::even);
}

TEST(MemoryLoop, ProductionAllocationLowersTheOpportunisticLimitAndWakesItsEvictor) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  // The opportunistic job holds 15 GiB of managed memory, all on the GPU.
  EXPECT_EQ(loop.request(2, 15_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  opp->managed_bytes = (15_GiB).count();
  opp->managed_resident_bytes = (15_GiB).count();
  const std::uint32_t generation = opp->memory_generation.load();

  EXPECT_EQ(loop.request(1, 12_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  EXPECT_EQ(opp->resident_limit.load(), (8_GiB).count());
  EXPECT_GT(opp->memory_generation.load(), generation) << "the evictor must be woken";
  EXPECT_FALSE(loop.settled()) << "15 GiB resident over an 8 GiB limit";
  opp->managed_resident_bytes = (8_GiB).count();  // what the evictor does
  EXPECT_TRUE(loop.settled());
  // The production job's limit is never set.
  EXPECT_EQ(prod->resident_limit.load(), cabi::no_resident_limit);
}

TEST(MemoryLoop, LimitRisesWhenProductionFreesAndLiftsWhenItLeaves) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  ASSERT_EQ(loop.request(2, 15_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  opp->managed_bytes = (15_GiB).count();
  opp->managed_resident_bytes = (5_GiB).count();
  ASSERT_EQ(loop.request(1, 15_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  prod->device_bytes = (15_GiB).count();
  loop.run(t0);
  EXPECT_EQ(opp->resident_limit.load(), (5_GiB).count());
  EXPECT_EQ(prod->view_others_bytes.load(), (5_GiB).count()) << "the production job sees what is resident";
  EXPECT_EQ(opp->view_others_bytes.load(), (15_GiB).count());
  prod->device_bytes = (10_GiB).count();  // a free, seen at the next tick
  loop.run(t0);
  EXPECT_EQ(opp->resident_limit.load(), (10_GiB).count());
  loop.remove_job(1, t0);
  EXPECT_EQ(opp->resident_limit.load(), cabi::no_resident_limit) << "restore everything";
}

TEST(MemoryLoop, OpportunisticDeviceMemoryCountsAgainstItsManagedLimit) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  ASSERT_EQ(loop.request(2, 3_GiB, cabi::allocation_path::fixed, t0), tgs::allocation_verdict::grant_device);
  opp->device_bytes = (3_GiB).count();  // a pool allocation: not evictable
  ASSERT_EQ(loop.request(2, 10_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  opp->managed_bytes = (10_GiB).count();
  ASSERT_EQ(loop.request(1, 12_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  prod->device_bytes = (12_GiB).count();
  loop.run(t0);
  EXPECT_EQ(opp->resident_limit.load(), (5_GiB).count());
  // More unmovable memory than the rest of its limit is refused.
  EXPECT_EQ(loop.request(2, 6_GiB, cabi::allocation_path::fixed, t0), tgs::allocation_verdict::deny_out_of_memory);
}

TEST(MemoryLoop, TwoOpportunisticJobsShareTheLimitInProportion) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  auto a = make_segment();
  auto b = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, a.get(), t0);
  loop.add_job(3, tgs::job_class::opportunistic, b.get(), t0);
  for (const auto& [id, size] : {std::pair{2U, 6_GiB}, std::pair{3U, 3_GiB}, std::pair{1U, 14_GiB}}) {
    ASSERT_NE(loop.request(id, size, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::deny_out_of_memory);
  }
  prod->device_bytes = (14_GiB).count();
  a->managed_bytes = (6_GiB).count();
  b->managed_bytes = (3_GiB).count();
  loop.run(t0);
  EXPECT_EQ(a->resident_limit.load() + b->resident_limit.load(), (6_GiB).count());
  EXPECT_EQ(a->resident_limit.load(), (4_GiB).count());
}

TEST(MemoryLoop, HardLimitDeniesBeyondTheJobsLimitAndShowsItAsTheTotal) {
  tgs::hard_limit::config cfg;
  cfg.opportunistic_limit = 4_GiB;
  gpu_memory_loop loop{tgs::any_memory_policy{cfg}, 20_GiB};
  auto opp = make_segment();
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_EQ(opp->view_total_bytes.load(), (4_GiB).count());
  EXPECT_EQ(loop.request(2, 3_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  opp->device_bytes = (3_GiB).count();
  EXPECT_EQ(loop.request(2, 2_GiB, cabi::allocation_path::convertible, t0),
            tgs::allocation_verdict::deny_out_of_memory);
  EXPECT_EQ(opp->view_others_bytes.load(), 0U) << "under hard limits the others' memory is not in the view";
}

TEST(MemoryLoop, OwnManagedAllocationsStayManagedAndFixedOnesStayDevice) {
  gpu_memory_loop loop{tgs::any_memory_policy{tgs::plain_unified_memory::config{}}, 20_GiB};
  auto prod = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  EXPECT_EQ(loop.request(1, 1_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  EXPECT_EQ(loop.request(1, 1_GiB, cabi::allocation_path::fixed, t0), tgs::allocation_verdict::grant_device);
  gpu_memory_loop tum{tum_without_reserve(), 20_GiB};
  tum.add_job(1, tgs::job_class::production, prod.get(), t0);
  EXPECT_EQ(tum.request(1, 1_GiB, cabi::allocation_path::managed, t0), tgs::allocation_verdict::grant_managed);
}

// A job writes its own segment: bytes it never asked for must change nothing for the others
// (docs/results/faults-and-attacks.md, item 6).
TEST(MemoryLoop, BytesAJobNeverAskedForAreNotBelieved) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  ASSERT_EQ(loop.request(2, 8_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  opp->managed_bytes = (8_GiB).count();
  opp->managed_resident_bytes = (8_GiB).count();
  // The production job claims a TiB of device memory without asking: the victim keeps its limit.
  prod->device_bytes = 1ULL << 40;
  loop.run(t0);
  EXPECT_EQ(opp->resident_limit.load(), (20_GiB).count());
  EXPECT_EQ(loop.counted(1)->device_bytes, 0U);
  EXPECT_TRUE(loop.settled());
  // Of what it asked for, it is believed; freeing and claiming it back is not believed.
  ASSERT_EQ(loop.request(1, 4_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  prod->device_bytes = (4_GiB).count();
  loop.run(t0);
  EXPECT_EQ(opp->resident_limit.load(), (16_GiB).count());
  prod->device_bytes = (1_GiB).count();
  loop.run(t0);
  prod->device_bytes = (4_GiB).count();
  loop.run(t0);
  EXPECT_EQ(loop.counted(1)->device_bytes, (1_GiB).count());
  // The opportunistic job claims more resident bytes than it holds: bounded by what it holds.
  opp->managed_resident_bytes = UINT64_MAX;
  EXPECT_EQ(loop.counted(2)->managed_resident_bytes, (8_GiB).count());
}

TEST(MemoryLoop, AGrantNotUsedWithinItsWindowBacksNothing) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  auto prod = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  ASSERT_EQ(loop.request(1, 4_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  const tgs::instant later = t0 + decltype(loop)::grant_window + std::chrono::seconds{1};
  loop.run(later);
  prod->device_bytes = (4_GiB).count();
  loop.run(later);
  EXPECT_EQ(loop.counted(1)->device_bytes, 0U);
}

TEST(MemoryLoop, AnOpportunisticJobThatDoesNotEvictIsNotWaitedForPastTheStall) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB, tgs::residency_split::in_order, std::chrono::seconds{1}};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  ASSERT_EQ(loop.request(2, 16_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_managed);
  opp->managed_bytes = (16_GiB).count();
  opp->managed_resident_bytes = (16_GiB).count();
  ASSERT_EQ(loop.request(1, 8_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
  prod->device_bytes = (8_GiB).count();
  EXPECT_FALSE(loop.settled()) << "16 GiB resident over a 12 GiB limit: wait for the evictor";
  // A job that moves keeps being waited for.
  opp->managed_resident_bytes = (14_GiB).count();
  loop.run(t0 + std::chrono::milliseconds{900});
  loop.run(t0 + std::chrono::milliseconds{1800});
  EXPECT_FALSE(loop.settled());
  // One that stops moving is not, from one stall on.
  loop.run(t0 + std::chrono::milliseconds{2000});
  EXPECT_TRUE(loop.settled());
  EXPECT_TRUE(loop.stalled(2));
  // A further production allocation does not wait for it again.
  const tgs::instant t3 = t0 + std::chrono::milliseconds{2100};
  ASSERT_EQ(loop.request(1, 2_GiB, cabi::allocation_path::convertible, t3), tgs::allocation_verdict::grant_device);
  prod->device_bytes = (10_GiB).count();
  loop.run(t3);
  EXPECT_TRUE(loop.settled());
  // Once it moves again it is waited for again.
  opp->managed_resident_bytes = (13_GiB).count();
  loop.run(t3 + std::chrono::milliseconds{100});
  EXPECT_FALSE(loop.stalled(2));
}

TEST(MemoryLoop, UnknownJobIsGrantedAsAsked) {
  gpu_memory_loop loop{tum_without_reserve(), 20_GiB};
  EXPECT_EQ(loop.request(9, 1_GiB, cabi::allocation_path::convertible, t0), tgs::allocation_verdict::grant_device);
}

}  // namespace
