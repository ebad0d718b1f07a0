// SPDX-License-Identifier: Apache-2.0
/// @file
/// Compile-time checks: every fault policy models `FaultPolicy`, and types that break one
/// requirement each do not.
#include <string_view>

#include "tgs/fault.hpp"

namespace {

using tgs::fault_decision;
using tgs::fault_observation;
using tgs::FaultPolicy;

static_assert(FaultPolicy<tgs::separate_contexts>);
static_assert(FaultPolicy<tgs::shared_fault_domain>);
static_assert(FaultPolicy<tgs::any_fault_policy>);

// A well-formed policy, to show that each counter-example below fails for its one defect only.
struct well_formed {
  struct config {};
  static constexpr std::string_view name = "well-formed";
  explicit well_formed(config) {}
  fault_decision step(const fault_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(FaultPolicy<well_formed>);

// `step` may throw: a driver reacting to a dead process must not fail itself.
struct throwing_step {
  struct config {};
  static constexpr std::string_view name = "throwing-step";
  explicit throwing_step(config) {}
  fault_decision step(const fault_observation&) { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!FaultPolicy<throwing_step>);

// Answers with a bare flag instead of a `fault_decision`: nothing about what is reclaimed.
struct bare_flag {
  struct config {};
  static constexpr std::string_view name = "bare-flag";
  explicit bare_flag(config) {}
  bool step(const fault_observation&) noexcept { return false; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!FaultPolicy<bare_flag>);

// Not copy-assignable: a registry could not swap policies in place.
struct not_assignable {
  struct config {};
  static constexpr std::string_view name = "not-assignable";
  explicit not_assignable(config) {}
  not_assignable(const not_assignable&) = default;
  not_assignable& operator=(const not_assignable&) = delete;
  fault_decision step(const fault_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!FaultPolicy<not_assignable>);

}  // namespace
