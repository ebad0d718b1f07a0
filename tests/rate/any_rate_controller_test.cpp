// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `any_rate_controller` and the controller registry used by CLIs and bindings.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate.hpp"

namespace tgs::test {
namespace {

/// The wrapped `tgs_rate_control` (the test fails loudly if there is none).
const tgs_rate_control& as_tgs(const any_rate_controller& c) {
  if (const auto* t = c.target<tgs_rate_control>()) return *t;
  throw std::logic_error("not a tgs_rate_control");
}

TEST(AnyRateController, MakesEveryRegisteredPolicyByName) {
  for (std::string_view policy : rate_controller_names()) {
    const auto c = make_rate_controller(policy);
    ASSERT_TRUE(c.has_value()) << policy;
    EXPECT_EQ(c->policy_name(), policy);
  }
}

TEST(AnyRateController, UnknownNameGivesNothingAndTheListNamesAll) {
  EXPECT_FALSE(make_rate_controller("foo").has_value());
  EXPECT_FALSE(make_rate_controller("").has_value());
  EXPECT_EQ(rate_controller_list(),
            "tgs, idle-harvest, priority-share, exclusive, co-execution, mps, mig, antman, token-bucket, time-slice-lock");
}

TEST(AnyRateController, BehavesExactlyLikeTheWrappedController) {
  const auto observations = observation_sequence(42, 500);
  any_rate_controller erased{tgs_rate_control::config{}};
  tgs_rate_control direct{{}};
  for (const auto& obs : observations) ASSERT_EQ(erased.step(obs), direct.step(obs));
  EXPECT_EQ(as_tgs(erased).phase(), direct.phase());
  EXPECT_EQ(as_tgs(erased).budget(), direct.budget());
  EXPECT_DOUBLE_EQ(as_tgs(erased).max_rate(), direct.max_rate());
  EXPECT_EQ(erased.target<mps>(), nullptr);
}

TEST(AnyRateController, ConfigAlternativeChoosesThePolicy) {
  const any_rate_controller c{mps::config{.production_threads = 0.5, .opportunistic_threads = 0.5}};
  EXPECT_EQ(c.policy_name(), "mps");
  EXPECT_EQ(any_rate_controller::name, "any");
  ASSERT_TRUE(std::holds_alternative<mps::config>(c.settings()));
  EXPECT_DOUBLE_EQ(std::get<mps::config>(c.settings()).production_threads, 0.5);
}

TEST(AnyRateController, WrapsABuiltControllerWithItsSettings) {
  const any_rate_controller c{token_bucket{{.budget_blocks = 77}}};
  EXPECT_EQ(c.policy_name(), "token-bucket");
  EXPECT_EQ(std::get<token_bucket::config>(c.settings()).budget_blocks, 77u);
}

TEST(AnyRateController, ConstructionValidatesTheWrappedConfig) {
  try {
    any_rate_controller c{mig::config{.production_slices = 7}};
    FAIL() << "accepted 7 + 3 slices of 7";
  } catch (const config_error& e) {
    EXPECT_NE(std::string{e.what()}.find("mig: production_slices"), std::string::npos);
  }
}

TEST(AnyRateController, CopiesAreIndependent) {
  any_rate_controller a{tgs_rate_control::config{}};
  (void)a.step({epoch, 0s, blocks(0), blocks(0)});  // arrival: profiling
  any_rate_controller b = a;
  // Driving the original into control must not move the copy.
  for (int i = 1; i <= 11; ++i) (void)a.step({epoch + i * 5s, 5s, blocks(1'000'000), blocks(0)});
  EXPECT_EQ(as_tgs(a).phase(), tgs_phase::slow_start);
  EXPECT_EQ(as_tgs(b).phase(), tgs_phase::profiling);
}

TEST(AnyRateController, DefaultConfigOfUnknownPolicyIsEmpty) {
  EXPECT_FALSE(any_rate_controller::default_config("Tgs").has_value());
  ASSERT_TRUE(any_rate_controller::default_config("antman").has_value());
  EXPECT_TRUE(std::holds_alternative<antman::config>(*any_rate_controller::default_config("antman")));
}

}  // namespace
}  // namespace tgs::test

TEST(AnyRateController, OnlyTheTokenBucketHasAFixedBlockBudget) {
  for (std::string_view name : tgs::rate_controller_names()) {
    const auto t = tgs::any_rate_controller::traits_of_policy(name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->fixed_block_budget, name == "token-bucket") << name;
  }
  EXPECT_FALSE(tgs::any_rate_controller::traits_of_policy("no-such-policy"));
}
