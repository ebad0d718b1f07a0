// SPDX-License-Identifier: Apache-2.0
/// @file
/// The typed conformance suite every rate controller passes: determinism under replay, decision
/// bounds, and no allocation in `step`.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include <gtest/gtest.h>

#include "rate_test_support.hpp"
#include "tgs/rate.hpp"

// Replacement global allocation functions that count calls made inside a `count_allocations`
// scope on the calling thread. This is the only translation unit of tgs-test-rate defining them.
namespace {
void* counted_allocate(std::size_t size) {
  if (tgs::test::counting_allocations) tgs::test::allocation_count.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc{};
}
void* counted_allocate_aligned(std::size_t size, std::align_val_t align) {
  if (tgs::test::counting_allocations) tgs::test::allocation_count.fetch_add(1);
  const auto a = static_cast<std::size_t>(align);
  const std::size_t rounded = (size + a - 1) / a * a;
  if (void* p = std::aligned_alloc(a, rounded == 0 ? a : rounded)) return p;
  throw std::bad_alloc{};
}
}  // namespace

void* operator new(std::size_t size) { return counted_allocate(size); }
void* operator new[](std::size_t size) { return counted_allocate(size); }
void* operator new(std::size_t size, std::align_val_t a) { return counted_allocate_aligned(size, a); }
void* operator new[](std::size_t size, std::align_val_t a) {
  return counted_allocate_aligned(size, a);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace tgs::test {
namespace {

constexpr std::uint64_t seed = 0x7467732d72617465ULL;  // "tgs-rate"
constexpr std::size_t steps = 4'000;

template <typename C>
C make_default() {
  return C{typename C::config{}};
}

template <typename C>
class RateControllerConformance : public ::testing::Test {};

using controllers = ::testing::Types<tgs_rate_control, idle_harvest, exclusive, co_execution, mps, mig, antman,
                                     token_bucket, time_slice_lock, any_rate_controller>;
TYPED_TEST_SUITE(RateControllerConformance, controllers);

TYPED_TEST(RateControllerConformance, ReplayGivesIdenticalDecisions) {
  const auto observations = observation_sequence(seed, steps);
  TypeParam a = make_default<TypeParam>();
  TypeParam b = make_default<TypeParam>();
  for (const auto& obs : observations) {
    const rate_decision da = a.step(obs);
    const rate_decision db = b.step(obs);
    ASSERT_EQ(da, db) << "at t = " << to_seconds(obs.now.time_since_epoch()) << " s";
  }
}

TYPED_TEST(RateControllerConformance, CopyMadeMidRunContinuesIdentically) {
  const auto observations = observation_sequence(seed + 1, steps);
  TypeParam original = make_default<TypeParam>();
  const std::size_t half = observations.size() / 2;
  for (std::size_t i = 0; i < half; ++i) (void)original.step(observations[i]);
  TypeParam copy = original;
  TypeParam assigned = make_default<TypeParam>();
  assigned = original;
  for (std::size_t i = half; i < observations.size(); ++i) {
    const rate_decision d = original.step(observations[i]);
    ASSERT_EQ(copy.step(observations[i]), d) << "copy diverged at step " << i;
    ASSERT_EQ(assigned.step(observations[i]), d) << "assigned copy diverged at step " << i;
  }
}

TYPED_TEST(RateControllerConformance, DecisionsStayInBounds) {
  const auto observations = observation_sequence(seed + 2, steps);
  TypeParam c = make_default<TypeParam>();
  for (const auto& obs : observations) {
    const rate_decision d = c.step(obs);
    expect_valid(d, obs);
    if (::testing::Test::HasFailure()) {
      FAIL() << "invalid decision at t = " << to_seconds(obs.now.time_since_epoch()) << " s";
    }
  }
}

TYPED_TEST(RateControllerConformance, StepDoesNotAllocate) {
  const auto observations = observation_sequence(seed + 3, steps);
  TypeParam c = make_default<TypeParam>();
  std::size_t allocations = 0;
  std::uint64_t budgets = 0;  // consumed below, so the loop cannot be optimised away
  {
    count_allocations scope;
    for (const auto& obs : observations) {
      budgets += c.step(obs).opportunistic_budget.value_or(1);
    }
    allocations = scope.count();
  }
  EXPECT_EQ(allocations, 0u);
  EXPECT_GT(budgets, 0u);
}

TYPED_TEST(RateControllerConformance, DescribeDoesNotAllocateAndNamesItsFields) {
  const auto observations = observation_sequence(seed + 4, steps);
  TypeParam c = make_default<TypeParam>();
  std::size_t allocations = 0;
  std::size_t fields = 0;
  {
    count_allocations scope;
    for (const auto& obs : observations) {
      (void)c.step(obs);
      const state_report r = c.describe();
      fields += r.fields().size();
      for (const state_field& f : r.fields()) {
        if (f.key.empty()) {
          counting_allocations = false;
          FAIL() << "a state field without a name";
        }
      }
    }
    allocations = scope.count();
  }
  EXPECT_EQ(allocations, 0u);
  (void)fields;
}

TEST(AllocationCounter, CountsAllocationsInsideItsScopeOnly) {
  // The counter must be able to see an allocation, or StepDoesNotAllocate proves nothing.
  std::vector<int>* outside = new std::vector<int>(16);
  std::size_t inside = 0;
  {
    count_allocations scope;
    auto* p = new std::vector<int>(16);
    inside = scope.count();
    delete p;
  }
  delete outside;
  EXPECT_GE(inside, 2u);  // the vector object and its buffer
}

TEST(AnyRateControllerConformance, EveryRegisteredPolicyReplaysAndDoesNotAllocate) {
  const auto observations = observation_sequence(seed + 4, steps);
  for (std::string_view policy : rate_controller_names()) {
    SCOPED_TRACE(policy);
    auto a = make_rate_controller(policy);
    ASSERT_TRUE(a.has_value());
    any_rate_controller b = *a;
    std::size_t allocations = 0;
    {
      count_allocations scope;
      for (const auto& obs : observations) {
        const rate_decision da = a->step(obs);
        const rate_decision db = b.step(obs);
        if (!(da == db)) {
          counting_allocations = false;
          FAIL() << "copies diverged";
        }
        expect_valid(da, obs);
      }
      allocations = scope.count();
    }
    EXPECT_EQ(allocations, 0u);
  }
}

}  // namespace
}  // namespace tgs::test
