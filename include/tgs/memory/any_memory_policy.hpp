// SPDX-License-Identifier: Apache-2.0
/// @file
/// `any_memory_policy`: a memory policy chosen at run time (CLI flag, Python), plus the registry
/// `make_memory_policy` / `memory_policy_names`.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tgs/core/config_error.hpp"
#include "tgs/core/policy_variant.hpp"
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
class any_memory_policy
    : public policy_variant<memory_observation, memory_decision, transparent_unified_memory,
                            hard_limit, no_oversubscription, plain_unified_memory> {
 public:
  using policy_variant::policy_variant;
  /// The wrapper's own name; `policy_name()` is the name of the policy it holds.
  static constexpr std::string_view name = "any-memory-policy";

  /// How the policy registered as `policy` moves pages (`P::paging`, which every registered
  /// policy states), or empty for an unknown name.
  [[nodiscard]] static constexpr std::optional<memory_paging> paging_of_policy(std::string_view policy) noexcept {
    std::optional<memory_paging> found;
    for_each_policy([&]<typename P>() {
      if (!found && P::name == policy) found = P::paging;
    });
    return found;
  }
};

static_assert(MemoryPolicy<any_memory_policy>);
/// The registry names of the memory policies, in a stable order (the order of
/// `any_memory_policy::config`'s alternatives).
[[nodiscard]] constexpr std::span<const std::string_view> memory_policy_names() noexcept {
  return any_memory_policy::names();
}

/// The memory policy registered as `policy`, with its default settings. Throws `config_error`
/// listing the known names when there is none.
///
/// ```cpp
/// auto policy = tgs::make_memory_policy("no-oversubscription");
/// ```
[[nodiscard]] inline any_memory_policy make_memory_policy(std::string_view policy) {
  if (auto cfg = any_memory_policy::default_config(policy)) return any_memory_policy{*cfg};
  std::string known;
  for (std::string_view n : memory_policy_names()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  throw config_error("memory policy: unknown name '" + std::string(policy) + "' (known: " + known +
                     ")");
}

}  // namespace tgs
