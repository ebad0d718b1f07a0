// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `priority_share`: uncapped while the production job is unhurt, tightening on a
/// slowdown its noise cannot explain and not on host jitter, loosening after recovery, the floor,
/// idle phases, the reference when the production job arrives second, refreshes, and settings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/core/config_error.hpp"
#include "tgs/rate/priority_share.hpp"

namespace tgs::test {
namespace {

using cfg_t = priority_share::config;

/// The speed signal (the default before the GPU-wait signal), which the tests up to the GPU-wait
/// signal's own read.
cfg_t speed_signal() {
  cfg_t c;
  c.gpu_wait_signal = false;
  return c;
}
constexpr duration period = 500ms;
/// The production job's speed alone, blocks per second.
constexpr double alone_speed = 1e6;
/// What the opportunistic job launches uncapped per 50 ms budget window.
constexpr double opp_uncapped = 200'000;

/// A production window at `speed` blocks per second, with sync marks over the whole window.
job_activity production(double speed) {
  job_activity a;
  a.blocks_launched = static_cast<std::uint64_t>(speed * to_seconds(period));
  a.synced_blocks = a.blocks_launched;
  a.synced_span = period;
  return a;
}

job_activity opportunistic(double blocks_per_budget_window) {
  job_activity a;
  a.blocks_launched = static_cast<std::uint64_t>(blocks_per_budget_window * 10);  // 10 budget windows a period
  return a;
}

/// What every feed below has: the controller, the clock, its latest decision and seeded draws.
struct feed_base {
  priority_share c;
  instant now = epoch;
  rate_decision last{};
  splitmix64 rng;

  feed_base(const cfg_t& cfg, std::uint64_t seed) : c(cfg), rng(seed) {}

