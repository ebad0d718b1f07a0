// SPDX-License-Identifier: Apache-2.0
// Tests of the GPU-pair contention model's properties (independent of fitted values).
#include "tgs/sim/contention.hpp"

#include <gtest/gtest.h>

namespace tgs::sim {
namespace {

using namespace tgs::literals;

model_profile profile(double busy, double iteration_ms = 100, bytes footprint = 4_GiB,
                      bytes hot = 4_GiB) {
  model_profile p;
  p.model = "m";
  p.gpu = "g";
  p.iteration_time = from_seconds(iteration_ms / 1e3);
  p.busy_fraction = busy;
  p.blocks_per_iteration = 1e5;
  p.footprint = footprint;
  p.hot_set = hot;
  return p;
}

model_contention params(double sensitivity) {
  model_contention c;
  c.sensitivity = {sensitivity, sensitivity, sensitivity};
  c.thrash = {10, 10, 10};
  c.slice_sensitivity = {0, 0.5, 0.5};
  c.max_interference = {100, 100, 100};
  return c;
}

TEST(PairModel, AJobAloneRunsAtFullSpeed) {
  const auto p = profile(0.8);
  const auto c = params(2);
  const pair_side alone{.profile = &p, .params = &c, .running = true};
  const auto r = solve_pair(compute_mode::time_slicing, {}, alone, {});
  EXPECT_DOUBLE_EQ(r.production, 1.0);
  EXPECT_DOUBLE_EQ(r.opportunistic, 0.0);
  EXPECT_DOUBLE_EQ(r.production_occupancy, 0.8);
}

TEST(PairModel, BusierCoRunnerSlowsTheJobMore) {
  const auto victim = profile(0.5);
  const auto light = profile(0.2);
  const auto heavy = profile(0.9);
  const auto c = params(2);
  const pair_side v{.profile = &victim, .params = &c, .running = true};
  const auto with_light = solve_pair(compute_mode::time_slicing, {}, v,
                                     {.profile = &light, .params = &c, .running = true});
  const auto with_heavy = solve_pair(compute_mode::time_slicing, {}, v,
                                     {.profile = &heavy, .params = &c, .running = true});
  EXPECT_LT(with_light.production, 1.0);
  EXPECT_LT(with_heavy.production, with_light.production);
}

TEST(PairModel, SolutionIsAFixedPoint) {
  const auto a = profile(0.7);
  const auto b = profile(0.4);
  const auto ca = params(3);
  const auto cb = params(1.5);
  gpu_contention g;
  g.aggressor_exponent = {2, 2, 2};
  g.occupancy_exponent = {1.5, 1, 1};
  const pair_side pa{.profile = &a, .params = &ca, .running = true};
  const pair_side pb{.profile = &b, .params = &cb, .running = true};
  const auto r = solve_pair(compute_mode::time_slicing, g, pa, pb);
  // Recompute each side from the other's solved occupancy: it must reproduce the solution.
  const double pressure_on_a = std::pow(0.4, 2) * std::pow(r.opportunistic_occupancy, 1.5);
  const double stretch_a = 1 + 3 * pressure_on_a;
  EXPECT_NEAR(r.production, 1 / ((1 - 0.7) + 0.7 * stretch_a), 1e-9);
  EXPECT_NEAR(r.production_occupancy, 0.7 * stretch_a * r.production, 1e-9);
}

TEST(PairModel, BudgetCapsTheOpportunisticJob) {
  const auto p = profile(0.9);
  const auto o = profile(0.4, 50);
  const auto c = params(2);
  pair_side opp{.profile = &o, .params = &c, .running = true};
  opp.max_blocks_per_second = 0.25 * o.blocks_per_second();
  const auto r = solve_pair(compute_mode::time_slicing, {},
                            {.profile = &p, .params = &c, .running = true}, opp);
  EXPECT_NEAR(r.opportunistic, 0.25, 1e-12);
  opp.max_blocks_per_second = 0;
  const auto held = solve_pair(compute_mode::time_slicing, {},
                               {.profile = &p, .params = &c, .running = true}, opp);
  EXPECT_EQ(held.opportunistic, 0);
  EXPECT_DOUBLE_EQ(held.production, 1.0);
}

TEST(PairModel, SmallerSliceIsSlower) {
  const auto p = profile(0.9);
  const auto c = params(0);
  pair_side side{.profile = &p, .params = &c, .running = true};
  side.sm_fraction = 4.0 / 7.0;
  const double four = solve_pair(compute_mode::mig, {}, side, {}).production;
  side.sm_fraction = 3.0 / 7.0;
  const double three = solve_pair(compute_mode::mig, {}, side, {}).production;
  EXPECT_LT(three, four);
  EXPECT_LT(four, 1.0);
}

TEST(MemoryModel, NoCostWhileEverythingFits) {
  const auto p = profile(0.9, 100, 10_GiB, 10_GiB);
  const auto o = profile(0.3, 100, 10_GiB, 2_GiB);
  const auto c = params(1);
  const pair_side ps{.profile = &p, .params = &c, .running = true};
  const pair_side os{.profile = &o, .params = &c, .running = true};
  for (auto placement : {memory_placement::production_pinned, memory_placement::shared_unified}) {
    const auto e = memory_cost(compute_mode::time_slicing, placement, 40_GiB, 25, ps, os,
                               bytes::max());
    EXPECT_EQ(e.production_extra, 0);
    EXPECT_EQ(e.opportunistic_extra, 0);
  }
}

TEST(MemoryModel, PinnedProductionStreamsOnlyTheMissingHotSet) {
  const auto p = profile(0.9, 100, 30_GiB, 30_GiB);
  const auto o = profile(0.3, 100, 20_GiB, 12_GiB);  // 10 GiB room: 2 GiB of hot set streamed
  const auto c = params(1);
  const auto e = memory_cost(compute_mode::time_slicing, memory_placement::production_pinned,
                             40_GiB, 25, {.profile = &p, .params = &c, .running = true},
                             {.profile = &o, .params = &c, .running = true}, bytes::max());
  EXPECT_EQ(e.production_extra, 0);
  EXPECT_EQ(e.opportunistic_resident, 10_GiB);
  const double seconds = 2.0 * (1ULL << 30) / 25e9;
  EXPECT_NEAR(e.opportunistic_extra, seconds / 0.1, 1e-9);
}

TEST(MemoryModel, SharedUnifiedMemoryThrashesBothJobs) {
  const auto p = profile(0.9, 100, 30_GiB, 30_GiB);
  const auto o = profile(0.3, 100, 20_GiB, 20_GiB);
  const auto c = params(1);
  const auto e = memory_cost(compute_mode::time_slicing, memory_placement::shared_unified, 40_GiB,
                             25, {.profile = &p, .params = &c, .running = true},
                             {.profile = &o, .params = &c, .running = true}, bytes::max());
  // 10 GiB over a 40 GiB budget is past the LRU cliff: full thrash cost for both.
  EXPECT_DOUBLE_EQ(e.production_extra, 10);
  EXPECT_DOUBLE_EQ(e.opportunistic_extra, 10);
  EXPECT_DOUBLE_EQ(thrash_pressure(thrash_knee / 2), 0.5);
}

TEST(MemoryModel, MigSlicesOnlyHurtTheJobThatOverflowsItsOwnSlice) {
  const auto p = profile(0.9, 100, 10_GiB, 10_GiB);
  const auto o = profile(0.3, 100, 30_GiB, 30_GiB);
  const auto c = params(1);
  pair_side ps{.profile = &p, .params = &c, .running = true};
  pair_side os{.profile = &o, .params = &c, .running = true};
  ps.sm_fraction = 4.0 / 7.0;
  os.sm_fraction = 3.0 / 7.0;
  const auto e = memory_cost(compute_mode::mig, memory_placement::shared_unified, 40_GiB, 25, ps,
                             os, bytes::max());
  EXPECT_EQ(e.production_extra, 0);
  EXPECT_DOUBLE_EQ(e.opportunistic_extra, 10);
}

}  // namespace
}  // namespace tgs::sim
