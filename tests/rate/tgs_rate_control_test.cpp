// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `tgs_rate_control` against Algorithm 1 and the released code's rules, driven by
/// synthetic production counts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate/tgs_rate_control.hpp"

namespace tgs::test {
namespace {

using tgs_feed = feed<tgs_rate_control>;
using cfg_t = tgs_rate_control::config;

constexpr std::uint64_t plateau = 1'000'000;  // production blocks per 5 s window

tgs_feed make_feed(const cfg_t& cfg = {}) { return tgs_feed{tgs_rate_control{cfg}}; }

/// Arrival, then a steady production rate until the first control window has set the budget.
tgs_feed in_control(const cfg_t& cfg = {}, std::uint64_t rate = plateau) {
  tgs_feed f = make_feed(cfg);
  f.arrive();
  for (int i = 0; i < 100 && f.controller.control_windows() == 0; ++i) f.window(rate);
  return f;
}

/// In control and past the warm-up, so the idle rules apply.
tgs_feed warmed_up(const cfg_t& cfg = {}) {
  tgs_feed f = in_control(cfg);
  while (f.controller.control_windows() < cfg.warmup_windows) f.window(plateau);
  return f;
}

/// In congestion avoidance with the last move a decrease (sign -1).
tgs_feed in_congestion_avoidance(const cfg_t& cfg = {}, std::uint64_t rate = plateau) {
  tgs_feed f = in_control(cfg, rate);
  f.window(rate * 96 / 100);  // 4% below R: leaves slow start
  return f;
}

std::optional<std::uint64_t> held() { return std::uint64_t{0}; }

TEST(TgsRateControl, HoldsOpportunisticWhileProfiling) {
  tgs_feed f = make_feed();
  EXPECT_EQ(f.arrive().opportunistic_budget, held());
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  for (int i = 0; i < 5; ++i) {
    const rate_decision d = f.window(plateau);
    EXPECT_EQ(d.opportunistic_budget, held()) << "window " << i + 1;
    EXPECT_EQ(f.controller.phase(), tgs_phase::profiling) << "window " << i + 1;
    EXPECT_EQ(d.revisit_at, f.now + 5s);
    EXPECT_TRUE(std::holds_alternative<time_sliced>(d.share));
  }
}

TEST(TgsRateControl, SteadyRateProfilesUpToTheBoundThenStartsAtInitialBudget) {
  tgs_feed f = make_feed();
  f.arrive();
  // A perfectly steady rate keeps the released code's "estimate equals R" condition true, so
  // profiling runs to `max_profile_windows`; the next window is the first control window.
  const int bound = cfg_t{}.max_profile_windows;
  ASSERT_GE(bound, cfg_t{}.profile_windows);
  for (int i = 1; i <= bound; ++i) {
    EXPECT_EQ(f.window(plateau).opportunistic_budget, held()) << "window " << i;
  }
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{20'000});
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
}

TEST(TgsRateControl, ProfilingEndsOnceThePeakLeavesTheEstimatorWindow) {
  cfg_t cfg;
  cfg.max_profile_windows = 10;  // room for the released code's own stop rule to act first
  tgs_feed f = make_feed(cfg);
  f.arrive();
  // One 4% peak: the estimator's best adjacent mean is 2% above the plateau while the peak is in
  // the five-entry window; profiling ends in the window where it has left, before the bound.
  const std::uint64_t rates[] = {plateau, plateau, plateau * 104 / 100, plateau, plateau,
                                 plateau, plateau, plateau, plateau};
  int window = 0;
  for (std::uint64_t r : rates) {
    f.window(r);
    ++window;
    if (window < 9) {
      EXPECT_EQ(f.controller.profiled_windows(), window);
    }
  }
  // Window 9 ended profiling (the stage is control, awaiting its first control window).
  EXPECT_EQ(f.controller.profiled_windows(), 9);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 1.02 * static_cast<double>(plateau));
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{20'000});
}

TEST(TgsRateControl, ProfilesAtLeastFiveWindows) {
  cfg_t cfg;
  cfg.max_profile_windows = 5;
  tgs_feed f = make_feed(cfg);
  f.arrive();
  for (int i = 1; i <= 5; ++i) f.window(plateau);
  EXPECT_EQ(f.controller.control_windows(), 0);
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{20'000});
}

TEST(TgsRateControl, SlowStartMultipliesBudgetByOnePointFive) {
  tgs_feed f = in_control();
  ASSERT_EQ(f.controller.budget(), 20'000u);
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{30'001});
  // 30001 * 1.5 + 1 = 45002.5, truncated as the code's `long long` does.
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{45'002});
  // 2.5% below R is inside the 3% dead band: still growing.
  EXPECT_EQ(f.window(plateau * 975 / 1000).opportunistic_budget,
            std::optional<std::uint64_t>{67'504});
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
}

TEST(TgsRateControl, SlowStartIsCappedByTheCodesCeiling) {
  cfg_t cfg;
  cfg.slow_start_cap_floor = 50'000;  // small floor so the cap is reached in a few windows
  tgs_feed f = in_control(cfg);
  f.window(plateau);  // 30001
  f.window(plateau);  // 45002
  // 67504 would exceed max(3 × opportunistic rate, floor) = max(3 × 10000, 50000) = 50000.
  const std::uint64_t opportunistic_per_5s = 10'000 * 100;  // 10000 per 50 ms
  EXPECT_EQ(f.window(plateau, 5s, opportunistic_per_5s).opportunistic_budget,
            std::optional<std::uint64_t>{50'000});
  // With the opportunistic job launching 30000 per 50 ms the cap is 90000.
  EXPECT_EQ(f.window(plateau, 5s, 30'000 * 100).opportunistic_budget,
            std::optional<std::uint64_t>{75'001});
  EXPECT_EQ(f.window(plateau, 5s, 30'000 * 100).opportunistic_budget,
            std::optional<std::uint64_t>{90'000});
}

TEST(TgsRateControl, LeavingTheDeadBandDividesByOnePointFiveIntoCongestionAvoidance) {
  tgs_feed f = in_control();
  f.window(plateau);  // 30001
  f.window(plateau);  // 45002
  EXPECT_EQ(f.window(plateau * 96 / 100).opportunistic_budget,
            std::optional<std::uint64_t>{30'001});  // 45002 / 1.5
  EXPECT_EQ(f.controller.phase(), tgs_phase::congestion_avoidance);
}

TEST(TgsRateControl, CongestionAvoidanceAddsMaxOfQuarterPermilleOrThousand) {
  {
    // R = 1e6: 0.025% of R is 250, so the step is RATE_MIN = 1000.
    tgs_feed f = in_congestion_avoidance();
    const std::uint64_t before = f.controller.budget();
    EXPECT_EQ(f.window(plateau).opportunistic_budget, before + 1'000);
    EXPECT_EQ(f.controller.phase(), tgs_phase::congestion_avoidance);
  }
  {
    // R = 2e7: 0.025% of R is 5000.
    tgs_feed f = in_congestion_avoidance({}, 20'000'000);
    const std::uint64_t before = f.controller.budget();
    EXPECT_EQ(f.window(20'000'000).opportunistic_budget, before + 5'000);
  }
}

TEST(TgsRateControl, CongestionAvoidanceRemovesMaxOfEightPercentOrThousand) {
  tgs_feed f = in_congestion_avoidance();
  f.window(plateau);  // +1000, sign +1
  const std::uint64_t before = f.controller.budget();
  ASSERT_GT(before * 8 / 100, 1'000u);
  // 5% below R: outside the band, below the 9% reset.
  EXPECT_EQ(f.window(plateau * 95 / 100).opportunistic_budget, before - before * 8 / 100);
  EXPECT_EQ(f.controller.phase(), tgs_phase::congestion_avoidance);
}

TEST(TgsRateControl, CongestionAvoidanceBandEdgeDependsOnTheLastMove) {
  // Exactly 3% below R: after a decrease (sign -1) the edge counts as inside (increase), after
  // an increase (sign +1) it counts as outside (decrease): the code's hysteresis.
  tgs_feed f = in_congestion_avoidance();
  const std::uint64_t a = f.controller.budget();
  EXPECT_EQ(f.window(plateau * 97 / 100).opportunistic_budget, a + 1'000);
  const std::uint64_t b = f.controller.budget();
  EXPECT_EQ(f.window(plateau * 97 / 100).opportunistic_budget, b - b * 8 / 100);
}

TEST(TgsRateControl, DeviationOfNinePercentReturnsToSlowStartWithBudgetOverTen) {
  tgs_feed f = in_congestion_avoidance();
  const std::uint64_t before = f.controller.budget();
  // The congestion-avoidance decrease applies first, then the reset divides by 10.
  const std::uint64_t decreased = before - std::max<std::uint64_t>(before * 8 / 100, 1'000);
  EXPECT_EQ(f.window(plateau * 91 / 100).opportunistic_budget, decreased / 10);
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
}

TEST(TgsRateControl, DeviationJustBelowNinePercentStaysInCongestionAvoidance) {
  tgs_feed f = in_congestion_avoidance();
  f.window(plateau * 911 / 1000);
  EXPECT_EQ(f.controller.phase(), tgs_phase::congestion_avoidance);
}

TEST(TgsRateControl, SustainedTwelvePercentDeviationLowersMaxRateByFifth) {
  tgs_feed f = in_control();
  const double r = f.controller.max_rate();
  for (int i = 1; i < 20; ++i) {
    f.window(plateau * 88 / 100);
    ASSERT_DOUBLE_EQ(f.controller.max_rate(), r) << "lowered after only " << i << " windows";
  }
  f.window(plateau * 88 / 100);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 0.8 * r);
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
}

TEST(TgsRateControl, InterruptedDeviationRestartsTheTwentyWindowCount) {
  tgs_feed f = in_control();
  const double r = f.controller.max_rate();
  for (int i = 0; i < 19; ++i) f.window(plateau * 88 / 100);
  f.window(plateau);  // one window back near R resets the counter
  for (int i = 0; i < 19; ++i) f.window(plateau * 88 / 100);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), r);
}

TEST(TgsRateControl, MaxRateDecayHalvesTheBudget) {
  cfg_t cfg;
  cfg.decay_windows = 1;  // decay on the first 12% window, so the arithmetic is visible
  tgs_feed f = in_control(cfg);
  ASSERT_EQ(f.controller.budget(), 20'000u);
  // Slow start leaves the band (20000 / 1.5 = 13333), then the decay halves it.
  EXPECT_EQ(f.window(plateau * 88 / 100).opportunistic_budget, std::optional<std::uint64_t>{6'666});
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 0.8 * static_cast<double>(plateau));
}

TEST(TgsRateControl, IdleProductionUnthrottlesWithinThreeWindows) {
  tgs_feed f = warmed_up();
  EXPECT_TRUE(f.window(0).opportunistic_budget.has_value());  // 1 idle window
  // 2 idle windows: the resume rule restarts the budget at 20000.
  EXPECT_EQ(f.window(0).opportunistic_budget, std::optional<std::uint64_t>{20'000});
  // 3 idle windows of the last 5: unthrottled.
  EXPECT_FALSE(f.window(0).opportunistic_budget.has_value());
  EXPECT_EQ(f.controller.phase(), tgs_phase::unthrottled);
  EXPECT_EQ(f.controller.budget(), std::uint64_t{1} << 32);  // the code's huge limit
  // Still stepping: the controller must see the production job come back.
  EXPECT_EQ(f.last.revisit_at, f.now + 5s);
}

TEST(TgsRateControl, IdleWindowsAreThoseBelowAThousandBlocks) {
  tgs_feed f = warmed_up();
  f.window(999);
  f.window(999);
  f.window(999);
  EXPECT_FALSE(f.last.opportunistic_budget.has_value());
  tgs_feed g = warmed_up();
  g.window(1'000);
  g.window(1'000);
  g.window(1'000);
  EXPECT_TRUE(g.last.opportunistic_budget.has_value());
}

TEST(TgsRateControl, IdleRulesWaitForTheFifteenWindowWarmUp) {
  tgs_feed f = in_control();
  for (int i = 0; i < 5; ++i) f.window(0);
  EXPECT_LT(f.controller.control_windows(), 15);
  EXPECT_TRUE(f.last.opportunistic_budget.has_value());
  EXPECT_NE(f.controller.phase(), tgs_phase::unthrottled);
}

TEST(TgsRateControl, ResumingProductionThrottlesAgainWithinThreeWindows) {
  tgs_feed f = warmed_up();
  for (int i = 0; i < 10; ++i) f.window(0);  // a long idle phase (50 s)
  ASSERT_FALSE(f.last.opportunistic_budget.has_value());
  EXPECT_FALSE(f.window(plateau).opportunistic_budget.has_value());  // 4 idle of 5
  EXPECT_FALSE(f.window(plateau).opportunistic_budget.has_value());  // 3 idle of 5
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{20'000});
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
  // R survived the idle phase, so slow start resumes against the production job's real rate.
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
}

TEST(TgsRateControl, ReleasedCodeReprofilesAfterALongIdleKeepingTheUnthrottledBudget) {
  // With the freeze switched off the controller is the released code: the fifth idle window
  // leaves no busy pair in the estimator, R collapses and profiling restarts with the huge
  // budget still in place, so the resuming production job is not throttled within 3 windows.
  cfg_t cfg;
  cfg.freeze_max_rate_while_idle = false;
  tgs_feed f = warmed_up(cfg);
  for (int i = 0; i < 10; ++i) f.window(0);
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  EXPECT_LT(f.controller.max_rate(), 1'000.0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(f.window(plateau).opportunistic_budget.has_value()) << "resumed window " << i;
  }
}

TEST(TgsRateControl, EstimateBeyondTwentyPercentReprofilesKeepingTheBudget) {
  tgs_feed f = in_control();
  f.window(plateau);
  const std::uint64_t budget = f.controller.budget();
  ASSERT_GT(budget, 0u);
  // The production job speeds up by 30% (say, its input pipeline got faster). The estimator
  // lags one window and averages adjacent pairs: +0% after the first such window, +15% (inside
  // the 10%..20% band, no action) after the second, +30% after the third, which re-profiles.
  f.window(plateau * 13 / 10);
  EXPECT_NE(f.controller.phase(), tgs_phase::profiling);
  f.window(plateau * 13 / 10);
  EXPECT_NE(f.controller.phase(), tgs_phase::profiling);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
  f.window(plateau * 13 / 10);
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  EXPECT_EQ(f.last.opportunistic_budget, std::optional<std::uint64_t>{f.controller.budget()});
  EXPECT_GT(f.controller.budget(), 0u);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 0.975 * 1.3 * static_cast<double>(plateau));
}

TEST(TgsRateControl, OpportunisticArrivalRestartsProfilingFromScratch) {
  tgs_feed f = in_control();
  f.window(plateau);
  ASSERT_GT(f.controller.max_rate(), 0.0);
  // The opportunistic job leaves: nothing to control.
  const rate_decision gone = f.step(blocks(plateau), std::nullopt);
  EXPECT_FALSE(gone.opportunistic_budget.has_value());
  EXPECT_EQ(gone.revisit_at, never);
  EXPECT_EQ(f.controller.phase(), tgs_phase::unthrottled);
  // A new opportunistic job arrives: held, R forgotten.
  const rate_decision back = f.step(blocks(plateau), blocks(0), 1s);
  EXPECT_EQ(back.opportunistic_budget, held());
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  EXPECT_EQ(f.controller.max_rate(), 0.0);
  EXPECT_EQ(f.controller.control_windows(), 0);
  EXPECT_EQ(back.revisit_at, f.now + 5s);
}

TEST(TgsRateControl, AbsentProductionLeavesOpportunisticUnthrottled) {
  tgs_feed f = in_control();
  const rate_decision d = f.step(std::nullopt, blocks(123));
  EXPECT_FALSE(d.opportunistic_budget.has_value());
  EXPECT_EQ(d.revisit_at, never);
  // The production job returns: profiling again, opportunistic held.
  EXPECT_EQ(f.step(blocks(0), blocks(0), 2s).opportunistic_budget, held());
}

TEST(TgsRateControl, ScalesWindowsToTheProductionWindow) {
  // The same production rate seen through 1 s, 5 s and 10 s windows gives the same estimate and
  // the same budgets.
  tgs_feed five = make_feed();
  tgs_feed one = make_feed();
  tgs_feed ten = make_feed();
  five.arrive();
  one.arrive();
  ten.arrive();
  for (int i = 0; i < 14; ++i) {
    const auto a = five.window(plateau, 5s);
    const auto b = one.window(plateau / 5, 1s);
    const auto c = ten.window(plateau * 2, 10s);
    EXPECT_EQ(a.opportunistic_budget, b.opportunistic_budget) << "window " << i;
    EXPECT_EQ(a.opportunistic_budget, c.opportunistic_budget) << "window " << i;
  }
  EXPECT_DOUBLE_EQ(one.controller.max_rate(), five.controller.max_rate());
  EXPECT_DOUBLE_EQ(ten.controller.max_rate(), five.controller.max_rate());
  EXPECT_GT(five.controller.budget(), 20'000u);
}

TEST(TgsRateControl, ZeroLengthWindowDoesNotAdvanceTheAlgorithm) {
  tgs_feed f = make_feed();
  f.arrive();
  f.window(plateau);
  const int profiled = f.controller.profiled_windows();
  const rate_decision before = f.last;
  const rate_decision again = f.window(plateau, 0s);
  EXPECT_EQ(f.controller.profiled_windows(), profiled);
  EXPECT_EQ(again, before);
  EXPECT_GT(again.revisit_at, f.now);
}

TEST(TgsRateControl, StepsOncePerProductionWindowWhileBothArePresent) {
  cfg_t cfg;
  cfg.production_window = 2s;
  tgs_feed f = make_feed(cfg);
  EXPECT_EQ(f.arrive().revisit_at, epoch + 2s);
  const rate_decision d = f.window(400'000, 2s);
  EXPECT_EQ(d.revisit_at, epoch + 4s);
  EXPECT_EQ(f.last.budget_window, 50ms);
}

class TgsRateControlConfig : public ::testing::TestWithParam<std::pair<std::string, cfg_t>> {};

TEST_P(TgsRateControlConfig, RejectsOutOfRangeFieldNamingIt) {
  const auto& [field, cfg] = GetParam();
  try {
    tgs_rate_control c{cfg};
    FAIL() << "accepted an invalid " << field;
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tgs_rate_control: " + field + " must be"), std::string::npos) << what;
  }
}

cfg_t with(auto mutate) {
  cfg_t c;
  mutate(c);
  return c;
}

// A case's name: the field it breaks and its index (one field can fail several ways).
std::string config_case_name(const ::testing::TestParamInfo<TgsRateControlConfig::ParamType>& param) {
  return param.param.first + "_" + std::to_string(param.index);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, TgsRateControlConfig,
    ::testing::Values(
        std::pair{std::string{"dead_band"}, with([](cfg_t& c) { c.dead_band = 1.5; })},
        std::pair{std::string{"dead_band"}, with([](cfg_t& c) { c.dead_band = 0.0; })},
        std::pair{std::string{"production_window"},
                  with([](cfg_t& c) { c.production_window = 0s; })},
        std::pair{std::string{"budget_window"}, with([](cfg_t& c) { c.budget_window = -1ms; })},
        std::pair{std::string{"initial_budget"}, with([](cfg_t& c) { c.initial_budget = 0; })},
        std::pair{std::string{"rate_window_size"},
                  with([](cfg_t& c) { c.rate_window_size = 17; })},
        std::pair{std::string{"max_profile_windows"},
                  with([](cfg_t& c) { c.max_profile_windows = 4; })},
        std::pair{std::string{"slow_start_factor"},
                  with([](cfg_t& c) { c.slow_start_factor = 1.0; })},
        std::pair{std::string{"multiplicative_decrease"},
                  with([](cfg_t& c) { c.multiplicative_decrease = 1.0; })},
        std::pair{std::string{"reprofile_threshold"},
                  with([](cfg_t& c) { c.reprofile_threshold = 0.05; })},
        std::pair{std::string{"decay_factor"}, with([](cfg_t& c) { c.decay_factor = 1.2; })},
        std::pair{std::string{"unthrottle_idle_windows"},
                  with([](cfg_t& c) { c.unthrottle_idle_windows = 6; })},
        std::pair{std::string{"reset_idle_windows"},
                  with([](cfg_t& c) { c.reset_idle_windows = 3; })},
        std::pair{std::string{"budget_ceiling"}, with([](cfg_t& c) { c.budget_ceiling = 0; })},
        std::pair{std::string{"profile_tolerance"},
                  with([](cfg_t& c) { c.profile_tolerance = std::nan(""); })}),
    config_case_name);

TEST(TgsRateControl, DefaultConfigIsTheReleasedCodesConstants) {
  const cfg_t c;
  EXPECT_EQ(c.production_window, 5s);
  EXPECT_EQ(c.budget_window, 50ms);
  EXPECT_EQ(c.initial_budget, 20'000u);
  EXPECT_EQ(c.rate_window_size, 5);
  EXPECT_EQ(c.profile_windows, 5);
  EXPECT_DOUBLE_EQ(c.dead_band, 0.03);
  EXPECT_DOUBLE_EQ(c.slow_start_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.additive_increase, 0.00025);
  EXPECT_DOUBLE_EQ(c.multiplicative_decrease, 0.08);
  EXPECT_EQ(c.min_step, 1'000u);
  EXPECT_DOUBLE_EQ(c.decay_threshold, 0.12);
  EXPECT_EQ(c.decay_windows, 20);
  EXPECT_DOUBLE_EQ(c.decay_factor, 0.8);
  EXPECT_EQ(c.idle_blocks, 1'000u);
  EXPECT_EQ(c.warmup_windows, 15);
  EXPECT_EQ(c.budget_ceiling, 100'000'000'000'000u);
  EXPECT_EQ(tgs_rate_control{c}.settings().initial_budget, c.initial_budget);
}

}  // namespace
}  // namespace tgs::test

namespace tgs::test {
namespace {

TEST(TgsRateControl, RateSmoothingDampsASingleNoisyWindow) {
  // Released behaviour (no smoothing): in slow start, one window 9% low leaves the band: the
  // budget shrinks (÷1.5) and slow start ends.
  tgs_feed raw = in_control();
  const std::uint64_t raw_before = raw.controller.budget();
  raw.window(plateau * 91 / 100);
  EXPECT_LT(raw.controller.budget(), raw_before);
  EXPECT_EQ(raw.controller.phase(), tgs_phase::congestion_avoidance);

  // With the code's `alpha` at 0.8 the same window moves the smoothed rate by under 2%: inside
  // the 3% band, so slow start keeps multiplying the budget.
  cfg_t cfg;
  cfg.rate_smoothing = 0.8;
  tgs_feed smooth = in_control(cfg);
  const std::uint64_t smooth_before = smooth.controller.budget();
  smooth.window(plateau * 91 / 100);
  EXPECT_EQ(smooth.controller.phase(), tgs_phase::slow_start);
  EXPECT_GT(smooth.controller.budget(), smooth_before);
}

TEST(TgsRateControl, RateSmoothingOutsideZeroToOneIsRejected) {
  cfg_t cfg;
  cfg.rate_smoothing = 1.0;
  EXPECT_THROW((void)tgs_rate_control{cfg}, config_error);
  try {
    (void)tgs_rate_control{cfg};
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("rate_smoothing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tgs::test

namespace tgs::test {
namespace {

/// A production rate that moves ±`spread` around `plateau` from window to window with no
/// contention at all (a training loop bound by its CPU side), deterministic.
class noisy_rate {
 public:
  explicit noisy_rate(double spread) : spread_(spread) {}
  std::uint64_t next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = static_cast<double>(state_ >> 11) / static_cast<double>(1ULL << 53);  // [0, 1)
    return static_cast<std::uint64_t>(static_cast<double>(plateau) * (1.0 + spread_ * (2.0 * u - 1.0)));
  }

 private:
  double spread_;
  std::uint64_t state_ = 42;
};

/// The opportunistic budget after `windows` windows of a ±10% noisy production job.
std::uint64_t budget_under_noise(const cfg_t& cfg, int windows) {
  tgs_feed f = make_feed(cfg);
  f.arrive();
  noisy_rate rate(0.10);
  for (int i = 0; i < windows; ++i) f.window(rate.next());
  return f.controller.budget();
}

/// Arrival, then a ±10% noisy production job until the first control window.
tgs_feed noisy_in_control(const cfg_t& cfg) {
  tgs_feed f = make_feed(cfg);
  f.arrive();
  noisy_rate rate(0.10);
  while (f.controller.control_windows() == 0) f.window(rate.next());
  return f;
}

/// Expects `better` to leave the opportunistic job at least `factor` times the budget `worse`
/// leaves it beside a ±10% noisy production job that nobody slows.
void expect_grows_more(const cfg_t& worse, const cfg_t& better, std::uint64_t factor) {
  const std::uint64_t starved = budget_under_noise(worse, 80);
  const std::uint64_t grown = budget_under_noise(better, 80);
  EXPECT_GT(grown, factor * std::max<std::uint64_t>(starved, 1)) << "before " << starved << ", after " << grown;
}

TEST(TgsRateControl, NoiseBandLetsTheOpportunisticJobGrowBesideANoisyProductionJob) {
  // The released 3% band reads ±10% CPU-side noise as interference and keeps cutting the budget;
  // a band calibrated on the job's own noise (measured while profiling) does not.
  cfg_t released;
  cfg_t calibrated;
  calibrated.noise_band_multiple = 2.5;
  expect_grows_more(released, calibrated, 20);
  tgs_feed f = noisy_in_control(calibrated);
  // Uniform ±10% has a 5.8% coefficient of variation: 2.5 x that, about 14%.
  EXPECT_GT(f.controller.dead_band(), 0.08);
  EXPECT_LE(f.controller.dead_band(), calibrated.max_noise_band);
}

TEST(TgsRateControl, ProfileMeanKeepsANoisyUnslowedJobInsideTheBand) {
  // A ±10% noisy production job that the opportunistic job does not slow at all. The released
  // estimator puts R near the top of the noise, so most windows read as a slowdown beyond a 5%
  // band and the budget is driven down; R from the profiling mean keeps the job mid-band.
  cfg_t released;
  released.noise_band_multiple = 2.5;
  released.max_noise_band = 0.05;
  released.rate_smoothing = 0.8;
  released.additive_increase = 0.005;  // growth that is not the bottleneck here
  cfg_t mean = released;
  mean.max_rate_from_profile_mean = true;
  expect_grows_more(released, mean, 3);

  tgs_feed f = noisy_in_control(mean);
  EXPECT_NEAR(f.controller.max_rate(), static_cast<double>(plateau), 0.06 * plateau);
  // A real slowdown still cuts the budget, and R does not follow it down.
  for (int i = 0; i < 10; ++i) f.window(plateau);
  const std::uint64_t before = f.controller.budget();
  const double r = f.controller.max_rate();
  for (int i = 0; i < 3; ++i) f.window(plateau * 88 / 100);
  EXPECT_LT(f.controller.budget(), before);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), r);
}

TEST(TgsRateControl, ProfileMeanCountsAFasterProductionJobAsUnslowed) {
  cfg_t cfg;
  cfg.max_rate_from_profile_mean = true;
  tgs_feed f = in_control(cfg);
  const std::uint64_t before = f.controller.budget();
  // 15% faster than its profiled mean: the released |deviation| would leave slow start.
  for (int i = 0; i < 3; ++i) f.window(plateau * 115 / 100);
  EXPECT_GT(f.controller.budget(), before);
  EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
  cfg_t released;
  tgs_feed g = in_control(released);
  g.window(plateau * 115 / 100);
  EXPECT_EQ(g.controller.phase(), tgs_phase::congestion_avoidance);
}

TEST(TgsRateControl, MinBudgetKeepsTheBudgetOffZero) {
  cfg_t cfg;
  cfg.min_budget = 5'000;
  tgs_feed f = in_congestion_avoidance(cfg);
  for (int i = 0; i < 40; ++i) f.window(plateau * 94 / 100);  // outside the band, below the reset
  EXPECT_EQ(f.controller.budget(), 5'000u);
  for (int i = 0; i < 5; ++i) f.window(plateau * 80 / 100);  // resets to slow start, divides
  EXPECT_GE(f.controller.budget(), 5'000u);
  tgs_feed g = in_congestion_avoidance();
  for (int i = 0; i < 40; ++i) g.window(plateau * 94 / 100);
  EXPECT_EQ(g.controller.budget(), 0u);  // the released code
  cfg.min_budget = cfg.initial_budget + 1;
  EXPECT_THROW(tgs_rate_control{cfg}, config_error);
}

/// A production job whose host side takes `host_s` per block and whose GPU work makes it wait
/// `wait_s` per block, over a 5 s window.
job_activity host_and_wait(double host_s, double wait_s) {
  const double per_block = host_s + wait_s;
  const auto blocks = static_cast<std::uint64_t>(5.0 / per_block);
  const auto wait = std::chrono::duration_cast<duration>(
      std::chrono::duration<double>(wait_s * static_cast<double>(blocks)));
  return job_activity{.blocks_launched = blocks, .sync_wait = wait};
}

/// The budget after `windows` windows beside a production job whose host time per block varies
/// ±20% (its CPU side) around 4 µs and whose wait per block is `wait_s` (1 µs alone).
std::uint64_t budget_beside_host_noise(const cfg_t& cfg, int windows, double wait_s = 1e-6) {
  tgs_feed f = make_feed(cfg);
  f.arrive();
  noisy_rate noise(0.20);
  auto host = [&] { return 4e-6 * static_cast<double>(noise.next()) / static_cast<double>(plateau); };
  while (f.controller.control_windows() == 0) f.step(host_and_wait(host(), 1e-6), blocks(0));
  for (int i = 0; i < windows; ++i) f.step(host_and_wait(host(), wait_s), blocks(0));
  return f.controller.budget();
}

TEST(TgsRateControl, SyncWaitCorrectionIgnoresTheProductionJobsHostNoise) {
  cfg_t released;
  cfg_t corrected;
  corrected.sync_wait_correction = true;
  const std::uint64_t starved = budget_beside_host_noise(released, 60);
  const std::uint64_t grown = budget_beside_host_noise(corrected, 60);
  EXPECT_GT(grown, 20 * std::max<std::uint64_t>(starved, 1)) << "released " << starved << ", corrected " << grown;
  EXPECT_GT(grown, 1'000'000u);  // slow start all the way: the job was never slowed
}

TEST(TgsRateControl, SyncWaitCorrectionSeesContention) {
  // The opportunistic job's kernels add 0.5 µs of wait per block to 5 µs: a 9% slowdown that the
  // host noise would hide from a single window's block count.
  cfg_t corrected;
  corrected.sync_wait_correction = true;
  tgs_feed f = make_feed(corrected);
  f.arrive();
  while (f.controller.control_windows() == 0) f.step(host_and_wait(4e-6, 1e-6), blocks(0));
  EXPECT_NEAR(f.controller.max_rate(), 5.0 / 5e-6, 1.0);
  for (int i = 0; i < 5; ++i) f.step(host_and_wait(4e-6, 1e-6), blocks(0));
  const std::uint64_t before = f.controller.budget();
  // Host time 10% shorter (the CPU side ran faster) and the wait 50% longer: the block count
  // barely moves (5.1 µs per block, 2% down, inside the band), the corrected rate falls by 9%.
  f.step(host_and_wait(3.6e-6, 1.5e-6), blocks(0));
  EXPECT_EQ(f.controller.budget(), static_cast<std::uint64_t>(static_cast<double>(before) / 1.5));
  EXPECT_EQ(f.controller.phase(), tgs_phase::congestion_avoidance);

  tgs_feed released = make_feed({});
  released.arrive();
  while (released.controller.control_windows() == 0) released.step(host_and_wait(4e-6, 1e-6), blocks(0));
  for (int i = 0; i < 5; ++i) released.step(host_and_wait(4e-6, 1e-6), blocks(0));
  const std::uint64_t released_before = released.controller.budget();
  released.step(host_and_wait(3.6e-6, 1.5e-6), blocks(0));
  EXPECT_GT(released.controller.budget(), released_before) << "the block count alone misses it";
}

TEST(TgsRateControl, LastSampleIsTheCorrectedRateTheBandSees) {
  cfg_t corrected;
  corrected.sync_wait_correction = true;
  tgs_feed f = make_feed(corrected);
  EXPECT_EQ(f.controller.last_sample(), 0.0);
  f.arrive();
  while (f.controller.control_windows() == 0) f.step(host_and_wait(4e-6, 1e-6), blocks(0));
  for (int i = 0; i < 5; ++i) f.step(host_and_wait(4e-6, 1e-6), blocks(0));
  EXPECT_NEAR(f.controller.last_sample() / f.controller.max_rate(), 1.0, 1e-6);
  // The launched count falls by 2%, the corrected rate by 9% (the contention test above): the
  // sample shows the 9% that left slow start.
  const job_activity slowed = host_and_wait(3.6e-6, 1.5e-6);
  f.step(slowed, blocks(0));
  const double launched = static_cast<double>(slowed.blocks_launched);
  EXPECT_NEAR(launched / f.controller.max_rate(), 0.98, 0.005);
  EXPECT_NEAR(f.controller.last_sample() / f.controller.max_rate(), 1.0 / 1.1, 0.005);
  // Without the correction it is the launched count itself.
  tgs_feed g = make_feed({});
  g.arrive();
  g.step(host_and_wait(4e-6, 1e-6), blocks(0));
  g.step(slowed, blocks(0));
  EXPECT_DOUBLE_EQ(g.controller.last_sample(), launched);
  // A new production job starts from nothing.
  g.step(std::nullopt, blocks(0));
  g.arrive();
  EXPECT_EQ(g.controller.last_sample(), 0.0);
}

TEST(TgsRateControl, SyncWaitCorrectionWithoutSyncWaitIsTheBlockRate) {
  // The simulator reports no sync wait: the option changes nothing there.
  cfg_t corrected;
  corrected.sync_wait_correction = true;
  tgs_feed a = make_feed(corrected);
  tgs_feed b = make_feed({});
  a.arrive();
  b.arrive();
  noisy_rate ra(0.10);
  noisy_rate rb(0.10);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(a.window(ra.next()), b.window(rb.next())) << "window " << i;
  }
}

/// With the sync-wait correction R is fixed after profiling. A production job profiled while it
/// waited 2 µs per block (say, while the opportunistic job's memory was being placed) that then
/// waits 1 µs runs 20% faster than R in every window.
tgs_feed faster_after_profiling(const cfg_t& cfg) {
  tgs_feed f = make_feed(cfg);
  f.arrive();
  while (f.controller.control_windows() == 0) f.step(host_and_wait(4e-6, 2e-6), blocks(0));
  for (int i = 0; i < 20; ++i) f.step(host_and_wait(4e-6, 1e-6), blocks(0));
  return f;
}

TEST(TgsRateControl, SlowdownOnlyKeepsGrowingBesideAProductionJobFasterThanR) {
  cfg_t released_deviation;
  released_deviation.sync_wait_correction = true;
  cfg_t slowdown_only = released_deviation;
  slowdown_only.slowdown_only = true;
  tgs_feed cut = faster_after_profiling(released_deviation);
  tgs_feed grown = faster_after_profiling(slowdown_only);
  EXPECT_NEAR(grown.controller.max_rate(), 5.0 / 6e-6, 1.0);  // R stays the profiled rate
  // |rate - R| / R: 20% above R reads as a deviation beyond 3 bands, so every window cuts.
  EXPECT_LT(cut.controller.budget(), cfg_t{}.initial_budget);
  // Only a slowdown counts: slow start all the way.
  EXPECT_EQ(grown.controller.phase(), tgs_phase::slow_start);
  EXPECT_GT(grown.controller.budget(), 100 * cut.controller.budget());
  // A real slowdown below R still cuts the budget.
  const std::uint64_t before = grown.controller.budget();
  grown.step(host_and_wait(4e-6, 2.5e-6), blocks(0));
  EXPECT_LT(grown.controller.budget(), before);
  EXPECT_FALSE(cfg_t{}.slowdown_only);
}

TEST(TgsRateControl, ProfileMeanIsOffByDefault) {
  // Released behaviour: R rises to the estimator's largest pair mean.
  tgs_feed f = in_control();
  f.window(plateau * 105 / 100);
  f.window(plateau * 105 / 100);
  f.window(plateau * 105 / 100);
  EXPECT_GT(f.controller.max_rate(), static_cast<double>(plateau));
  EXPECT_FALSE(cfg_t{}.max_rate_from_profile_mean);
}

TEST(TgsRateControl, NoiseBandKeepsTheReleasedBandForASteadyJobAndIsCapped) {
  cfg_t cfg;
  cfg.noise_band_multiple = 2.5;
  EXPECT_DOUBLE_EQ(in_control(cfg).controller.dead_band(), cfg.dead_band);
  cfg.noise_band_multiple = 100.0;
  tgs_feed f = noisy_in_control(cfg);
  EXPECT_DOUBLE_EQ(f.controller.dead_band(), cfg.max_noise_band);
  // A slowdown beyond the widened band still cuts the budget (the guarantee stays).
  const std::uint64_t before = f.controller.budget();
  f.window(plateau / 2);
  EXPECT_LT(f.controller.budget(), before);
}

TEST(TgsRateControl, NoiseBandSettingsAreValidated) {
  cfg_t cfg;
  cfg.noise_band_multiple = -1.0;
  EXPECT_THROW(tgs_rate_control{cfg}, config_error);
  cfg = {};
  cfg.max_noise_band = 0.4;  // 3 x 0.4 >= 1
  EXPECT_THROW(tgs_rate_control{cfg}, config_error);
  cfg.max_noise_band = 0.01;  // below the 3% band
  EXPECT_THROW(tgs_rate_control{cfg}, config_error);
}

TEST(TgsRateControl, RateSmoothingKeepsTheIdleAndResumeTimings) {
  // Smoothing must not hide an idle production job (on a GPU it once kept the opportunistic job
  // throttled through a whole production pause): the idle edge passes through unsmoothed.
  cfg_t cfg;
  cfg.rate_smoothing = 0.8;
  tgs_feed f = warmed_up(cfg);
  f.window(0);
  f.window(0);
  EXPECT_FALSE(f.window(0).opportunistic_budget.has_value());  // 3 idle of 5: unthrottled
  for (int i = 0; i < 7; ++i) f.window(0);
  EXPECT_FALSE(f.window(plateau).opportunistic_budget.has_value());  // 4 idle of 5
  EXPECT_FALSE(f.window(plateau).opportunistic_budget.has_value());  // 3 idle of 5
  EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{20'000});
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
}

}  // namespace
}  // namespace tgs::test

namespace tgs::test {
namespace {

/// Steps `f` with `production` until `done` holds, at most 100 windows, so that a controller that
/// never gets there fails the test instead of hanging it.
template <typename Done>
void step_until(tgs_feed& f, const job_activity& production, Done done) {
  for (int i = 0; i < 100 && !done(); ++i) f.step(production, blocks(0));
  ASSERT_TRUE(done()) << "not reached in 100 windows";
}

/// The released settings with a reference refresh every `every` control windows.
cfg_t refreshing_every(int every) {
  cfg_t cfg;
  cfg.refresh_every_windows = every;
  return cfg;
}

/// The same with the sync-wait correction, each refresh moving R (and the host time) all the way.
cfg_t corrected_refreshing_every(int every) {
  cfg_t cfg = refreshing_every(every);
  cfg.sync_wait_correction = true;
  cfg.refresh_weight = 1.0;
  return cfg;
}

/// Arrives and profiles at 4 µs of host time and 1 µs of wait per block (R = 1e6 blocks per
/// window) until the first control window.
void profile_at_four_and_one(tgs_feed& f) {
  f.arrive();
  step_until(f, host_and_wait(4e-6, 1e-6), [&] { return f.controller.control_windows() > 0; });
}

/// Steps with `production` until a refresh starts, then through its held windows.
void refresh_with(tgs_feed& f, const job_activity& production) {
  step_until(f, production, [&] { return f.controller.phase() == tgs_phase::refreshing; });
  for (int i = 0; i < f.controller.settings().refresh_windows; ++i) f.step(production, blocks(0));
}

TEST(TgsRateControlRefresh, IsOffByDefaultAndNeverHoldsTheOpportunisticJob) {
  const cfg_t defaults;
  EXPECT_EQ(defaults.refresh_every_windows, 0);
  EXPECT_EQ(defaults.refresh_windows, 3);
  EXPECT_DOUBLE_EQ(defaults.refresh_weight, 0.5);
  tgs_feed f = in_control();
  noisy_rate rate(0.02);
  for (int i = 0; i < 200; ++i) {
    f.window(rate.next());
    ASSERT_NE(f.controller.phase(), tgs_phase::refreshing) << "window " << i;
    ASSERT_NE(f.last.opportunistic_budget, held()) << "window " << i;
  }
  EXPECT_EQ(f.controller.refreshes(), 0);
  EXPECT_EQ(to_string(tgs_phase::refreshing), "refreshing");
}

TEST(TgsRateControlRefresh, HoldsForRefreshWindowsAfterKControlWindowsThenResumesTheBudget) {
  // Beside a twin without refreshes fed the same control windows, the refresh is a pause: the
  // budget, the growth and the window count carry on from where they were.
  const cfg_t cfg = refreshing_every(4);
  tgs_feed f = in_control(cfg);
  tgs_feed twin = in_control();
  ASSERT_EQ(f.controller.control_windows(), 1);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    for (int i = 1; i < cfg.refresh_every_windows; ++i) {
      EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
      f.window(plateau);
      twin.window(plateau);
    }
    // The K-th control window since profiling (or since the last refresh) ends with the
    // opportunistic job held; the budget it reached waits.
    const std::int64_t windows = f.controller.control_windows();
    const std::uint64_t before = f.controller.budget();
    EXPECT_EQ(before, twin.controller.budget());
    EXPECT_EQ(f.last.opportunistic_budget, held());
    for (int held_window = 1; held_window < cfg.refresh_windows; ++held_window) {
      EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
      EXPECT_EQ(f.window(plateau).opportunistic_budget, held()) << "held window " << held_window;
      EXPECT_EQ(f.last.revisit_at, f.now + 5s);
    }
    EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
    // The last held window ends the refresh: the budget is exactly what it was.
    EXPECT_EQ(f.window(plateau).opportunistic_budget, std::optional<std::uint64_t>{before});
    EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start);
    EXPECT_EQ(f.controller.control_windows(), windows);
    EXPECT_EQ(f.controller.budget(), before);
    EXPECT_EQ(f.controller.refreshes(), round + 1);
    EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
    // The next control window is the twin's next one.
    EXPECT_EQ(f.window(plateau).opportunistic_budget, twin.window(plateau).opportunistic_budget);
    EXPECT_EQ(f.controller.phase(), twin.controller.phase());
    EXPECT_EQ(f.controller.control_windows(), windows + 1);
  }
}

TEST(TgsRateControlRefresh, MovesRByTheWeightTowardsTheMeanOfItsSamples) {
  cfg_t cfg = refreshing_every(4);
  cfg.refresh_windows = 4;
  tgs_feed f = in_control(cfg);
  for (int i = 1; i < 4; ++i) f.window(plateau);
  ASSERT_EQ(f.controller.phase(), tgs_phase::refreshing);
  ASSERT_DOUBLE_EQ(f.controller.max_rate(), 1e6);
  // The first held window is discarded (its rate would pull the mean up to 1.4e6); the samples'
  // mean is 1.1e6, so R moves halfway from 1e6: 1.05e6.
  f.window(2 * plateau);
  f.window(plateau * 105 / 100);
  f.window(plateau * 110 / 100);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 1e6) << "R moved before the refresh ended";
  f.window(plateau * 115 / 100);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 1.05e6);
  EXPECT_EQ(f.controller.refreshes(), 1);
  // The next refresh starts from nothing: its own samples (1.05e6) leave R where it is.
  for (int i = 0; i < 4; ++i) f.window(plateau * 105 / 100);
  ASSERT_EQ(f.controller.phase(), tgs_phase::refreshing);
  f.window(2 * plateau);
  for (int i = 0; i < 3; ++i) f.window(plateau * 105 / 100);
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), 1.05e6);
  EXPECT_EQ(f.controller.refreshes(), 2);
  // A drift downwards moves R down: with weight 1 it is the samples' mean.
  cfg.refresh_weight = 1.0;
  tgs_feed g = in_control(cfg);
  for (int i = 1; i < 4; ++i) g.window(plateau);
  g.window(plateau);
  g.window(plateau * 90 / 100);
  g.window(plateau * 92 / 100);
  g.window(plateau * 94 / 100);
  EXPECT_DOUBLE_EQ(g.controller.max_rate(), 0.92e6);
}

TEST(TgsRateControlRefresh, LetsTheBudgetGrowBesideAProductionJobThatDriftedBelowR) {
  // The production job drifts to 0.93 of the R profiled at the arrival, nobody slowing it: the
  // released controller reads the 7% as interference and cuts the budget to 0; a refresh that
  // sees the drifted rate alone moves R to it and the budget grows.
  cfg_t cfg = refreshing_every(10);
  cfg.refresh_weight = 1.0;
  const std::uint64_t drifted = plateau * 93 / 100;
  tgs_feed released = in_control();
  tgs_feed refreshed = in_control(cfg);
  for (int i = 0; i < 60; ++i) {
    released.window(drifted);
    refreshed.window(drifted);
  }
  EXPECT_EQ(released.controller.budget(), 0u);
  EXPECT_DOUBLE_EQ(refreshed.controller.max_rate(), static_cast<double>(drifted));
  EXPECT_GT(refreshed.controller.budget(), 20'000u);
  EXPECT_EQ(refreshed.controller.refreshes(), 4);  // 10 control + 3 held windows per round
}

TEST(TgsRateControlRefresh, RefreshedHostTimeKeepsTheCorrectedSampleAtR) {
  // Profiled at 4 µs of host time and 1 µs of wait per block. Then the host side slows to
  // 4.5 µs and, the GPU less queued, the job waits 0.75 µs alone: the corrected sample, with the
  // 4 µs learnt while profiling, reads the job alone 5% above R (beyond the 3% band: the budget
  // is cut) and the job slowed by 6% (1.1 µs of wait) as 2% below R (inside: unslowed). A
  // refresh measures the host time and R at the job's current speed, after which the job alone
  // reads R and the slowed job 6% below it.
  cfg_t cfg = corrected_refreshing_every(6);
  tgs_feed f = make_feed(cfg);
  ASSERT_NO_FATAL_FAILURE(profile_at_four_and_one(f));
  ASSERT_NEAR(f.controller.max_rate(), 1e6, 1.0);
  const job_activity alone = host_and_wait(4.5e-6, 0.75e-6);
  const job_activity slowed = host_and_wait(4.5e-6, 1.1e-6);
  auto reads = [&] { return f.controller.last_sample() / f.controller.max_rate(); };

  std::uint64_t before = f.controller.budget();
  f.step(alone, blocks(0));
  EXPECT_NEAR(reads(), 5.0 / 4.75, 1e-4);
  EXPECT_LT(f.controller.budget(), before) << "stale host time: the job alone reads as a deviation";
  before = f.controller.budget();
  f.step(slowed, blocks(0));
  EXPECT_NEAR(reads(), 5.0 / 5.1, 1e-4);
  EXPECT_GT(f.controller.budget(), before) << "stale host time: the slowed job reads as unslowed";

  ASSERT_NO_FATAL_FAILURE(refresh_with(f, alone));
  ASSERT_EQ(f.controller.refreshes(), 1);
  const double launched_alone = static_cast<double>(alone.blocks_launched);
  EXPECT_NEAR(f.controller.max_rate(), launched_alone, 1.0);

  before = f.controller.budget();
  f.step(alone, blocks(0));
  EXPECT_NEAR(reads(), 1.0, 1e-6);
  EXPECT_GT(f.controller.budget(), before);
  before = f.controller.budget();
  f.step(slowed, blocks(0));
  EXPECT_NEAR(reads(), 5.25 / 5.6, 1e-4);
  EXPECT_LT(f.controller.budget(), before);

  // With weight 0.5 the host time and R move halfway, and R by the rate blended, not by the
  // rate at the blended host time: the job alone reads 1 / ((1 + 1 / 1.05) / 2) = 1.024 of R
  // after one refresh, and the misreading about halves with each refresh after that.
  cfg.refresh_weight = 0.5;
  tgs_feed g = make_feed(cfg);
  ASSERT_NO_FATAL_FAILURE(profile_at_four_and_one(g));
  double previous = 5.0 / 4.75;
  for (int refresh = 1; refresh <= 3; ++refresh) {
    SCOPED_TRACE(refresh);
    ASSERT_NO_FATAL_FAILURE(refresh_with(g, alone));
    ASSERT_EQ(g.controller.refreshes(), refresh);
    g.step(alone, blocks(0));
    const double read = g.controller.last_sample() / g.controller.max_rate();
    if (refresh == 1) {
      EXPECT_NEAR(g.controller.max_rate(), (1e6 + launched_alone) / 2.0, 1.0);
      EXPECT_NEAR(read, 1.0 / ((1.0 + 1.0 / 1.05) / 2.0), 1e-4);
    }
    EXPECT_GT(read, 1.0);
    EXPECT_LT(read - 1.0, 0.55 * (previous - 1.0));
    previous = read;
  }
}

TEST(TgsRateControlRefresh, AReprofileMeasuresTheHostTimeAgain) {
  // A refresh moved the host time per block to 4.5 µs; a re-profile then measures the job at
  // 4 µs again, and its corrected sample must read R, as after the first profiling run, not
  // the 4.5 µs the refresh left (which would read it 9% slow).
  const cfg_t cfg = corrected_refreshing_every(3);
  tgs_feed f = make_feed(cfg);
  const job_activity usual = host_and_wait(4e-6, 1e-6);
  ASSERT_NO_FATAL_FAILURE(profile_at_four_and_one(f));
  ASSERT_NO_FATAL_FAILURE(refresh_with(f, host_and_wait(4.5e-6, 0.75e-6)));
  ASSERT_EQ(f.controller.refreshes(), 1);
  // Waits of 10 µs per block: the corrected rate falls by two thirds and the estimator, once the
  // low windows fill it, re-profiles.
  ASSERT_NO_FATAL_FAILURE(step_until(f, host_and_wait(4e-6, 10e-6),
                                     [&] { return f.controller.phase() == tgs_phase::profiling; }));
  ASSERT_NO_FATAL_FAILURE(
      step_until(f, usual, [&] { return f.controller.phase() != tgs_phase::profiling; }));
  EXPECT_NEAR(f.controller.max_rate(), 1e6, 1.0);
  f.step(usual, blocks(0));
  EXPECT_NEAR(f.controller.last_sample() / f.controller.max_rate(), 1.0, 1e-6);
}

TEST(TgsRateControlRefresh, AnIdleWindowEndsTheRefreshAsAControlWindowWithRUnchanged) {
  const cfg_t cfg = refreshing_every(4);
  tgs_feed f = in_control(cfg);
  tgs_feed twin = in_control();
  for (int i = 1; i < 4; ++i) {
    f.window(plateau);
    twin.window(plateau);
  }
  ASSERT_EQ(f.controller.phase(), tgs_phase::refreshing);
  f.window(2 * plateau);  // the discarded first window: no trace of it may remain
  // The production job goes idle in the refresh: the window is the twin's next control window.
  EXPECT_EQ(f.window(0).opportunistic_budget, twin.window(0).opportunistic_budget);
  EXPECT_EQ(f.controller.phase(), twin.controller.phase());
  EXPECT_EQ(f.controller.control_windows(), twin.controller.control_windows());
  EXPECT_EQ(f.controller.budget(), twin.controller.budget());
  EXPECT_DOUBLE_EQ(f.controller.max_rate(), static_cast<double>(plateau));
  EXPECT_EQ(f.controller.refreshes(), 0);
  // The aborted refresh ended, and the idle window was the first control window after it: the
  // next refresh comes K - 1 control windows later.
  for (int i = 1; i < cfg.refresh_every_windows - 1; ++i) {
    EXPECT_EQ(f.window(plateau).opportunistic_budget, twin.window(plateau).opportunistic_budget)
        << "control window " << i;
  }
  f.window(plateau);
  twin.window(plateau);
  EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
  EXPECT_EQ(f.controller.budget(), twin.controller.budget());
}

TEST(TgsRateControlRefresh, IsNotStartedWhileTheOpportunisticJobIsUnthrottled) {
  // Due after control window 18, when 3 idle windows of 5 have unthrottled the opportunistic
  // job: the refresh waits for the first control window that throttles it again.
  tgs_feed f = warmed_up(refreshing_every(18));
  ASSERT_EQ(f.controller.control_windows(), 15);
  for (int i = 0; i < 10; ++i) {
    f.window(0);
    EXPECT_NE(f.controller.phase(), tgs_phase::refreshing) << "idle window " << i;
  }
  ASSERT_EQ(f.controller.phase(), tgs_phase::unthrottled);
  f.window(plateau);  // 4 idle of 5
  f.window(plateau);  // 3 idle of 5
  EXPECT_EQ(f.controller.phase(), tgs_phase::unthrottled);
  EXPECT_FALSE(f.last.opportunistic_budget.has_value());
  f.window(plateau);  // 2 idle of 5: the budget restarts at 20,000, and the refresh is due
  EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
  EXPECT_EQ(f.last.opportunistic_budget, held());
  EXPECT_EQ(f.controller.budget(), 20'000u);
}

TEST(TgsRateControlRefresh, AReprofileOrAnArrivalRestartsTheCount) {
  const cfg_t cfg = refreshing_every(5);
  tgs_feed f = in_control(cfg);
  // Control windows 2 and 3 count towards the refresh; the third 30% window re-profiles (see
  // EstimateBeyondTwentyPercentReprofilesKeepingTheBudget).
  for (int i = 0; i < 3; ++i) f.window(plateau * 13 / 10);
  ASSERT_EQ(f.controller.phase(), tgs_phase::profiling);
  const std::int64_t windows = f.controller.control_windows();
  ASSERT_NO_FATAL_FAILURE(step_until(f, blocks(plateau * 13 / 10),
                                     [&] { return f.controller.phase() != tgs_phase::profiling; }));
  // Profiling ended. Had the count survived the re-profile, the refresh would be due after 2
  // more control windows; it is due after 5.
  ASSERT_EQ(f.controller.control_windows(), windows);
  for (int i = 1; i < cfg.refresh_every_windows; ++i) {
    f.window(plateau * 13 / 10);
    EXPECT_NE(f.controller.phase(), tgs_phase::refreshing) << "control window " << i;
  }
  f.window(plateau * 13 / 10);
  EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
  for (int i = 0; i < cfg.refresh_windows; ++i) f.window(plateau * 13 / 10);
  EXPECT_EQ(f.controller.refreshes(), 1);
  ASSERT_NO_FATAL_FAILURE(step_until(
      f, blocks(plateau * 13 / 10), [&] { return f.controller.phase() == tgs_phase::refreshing; }));
  // The opportunistic job leaves mid-refresh and another arrives: profiling from scratch, no
  // refresh counted yet, and the count of control windows starts again after it.
  f.step(blocks(plateau), std::nullopt);
  f.arrive();
  EXPECT_EQ(f.controller.phase(), tgs_phase::profiling);
  EXPECT_EQ(f.last.opportunistic_budget, held());
  EXPECT_EQ(f.controller.refreshes(), 0);
  ASSERT_NO_FATAL_FAILURE(
      step_until(f, blocks(plateau), [&] { return f.controller.control_windows() > 0; }));
  for (int i = 1; i < cfg.refresh_every_windows; ++i) {
    EXPECT_EQ(f.controller.phase(), tgs_phase::slow_start) << "control window " << i;
    f.window(plateau);
  }
  EXPECT_EQ(f.controller.phase(), tgs_phase::refreshing);
}

// The refresh settings, through the same check as the released ones.
INSTANTIATE_TEST_SUITE_P(
    RefreshFields, TgsRateControlConfig,
    ::testing::Values(
        std::pair{std::string{"refresh_every_windows"},
                  with([](cfg_t& c) { c.refresh_every_windows = -1; })},
        std::pair{std::string{"refresh_windows"}, with([](cfg_t& c) { c.refresh_windows = 1; })},
        std::pair{std::string{"refresh_windows"}, with([](cfg_t& c) {
                    c.refresh_every_windows = 10;
                    c.refresh_windows = 0;
                  })},
        std::pair{std::string{"refresh_weight"}, with([](cfg_t& c) { c.refresh_weight = 0.0; })},
        std::pair{std::string{"refresh_weight"}, with([](cfg_t& c) { c.refresh_weight = 1.01; })},
        std::pair{std::string{"refresh_weight"},
                  with([](cfg_t& c) { c.refresh_weight = std::nan(""); })}),
    config_case_name);

TEST(TgsRateControlRefresh, TheBoundsThemselvesAreAccepted) {
  cfg_t cfg = refreshing_every(1);
  cfg.refresh_windows = 2;
  cfg.refresh_weight = 1.0;
  EXPECT_NO_THROW(tgs_rate_control{cfg});
}

}  // namespace
}  // namespace tgs::test
