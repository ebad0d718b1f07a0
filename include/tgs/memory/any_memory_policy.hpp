// SPDX-License-Identifier: Apache-2.0
/// @file
/// `any_memory_policy`: a memory policy chosen at run time (CLI flag, Python), plus the registry
/// `make_memory_policy` / `memory_policy_names`.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tgs/core/config_error.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/hard_limit.hpp"
#include "tgs/memory/no_oversubscription.hpp"
#include "tgs/memory/plain_unified_memory.hpp"
#include "tgs/memory/transparent_unified_memory.hpp"

namespace tgs {

/// One of the memory policies, chosen at run time. It models `MemoryPolicy` itself, so a driver
/// templated on the concept takes it unchanged; hot loops that know the policy at compile time
/// should use the concrete type.
///
/// It holds the policy by value in a `std::variant`: copying forks it, and `step` neither
/// allocates nor throws.
///
/// ```cpp
/// tgs::any_memory_policy policy = tgs::make_memory_policy("hard-limit");
/// // or, with settings:
/// tgs::any_memory_policy tum{tgs::transparent_unified_memory::config{.reserve = tgs::bytes{0}}};
/// std::string_view chosen = tum.policy_name();  // "tgs"
/// ```
class any_memory_policy {
 public:
  /// The settings of whichever policy is held; the alternative selects the policy.
  using config = std::variant<transparent_unified_memory::config, hard_limit::config,
                              no_oversubscription::config, plain_unified_memory::config>;

  /// The wrapper's own name; `policy_name()` is the name of the policy it holds.
  static constexpr std::string_view name = "any-memory-policy";

  /// Builds the policy `cfg` selects; throws `config_error` as that policy's constructor does.
  explicit any_memory_policy(config cfg) : config_(cfg), policy_(std::visit(from_config{}, cfg)) {}

  [[nodiscard]] memory_decision step(const memory_observation& obs) const noexcept {
    return std::visit([&obs](const auto& policy) noexcept { return policy.step(obs); }, policy_);
  }

  /// The registry name of the held policy (`"tgs"`, `"hard-limit"`, ...).
  [[nodiscard]] std::string_view policy_name() const noexcept {
    return std::visit([](const auto& policy) noexcept { return std::string_view{policy.name}; },
                      policy_);
  }

  [[nodiscard]] const config& settings() const noexcept { return config_; }

 private:
  using policies = std::variant<transparent_unified_memory, hard_limit, no_oversubscription,
                                plain_unified_memory>;

  // Each config is nested in its policy, so the policy cannot be deduced from it: spell it out.
  struct from_config {
    policies operator()(const transparent_unified_memory::config& c) const {
      return transparent_unified_memory{c};
    }
    policies operator()(const hard_limit::config& c) const { return hard_limit{c}; }
    policies operator()(const no_oversubscription::config& c) const {
      return no_oversubscription{c};
    }
    policies operator()(const plain_unified_memory::config& c) const {
      return plain_unified_memory{c};
    }
  };

  config config_;
  policies policy_;
};

static_assert(MemoryPolicy<any_memory_policy>);

namespace detail {
inline constexpr std::array<std::string_view, 4> memory_policy_names{
    transparent_unified_memory::name, hard_limit::name, no_oversubscription::name,
    plain_unified_memory::name};
}  // namespace detail

/// The registry names of the memory policies, in a stable order (the order of
/// `any_memory_policy::config`'s alternatives).
[[nodiscard]] constexpr std::span<const std::string_view> memory_policy_names() noexcept {
  return detail::memory_policy_names;
}

/// The memory policy registered as `policy`, with its default settings. Throws `config_error`
/// listing the known names when there is none.
///
/// ```cpp
/// auto policy = tgs::make_memory_policy("no-oversubscription");
/// ```
[[nodiscard]] inline any_memory_policy make_memory_policy(std::string_view policy) {
  if (policy == transparent_unified_memory::name) {
    return any_memory_policy{transparent_unified_memory::config{}};
  }
  if (policy == hard_limit::name) return any_memory_policy{hard_limit::config{}};
  if (policy == no_oversubscription::name) return any_memory_policy{no_oversubscription::config{}};
  if (policy == plain_unified_memory::name) {
    return any_memory_policy{plain_unified_memory::config{}};
  }
  std::string known;
  for (std::string_view n : memory_policy_names()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  throw config_error("memory policy: unknown name '" + std::string(policy) + "' (known: " + known +
                     ")");
}

}  // namespace tgs
