// SPDX-License-Identifier: Apache-2.0
// Tests of the GPU-pair model's mechanisms: time slicing's max-min shares and collision loss, MPS's
// thread floor and capacity, MIG slices, launch budgets, memory streaming and thrashing, and gap
// filling, each against a value worked out by hand from the equations of contention.hpp.
#include "tgs/sim/contention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tgs::sim {
namespace {

using namespace tgs::literals;

model_profile job(double busy, double iteration_ms = 10, double blocks = 1000) {
  model_profile m;
  m.model = "m";
  m.iteration_time = from_seconds(iteration_ms / 1e3);
  m.busy_fraction = busy;
  m.kernels_per_iteration = 100;
  m.blocks_per_iteration = blocks;
  m.gaps_per_iteration = 50;
  m.footprint = 4_GiB;
  m.hot_set = 1_GiB;
  return m;
}

gpu_contention gpu(double switch_loss = 0.0) {
  gpu_contention g;
  g.switch_loss = switch_loss;
  g.mps_switch_loss = 0.0;
  g.mps_capacity = 1.2;
  return g;
}

TEST(ModelProfile, AFasterHostLeavesTheGpuBusierWithTheSameKernels) {
  // 10 ms alone with the GPU busy 40%: 4 ms of kernels. At 125 it/s (8 ms) the same kernels keep
  // it busy half the time; at 50 it/s (20 ms), a fifth.
  const model_profile p = job(0.4, 10);
  const model_profile fast = p.at_alone_rate(125);
  EXPECT_NEAR(to_seconds(fast.iteration_time), 0.008, 1e-12);
  EXPECT_NEAR(fast.busy_fraction, 0.5, 1e-12);
  EXPECT_NEAR(fast.kernel_seconds(), p.kernel_seconds(), 1e-15);
  const model_profile slow = p.at_alone_rate(50);
  EXPECT_NEAR(slow.busy_fraction, 0.2, 1e-12);
  // Idle time grows by the host's 10 ms, spread over the same gaps.
  EXPECT_NEAR(slow.gap_seconds() - p.gap_seconds(), 0.010 / 50, 1e-12);
  // No host makes the iteration shorter than its kernels: the GPU is then busy all the time.
  const model_profile bound = p.at_alone_rate(1000);
  EXPECT_NEAR(to_seconds(bound.iteration_time), 0.004, 1e-12);
  EXPECT_DOUBLE_EQ(bound.busy_fraction, 1.0);
  // A rate that is no rate leaves the profile as it was.
  for (const double bad : {0.0, -3.0, std::nan(""), HUGE_VAL}) {
    const model_profile same = p.at_alone_rate(bad);
    EXPECT_EQ(same.iteration_time, p.iteration_time);
    EXPECT_EQ(same.busy_fraction, p.busy_fraction);
  }
}

TEST(PairModel, AJobAloneRunsAtFullSpeed) {
  const model_profile p = job(0.7);
  const pair_side alone{.profile = &p, .running = true};
  for (auto mode : {compute_mode::time_slicing, compute_mode::mps, compute_mode::mig}) {
    const pair_rates r = solve_pair(mode, gpu(0.5), alone, {});
    EXPECT_DOUBLE_EQ(r.production, 1.0);
    EXPECT_DOUBLE_EQ(r.opportunistic, 0.0);
    EXPECT_DOUBLE_EQ(r.production_share, 0.7);
  }
}

TEST(PairModel, TimeSlicingSplitsABusyGpuInHalves) {
  // Two GPU-bound jobs: half the GPU each, so half their speed.
  const model_profile a = job(1.0);
  const model_profile b = job(1.0);
  const pair_rates r = solve_pair(compute_mode::time_slicing, gpu(), {.profile = &a, .running = true},
                                  {.profile = &b, .running = true});
  EXPECT_DOUBLE_EQ(r.production, 0.5);
  EXPECT_DOUBLE_EQ(r.opportunistic, 0.5);
}

TEST(PairModel, ALightJobKeepsItsNeedAndTheHeavyOneGetsTheRest) {
  // Max-min fairness: 0.3 < 1/2 is served in full; the 0.97 job gets 0.7 of the GPU.
  const model_profile heavy = job(0.97);
  const model_profile light = job(0.3);
  const pair_rates r = solve_pair(compute_mode::time_slicing, gpu(), {.profile = &heavy, .running = true},
                                  {.profile = &light, .running = true});
  EXPECT_NEAR(r.production, 0.7 / 0.97, 1e-12);
  EXPECT_DOUBLE_EQ(r.opportunistic, 1.0);
}

TEST(PairModel, CollisionsCostInProportionToBothJobsBusyTime) {
  // Both fit (0.3 + 0.3 < 1), so only the collision loss remains: 1 / (1 + 0.5 x 0.3 x 0.3).
  const model_profile a = job(0.3);
  const model_profile b = job(0.3);
  const pair_rates r = solve_pair(compute_mode::time_slicing, gpu(0.5), {.profile = &a, .running = true},
                                  {.profile = &b, .running = true});
  EXPECT_NEAR(r.production, 1.0 / (1.0 + 0.5 * 0.3 * 0.3), 1e-12);
  EXPECT_NEAR(r.opportunistic, r.production, 1e-12);
}

TEST(PairModel, ACoRunnersKernelsOverrunABusyJobsShortGaps) {
  // Busy job: 10 ms, busy 0.8, 100 kernels of 80 us and 100 gaps of 20 us. Light job: 10 ms, busy
  // 0.2, 100 kernels of 20 us and 100 gaps of 80 us (10,000 arrivals a second each alone). With a
  // 10 us switch and no other loss, each light kernel landing in the busy job's busy stretch
  // (0.8 of the time) delays it by 20 + 10 - 20 = 10 us: 10,000 x 0.8 x 10 us = 0.08 per light
  // rate unit; each busy kernel delays the light job by 80 + 10 - 80 = 10 us, 0.2 of the time:
  // 0.02. Solved together: x_b = 1 / (1 + 0.08 x_l), x_l = 1 / (1 + 0.02 x_b).
  model_profile busy = job(0.8);
  busy.gaps_per_iteration = 100;
  model_profile light = job(0.2);
  light.gaps_per_iteration = 100;
  gpu_contention g = gpu(0.0);
  g.overrun_switch_s = 10e-6;
  const pair_rates r = solve_pair(compute_mode::time_slicing, g, {.profile = &busy, .running = true},
                                  {.profile = &light, .running = true});
  double xb = 1;
  double xl = 1;
  for (int i = 0; i < 200; ++i) {
    xb = 1.0 / (1.0 + 0.08 * xl);
    xl = 1.0 / (1.0 + 0.02 * xb);
  }
  EXPECT_NEAR(r.production, xb, 1e-6);
  EXPECT_NEAR(r.opportunistic, xl, 1e-6);
  EXPECT_LT(r.production, r.opportunistic - 0.05);
  // No switch, no overrun: the gaps absorb every kernel.
  g.overrun_switch_s = 0;
  const pair_rates none = solve_pair(compute_mode::time_slicing, g, {.profile = &busy, .running = true},
                                     {.profile = &light, .running = true});
  EXPECT_DOUBLE_EQ(none.production, 1.0);
  EXPECT_DOUBLE_EQ(none.opportunistic, 1.0);
  // MPS runs kernels side by side: no overrun.
  g.overrun_switch_s = 10e-6;
  const pair_rates mps = solve_pair(compute_mode::mps, g, {.profile = &busy, .running = true},
                                    {.profile = &light, .running = true});
  EXPECT_DOUBLE_EQ(mps.production, 1.0);
}

TEST(PairModel, TwoGpuBoundJobsPayTheirOverrunsInsideTheirHalves) {
  // Each gets half the GPU; their overruns would allow more than half, so the share binds alone.
  model_profile a = job(1.0);
  a.gaps_per_iteration = 1;
  gpu_contention g = gpu(0.0);
  g.overrun_switch_s = 10e-6;
  const pair_rates r = solve_pair(compute_mode::time_slicing, g, {.profile = &a, .running = true},
                                  {.profile = &a, .running = true});
  EXPECT_DOUBLE_EQ(r.production, 0.5);
  EXPECT_DOUBLE_EQ(r.opportunistic, 0.5);
}

TEST(PairModel, ALaunchBudgetCapsTheOpportunisticJob) {
  // 1000 blocks per 10 ms iteration alone = 100k blocks/s; a budget of 25k blocks/s caps it at 0.25.
  const model_profile p = job(0.97);
  const model_profile o = job(0.6);
  pair_side opp{.profile = &o, .running = true};
  opp.max_blocks_per_second = 25000.0;
  const pair_rates r = solve_pair(compute_mode::time_slicing, gpu(), {.profile = &p, .running = true}, opp);
  EXPECT_NEAR(r.opportunistic, 0.25, 1e-12);
  // It takes 0.15 of the GPU; the production job's 0.97 gets the other 0.85.
  EXPECT_NEAR(r.production, 0.85 / 0.97, 1e-12);
}

TEST(PairModel, MpsKeepsTheOpportunisticJobsThreadShareOfItsNeed) {
  // Demands 0.97 and 0.6 exceed the capacity 1.2: the opportunistic job keeps half its need (0.3),
  // more than the 0.23 the production job leaves, which gets the other 0.9.
  const model_profile p = job(0.97);
  const model_profile o = job(0.6);
  pair_side opp{.profile = &o, .running = true, .sm_fraction = 0.5};
  const pair_rates r = solve_pair(compute_mode::mps, gpu(), {.profile = &p, .running = true}, opp);
  EXPECT_NEAR(r.production, 0.9 / 0.97, 1e-12);
  EXPECT_NEAR(r.opportunistic, 0.3 / 0.6, 1e-12);
}

TEST(PairModel, MpsPriorityServesTheProductionJobFirstAndChargesItForTheRest) {
  // Demands 0.97 and 0.6 exceed the capacity 1.2. At below-normal priority the opportunistic job
  // has only the 0.23 the production job leaves (rate 0.23 / 0.6), and each unit of that share
  // costs the production job mps_priority_loss: 1 / (1 + 0.5 x 0.23 x 0.97).
  const model_profile p = job(0.97);
  const model_profile o = job(0.6);
  gpu_contention g = gpu();
  g.mps_priority_loss = 0.5;
  pair_side opp{.profile = &o, .running = true, .below_normal = true};
  const pair_rates r = solve_pair(compute_mode::mps, g, {.profile = &p, .running = true}, opp);
  EXPECT_NEAR(r.opportunistic, 0.23 / 0.6, 1e-12);
  EXPECT_NEAR(r.production, 1.0 / (1.0 + 0.5 * 0.23 * 0.97), 1e-12);
  // Unmeasured (NaN), the priority loss is the MPS loss: 0 here, so production keeps its speed.
  g.mps_priority_loss = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NEAR(solve_pair(compute_mode::mps, g, {.profile = &p, .running = true}, opp).production, 1.0, 1e-12);
}

TEST(PairModel, UnderMpsPriorityALaunchCapLowersTheLossAndAThreadCapDoesNot) {
  // What the H100 measured on ResNet-50 b256 beside ShuffleNet v2 b128 under MPS priority: a thread
  // cap leaves the production job's loss as it is (the opportunistic job still fills the room
  // left), a launch cap lowers it with the opportunistic job's share.
  const model_profile p = job(0.97);
  model_profile o = job(0.6);
  o.slice_sensitivity = 0.5;  // fewer SMs stretch its kernels
  gpu_contention g = gpu();
  g.mps_priority_loss = 1.0;
  const pair_side prod{.profile = &p, .running = true};
  const pair_rates uncapped = solve_pair(compute_mode::mps, g, prod, {.profile = &o, .running = true, .below_normal = true});
  const pair_rates threads =
      solve_pair(compute_mode::mps, g, prod, {.profile = &o, .running = true, .sm_fraction = 0.2, .below_normal = true});
  pair_side capped{.profile = &o, .running = true, .below_normal = true};
  capped.max_blocks_per_second = 10000.0;  // 0.1 of its alone rate
  const pair_rates launches = solve_pair(compute_mode::mps, g, prod, capped);
  EXPECT_NEAR(threads.production, uncapped.production, 1e-12);
  EXPECT_LT(threads.opportunistic, uncapped.opportunistic);
  EXPECT_GT(launches.production, uncapped.production + 0.05);
  EXPECT_NEAR(launches.opportunistic, 0.1, 1e-12);
}

TEST(PairModel, MigSlicesStretchOnlyTheSlicesOwnJob) {
  model_profile p = job(0.8);
  p.slice_sensitivity = 1.0;
  model_profile o = job(0.5);
  o.slice_sensitivity = 0.0;
  const pair_side ps{.profile = &p, .running = true, .sm_fraction = 4.0 / 7.0};
  const pair_side os{.profile = &o, .running = true, .sm_fraction = 3.0 / 7.0};
  const pair_rates r = solve_pair(compute_mode::mig, gpu(3.0), ps, os);
  // 1 / (0.2 + 0.8 x (1 + (7/4 - 1))): the SM-bound job slows, the one with small kernels not.
  EXPECT_NEAR(r.production, 1.0 / (0.2 + 0.8 * 1.75), 1e-12);
  EXPECT_DOUBLE_EQ(r.opportunistic, 1.0);
}

TEST(PairModel, AnOpportunisticJobStreamsTheShareOfItsHotSetLeftOnHost) {
  // Production pinned (4 GiB of 10): the opportunistic job (4 GiB, 1 GiB hot per 10 ms iteration)
  // keeps 3 GiB resident under its limit; a quarter of its hot set crosses a 25 GB/s link.
  model_profile p = job(0.5);
  model_profile o = job(0.5);
  const pair_side ps{.profile = &p, .running = true};
  const pair_side os{.profile = &o, .running = true};
  const memory_effect e = memory_cost(compute_mode::time_slicing, memory_placement::production_pinned,
                                      10_GiB, 25, gpu(), ps, os, 3_GiB);
  EXPECT_EQ(e.opportunistic_resident, 3_GiB);
  EXPECT_NEAR(e.opportunistic_extra, 0.25 * 1073741824.0 / 25e9 / 0.01, 1e-9);
  EXPECT_DOUBLE_EQ(e.production_extra, 0.0);
}

TEST(PairModel, OversubscribedSharedUnifiedMemoryThrashesBothJobs) {
  gpu_contention g = gpu();
  g.thrash = {2.0, 3.0, 4.0};
  model_profile p = job(0.5);
  model_profile o = job(0.5);
  p.footprint = 6_GiB;
  o.footprint = 6_GiB;
  const pair_side ps{.profile = &p, .running = true};
  const pair_side os{.profile = &o, .running = true};
  const memory_effect e = memory_cost(compute_mode::time_slicing, memory_placement::shared_unified,
                                      10_GiB, 25, g, ps, os, bytes::max());
  EXPECT_DOUBLE_EQ(e.production_extra, 2.0);  // 20% over: far past the knee
  EXPECT_DOUBLE_EQ(e.opportunistic_extra, 2.0);
  const memory_effect fits = memory_cost(compute_mode::time_slicing, memory_placement::shared_unified,
                                         16_GiB, 25, g, ps, os, bytes::max());
  EXPECT_DOUBLE_EQ(fits.production_extra, 0.0);
}

TEST(PairModel, GapFillingUsesTheIdleTimePastTheHoldoff) {
  // Production busy 0.5 of a 10 ms iteration in 50 gaps: gaps of 100 us. With no holdoff the
  // opportunistic job (busy 0.5) gets all 0.5 of idle time: its full speed.
  const model_profile p = job(0.5);
  const model_profile o = job(0.5);
  const pair_side ps{.profile = &p, .running = true};
  const pair_side os{.profile = &o, .running = true};
  const gap_effect open = gap_fill_effect(gpu(), ps, os, 0.5, duration::zero(), 1);
  EXPECT_NEAR(open.opportunistic, 1.0, 1e-12);
  // A holdoff of one mean gap keeps e^-1 of the idle time.
  const gap_effect held = gap_fill_effect(gpu(), ps, os, 0.5, std::chrono::microseconds{100}, 1);
  EXPECT_NEAR(held.opportunistic, std::exp(-1.0), 1e-9);
  // Each gap entered costs the production job half an opportunistic kernel (50 us) and a switch.
  const gpu_contention g = gpu();
  const double entered_per_s = 0.5 / 100e-6;
  EXPECT_NEAR(open.production_wait, g.gap_exposure * entered_per_s * (0.5 * 50e-6 + g.context_switch_s),
              1e-9);
}

}  // namespace
}  // namespace tgs::sim
