// SPDX-License-Identifier: Apache-2.0
// Tests of tgs-node's per-GPU control loop against in-memory job segments and a hand-driven clock.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "control_loop.hpp"
#include "tgs/rate/exclusive.hpp"
#include "tgs/rate/tgs_rate_control.hpp"

namespace cabi = tgs::cuda::abi;
using tgs::cuda::node::gpu_control_loop;
using namespace std::chrono_literals;

namespace {

/// A controller with a fixed budget that remembers what it was shown.
struct fixed_budget {
  struct config {
    std::optional<std::uint64_t> budget;
    tgs::duration window = 10ms;
    tgs::duration period = 100ms;
    std::optional<tgs::gap_fill> fill_gaps = std::nullopt;
  };
  static constexpr std::string_view name = "fixed-budget";
  explicit fixed_budget(const config& c) : cfg(c) {}
  [[nodiscard]] const config& settings() const noexcept { return cfg; }
  [[nodiscard]] tgs::state_report describe() const noexcept { return {}; }
  tgs::rate_decision step(const tgs::rate_observation& obs) noexcept {
    last = obs;
    ++steps;
    tgs::rate_decision d{tgs::time_sliced{}, cfg.budget, cfg.window, obs.now + cfg.period};
    d.fill_gaps = cfg.fill_gaps;
    return d;
  }
  config cfg;
  tgs::rate_observation last{};
  int steps = 0;
};
static_assert(tgs::RateController<fixed_budget>);

struct segment_deleter {
  void operator()(cabi::job_segment* s) const { delete s; }
};
using segment_ptr = std::unique_ptr<cabi::job_segment, segment_deleter>;
segment_ptr make_segment() { return segment_ptr(new cabi::job_segment{}); }

/// Simulates the interposer's gate: counts a launch and says whether it may pass now.
bool launch(cabi::job_segment& s, std::uint64_t blocks) {
  const std::uint64_t before = s.launch_counter.fetch_add(cabi::pack_launch(blocks));
  return cabi::within_allowance(before & cabi::block_mask, s.allowance.load());
}

const tgs::instant t0 = tgs::epoch + 1s;

}  // namespace

TEST(ControlLoop, StepsOnArrivalAndDeparture) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{}}, t0};
  auto a = make_segment();
  loop.add_job(1, tgs::job_class::production, a.get(), t0);
  EXPECT_EQ(loop.controller().steps, 1);
  loop.remove_job(1, t0 + 1ms);
  EXPECT_EQ(loop.controller().steps, 2);
  EXPECT_EQ(loop.job_count(), 0u);
}

TEST(ControlLoop, ObservesBlocksAndLaunchesPerClassOverTheWindow) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  for (int i = 0; i < 3; ++i) launch(*prod, 100);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(launch(*opp, 7));
  loop.run(t0 + 100ms, 0);
  const tgs::rate_observation& obs = loop.controller().last;
  EXPECT_EQ(obs.window, 100ms);
  ASSERT_TRUE(obs.production && obs.opportunistic);
  EXPECT_EQ(obs.production->blocks_launched, 300u);
  EXPECT_EQ(obs.production->launches, 3u);
  EXPECT_EQ(obs.opportunistic->blocks_launched, 35u);
  EXPECT_EQ(obs.opportunistic->launches, 5u);
}

TEST(ControlLoop, ObservesTheTimeEachClassBlockedInSynchronisation) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  prod->sync_wait_ns = 5'000'000'000;  // before it joined: not part of any window
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  prod->sync_wait_ns += 30'000'000;
  opp->sync_wait_ns += 7'000'000;
  loop.run(t0 + 100ms, 0);
  const tgs::rate_observation& obs = loop.controller().last;
  ASSERT_TRUE(obs.production && obs.opportunistic);
  EXPECT_EQ(obs.production->sync_wait, std::optional<tgs::duration>{30ms});
  EXPECT_EQ(obs.opportunistic->sync_wait, std::optional<tgs::duration>{7ms});
  loop.run(t0 + 200ms, 0);
  EXPECT_EQ(loop.controller().last.production->sync_wait, std::optional<tgs::duration>{0ms});
}

