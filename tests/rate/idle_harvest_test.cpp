// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `idle_harvest`: the reference, gap filling, the reaction to a real slowdown and
/// not to host jitter, growth with demand, refreshes, and its settings' validation.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/core/config_error.hpp"
#include "tgs/rate/idle_harvest.hpp"

namespace tgs::test {
namespace {

using cfg_t = idle_harvest::config;
constexpr duration period = 500ms;
/// The production job's GPU-side speed alone: blocks per second of GPU busy time.
constexpr double alone_speed = 1e6;

/// A production window: `blocks` launched, busy for blocks / speed.
job_activity production(double blocks, double speed = alone_speed) {
  job_activity a;
  a.blocks_launched = static_cast<std::uint64_t>(blocks);
  a.gpu_busy = from_seconds(blocks / speed);
  return a;
}

/// An opportunistic window of `blocks`.
job_activity opportunistic(double blocks) {
  job_activity a;
  a.blocks_launched = static_cast<std::uint64_t>(blocks);
  return a;
}

struct harvest_feed {
  idle_harvest c;
  instant now = epoch;
  rate_decision last{};
  explicit harvest_feed(const cfg_t& cfg = {}) : c(cfg) {
    last = c.step({now, duration::zero(), production(0), opportunistic(0)});
  }
  /// One period with the production job launching `blocks` at GPU-side speed `speed`.
  rate_decision window(double blocks, double speed = alone_speed, double opp_blocks = 100'000) {
    now += period;
    last = c.step({now, period, production(blocks, speed), opportunistic(opp_blocks)});
    return last;
  }
  /// Steps until the reference is measured (at most 10 windows).
  void reach_harvesting(double blocks = 200'000) {
    for (int i = 0; i < 10 && c.phase() != harvest_phase::harvesting; ++i) window(blocks);
    ASSERT_EQ(c.phase(), harvest_phase::harvesting);
  }
};

TEST(IdleHarvest, AnArrivalHoldsTheOpportunisticJobWhileTheReferenceIsMeasured) {
  harvest_feed f;
  EXPECT_EQ(f.c.phase(), harvest_phase::reference);
  EXPECT_EQ(f.last.opportunistic_budget, std::optional<std::uint64_t>{0});
  EXPECT_FALSE(f.last.fill_gaps) << "held: no gap launches during the reference";
  EXPECT_EQ(f.last.revisit_at, epoch + period);
  // One window drains the opportunistic job's queued work, three measure the speed.
  for (int i = 0; i < 3; ++i) f.window(200'000);
  EXPECT_EQ(f.c.phase(), harvest_phase::reference);
  f.window(200'000);
  EXPECT_EQ(f.c.phase(), harvest_phase::harvesting);
  EXPECT_DOUBLE_EQ(f.c.reference_speed(), alone_speed);
  ASSERT_TRUE(f.last.fill_gaps);
  EXPECT_EQ(f.last.fill_gaps->holdoff, cfg_t{}.initial_holdoff);
  EXPECT_EQ(f.last.fill_gaps->max_inflight, cfg_t{}.initial_inflight);
}

TEST(IdleHarvest, TheReferenceIsTheMedianSoOneOutlyingWindowDoesNotSetIt) {
  harvest_feed f;
  f.window(200'000);  // drained
  f.window(200'000, 0.97 * alone_speed);
  f.window(200'000, 1.5 * alone_speed);  // one window far off
  f.window(200'000, 1.01 * alone_speed);
  ASSERT_EQ(f.c.phase(), harvest_phase::harvesting);
  EXPECT_NEAR(f.c.reference_speed(), 1.01 * alone_speed, 1.0);
}

TEST(IdleHarvest, IdleProductionWindowsDoNotCountTowardsTheReference) {
  harvest_feed f;
  for (int i = 0; i < 5; ++i) f.window(0);  // no GPU work: nothing to measure
  EXPECT_EQ(f.c.phase(), harvest_phase::reference);
  f.reach_harvesting();
}

TEST(IdleHarvest, HostJitterOfTenPercentNeitherTightensNorStarves) {
  // The production job's launches move ±10% from window to window with its host side; its
  // GPU-side speed does not. The gate opens fully and the share beside busy periods grows.
  harvest_feed f;
  f.reach_harvesting();
  splitmix64 rng{7};
  for (int i = 0; i < 40; ++i) {
    const double jitter = 0.9 + 0.2 * static_cast<double>(rng.below(1000)) / 1000.0;
    f.window(200'000 * jitter);
  }
  ASSERT_TRUE(f.last.fill_gaps);
  EXPECT_EQ(f.last.fill_gaps->holdoff, duration::zero());
  EXPECT_EQ(f.last.fill_gaps->max_inflight, cfg_t{}.max_inflight);
  // 100,000 opportunistic blocks per 500 ms are 2,000 per 10 ms budget window: the share grows to
  // three times that.
  EXPECT_EQ(f.c.budget(), 6'000u) << "the share grows with demand";
}

TEST(IdleHarvest, BlocksBetweenSynchronisationsOutweighAWindowsBurstyCount) {
  // A job that launches each iteration in a burst: a window's launched blocks swing by an
  // iteration (here ±20%) with where the bursts fall, while the blocks between its
  // synchronisations, over the busy time between them, stay the job's true speed.
  harvest_feed f;
  splitmix64 rng{11};
  const auto bursty = [&](double speed) {
    const double swing = 0.8 + 0.4 * static_cast<double>(rng.below(1000)) / 1000.0;
    job_activity a = production(200'000 * swing, speed * swing);  // busy time is the true one
    a.synced_blocks = 180'000;
    a.synced_gpu_busy = from_seconds(180'000 / speed);
    f.now += period;
    f.last = f.c.step({f.now, period, a, opportunistic(100'000)});
  };
  for (int i = 0; i < 40; ++i) bursty(alone_speed);
  ASSERT_EQ(f.c.phase(), harvest_phase::harvesting);
  EXPECT_NEAR(f.c.reference_speed(), alone_speed, 1.0);
  EXPECT_EQ(f.c.budget(), 6'000u) << "no swing read as a slowdown: the share grew with demand";
  bursty(0.9 * alone_speed);
  EXPECT_LT(f.c.budget(), 6'000u) << "a real slowdown between synchronisations still backs off";
}

TEST(IdleHarvest, ARealSlowdownBacksOffWithinOneWindow) {
  harvest_feed f;
  f.reach_harvesting();
  for (int i = 0; i < 30; ++i) f.window(200'000);
  const std::uint64_t grown = f.c.budget();
  ASSERT_GT(grown, 0u);
  // The opportunistic kernels make each production block take 10% longer on the GPU.
  f.window(180'000, 0.9 * alone_speed);
  EXPECT_LT(f.c.budget(), grown) << "the share is cut at the first slowed window";
  // Kept slowed, the share goes and then the gate tightens.
  for (int i = 0; i < 20; ++i) f.window(180'000, 0.9 * alone_speed);
  EXPECT_EQ(f.c.budget(), 0u);
  ASSERT_TRUE(f.last.fill_gaps);
  EXPECT_GT(f.last.fill_gaps->holdoff, cfg_t{}.initial_holdoff);
  EXPECT_EQ(f.last.fill_gaps->max_inflight, 1u);
  EXPECT_LE(f.last.fill_gaps->holdoff, cfg_t{}.max_holdoff);
}

TEST(IdleHarvest, TheShareIsBoundedByWhatTheOpportunisticJobLaunches) {
  harvest_feed f;
  f.reach_harvesting();
  // 200 blocks per 500 ms is 4 per 10 ms budget window: the share stays near 3x that (or the
  // first share, whichever is larger), however long the production job is unslowed.
  for (int i = 0; i < 60; ++i) f.window(200'000, alone_speed, 200);
  EXPECT_LE(f.c.budget(), std::max<std::uint64_t>(cfg_t{}.initial_budget, 12));
}

TEST(IdleHarvest, OneFastWindowDoesNotRaiseTheReference) {
  // Were S0 raised by every window above it, it would climb to the top of the window-to-window
  // spread and every ordinary window after would read as a slowdown.
  harvest_feed f;
  f.reach_harvesting();
  f.window(200'000, 1.2 * alone_speed);
  f.window(200'000);
  EXPECT_DOUBLE_EQ(f.c.reference_speed(), alone_speed);
}

TEST(IdleHarvest, AProductionJobFasterWindowAfterWindowRaisesTheReference) {
  harvest_feed f;
  f.reach_harvesting();
  for (int i = 0; i < 6; ++i) f.window(200'000, 1.2 * alone_speed);
  EXPECT_GT(f.c.reference_speed(), 1.1 * alone_speed);
  EXPECT_LE(f.c.reference_speed(), 1.2 * alone_speed);
}

TEST(IdleHarvest, TheReferenceIsMeasuredAgainAfterTheRefreshPeriod) {
  cfg_t cfg;
  cfg.refresh_every_windows = 10;
  harvest_feed f{cfg};
  f.reach_harvesting();
  for (int i = 0; i < 9; ++i) f.window(200'000);
  EXPECT_EQ(f.c.phase(), harvest_phase::harvesting);
  f.window(200'000);
  EXPECT_EQ(f.c.phase(), harvest_phase::reference);
  EXPECT_EQ(f.last.opportunistic_budget, std::optional<std::uint64_t>{0});
  EXPECT_FALSE(f.last.fill_gaps);
  // The refresh measures a production job that is now 20% slower on its own (another phase of
  // its training): the new reference makes that its normal speed, not a slowdown.
  for (int i = 0; i < 4; ++i) f.window(160'000, 0.8 * alone_speed);
  EXPECT_EQ(f.c.phase(), harvest_phase::harvesting);
  EXPECT_DOUBLE_EQ(f.c.reference_speed(), 0.8 * alone_speed);
}

TEST(IdleHarvest, WithoutAGpuSideSignalItFillsGapsAndGrantsNoShare) {
  harvest_feed f;
  for (int i = 0; i < 20; ++i) {
    f.now += period;
    f.last = f.c.step({f.now, period, blocks(200'000), opportunistic(100'000)});
  }
  EXPECT_EQ(f.c.phase(), harvest_phase::harvesting) << "an old interposer must not hold the job";
  ASSERT_TRUE(f.last.fill_gaps);
  EXPECT_EQ(f.last.opportunistic_budget, std::optional<std::uint64_t>{0});
}

TEST(IdleHarvest, WithoutAPairItUnthrottles) {
  harvest_feed f;
  f.reach_harvesting();
  f.now += period;
  const rate_decision d = f.c.step({f.now, period, std::nullopt, opportunistic(100'000)});
  EXPECT_FALSE(d.opportunistic_budget);
  EXPECT_FALSE(d.fill_gaps);
  EXPECT_EQ(d.revisit_at, never);
  EXPECT_EQ(f.c.phase(), harvest_phase::inactive);
}

TEST(IdleHarvest, DescribeNamesThePhaseTheSpeedsAndTheGate) {
  harvest_feed f;
  f.reach_harvesting();
  f.window(200'000, 0.95 * alone_speed);
  const state_report r = f.c.describe();
  ASSERT_NE(r.find("phase"), nullptr);
  EXPECT_EQ(std::get<std::string_view>(r.find("phase")->value), "harvesting");
  ASSERT_NE(r.find("slowdown"), nullptr);
  EXPECT_GT(std::get<double>(r.find("slowdown")->value), 0.0);
  EXPECT_NE(r.find("reference_blocks_per_busy_s"), nullptr);
  EXPECT_NE(r.find("holdoff_us"), nullptr);
  EXPECT_NE(r.find("max_inflight"), nullptr);
  EXPECT_NE(r.find("budget_blocks"), nullptr);
  ASSERT_NE(r.find("window_blocks_per_busy_s"), nullptr) << "the latest window's own speed, for diagnosis";
  EXPECT_NEAR(std::get<double>(r.find("window_blocks_per_busy_s")->value), 0.95 * alone_speed, 1.0);
  ASSERT_NE(r.find("production_busy_fraction"), nullptr);
  EXPECT_NEAR(std::get<double>(r.find("production_busy_fraction")->value), 200'000 / (0.95 * alone_speed) / 0.5, 1e-6);
}

/// The config error for `cfg`, or "" when it is accepted.
std::string error_of(const cfg_t& cfg) {
  try {
    idle_harvest c{cfg};
  } catch (const config_error& e) {
    return e.what();
  }
  return {};
}

TEST(IdleHarvest, SettingsOutOfRangeNameTheField) {
  const auto with = [](auto change) {
    cfg_t c;
    change(c);
    return c;
  };
  EXPECT_EQ(error_of({}), "");
  EXPECT_EQ(error_of(with([](cfg_t& c) { c.period = duration::zero(); })),
            "idle_harvest: period must be positive, got 0ns");
  EXPECT_NE(error_of(with([](cfg_t& c) { c.target_slowdown = 0.0; })).find("target_slowdown"),
            std::string::npos);
  EXPECT_NE(error_of(with([](cfg_t& c) { c.initial_inflight = 5; })).find("initial_inflight"),
            std::string::npos);
  EXPECT_NE(error_of(with([](cfg_t& c) { c.max_inflight = 0; })).find("max_inflight"),
            std::string::npos);
  EXPECT_NE(error_of(with([](cfg_t& c) { c.initial_holdoff = std::chrono::seconds{1}; }))
                .find("initial_holdoff"),
            std::string::npos);
  EXPECT_NE(error_of(with([](cfg_t& c) { c.smoothing = 1.0; })).find("smoothing"),
            std::string::npos);
  EXPECT_NE(error_of(with([](cfg_t& c) { c.refresh_every_windows = -1; }))
                .find("refresh_every_windows"),
            std::string::npos);
}

}  // namespace
}  // namespace tgs::test
