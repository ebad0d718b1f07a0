// SPDX-License-Identifier: Apache-2.0
/// @file
/// The `///` examples of the rate-control headers, compiled and run, so the documentation cannot
/// drift from the code.
#include <cassert>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "tgs/rate.hpp"

namespace {

TEST(RateDocExamples, ConceptSeam) {
  tgs::tgs_rate_control c{{}};
  tgs::rate_decision d = c.step({.now = tgs::epoch, .window = {}, .production = {}, .opportunistic = {}});
  EXPECT_EQ(d.revisit_at, tgs::never);
}

TEST(RateDocExamples, TgsRateControl) {
  tgs::tgs_rate_control c{{}};
  tgs::rate_observation obs{.now = tgs::epoch, .window = {},
                            .production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}};
  tgs::rate_decision d = c.step(obs);  // an arrival: profiling starts, the opportunistic job is held
  EXPECT_TRUE(d.opportunistic_budget == 0u && c.phase() == tgs::tgs_phase::profiling);
}

TEST(RateDocExamples, StaticModes) {
  {
    tgs::exclusive c{{}};
    auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
    EXPECT_TRUE(d.opportunistic_budget == 0u);
  }
  {
    tgs::co_execution c{{}};
    auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
    EXPECT_TRUE(!d.opportunistic_budget && d.revisit_at == tgs::never);
  }
  {
    tgs::mps c{{.production_threads = 0.5, .opportunistic_threads = 0.5}};
    auto d = c.step({});
    EXPECT_TRUE(std::get<tgs::mps_partition>(d.share).production_threads == 0.5);
  }
  {
    tgs::mig c{{}};
    auto d = c.step({});
    EXPECT_TRUE(std::get<tgs::mig_partition>(d.share).total_slices == 7);
  }
  {
    tgs::token_bucket c{{.budget_blocks = 5000}};
    auto d = c.step({});
    EXPECT_TRUE(d.opportunistic_budget == 5000u);
  }
}

TEST(RateDocExamples, FeedbackModes) {
  {
    tgs::antman c{{}};
    auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
    EXPECT_TRUE(d.opportunistic_budget == 0u);  // learning the baseline
  }
  {
    tgs::time_slice_lock c{{}};
    auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
    EXPECT_TRUE(std::get<tgs::exclusive_turn>(d.share).holder == tgs::job_class::production);
  }
}

TEST(RateDocExamples, AnyRateController) {
  std::ostringstream out;
  auto& cout = out;  // the example writes to std::cout; capture it here
  {
    std::optional<tgs::any_rate_controller> c = tgs::make_rate_controller("tgs");  // defaults
    tgs::any_rate_controller m{tgs::mps::config{.production_threads = 0.5}};
    tgs::rate_decision d = c->step({});
    std::string_view which = m.policy_name();  // "mps"
    if (const auto* t = c->target<tgs::tgs_rate_control>()) {
      cout << to_string(t->phase()) << '\n';  // the concrete accessors stay reachable
    }
    EXPECT_EQ(which, "mps");
    EXPECT_EQ(d.revisit_at, tgs::never);
  }
  EXPECT_EQ(out.str(), "unthrottled\n");
  out.str("");
  for (std::string_view n : tgs::rate_controller_names()) cout << n << '\n';
  EXPECT_EQ(out.str().substr(0, 4), "tgs\n");

  const std::string flag = "foo";
  try {
    auto c = tgs::make_rate_controller(flag);
    if (!c) throw std::invalid_argument("unknown policy '" + flag + "'; known: " +
                                        tgs::rate_controller_list());
    FAIL() << "'foo' is not a policy";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string{e.what()},
              "unknown policy 'foo'; known: tgs, idle-harvest, priority-share, exclusive, co-execution, mps, mig, antman, "
              "token-bucket, time-slice-lock");
  }
}

}  // namespace