TEST(ControlLoop, MeasuresTheProductionJobsSpeedBetweenItsSynchronisationMarks) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  cabi::write_sync_mark(*prod, 10, 1'000, 1'000'000);  // before it was sampled: a start for a span only
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_NE(prod->sync_mark_seq.load(), 0u);
  ASSERT_NE(prod->sample_activity.load(), 0u) << "an opportunistic job shares the GPU: sampled";
  cabi::write_sync_mark(*prod, 1'000, 5'000'000, 41'000'000);  // the first mark of the sampling
  loop.run(t0 + 100ms, 0);
  EXPECT_EQ(loop.controller().last.production->synced_blocks, std::optional<std::uint64_t>{990});
  EXPECT_EQ(loop.controller().last.production->synced_span, std::optional<tgs::duration>{40ms});
  EXPECT_FALSE(loop.controller().last.production->synced_gpu_busy) << "not sampled throughout";
  cabi::write_sync_mark(*prod, 1'600, 9'000'000, 61'000'000);
  cabi::write_sync_mark(*prod, 3'000, 12'000'000, 91'000'000);  // two marks in one window: the span of both
  loop.run(t0 + 200ms, 0);
  const tgs::rate_observation& obs = loop.controller().last;
  EXPECT_EQ(obs.production->synced_blocks, std::optional<std::uint64_t>{2'000});
  EXPECT_EQ(obs.production->synced_gpu_busy, std::optional<tgs::duration>{7ms});
  EXPECT_EQ(obs.production->synced_span, std::optional<tgs::duration>{50ms});
  loop.run(t0 + 300ms, 0);
  EXPECT_FALSE(loop.controller().last.production->synced_blocks) << "no mark in this window";
  EXPECT_FALSE(loop.controller().last.opportunistic->synced_blocks) << "an opportunistic job's marks are not read";
}

TEST(ControlLoop, AProductionJobAloneIsMeasuredBetweenItsMarksWithoutBusyTime) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  EXPECT_EQ(prod->sample_activity.load(), 0u) << "alone: not sampled";
  cabi::write_sync_mark(*prod, 100, 0, 10'000'000);
  loop.run(t0 + 100ms, 0);
  cabi::write_sync_mark(*prod, 5'100, 0, 60'000'000);
  loop.run(t0 + 200ms, 0);
  EXPECT_EQ(loop.controller().last.production->synced_blocks, std::optional<std::uint64_t>{5'000});
  EXPECT_EQ(loop.controller().last.production->synced_span, std::optional<tgs::duration>{50ms});
  EXPECT_FALSE(loop.controller().last.production->synced_gpu_busy);
}

TEST(ControlLoop, AMarkedWaitIsReadBetweenMarksOnlyFromAJobWhoseInterposerSaysItMarksIt) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto marking = make_segment();
  auto older = make_segment();
  loop.add_job(1, tgs::job_class::production, marking.get(), t0, true);
  loop.add_job(2, tgs::job_class::production, older.get(), t0, false);
  cabi::write_sync_mark(*marking, 100, 0, 10'000'000, 1'000'000);
  cabi::write_sync_mark(*older, 100, 0, 10'000'000);
  loop.run(t0 + 100ms, 0);
  cabi::write_sync_mark(*marking, 5'100, 0, 60'000'000, 13'000'000);
  cabi::write_sync_mark(*older, 200, 0, 60'000'000);
  loop.run(t0 + 200ms, 0);
  EXPECT_FALSE(loop.controller().last.production->synced_sync_wait)
      << "the older interposer's marks carry no wait: a sum over both jobs would mismatch the blocks";
  loop.remove_job(2, t0 + 250ms);
  cabi::write_sync_mark(*marking, 7'100, 0, 80'000'000, 16'000'000);
  loop.run(t0 + 350ms, 0);
  EXPECT_EQ(loop.controller().last.production->synced_blocks, std::optional<std::uint64_t>{2'000});
  EXPECT_EQ(loop.controller().last.production->synced_sync_wait, std::optional<tgs::duration>{3ms});
  // A forged wait longer than the span between the marks counts as the span at most.
  cabi::write_sync_mark(*marking, 8'100, 0, 90'000'000, 999'000'000);
  loop.run(t0 + 450ms, 0);
  EXPECT_EQ(loop.controller().last.production->synced_sync_wait, std::optional<tgs::duration>{10ms});
}

TEST(ControlLoop, AProductionJobsMarksSpanNoBusyTimeItWasNotSampled) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  cabi::write_sync_mark(*prod, 100, 1'000'000, 1'000'000);
  loop.run(t0 + 100ms, 0);
  loop.remove_job(2, t0 + 150ms);  // alone: no longer sampled, its busy time stops
  EXPECT_EQ(prod->sample_activity.load(), 0u);
  cabi::write_sync_mark(*prod, 90'000, 1'000'000, 2'000'000);  // a sync that ended after sampling stopped
  loop.run(t0 + 200ms, 0);
  loop.add_job(3, tgs::job_class::opportunistic, opp.get(), t0 + 250ms);
  cabi::write_sync_mark(*prod, 100'000, 2'000'000, 3'000'000);  // the first mark of the new sampling
  loop.run(t0 + 350ms, 0);  // the arrival stepped at 250 ms: the next step is due at 350 ms
  EXPECT_FALSE(loop.controller().last.production->synced_gpu_busy) << "no busy time across the pause";
  EXPECT_EQ(loop.controller().last.production->synced_blocks, std::optional<std::uint64_t>{10'000});
  cabi::write_sync_mark(*prod, 100'500, 2'500'000, 4'000'000);
  loop.run(t0 + 450ms, 0);
  EXPECT_EQ(loop.controller().last.production->synced_blocks, std::optional<std::uint64_t>{500});
  EXPECT_EQ(loop.controller().last.production->synced_gpu_busy, std::optional<tgs::duration>{500us});
}

TEST(ControlLoop, ReportsTheMeanDriverTimeOfTheLaunchesEachJobTimedPerRatePeriod) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = std::nullopt}}, t0};
  auto prod = make_segment();
  prod->timed_launches = 50;  // before it joined: not part of any period
  prod->timed_launch_ns = 9'000'000;
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  ASSERT_EQ(loop.report().size(), 1u);
  EXPECT_FALSE(loop.report()[0].launch_call_us) << "nothing timed yet";
  prod->timed_launches += 4;
  prod->timed_launch_ns += 12'000;
  loop.run(t0 + 1s, 0);
  ASSERT_TRUE(loop.report()[0].launch_call_us);
  EXPECT_DOUBLE_EQ(*loop.report()[0].launch_call_us, 3.0);
  loop.run(t0 + 2s, 0);
  EXPECT_FALSE(loop.report()[0].launch_call_us) << "no launch timed in the last period";
}

TEST(ControlLoop, NoProductionJobMeansNoProductionActivity) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{}}, t0};
  auto opp = make_segment();
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_FALSE(loop.controller().last.production);
  EXPECT_TRUE(loop.controller().last.opportunistic);
}

TEST(ControlLoop, RefillsTheOpportunisticAllowanceEveryBudgetWindow) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = 100, .window = 10ms, .period = 1s}}, t0};
  auto opp = make_segment();
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_TRUE(launch(*opp, 60));   // blocks 0..59
  EXPECT_TRUE(launch(*opp, 60));   // starts at 60 < 100: passes and overdraws to 120
  EXPECT_FALSE(launch(*opp, 10));  // starts at 120: over the allowance, must wait
  const std::uint32_t generation = opp->refill_generation.load();
  EXPECT_EQ(loop.run(t0 + 5ms, 0), t0 + 10ms);  // nothing due yet; next refill at 10 ms
  EXPECT_EQ(opp->allowance.load(), 100u);
  loop.run(t0 + 10ms, 0);
  // In debt: the budget adds to the allowance, so the waiting launch (at 120) now passes.
  EXPECT_EQ(opp->allowance.load(), 200u);
  EXPECT_TRUE(cabi::within_allowance(120, opp->allowance.load()));
  EXPECT_GT(opp->refill_generation.load(), generation);
  EXPECT_EQ(opp->budget_blocks.load(), 100u);
}

TEST(ControlLoop, UnderGapFillingAWaitingLaunchWaitsForAGapOrABudget) {
  gpu_control_loop<fixed_budget> loop{
      fixed_budget{{.budget = 0, .window = 10ms, .period = 1s, .fill_gaps = tgs::gap_fill{1ms, 1}}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  ASSERT_EQ(opp->gap_fill.load(), 1u);
  EXPECT_FALSE(launch(*opp, 40));  // blocks 0..39: no budget, no gap
  for (int i = 1; i <= 5; ++i) {
    loop.run(t0 + i * 10ms, 0);
    EXPECT_FALSE(cabi::within_allowance(0, opp->allowance.load())) << "refill " << i << " let it through";
  }
  // It passes in a gap (its gate records where it ended), and two more launches follow there.
  opp->gap_passed_to.store(40);
  EXPECT_FALSE(launch(*opp, 30));  // blocks 40..69
  loop.run(t0 + 60ms, 0);
  EXPECT_EQ(opp->allowance.load(), 40u) << "what passed in the gap is no debt; the next launch still waits";
  EXPECT_FALSE(cabi::within_allowance(40, opp->allowance.load()));
}

TEST(ControlLoop, SplitsTheBudgetAcrossOpportunisticJobs) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{.budget = 100, .window = 10ms, .period = 1s}}, t0};
  auto a = make_segment();
  auto b = make_segment();
  loop.add_job(2, tgs::job_class::opportunistic, a.get(), t0);
  loop.add_job(3, tgs::job_class::opportunistic, b.get(), t0);
  EXPECT_EQ(a->allowance.load(), 50u);
  EXPECT_EQ(b->allowance.load(), 50u);
}

TEST(ControlLoop, WritesTheHeartbeatEveryRun) {
  gpu_control_loop<fixed_budget> loop{fixed_budget{{}}, t0};
  auto prod = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.run(t0 + 1ms, 12345);
  EXPECT_EQ(prod->heartbeat_ns.load(), 12345u);
}

TEST(ControlLoop, ReclaimsTheShareWhenTheProductionJobLeaves) {
  gpu_control_loop<tgs::exclusive> loop{tgs::exclusive{{}}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_FALSE(launch(*opp, 1));  // held while the production job is there
  loop.remove_job(1, t0 + 1ms);
  // The departure step refills at once: the waiting launch and the next ones pass.
  EXPECT_TRUE(cabi::within_allowance(0, opp->allowance.load()));
  EXPECT_TRUE(launch(*opp, 1'000'000));
  EXPECT_FALSE(loop.report().front().budget_blocks);
}

TEST(ControlLoop, TgsHoldsTheOpportunisticJobWhileProfiling) {
  tgs::tgs_rate_control::config cfg;
  cfg.production_window = 100ms;
  gpu_control_loop<tgs::tgs_rate_control> loop{tgs::tgs_rate_control{cfg}, t0};
  auto prod = make_segment();
  auto opp = make_segment();
  loop.add_job(1, tgs::job_class::production, prod.get(), t0);
  loop.add_job(2, tgs::job_class::opportunistic, opp.get(), t0);
  EXPECT_EQ(loop.decision().opportunistic_budget, 0u);
  EXPECT_EQ(loop.decision().revisit_at, t0 + 100ms);
  EXPECT_FALSE(launch(*opp, 1));
  EXPECT_EQ(loop.controller().phase(), tgs::tgs_phase::profiling);
}
