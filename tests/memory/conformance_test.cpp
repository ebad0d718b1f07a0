// SPDX-License-Identifier: Apache-2.0
/// @file
/// The `MemoryPolicy` conformance suite, run for every memory policy and for the type-erased
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
#include "tgs/memory.hpp"

namespace {

using namespace tgs::literals;
using tgs::bytes;
using tgs::memory_decision;
using tgs::memory_observation;

// --- the policies under test ------------------------------------------------------------------

struct tum {
  static constexpr const char* label = "TransparentUnifiedMemory";
  static tgs::transparent_unified_memory make() { return tgs::transparent_unified_memory{{}}; }
};
struct hard {
  static constexpr const char* label = "HardLimit";
  static tgs::hard_limit make() { return tgs::hard_limit{{.production_fraction = 0.6}}; }
};
struct hard_explicit {
  static constexpr const char* label = "HardLimitExplicit";
  static tgs::hard_limit make() {
    return tgs::hard_limit{{.production_limit = 30_GiB, .opportunistic_limit = 30_GiB}};
  }
};
struct no_oversubscription {
  static constexpr const char* label = "NoOversubscription";
  static tgs::no_oversubscription make() { return tgs::no_oversubscription{{}}; }
};
struct unified {
  static constexpr const char* label = "PlainUnifiedMemory";
  static tgs::plain_unified_memory make() { return tgs::plain_unified_memory{{}}; }
};
template <std::size_t Index>
struct erased {
  static std::string label_text() {
    std::string label = "Any_" + std::string(tgs::memory_policy_names()[Index]);
    for (char& c : label) c = c == '-' ? '_' : c;  // gtest names allow [A-Za-z0-9_] only
    return label;
  }
  static tgs::any_memory_policy make() {
    return tgs::make_memory_policy(tgs::memory_policy_names()[Index]);
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

using factories = ::testing::Types<tum, hard, hard_explicit, no_oversubscription, unified,
                                   erased<0>, erased<1>, erased<2>, erased<3>>;

static_assert(tgs::memory_policy_names().size() == 4,
              "add an erased<> factory for every registered memory policy");

// --- observations -----------------------------------------------------------------------------

// A pseudo-random but reproducible stream of observations: ordinary footprints, oversubscribed
// GPUs, absent jobs, zero capacity, and byte counts near 2^64 that would overflow naive sums.
std::vector<memory_observation> random_observations(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng{seed};
  auto chance = [&rng](double p) { return std::bernoulli_distribution{p}(rng); };
  auto up_to = [&rng](std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>{0, hi}(rng);
  };
  const std::uint64_t capacities[] = {0, (16_GiB).count(), (40_GiB).count(), (80_GiB).count(),
                                      (141_GiB).count()};

  std::vector<memory_observation> out;
  out.reserve(n);
  tgs::instant now = tgs::epoch;
  for (std::size_t i = 0; i < n; ++i) {
    now += std::chrono::nanoseconds{up_to(10'000'000)};
    memory_observation obs;
    obs.now = now;
    const bool extreme = chance(0.05);
    const std::uint64_t capacity =
        extreme ? up_to(bytes::max().count()) : capacities[up_to(std::size(capacities) - 1)];
    obs.capacity = bytes{capacity};
    const std::uint64_t footprint_max = extreme ? bytes::max().count() : capacity + capacity / 2;
    auto job = [&]() {
      const bytes allocated{up_to(footprint_max)};
      return tgs::job_memory{allocated, bytes{up_to(allocated.count())}};
    };
    if (chance(0.7)) obs.production = job();
    if (chance(0.6)) obs.opportunistic = job();
    if (chance(0.6)) {
      obs.request = tgs::allocation_request{
          chance(0.5) ? tgs::job_class::production : tgs::job_class::opportunistic,
          bytes{up_to(extreme ? bytes::max().count() : capacity / 2)}};
      obs.request->movable = chance(0.8);
    }
    out.push_back(obs);
  }
  return out;
}

constexpr std::uint64_t seed = 20230417;  // any fixed value: replays must not depend on it
constexpr std::size_t steps = 5000;

// --- the suite --------------------------------------------------------------------------------

template <typename Factory>
class MemoryPolicyConformance : public ::testing::Test {};
TYPED_TEST_SUITE(MemoryPolicyConformance, factories, factory_names);

TYPED_TEST(MemoryPolicyConformance, ReplayGivesTheSameDecisions) {
  tgs::testing::expect_replay_gives_the_same_decisions([] { return TypeParam::make(); },
                                                      random_observations(seed, steps));
}

TYPED_TEST(MemoryPolicyConformance, MidRunCopyContinuesIdentically) {
  tgs::testing::expect_mid_run_copy_continues_identically([] { return TypeParam::make(); },
                                                         random_observations(seed + 1, steps));
}

TYPED_TEST(MemoryPolicyConformance, DecisionsStayWithinBounds) {
  const auto observations = random_observations(seed + 2, steps);
  auto policy = TypeParam::make();
  for (std::size_t i = 0; i < observations.size(); ++i) {
    const memory_observation& obs = observations[i];
    const memory_decision d = policy.step(obs);
    EXPECT_TRUE(d.opportunistic_resident_limit <= obs.capacity ||
                d.opportunistic_resident_limit == bytes::max())
        << "step " << i << ": resident limit " << d.opportunistic_resident_limit.count()
        << " above capacity " << obs.capacity.count();
    EXPECT_EQ(d.verdict.has_value(), obs.request.has_value()) << "step " << i;
    if (obs.request && !obs.request->movable) {
      EXPECT_NE(d.verdict, tgs::allocation_verdict::grant_managed)
          << "step " << i << ": memory the driver cannot manage was granted as managed";
    }
    EXPECT_TRUE(d.revisit_at == tgs::never || d.revisit_at > obs.now) << "step " << i;
  }
}

TYPED_TEST(MemoryPolicyConformance, StepDoesNotAllocate) {
  const auto observations = random_observations(seed + 3, steps);
  auto policy = TypeParam::make();
  std::uint64_t sink = 0;
  tgs::testing::allocation_scope scope;
  for (const auto& obs : observations) {
    const memory_decision d = policy.step(obs);
    sink += d.opportunistic_resident_limit.count() + (d.verdict ? 1U : 0U);
  }
  EXPECT_EQ(scope.allocations(), 0U);
  EXPECT_NE(sink, 0U);  // keeps the loop observable
}

// The allocation check above can fail: the counter sees an allocation made in its scope and
// none made outside it.
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
