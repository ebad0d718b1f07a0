// SPDX-License-Identifier: Apache-2.0
/// @file
/// Compile-time checks: every memory policy models `MemoryPolicy`, and types that break one
/// requirement each do not.
#include <string_view>

#include "tgs/memory.hpp"

namespace {

using tgs::memory_decision;
using tgs::memory_observation;
using tgs::MemoryPolicy;

static_assert(MemoryPolicy<tgs::transparent_unified_memory>);
static_assert(MemoryPolicy<tgs::hard_limit>);
static_assert(MemoryPolicy<tgs::no_oversubscription>);
static_assert(MemoryPolicy<tgs::plain_unified_memory>);
static_assert(MemoryPolicy<tgs::any_memory_policy>);

// A well-formed policy, to show that each counter-example below fails for its one defect only.
struct well_formed {
  struct config {};
  static constexpr std::string_view name = "well-formed";
  explicit well_formed(config) {}
  memory_decision step(const memory_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(MemoryPolicy<well_formed>);

// `step` may throw: a driver could not call it from an allocation hook.
struct throwing_step {
  struct config {};
  static constexpr std::string_view name = "throwing-step";
  explicit throwing_step(config) {}
  memory_decision step(const memory_observation&) { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!MemoryPolicy<throwing_step>);

// `step` answers something other than a `memory_decision` (an untyped verdict).
struct untyped_decision {
  struct config {};
  static constexpr std::string_view name = "untyped-decision";
  explicit untyped_decision(config) {}
  int step(const memory_observation&) noexcept { return 0; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!MemoryPolicy<untyped_decision>);

// Not copyable: the simulator forks policies by copying them.
struct move_only {
  struct config {};
  static constexpr std::string_view name = "move-only";
  explicit move_only(config) {}
  move_only(move_only&&) = default;
  move_only(const move_only&) = delete;
  memory_decision step(const memory_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!MemoryPolicy<move_only>);

// No `settings()`: a driver could not report what it runs with.
struct no_settings {
  struct config {};
  static constexpr std::string_view name = "no-settings";
  explicit no_settings(config) {}
  memory_decision step(const memory_observation&) noexcept { return {}; }
};
static_assert(!MemoryPolicy<no_settings>);

// No `name`: the registry could not list it.
struct nameless {
  struct config {};
  explicit nameless(config) {}
  memory_decision step(const memory_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!MemoryPolicy<nameless>);

// Not constructible from its `config`: settings could not be validated at construction.
struct unconfigurable {
  struct config {};
  static constexpr std::string_view name = "unconfigurable";
  unconfigurable() {}  // user-provided, so not an aggregate that `config` could initialise
  memory_decision step(const memory_observation&) noexcept { return {}; }
  const config& settings() const noexcept { return config_; }
  config config_;
};
static_assert(!MemoryPolicy<unconfigurable>);

}  // namespace
