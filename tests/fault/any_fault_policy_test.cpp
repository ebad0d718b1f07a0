// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `any_fault_policy` and the fault-policy registry.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "tgs/fault.hpp"

namespace {

using tgs::any_fault_policy;
using tgs::fault_kind;
using tgs::fault_observation;
using tgs::job_class;

TEST(AnyFaultPolicy, EveryRegisteredNameBuildsThatPolicy) {
  std::set<std::string_view> seen;
  for (std::string_view name : tgs::fault_policy_names()) {
    EXPECT_EQ(tgs::make_fault_policy(name).policy_name(), name);
    EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
  }
  EXPECT_EQ(seen, (std::set<std::string_view>{"separate-contexts", "shared-fault-domain"}));
}

TEST(AnyFaultPolicy, UnknownNameThrowsListingKnownNames) {
  try {
    (void)tgs::make_fault_policy("mig");
    ADD_FAILURE() << "accepted an unknown name";
  } catch (const tgs::config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'mig'"), std::string::npos) << what;
    for (std::string_view name : tgs::fault_policy_names()) {
      EXPECT_NE(what.find(name), std::string::npos) << what;
    }
  }
}

TEST(AnyFaultPolicy, DecidesAsTheWrappedPolicy) {
  const tgs::shared_fault_domain::config pessimistic{.abrupt_exit_ends_co_runner = true};
  const any_fault_policy erased_shared{pessimistic};
  const any_fault_policy erased_separate{tgs::separate_contexts::config{}};
  for (fault_kind kind : {fault_kind::crashed, fault_kind::killed, fault_kind::out_of_memory,
                          fault_kind::gpu_exception}) {
    fault_observation obs;
    obs.failed = job_class::opportunistic;
    obs.kind = kind;
    obs.co_runner_present = true;
    EXPECT_EQ(erased_shared.step(obs), tgs::shared_fault_domain{pessimistic}.step(obs));
    EXPECT_EQ(erased_separate.step(obs), tgs::separate_contexts{{}}.step(obs));
  }
}

TEST(AnyFaultPolicy, SettingsReturnTheHeldConfig) {
  const any_fault_policy policy{
      tgs::separate_contexts::config{.reclaim_within = std::chrono::milliseconds{300}}};
  const auto* held = std::get_if<tgs::separate_contexts::config>(&policy.settings());
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->reclaim_within, std::chrono::milliseconds{300});
}

TEST(AnyFaultPolicy, ValidatesTheHeldConfig) {
  EXPECT_THROW(
      any_fault_policy{tgs::shared_fault_domain::config{.reclaim_within = tgs::duration::zero()}},
      tgs::config_error);
}

}  // namespace

namespace settings_tables {

/// The member `flag` of `P`'s settings table points to, as a `T Config::*`; fails when absent.
template <typename P, typename T>
T P::config::*member_of(std::string_view flag) {
  for (const tgs::setting<typename P::config>& s : P::setting_table) {
    if (s.flag == flag) return std::get<T P::config::*>(s.member);
  }
  ADD_FAILURE() << P::name << " has no setting " << flag;
  return nullptr;
}

// The tables are what tgs-node turns into `--fault.<policy>.<setting>`: each entry must reach the
// field that changes the policy's decision.
TEST(FaultSettingsTable, AbruptExitSwitchMakesAKillEndTheCoRunner) {
  tgs::shared_fault_domain::config cfg;
  auto member = member_of<tgs::shared_fault_domain, bool>("abrupt-exit-ends-co-runner");
  ASSERT_NE(member, nullptr);
  const fault_observation killed{
      .failed = job_class::opportunistic, .kind = fault_kind::killed, .co_runner_present = true};
  EXPECT_FALSE(tgs::shared_fault_domain{cfg}.step(killed).co_runner_terminated);
  cfg.*member = true;
  EXPECT_TRUE(tgs::shared_fault_domain{cfg}.step(killed).co_runner_terminated);
}

template <typename P>
void expect_reclaim_deadline_setting() {
  typename P::config cfg;
  auto member = member_of<P, tgs::duration>("reclaim-within-ms");
  ASSERT_NE(member, nullptr);
  cfg.*member = std::chrono::milliseconds{250};
  EXPECT_EQ(any_fault_policy{P{cfg}}.step({}).reclaim_within, std::chrono::milliseconds{250})
      << P::name;
}

TEST(FaultSettingsTable, EveryPolicysReclaimDeadlineIsASetting) {
  expect_reclaim_deadline_setting<tgs::separate_contexts>();
  expect_reclaim_deadline_setting<tgs::shared_fault_domain>();
}

}  // namespace settings_tables
