// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `any_memory_policy` and the memory-policy registry.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "tgs/memory.hpp"

namespace {

using namespace tgs::literals;
using tgs::allocation_request;
using tgs::any_memory_policy;
using tgs::job_class;
using tgs::job_memory;
using tgs::memory_observation;

memory_observation sample(job_class requester) {
  memory_observation obs;
  obs.capacity = 40_GiB;
  obs.production = job_memory{30_GiB, 30_GiB};
  obs.opportunistic = job_memory{18_GiB, 18_GiB};
  obs.request = allocation_request{requester, 4_GiB};
  return obs;
}

TEST(AnyMemoryPolicy, EveryRegisteredNameBuildsThatPolicy) {
  std::set<std::string_view> seen;
  for (std::string_view name : tgs::memory_policy_names()) {
    const any_memory_policy policy = tgs::make_memory_policy(name);
    EXPECT_EQ(policy.policy_name(), name);
    EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(seen, (std::set<std::string_view>{"tgs", "hard-limit", "no-oversubscription",
                                              "unified-memory"}));
}

TEST(AnyMemoryPolicy, UnknownNameThrowsListingKnownNames) {
  try {
    (void)tgs::make_memory_policy("mps");
    ADD_FAILURE() << "accepted an unknown name";
  } catch (const tgs::config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'mps'"), std::string::npos) << what;
    for (std::string_view name : tgs::memory_policy_names()) {
      EXPECT_NE(what.find(name), std::string::npos) << what;
    }
  }
}

TEST(AnyMemoryPolicy, DecidesAsTheWrappedPolicy) {
  const tgs::transparent_unified_memory::config tum_config{.reserve = 2_GiB};
  const tgs::hard_limit::config hard_config{.production_fraction = 0.7};
  const any_memory_policy erased_tum{tum_config};
  const any_memory_policy erased_hard{hard_config};
  const any_memory_policy erased_mps{tgs::no_oversubscription::config{}};
  const any_memory_policy erased_um{tgs::plain_unified_memory::config{}};
  for (job_class requester : {job_class::production, job_class::opportunistic}) {
    const memory_observation obs = sample(requester);
    EXPECT_EQ(erased_tum.step(obs), tgs::transparent_unified_memory{tum_config}.step(obs));
    EXPECT_EQ(erased_hard.step(obs), tgs::hard_limit{hard_config}.step(obs));
    EXPECT_EQ(erased_mps.step(obs), tgs::no_oversubscription{{}}.step(obs));
    EXPECT_EQ(erased_um.step(obs), tgs::plain_unified_memory{{}}.step(obs));
  }
}

TEST(AnyMemoryPolicy, SettingsReturnTheHeldConfig) {
  const any_memory_policy policy{tgs::hard_limit::config{.production_fraction = 0.7}};
  const auto* held = std::get_if<tgs::hard_limit::config>(&policy.settings());
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->production_fraction, 0.7);
  EXPECT_EQ(policy.policy_name(), "hard-limit");
}

TEST(AnyMemoryPolicy, ValidatesTheHeldConfig) {
  EXPECT_THROW(any_memory_policy{tgs::hard_limit::config{.production_fraction = 2.0}},
               tgs::config_error);
}

TEST(AnyMemoryPolicy, AssignmentSwitchesPolicy) {
  any_memory_policy policy = tgs::make_memory_policy("tgs");
  const any_memory_policy other = tgs::make_memory_policy("unified-memory");
  policy = other;
  EXPECT_EQ(policy.policy_name(), "unified-memory");
  EXPECT_FALSE(policy.step(sample(job_class::production)).production_pinned);
}

}  // namespace

TEST(AnyMemoryPolicy, SaysHowEachPolicyMovesPages) {
  using tgs::memory_paging;
  EXPECT_EQ(tgs::any_memory_policy::paging_of_policy("tgs"), memory_paging::policy_eviction);
  EXPECT_EQ(tgs::any_memory_policy::paging_of_policy("unified-memory"), memory_paging::driver_demand);
  EXPECT_EQ(tgs::any_memory_policy::paging_of_policy("hard-limit"), memory_paging::none);
  EXPECT_EQ(tgs::any_memory_policy::paging_of_policy("no-oversubscription"), memory_paging::none);
  EXPECT_FALSE(tgs::any_memory_policy::paging_of_policy("no-such-policy"));
  for (std::string_view name : tgs::memory_policy_names()) {
    EXPECT_TRUE(tgs::any_memory_policy::paging_of_policy(name)) << name;
  }
}
