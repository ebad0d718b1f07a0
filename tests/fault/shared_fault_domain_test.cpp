// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `shared_fault_domain`: which failures take the co-runner down under MPS.
#include "tgs/fault/shared_fault_domain.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tgs/core/config_error.hpp"

namespace {

using tgs::fault_kind;
using tgs::fault_observation;
using tgs::job_class;
using tgs::shared_fault_domain;

fault_observation failure(job_class failed, fault_kind kind, bool co_runner_present = true) {
  fault_observation obs;
  obs.now = tgs::epoch + std::chrono::seconds{7};
  obs.failed = failed;
  obs.kind = kind;
  obs.co_runner_present = co_runner_present;
  return obs;
}

TEST(SharedFaultDomain, GpuExceptionEndsCoRunner) {
  shared_fault_domain policy{{}};
  for (job_class failed : {job_class::production, job_class::opportunistic}) {
    const auto d = policy.step(failure(failed, fault_kind::gpu_exception));
    EXPECT_TRUE(d.co_runner_terminated) << to_string(failed);
    EXPECT_TRUE(d.reclaim_share);
    EXPECT_TRUE(d.reclaim_memory);
  }
}

TEST(SharedFaultDomain, OutOfMemoryEndsOnlyFailedJob) {
  shared_fault_domain policy{{.abrupt_exit_ends_co_runner = true}};
  const auto d = policy.step(failure(job_class::opportunistic, fault_kind::out_of_memory));
  EXPECT_FALSE(d.co_runner_terminated);
}

TEST(SharedFaultDomain, AbruptExitSparesCoRunnerByDefault) {
  shared_fault_domain policy{{}};
  EXPECT_FALSE(policy.settings().abrupt_exit_ends_co_runner);
  EXPECT_FALSE(
      policy.step(failure(job_class::opportunistic, fault_kind::killed)).co_runner_terminated);
  EXPECT_FALSE(
      policy.step(failure(job_class::production, fault_kind::crashed)).co_runner_terminated);
}

TEST(SharedFaultDomain, AbruptExitEndsCoRunnerWhenConfigured) {
  shared_fault_domain policy{{.abrupt_exit_ends_co_runner = true}};
  EXPECT_TRUE(
      policy.step(failure(job_class::opportunistic, fault_kind::killed)).co_runner_terminated);
  EXPECT_TRUE(
      policy.step(failure(job_class::production, fault_kind::crashed)).co_runner_terminated);
}

TEST(SharedFaultDomain, NothingToEndWithoutCoRunner) {
  shared_fault_domain policy{{.abrupt_exit_ends_co_runner = true}};
  for (fault_kind kind : {fault_kind::crashed, fault_kind::killed, fault_kind::out_of_memory,
                          fault_kind::gpu_exception}) {
    const auto d = policy.step(failure(job_class::production, kind, false));
    EXPECT_FALSE(d.co_runner_terminated) << to_string(kind);
    EXPECT_TRUE(d.reclaim_memory) << to_string(kind);
  }
}

TEST(SharedFaultDomain, ReclaimsWithinTheConfiguredTime) {
  shared_fault_domain policy{{.reclaim_within = std::chrono::milliseconds{500}}};
  EXPECT_EQ(policy.step(failure(job_class::production, fault_kind::gpu_exception)).reclaim_within,
            std::chrono::milliseconds{500});
}

TEST(SharedFaultDomain, RejectsNonPositiveReclaimWithin) {
  try {
    shared_fault_domain policy{{.reclaim_within = tgs::duration::zero()}};
    ADD_FAILURE() << "accepted reclaim_within 0";
  } catch (const tgs::config_error& e) {
    EXPECT_STREQ(e.what(), "shared_fault_domain: reclaim_within must be positive, got 0 ns");
  }
}

}  // namespace
