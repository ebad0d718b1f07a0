// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests of the seeded class/model assignment and of the explicit random draws under it.
#include "tgs/traces/labels.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "tgs/core/config_error.hpp"
#include "tgs/traces/random.hpp"

namespace tgs::traces {
namespace {

using namespace std::chrono_literals;

trace jobs_of(std::size_t n, tgs::duration run) {
  trace t;
  for (std::size_t i = 0; i < n; ++i) {
    job_record r;
    r.submit = tgs::epoch + std::chrono::seconds{static_cast<std::int64_t>(i)};
    r.run_time = run;
    t.jobs.push_back(r);
  }
  normalise(t);
  return t;
}

TEST(SeededRandom, MatchesTheStandardMersenneTwister) {
  // The C++ standard fixes the 10000th output of a default-seeded mt19937_64
  // ([rand.predef]); tgs's draws inherit that platform independence.
  seeded_random rng{5489};
  std::uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = rng.next();
  EXPECT_EQ(x, 9981545732273789042ULL);
}

TEST(SeededRandom, DrawsStayInRangeAndCoverIt) {
  seeded_random rng{1};
  std::map<std::uint64_t, int> seen;
  double lo = 1;
  double hi = 0;
  for (int i = 0; i < 60000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    ++seen[rng.below(6)];
  }
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
  ASSERT_EQ(seen.size(), 6U);
  // Each face 10000 +- 5 standard deviations (sd = sqrt(60000 * 1/6 * 5/6) ~ 91).
  for (const auto& [face, count] : seen) EXPECT_NEAR(count, 10000, 460) << face;
  const std::uint64_t weights[] = {0, 3, 1};
  int ones = 0;
  for (int i = 0; i < 40000; ++i) {
    const std::size_t k = rng.pick(weights);
    ASSERT_NE(k, 0U);
    ones += k == 1 ? 1 : 0;
  }
  EXPECT_NEAR(ones, 30000, 450);  // 5 sd of a binomial(40000, 3/4)
}

TEST(LogLinearQuantiles, InterpolatesOnTheLogScaleAndKnowsItsMean) {
  const quantile_anchor a[] = {{0.0, 1.0}, {0.5, 100.0}, {1.0, 10000.0}};
  const log_linear_quantiles q{a, 0.0};
  EXPECT_DOUBLE_EQ(q(0.0), 1.0);
  EXPECT_NEAR(q(0.25), 10.0, 1e-9);
  EXPECT_NEAR(q(0.5), 100.0, 1e-9);
  EXPECT_NEAR(q(1.0), 10000.0, 1e-6);
  // Mean of each half: (e^b - e^a) / (b - a) over log values.
  const double expect = 0.5 * (99.0 / std::log(100.0)) + 0.5 * (9900.0 / std::log(100.0));
  EXPECT_NEAR(q.mean(), expect, 1e-6);
  const quantile_anchor bad[] = {{0.0, 5.0}, {1.0, 4.0}};
  EXPECT_THROW((log_linear_quantiles{bad, 0.0}), tgs::config_error);
}

TEST(AssignLabels, ProductionFractionIsHonoured) {
  trace t = jobs_of(20000, 1h);
  assign_labels(t, {.seed = 9, .production_fraction = 0.25, .models = {}, .overwrite = {}});
  std::size_t production = 0;
  for (const job_record& j : t.jobs) {
    ASSERT_TRUE(j.priority.has_value());
    production += *j.priority == tgs::job_class::production ? 1U : 0U;
    EXPECT_FALSE(j.model.has_value());
  }
  // 5000 +- 5 sd (sd ~ 61).
  EXPECT_NEAR(static_cast<double>(production), 5000.0, 310.0);
}

TEST(AssignLabels, ModelsFollowWeightsAndIterationsCoverTheRunTime) {
  trace t = jobs_of(30000, 1000ms);
  assign_labels(t, {.seed = 2,
                    .production_fraction = {},
                    .models = {{"resnet50", 2.0, 300ms, 256}, {"bert", 1.0, std::nullopt, 32}},
                    .overwrite = {}});
  std::size_t resnet = 0;
  for (const job_record& j : t.jobs) {
    ASSERT_TRUE(j.model.has_value());
    if (*j.model == "resnet50") {
      ++resnet;
      EXPECT_EQ(j.iterations, 4U);  // ceil(1000 ms / 300 ms)
      EXPECT_EQ(j.batch_size, 256U);
    } else {
      EXPECT_EQ(*j.model, "bert");
      EXPECT_FALSE(j.iterations.has_value());
      EXPECT_EQ(j.batch_size, 32U);
    }
    EXPECT_FALSE(j.priority.has_value());
  }
  EXPECT_NEAR(static_cast<double>(resnet), 20000.0, 410.0);  // 5 sd of binomial(30000, 2/3)
}

TEST(AssignLabels, IsDeterministicAndSeedSensitive) {
  const label_options options{
      .seed = 11,
      .production_fraction = 0.5,
      .models = {{"a", 1.0, std::nullopt, std::nullopt}, {"b", 1.0, std::nullopt, std::nullopt}},
      .overwrite = {}};
  trace x = jobs_of(1000, 1h);
  trace y = jobs_of(1000, 1h);
  trace z = jobs_of(1000, 1h);
  assign_labels(x, options);
  assign_labels(y, options);
  label_options other = options;
  other.seed = 12;
  assign_labels(z, other);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < x.jobs.size(); ++i) {
    EXPECT_EQ(x.jobs[i].priority, y.jobs[i].priority);
    EXPECT_EQ(x.jobs[i].model, y.jobs[i].model);
    differ +=
        (x.jobs[i].priority != z.jobs[i].priority || x.jobs[i].model != z.jobs[i].model) ? 1U : 0U;
  }
  EXPECT_GT(differ, 500U);
}

TEST(AssignLabels, KeepsExistingFieldsUnlessAskedToOverwrite) {
  trace t = jobs_of(3, 10s);
  t.jobs[0].priority = tgs::job_class::production;
  t.jobs[0].model = "mine";
  t.jobs[1].run_time.reset();
  t.jobs[1].iterations = 7;
  t.jobs[1].model = "known";
  const label_options options{.seed = 1,
                              .production_fraction = 0.0,
                              .models = {{"known", 1.0, 2s, std::nullopt}},
                              .overwrite = {}};
  assign_labels(t, options);
  EXPECT_EQ(t.jobs[0].priority, tgs::job_class::production);
  EXPECT_EQ(t.jobs[0].model, "mine");
  EXPECT_FALSE(t.jobs[0].iterations.has_value());           // "mine" is not described
  EXPECT_EQ(t.jobs[1].run_time, std::chrono::seconds{14});  // 7 iterations x 2 s
  EXPECT_EQ(t.jobs[2].priority, tgs::job_class::opportunistic);
  EXPECT_EQ(t.jobs[2].iterations, 5U);
  label_options overwrite = options;
  overwrite.overwrite = true;
  assign_labels(t, overwrite);
  EXPECT_EQ(t.jobs[0].priority, tgs::job_class::opportunistic);
  EXPECT_EQ(t.jobs[0].model, "known");
  EXPECT_EQ(t.jobs[0].iterations, 5U);
}

TEST(AssignLabels, RejectsInvalidOptions) {
  trace t = jobs_of(1, 1s);
  EXPECT_THROW(
      assign_labels(t, {.seed = {}, .production_fraction = 1.5, .models = {}, .overwrite = {}}),
      tgs::config_error);
  EXPECT_THROW(assign_labels(t, {.seed = {},
                                 .production_fraction = {},
                                 .models = {{"", 1.0, std::nullopt, std::nullopt}},
                                 .overwrite = {}}),
               tgs::config_error);
  EXPECT_THROW(assign_labels(t, {.seed = {},
                                 .production_fraction = {},
                                 .models = {{"m", 0.0, std::nullopt, std::nullopt}},
                                 .overwrite = {}}),
               tgs::config_error);
  EXPECT_THROW(assign_labels(t, {.seed = {},
                                 .production_fraction = {},
                                 .models = {{"m", 1.0, 0s, std::nullopt}},
                                 .overwrite = {}}),
               tgs::config_error);
}

}  // namespace
}  // namespace tgs::traces