  /// A draw uniform in [1 - spread, 1 + spread]; 1, without a draw, when `spread` is 0.
  double uniform(double spread) {
    if (spread == 0.0) return 1.0;
    return 1.0 - spread + 2.0 * spread * static_cast<double>(rng.below(10'001)) / 10'000.0;
  }
  /// The opportunistic job's rate this window under the latest decision.
  [[nodiscard]] double opp_rate() const {
    return last.opportunistic_budget ? std::min(opp_uncapped, static_cast<double>(*last.opportunistic_budget))
                                     : opp_uncapped;
  }
};

/// A pair on one GPU: `hurt(cap)` is the production job's relative speed when the opportunistic
/// job launches at most `cap` (empty: uncapped) per budget window; `jitter` spreads each
/// window's production speed uniformly by ±jitter (seeded).
struct pair_feed : feed_base {
  double jitter = 0.0;
  /// The production job's loss at the opportunistic job's full uncapped rate; it scales with
  /// the share of that rate the cap lets through.
  double loss_at_full = 0.0;

  explicit pair_feed(const cfg_t& cfg = speed_signal()) : feed_base(cfg, 7) {}

  double noise() { return uniform(jitter); }
  /// The production job alone for `n` windows.
  void alone(int n) {
    for (int i = 0; i < n; ++i) {
      now += period;
      last = c.step({now, period, production(alone_speed * noise()), std::nullopt});
    }
  }
  /// The opportunistic job arrives (an event step).
  void arrive() { last = c.step({now, duration::zero(), production(alone_speed), opportunistic(0)}); }
  /// `n` windows of both jobs; the production job's speed follows the opportunistic job's rate.
  void share(int n) {
    for (int i = 0; i < n; ++i) {
      const double used = opp_rate();
      const double speed = alone_speed * (1.0 - loss_at_full * used / opp_uncapped) * noise();
      now += period;
      last = c.step({now, period, production(speed), opportunistic(used)});
    }
  }
  /// The production job's relative speed under the current decision (no jitter).
  [[nodiscard]] double production_share() const { return 1.0 - loss_at_full * opp_rate() / opp_uncapped; }
};

TEST(PriorityShare, EveryDecisionMakesTheOpportunisticJobABelowNormalMpsClient) {
  priority_share c{speed_signal()};
  for (const rate_decision& d : {c.step({}), c.step({epoch, period, production(alone_speed), std::nullopt}),
                                 c.step({epoch + period, period, production(alone_speed), opportunistic(1)})}) {
    const auto* share = std::get_if<mps_partition>(&d.share);
    ASSERT_NE(share, nullptr);
    EXPECT_TRUE(share->opportunistic_below_normal);
    EXPECT_EQ(share->production_threads, 1.0);
    EXPECT_EQ(share->opportunistic_threads, 1.0);
  }
}

TEST(PriorityShare, TheOpportunisticJobStartsUncappedWhenTheProductionJobWasMeasuredAlone) {
  pair_feed f;
  f.alone(16);
  f.arrive();
  EXPECT_EQ(f.c.phase(), priority_share_phase::sharing);
  EXPECT_FALSE(f.last.opportunistic_budget);
  EXPECT_NEAR(f.c.reference_speed(), alone_speed, 1.0);
}

TEST(PriorityShare, AnUnhurtProductionJobLeavesTheOpportunisticJobUncapped) {
  pair_feed f;
  f.alone(16);
  f.arrive();
  f.share(240);  // two minutes, a refresh included
  EXPECT_FALSE(f.last.opportunistic_budget);
}

/// Over 20 seeds of two minutes each (the first 20 s left out): the production job's mean
/// relative speed and the opportunistic job's mean share of its uncapped rate, overall and in
/// the worst seed.
struct seeded_outcome {
  double production = 0.0;
  double opportunistic = 0.0;
  double worst_production = 1.0;
  double worst_opportunistic = 1.0;
};

seeded_outcome run_seeds(double jitter, double loss_at_full) {
  seeded_outcome out;
  constexpr int seeds = 20;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    pair_feed f;
    f.rng = splitmix64{seed};
    f.jitter = jitter;
    f.loss_at_full = loss_at_full;
    f.alone(16);
    f.arrive();
    f.share(40);
    double production = 0.0;
    double opp = 0.0;
    for (int i = 0; i < 200; ++i) {
      f.share(1);
      production += f.production_share() / 200;
      opp += f.opp_rate() / opp_uncapped / 200;
    }
    out.production += production / seeds;
    out.opportunistic += opp / seeds;
    out.worst_production = std::min(out.worst_production, production);
    out.worst_opportunistic = std::min(out.worst_opportunistic, opp);
  }
  return out;
}

TEST(PriorityShare, HostJitterOfTenPercentIsNotReadAsASlowdown) {
  // An unhurt production job whose speed moves ±10% window to window (uniformly).
  const seeded_outcome o = run_seeds(0.10, 0.0);
  EXPECT_GE(o.opportunistic, 0.95);
  EXPECT_GE(o.worst_opportunistic, 0.85);
}

TEST(PriorityShare, AFalseAlarmOnAVeryJitteryJobDoesNotHoldTheCapForGood) {
  // ±20% per window, as a host-bound job's speed moved on an H100: a reference high by chance
  // reads ordinary windows as a loss just beyond the tolerance, and once a false alarm sets a
  // cap only probing undoes it (and a slope learnt from noise would make each probe tiny).
  const seeded_outcome o = run_seeds(0.20, 0.0);
  EXPECT_GE(o.opportunistic, 0.94);
  EXPECT_GE(o.worst_opportunistic, 0.6);
}

TEST(PriorityShare, AJitteryProductionJobThatLosesLessThanTheToleranceKeepsMostOfTheShare) {
  // The same jitter and a real loss of 2% uncapped (the tolerance is 4%): a reference high by
  // chance may read that as too much, and the cap then probes back up.
  const seeded_outcome o = run_seeds(0.10, 0.02);
  EXPECT_GE(o.opportunistic, 0.9);
  EXPECT_GE(o.worst_opportunistic, 0.8);
}

TEST(PriorityShare, AGpuBoundPairSettlesAtTheTolerance) {
  // The high pair's shape: ±2% per window, 7% lost uncapped. The production job holds 0.95
  // and the opportunistic job keeps about half of its uncapped rate.
  const seeded_outcome o = run_seeds(0.02, 0.07);
  EXPECT_GE(o.worst_production, 0.95);
  EXPECT_GE(o.opportunistic, 0.5);
}

TEST(PriorityShare, AJitteryHurtProductionJobIsProtectedToWithinItsNoise) {
  // ±10% per window and 15% lost uncapped: a loss within the noise of a few windows cannot be
  // told from jitter, so the job is held within a few percent of the tolerance.
  const seeded_outcome o = run_seeds(0.10, 0.15);
  EXPECT_GE(o.production, 0.925);
  EXPECT_GE(o.worst_production, 0.9);
  EXPECT_GE(o.opportunistic, 0.3);
}

TEST(PriorityShare, AHurtProductionJobIsProtectedWithinTheTolerance) {
  // The high pair's shape: uncapped, the production job runs at 0.93 of alone.
  pair_feed f;
  f.loss_at_full = 0.07;
  f.alone(16);
  f.arrive();
  f.share(30);  // 15 s
  ASSERT_TRUE(f.last.opportunistic_budget);
  // Over the next minute the production job holds at least 0.95 on average, and the
  // opportunistic job keeps more than the floor.
  double production = 0.0;
  double opp = 0.0;
  for (int i = 0; i < 120; ++i) {
    f.share(1);
    production += f.production_share();
    opp += f.opp_rate() / opp_uncapped;
  }
  EXPECT_GE(production / 120, 0.95);
  EXPECT_GT(opp / 120, 0.2);
}

TEST(PriorityShare, TheCapLoosensOnceTheProductionJobRecovers) {
  pair_feed f;
  f.loss_at_full = 0.2;
  f.alone(16);
  f.arrive();
  f.share(30);
  ASSERT_TRUE(f.last.opportunistic_budget);
  const std::uint64_t tight = *f.last.opportunistic_budget;
  // The production job stops being hurt (another phase): the cap opens up and is lifted.
  f.loss_at_full = 0.0;
  f.share(60);
  EXPECT_TRUE(!f.last.opportunistic_budget || *f.last.opportunistic_budget > 2 * tight);
  f.share(60);
  EXPECT_FALSE(f.last.opportunistic_budget);
}

TEST(PriorityShare, TheCapNeverFallsBelowTheFloor) {
  cfg_t cfg = speed_signal();
  cfg.floor_fraction = 0.1;
  pair_feed f{cfg};
  f.loss_at_full = 0.9;  // hurt whatever the opportunistic job gets
  f.alone(16);
  f.arrive();
  f.share(100);
  ASSERT_TRUE(f.last.opportunistic_budget);
  EXPECT_GE(static_cast<double>(*f.last.opportunistic_budget), 0.1 * opp_uncapped * 0.99);
  EXPECT_LE(static_cast<double>(*f.last.opportunistic_budget), 0.1 * opp_uncapped * 1.5);
}

TEST(PriorityShare, AProductionJobStillHurtAtTheFloorIsSaidToBeUnprotected) {
  cfg_t cfg = speed_signal();
  cfg.floor_fraction = 0.1;
  pair_feed f{cfg};
  f.loss_at_full = 0.9;  // 9% lost even at the floor: more than the 4% tolerated
  f.alone(16);
  f.arrive();
  bool said = false;
  int windows = 0;
  for (; windows < 100 && !said; ++windows) {
    f.share(1);
    said = f.last.production_unprotected;
  }
  EXPECT_TRUE(said) << "the cap reached its floor and production stayed below its target";
  ASSERT_TRUE(f.last.opportunistic_budget);
  EXPECT_LE(static_cast<double>(*f.last.opportunistic_budget), 0.1 * opp_uncapped * 1.01) << "at the floor";
  EXPECT_LT(windows, 80) << "said within 40 s of the arrival";
}

TEST(PriorityShare, AProductionJobTheFloorProtectsIsNeverSaidToBeUnprotected) {
  cfg_t cfg = speed_signal();
  cfg.floor_fraction = 0.1;
  pair_feed f{cfg};
  f.loss_at_full = 0.3;  // 3% at the floor: within the tolerance
  f.jitter = 0.1;
  f.alone(16);
  f.arrive();
  for (int i = 0; i < 200; ++i) {
    f.share(1);
    ASSERT_FALSE(f.last.production_unprotected) << "window " << i;
  }
}

TEST(PriorityShare, AnIdleProductionJobChangesNothingAndResumesUnderTheSameCap) {
  pair_feed f;
  f.loss_at_full = 0.2;
  f.alone(16);
  f.arrive();
  f.share(30);
  ASSERT_TRUE(f.last.opportunistic_budget);
  const rate_decision before = f.last;
  for (int i = 0; i < 20; ++i) {
    f.now += period;
    f.last = f.c.step({f.now, period, job_activity{}, opportunistic(f.opp_rate())});
  }
  EXPECT_EQ(f.last.opportunistic_budget, before.opportunistic_budget);
}

TEST(PriorityShare, AProductionJobThatArrivesSecondIsMeasuredWithTheOpportunisticJobAtItsFloor) {
  priority_share c{speed_signal()};
  instant now = epoch;
  // The opportunistic job alone, uncapped.
  for (int i = 0; i < 4; ++i) {
    now += period;
    EXPECT_FALSE(c.step({now, period, std::nullopt, opportunistic(opp_uncapped)}).opportunistic_budget);
  }
  rate_decision d = c.step({now, duration::zero(), production(0), opportunistic(opp_uncapped)});
  EXPECT_EQ(c.phase(), priority_share_phase::reference);
  ASSERT_TRUE(d.opportunistic_budget);
  const std::uint64_t floor = *d.opportunistic_budget;
  EXPECT_LT(floor, opp_uncapped / 10);
  // One discarded window and the refresh windows, then sharing starts uncapped.
  for (int i = 0; i < c.settings().refresh_windows + 1; ++i) {
    now += period;
    d = c.step({now, period, production(alone_speed), opportunistic(static_cast<double>(floor))});
  }
  EXPECT_EQ(c.phase(), priority_share_phase::sharing);
  EXPECT_FALSE(d.opportunistic_budget);
  EXPECT_NEAR(c.reference_speed(), alone_speed, 1.0);
}

TEST(PriorityShare, ARefreshHoldsTheOpportunisticJobBrieflyAndKeepsItsCap) {
  cfg_t cfg = speed_signal();
  cfg.refresh_every_windows = 40;
  pair_feed f{cfg};
  f.loss_at_full = 0.2;
  f.alone(16);
  f.arrive();
  int held = 0;
  for (int i = 0; i < 200; ++i) {
    f.share(1);
    if (f.c.phase() == priority_share_phase::reference) ++held;
  }
  // Five refreshes of five windows each, at most.
  EXPECT_GT(held, 0);
  EXPECT_LE(held, 5 * (cfg.refresh_windows + 1));
}

TEST(PriorityShare, AProductionJobThatSpedUpGetsANewReference) {
  pair_feed f;
  f.alone(16);
  f.arrive();
  // The production job runs 20% faster than alone (it left a slow phase) and is then slowed
  // by 10% from there: protected at its new speed, not its old one.
  for (int i = 0; i < 20; ++i) {
    f.now += period;
    f.last = f.c.step({f.now, period, production(1.2 * alone_speed), opportunistic(opp_uncapped)});
  }
  EXPECT_NEAR(f.c.reference_speed(), 1.2 * alone_speed, 1.0);
  for (int i = 0; i < 10; ++i) {
    f.now += period;
    f.last = f.c.step({f.now, period, production(1.08 * alone_speed), opportunistic(f.opp_rate())});
  }
  EXPECT_TRUE(f.last.opportunistic_budget);
}

TEST(PriorityShare, WithoutSyncMarksTheWindowsLaunchedBlocksAreTheSpeed) {
  priority_share c{speed_signal()};
  instant now = epoch;
  for (int i = 0; i < 8; ++i) {
    now += period;
    (void)c.step({now, period, blocks(500'000), std::nullopt});
  }
  EXPECT_NEAR(c.reference_speed(), 1e6, 1.0);
}

TEST(PriorityShare, ShortEventWindowsAreNotSamples) {
  priority_share c{speed_signal()};
  instant now = epoch;
  for (int i = 0; i < 8; ++i) {
    now += period;
    (void)c.step({now, period, production(alone_speed), std::nullopt});
    now += 1ms;
    (void)c.step({now, 1ms, blocks(1), std::nullopt});  // 1000 blocks per second: would be an outlier
  }
  EXPECT_NEAR(c.reference_speed(), alone_speed, 1.0);
}

TEST(PriorityShare, ThePolicyRevisitsEveryPeriodWhileAProductionJobRuns) {
  priority_share c{speed_signal()};
  EXPECT_EQ(c.step({epoch, duration::zero(), production(0), std::nullopt}).revisit_at, epoch + period);
  EXPECT_EQ(c.step({epoch + period, period, production(alone_speed), std::nullopt}).revisit_at, epoch + 2 * period);
  EXPECT_EQ(c.step({epoch + period, duration::zero(), std::nullopt, opportunistic(1)}).revisit_at, never);
}

// --- the GPU-wait signal ------------------------------------------------------------------------

/// A host-bound production job: 0.5 ms of GPU time and 3.5 ms of host time per iteration of 500
/// blocks, its host time drawn afresh every window within ±`host_jitter` (seeded); beside the
/// opportunistic job each iteration's GPU time grows by `gpu_stretch` times the share of its
/// uncapped rate the cap lets through. The interposer's sampled busy time is off by up to ±1%.
/// Its host waits for its GPU work (iteration = host + GPU, wait = GPU) unless `overlapped`: then
/// it prepares the next iteration while the GPU runs (iteration = the longer of the two, wait =
/// what the GPU takes beyond the host).
struct host_bound_feed : feed_base {
  static constexpr double gpu_s = 0.5e-3;
  static constexpr double host_s = 3.5e-3;
  static constexpr double iteration_blocks = 500;
  double host_jitter = 0.0;
  double gpu_stretch = 0.0;
  int first_cap_window = -1;  ///< the first shared window (counted from 1) that ended capped
  int shared_windows = 0;
  int caps_set = 0;           ///< uncapped-to-capped changes while sharing
  bool overlapped = false;
  bool marks_wait = true;     ///< an interposer that marks the wait

  explicit host_bound_feed(const cfg_t& cfg) : feed_base(cfg, 11) {}

  /// A window of the production job: its synced blocks, span and busy time, and the window's.
  job_activity window(bool shared) {
    const double gpu = gpu_s * (1.0 + (shared ? gpu_stretch * opp_rate() / opp_uncapped : 0.0));
    const double host = host_s * uniform(host_jitter);
    const double iteration = overlapped ? std::max(host, gpu) : host + gpu;
    const double wait = overlapped ? std::max(0.0, gpu - host) : gpu;
    const double iterations = std::floor(to_seconds(period) / iteration);
    job_activity a;
    a.blocks_launched = static_cast<std::uint64_t>(iterations * iteration_blocks);
    a.synced_blocks = a.blocks_launched;
    a.synced_span = std::chrono::duration_cast<duration>(std::chrono::duration<double>(iterations * iteration));
    // The node samples the production job only while an opportunistic job shares the GPU.
    if (shared) {
      a.synced_gpu_busy = std::chrono::duration_cast<duration>(std::chrono::duration<double>(iterations * gpu * uniform(0.01)));
      a.gpu_busy = a.synced_gpu_busy;
    }
    if (marks_wait) {
      a.synced_sync_wait = std::chrono::duration_cast<duration>(std::chrono::duration<double>(iterations * wait));
    }
    return a;
  }
  void alone(int n) {
    for (int i = 0; i < n; ++i) {
      now += period;
      last = c.step({now, period, window(false), std::nullopt});
    }
  }
  void arrive() { last = c.step({now, duration::zero(), window(true), opportunistic(0)}); }
  void share(int n) {
    for (int i = 0; i < n; ++i) {
      const double used = opp_rate();
      const bool was_capped = last.opportunistic_budget.has_value();
      now += period;
      last = c.step({now, period, window(true), opportunistic(used)});
      ++shared_windows;
      // A refresh holds the opportunistic job at its floor too: that is no cap.
      if (last.opportunistic_budget && !was_capped && c.phase() == priority_share_phase::sharing) {
        ++caps_set;
        if (first_cap_window < 0) first_cap_window = shared_windows;
      }
    }
  }
};

cfg_t gpu_wait() { return cfg_t{}; }

TEST(PriorityShare, TheDefaultReadsTheGpuWaitSignal) {
  // Chosen from the H200's dominance table (docs/results/dominance.md).
  EXPECT_TRUE(cfg_t{}.gpu_wait_signal);
}

/// The stretch of the production job's GPU time that costs it `loss` of its speed.
constexpr double stretch_for(double loss) {
  return (host_bound_feed::host_s + host_bound_feed::gpu_s) * (1.0 / (1.0 - loss) - 1.0) / host_bound_feed::gpu_s;
}

TEST(PriorityShare, UnderTheGpuWaitSignalTheReferenceIsTakenBesideTheHeldOpportunisticJob) {
  // Alone, the node does not sample the production job: no busy time, so no reference; on the
  // arrival the opportunistic job is held at its floor while the reference is measured.
  host_bound_feed f{gpu_wait()};
  f.alone(16);
  f.arrive();
  EXPECT_EQ(f.c.phase(), priority_share_phase::reference);
  ASSERT_TRUE(f.last.opportunistic_budget);
  EXPECT_EQ(*f.last.opportunistic_budget, cfg_t{}.min_budget_blocks);
  f.share(cfg_t{}.refresh_windows + 1);
  EXPECT_EQ(f.c.phase(), priority_share_phase::sharing);
  EXPECT_FALSE(f.last.opportunistic_budget);
  const state_report r = f.c.describe();
  ASSERT_NE(r.find("reference_gpu_ns_per_block"), nullptr);
  EXPECT_NEAR(std::get<double>(r.find("reference_gpu_ns_per_block")->value), 1e9 * host_bound_feed::gpu_s / 500, 10.0);
  ASSERT_NE(r.find("reference_wait_ns_per_block"), nullptr);
  EXPECT_NEAR(std::get<double>(r.find("reference_wait_ns_per_block")->value), 1e9 * host_bound_feed::gpu_s / 500, 1.0);
  EXPECT_EQ(r.find("reference_blocks_per_s"), nullptr) << "the samples are not blocks per second";
  f.share(8);
  const state_report later = f.c.describe();
  ASSERT_NE(later.find("busy_loss"), nullptr);
  ASSERT_NE(later.find("wait_loss"), nullptr);
  EXPECT_NEAR(std::get<double>(later.find("busy_loss")->value), 0.0, 0.01);
  EXPECT_NEAR(std::get<double>(later.find("wait_loss")->value), 0.0, 0.01);
}

/// Over 20 seeds: a production job with ±`jitter` host time per window, unhurt for a minute,
/// then losing `loss` of its speed to the opportunistic job uncapped. Returns the most caps any
/// seed set in the unhurt minute, and the latest window (after the loss began) at which a seed
/// first capped (-1: some seed never did within 40 windows).
struct detection {
  int most_false_caps = 0;
  int latest_detection_window = 0;
};
detection detect(const cfg_t& cfg, double jitter, double loss, bool overlapped = false, bool marks_wait = true) {
  detection out;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    host_bound_feed f{cfg};
    f.rng = splitmix64{seed};
    f.host_jitter = jitter;
    f.overlapped = overlapped;
    f.marks_wait = marks_wait;
    f.alone(16);
    f.arrive();
    f.share(cfg.refresh_windows + 1);  // the reference, where the signal needs one beside
    const int before = f.caps_set;
    f.share(120);
    out.most_false_caps = std::max(out.most_false_caps, f.caps_set - before);
    // The loss starts with the cap lifted, as after a false alarm has been undone.
    for (int i = 0; i < 100 && f.last.opportunistic_budget; ++i) f.share(1);
    f.gpu_stretch = overlapped ? loss : stretch_for(loss);
    const int from = f.shared_windows;
    f.first_cap_window = -1;
    for (int i = 0; i < 40 && f.first_cap_window < 0; ++i) f.share(1);
    if (f.first_cap_window < 0 || out.latest_detection_window < 0) {
      out.latest_detection_window = -1;
    } else {
      out.latest_detection_window = std::max(out.latest_detection_window, f.first_cap_window - from);
    }
  }
  return out;
}

TEST(PriorityShare, TheGpuWaitSignalSeesAFivePercentLossUnderFifteenPercentJitterWithinTenSeconds) {
  // The case: a host-bound job whose speed moves 8-15% a second, a 5% loss to see
  // within 10 s (20 windows) and no reaction to the noise.
  const detection d = detect(gpu_wait(), 0.15, 0.05);
  EXPECT_EQ(d.most_false_caps, 0);
  EXPECT_GE(d.latest_detection_window, 1);
  EXPECT_LE(d.latest_detection_window, 20);
}

TEST(PriorityShare, TheSpeedSignalCannotTellAFivePercentLossFromFifteenPercentJitter) {
  // The same job under the speed signal: its speed's own noise hides the loss (a 4% tolerance
  // plus 2.33 standard errors of a ±13% speed), so some seed still has not capped after 20 s.
  const detection d = detect(speed_signal(), 0.15, 0.05);
  EXPECT_EQ(d.latest_detection_window, -1);
}

TEST(PriorityShare, KernelsStretchedUnderAnOverlappedHostCostNothingAndAreNotCapped) {
  // A job that prepares its next iteration while its kernels run: kernels 1.5 times as long (0.75
  // of its 3.5 ms host time) keep the GPU busier per block and cost it no time. The busy time
  // alone would read a loss; the wait, which does not grow, says there is none.
  const detection d = detect(gpu_wait(), 0.15, 0.5, true);
  EXPECT_EQ(d.most_false_caps, 0);
  EXPECT_EQ(d.latest_detection_window, -1) << "a cap on a job that lost nothing";
}

TEST(PriorityShare, WithoutAMarkedWaitTheBusyTimeAloneIsReadAndErrsTowardsProtecting) {
  // An older interposer marks no wait: the same stretch then reads as a loss, and the cap closes.
  const detection d = detect(gpu_wait(), 0.15, 0.5, true, false);
  EXPECT_GE(d.latest_detection_window, 1);
}

TEST(PriorityShare, SettingsOutOfRangeAreRefusedByName) {
  const auto refused = [](cfg_t cfg, const std::string& field) {
    try {
      priority_share c{cfg};
      ADD_FAILURE() << field << " accepted";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  cfg_t c;
  c.period = duration::zero();
  refused(c, "period");
  c = {};
  c.reference_windows = 1;
  refused(c, "reference_windows");
  c = {};
  c.reference_windows = 65;
  refused(c, "reference_windows");
  c = {};
  c.refresh_windows = 17;
  refused(c, "refresh_windows");
  c = {};
  c.tolerated_slowdown = 0.5;
  refused(c, "tolerated_slowdown");
  c = {};
  c.tighten_factor = 1.0;
  refused(c, "tighten_factor");
  c = {};
  c.loosen_factor = 1.0;
  refused(c, "loosen_factor");
  c = {};
  c.min_budget_blocks = 0;
  refused(c, "min_budget_blocks");
  c = {};
  c.confidence_z = 0.0;
  refused(c, "confidence_z");
}

}  // namespace
}  // namespace tgs::test
