// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `separate_contexts`: a failure ends only the failed job, its share and memory
/// return within the configured time.
#include "tgs/fault/separate_contexts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tgs/core/config_error.hpp"

namespace {

using tgs::fault_kind;
using tgs::fault_observation;
using tgs::job_class;
using tgs::separate_contexts;

constexpr fault_kind all_kinds[] = {fault_kind::crashed, fault_kind::killed,
                                    fault_kind::out_of_memory, fault_kind::gpu_exception};

fault_observation failure(job_class failed, fault_kind kind) {
  fault_observation obs;
  obs.now = tgs::epoch + std::chrono::seconds{42};
  obs.failed = failed;
  obs.kind = kind;
  obs.co_runner_present = true;
  return obs;
}

TEST(SeparateContexts, KillEndsOnlyFailedJob) {
  separate_contexts policy{{}};
  for (job_class failed : {job_class::production, job_class::opportunistic}) {
    const auto d = policy.step(failure(failed, fault_kind::killed));
    EXPECT_FALSE(d.co_runner_terminated) << to_string(failed);
    EXPECT_TRUE(d.reclaim_share);
    EXPECT_TRUE(d.reclaim_memory);
  }
}

TEST(SeparateContexts, NoFaultKindEndsTheCoRunner) {
  separate_contexts policy{{}};
  for (job_class failed : {job_class::production, job_class::opportunistic}) {
    for (fault_kind kind : all_kinds) {
      const auto d = policy.step(failure(failed, kind));
      EXPECT_FALSE(d.co_runner_terminated) << to_string(failed) << " " << to_string(kind);
      EXPECT_TRUE(d.reclaim_share) << to_string(kind);
      EXPECT_TRUE(d.reclaim_memory) << to_string(kind);
    }
  }
}

TEST(SeparateContexts, ReclaimsWithinOneSecondByDefault) {
  separate_contexts policy{{}};
  EXPECT_EQ(policy.settings().reclaim_within, std::chrono::seconds{1});
  EXPECT_EQ(policy.step(failure(job_class::production, fault_kind::crashed)).reclaim_within,
            std::chrono::seconds{1});
}

TEST(SeparateContexts, ReclaimsWithinTheConfiguredTime) {
  separate_contexts policy{{.reclaim_within = std::chrono::milliseconds{200}}};
  EXPECT_EQ(
      policy.step(failure(job_class::opportunistic, fault_kind::gpu_exception)).reclaim_within,
      std::chrono::milliseconds{200});
}

TEST(SeparateContexts, RejectsNonPositiveReclaimWithin) {
  for (tgs::duration bad : {tgs::duration::zero(), tgs::duration{-1}}) {
    try {
      separate_contexts policy{{.reclaim_within = bad}};
      ADD_FAILURE() << "accepted reclaim_within " << bad.count() << " ns";
    } catch (const tgs::config_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("separate_contexts"), std::string::npos) << what;
      EXPECT_NE(what.find("reclaim_within"), std::string::npos) << what;
    }
  }
}

}  // namespace
