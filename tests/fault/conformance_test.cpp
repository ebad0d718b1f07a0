// SPDX-License-Identifier: Apache-2.0
/// @file
/// The `FaultPolicy` conformance suite, run for every fault policy and for the type-erased
/// wrapper holding each of them: determinism under replay, bounds, no allocation in `step`.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "support/allocation_counter.hpp"
#include "support/conformance.hpp"
#include "tgs/fault.hpp"

namespace {

using tgs::fault_decision;
using tgs::fault_kind;
using tgs::fault_observation;

// --- the policies under test ------------------------------------------------------------------

struct separate {
  static constexpr const char* label = "SeparateContexts";
  static tgs::separate_contexts make() { return tgs::separate_contexts{{}}; }
};
struct shared {
  static constexpr const char* label = "SharedFaultDomain";
  static tgs::shared_fault_domain make() { return tgs::shared_fault_domain{{}}; }
};
struct shared_pessimistic {
  static constexpr const char* label = "SharedFaultDomainPessimistic";
  static tgs::shared_fault_domain make() {
    return tgs::shared_fault_domain{
        {.abrupt_exit_ends_co_runner = true, .reclaim_within = std::chrono::milliseconds{250}}};
  }
};
template <std::size_t Index>
struct erased {
  static std::string label_text() {
    std::string label = "Any_" + std::string(tgs::fault_policy_names()[Index]);
    for (char& c : label) c = c == '-' ? '_' : c;  // gtest names allow [A-Za-z0-9_] only
    return label;
  }
  static tgs::any_fault_policy make() {
    return tgs::make_fault_policy(tgs::fault_policy_names()[Index]);
  }
};

template <typename T>
concept has_label = requires {
  T::label;
};

struct factory_names {
  template <typename Factory>
  static std::string GetName(int) {
    if constexpr (has_label<Factory>) {
      return Factory::label;
    } else {
      return Factory::label_text();
    }
  }
};

using factories = ::testing::Types<separate, shared, shared_pessimistic, erased<0>, erased<1>>;

static_assert(tgs::fault_policy_names().size() == 2,
              "add an erased<> factory for every registered fault policy");

// --- observations -----------------------------------------------------------------------------

// A pseudo-random but reproducible stream of failures of either class, every kind, with and
// without a co-runner.
std::vector<fault_observation> random_observations(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<std::uint64_t> gap{0, 5'000'000'000};
  std::uniform_int_distribution<int> kind{0, 3};
  std::bernoulli_distribution coin{0.5};
  std::vector<fault_observation> out;
  out.reserve(n);
  tgs::instant now = tgs::epoch;
  for (std::size_t i = 0; i < n; ++i) {
    now += std::chrono::nanoseconds{gap(rng)};
    fault_observation obs;
    obs.now = now;
    obs.failed = coin(rng) ? tgs::job_class::production : tgs::job_class::opportunistic;
    obs.kind = static_cast<fault_kind>(kind(rng));
    obs.co_runner_present = coin(rng);
    out.push_back(obs);
  }
  return out;
}

constexpr std::uint64_t seed = 20230417;  // any fixed value: replays must not depend on it
constexpr std::size_t steps = 2000;

// --- the suite --------------------------------------------------------------------------------

template <typename Factory>
class FaultPolicyConformance : public ::testing::Test {};
TYPED_TEST_SUITE(FaultPolicyConformance, factories, factory_names);

TYPED_TEST(FaultPolicyConformance, ReplayGivesTheSameDecisions) {
  tgs::testing::expect_replay_gives_the_same_decisions([] { return TypeParam::make(); },
                                                      random_observations(seed, steps));
}

TYPED_TEST(FaultPolicyConformance, MidRunCopyContinuesIdentically) {
  tgs::testing::expect_mid_run_copy_continues_identically([] { return TypeParam::make(); },
                                                         random_observations(seed + 1, steps));
}

TYPED_TEST(FaultPolicyConformance, DecisionsStayWithinBounds) {
  const auto observations = random_observations(seed + 2, steps);
  auto policy = TypeParam::make();
  for (std::size_t i = 0; i < observations.size(); ++i) {
    const fault_observation& obs = observations[i];
    const fault_decision d = policy.step(obs);
    // There is no co-runner to end when none is present.
    EXPECT_TRUE(obs.co_runner_present || !d.co_runner_terminated) << "step " << i;
    EXPECT_GT(d.reclaim_within, tgs::duration::zero()) << "step " << i;
  }
}

TYPED_TEST(FaultPolicyConformance, StepDoesNotAllocate) {
  const auto observations = random_observations(seed + 3, steps);
  auto policy = TypeParam::make();
  std::int64_t sink = 0;
  tgs::testing::allocation_scope scope;
  for (const auto& obs : observations) {
    const fault_decision d = policy.step(obs);
    sink += d.reclaim_within.count() + (d.co_runner_terminated ? 1 : 0);
  }
  EXPECT_EQ(scope.allocations(), 0U);
  EXPECT_NE(sink, 0);  // keeps the loop observable
}

TEST(AllocationCounter, CountsAllocationsInScopeOnly) {
  void* outside = ::operator new(64);
  std::uint64_t seen = 0;
  {
    tgs::testing::allocation_scope scope;
    void* inside = ::operator new(64);
    ::operator delete(inside);
    seen = scope.allocations();
  }
  ::operator delete(outside);
  EXPECT_EQ(seen, 1U);
}

}  // namespace
