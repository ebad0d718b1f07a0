// SPDX-License-Identifier: Apache-2.0
/// @file
/// Behaviour of `no_oversubscription`: device memory only, first come first served.
#include "tgs/memory/no_oversubscription.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace {

using namespace tgs::literals;
using tgs::allocation_request;
using tgs::allocation_verdict;
using tgs::bytes;
using tgs::job_class;
using tgs::job_memory;
using tgs::memory_observation;
using tgs::no_oversubscription;

memory_observation on_40_gib(std::optional<job_memory> production,
                             std::optional<job_memory> opportunistic,
                             std::optional<allocation_request> request) {
  memory_observation obs;
  obs.capacity = 40_GiB;
  obs.production = production;
  obs.opportunistic = opportunistic;
  obs.request = request;
  return obs;
}

TEST(NoOversubscription, RefusesColocationThatDoesNotFit) {
  no_oversubscription policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, std::nullopt,
                                       allocation_request{job_class::opportunistic, 12_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(NoOversubscription, AdmitsColocationThatFitsExactly) {
  no_oversubscription policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, std::nullopt,
                                       allocation_request{job_class::opportunistic, 10_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::grant_device);
}

TEST(NoOversubscription, GivesProductionNoPriority) {
  // The opportunistic job came first; the production job's growth fails instead of evicting it.
  no_oversubscription policy{{}};
  const auto d = policy.step(on_40_gib(job_memory{15_GiB, 15_GiB}, job_memory{20_GiB, 20_GiB},
                                       allocation_request{job_class::production, 6_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

TEST(NoOversubscription, NeverEvicts) {
  no_oversubscription policy{{}};
  const auto d =
      policy.step(on_40_gib(job_memory{30_GiB, 30_GiB}, job_memory{10_GiB, 10_GiB}, std::nullopt));
  EXPECT_FALSE(d.verdict.has_value());
  EXPECT_EQ(d.opportunistic_resident_limit, bytes::max());
  EXPECT_TRUE(d.production_pinned);
}

TEST(NoOversubscription, SumsNearTheLimitOfBytesDoNotWrapAround) {
  no_oversubscription policy{{}};
  // A wrapped sum of these two would be small and pass the check.
  const auto d = policy.step(on_40_gib(job_memory{bytes::max(), 0_GiB}, job_memory{2_GiB, 0_GiB},
                                       allocation_request{job_class::opportunistic, 1_GiB}));
  EXPECT_EQ(d.verdict, allocation_verdict::deny_out_of_memory);
}

}  // namespace
