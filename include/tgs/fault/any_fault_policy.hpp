// SPDX-License-Identifier: Apache-2.0
/// @file
/// `any_fault_policy`: a fault policy chosen at run time (CLI flag, Python), plus the registry
/// `make_fault_policy` / `fault_policy_names`.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tgs/core/config_error.hpp"
#include "tgs/core/policy_variant.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/fault/concepts.hpp"
#include "tgs/fault/separate_contexts.hpp"
#include "tgs/fault/shared_fault_domain.hpp"

namespace tgs {

/// One of the fault policies, chosen at run time. It models `FaultPolicy` itself; it holds the
/// policy by value in a `std::variant`, so copying forks it and `step` neither allocates nor
/// throws.
///
/// ```cpp
/// tgs::any_fault_policy policy = tgs::make_fault_policy("shared-fault-domain");
/// tgs::any_fault_policy pessimistic{
///     tgs::shared_fault_domain::config{.abrupt_exit_ends_co_runner = true}};
/// std::string_view chosen = pessimistic.policy_name();  // "shared-fault-domain"
/// ```
class any_fault_policy : public policy_variant<fault_observation, fault_decision, separate_contexts,
                                               shared_fault_domain> {
 public:
  using policy_variant::policy_variant;
  /// The wrapper's own name; `policy_name()` is the name of the policy it holds.
  static constexpr std::string_view name = "any-fault-policy";
};

static_assert(FaultPolicy<any_fault_policy>);
// Every registered policy lists its settings, from which tgs-node makes its `--fault.` flags.
static_assert(SettingsTable<separate_contexts> && SettingsTable<shared_fault_domain>);

/// The registry names of the fault policies, in a stable order (the order of
/// `any_fault_policy::config`'s alternatives).
[[nodiscard]] constexpr std::span<const std::string_view> fault_policy_names() noexcept {
  return any_fault_policy::names();
}

/// The fault policy registered as `policy`, with its default settings. Throws `config_error`
/// listing the known names when there is none.
///
/// ```cpp
/// auto policy = tgs::make_fault_policy("shared-fault-domain");
/// ```
[[nodiscard]] inline any_fault_policy make_fault_policy(std::string_view policy) {
  if (auto cfg = any_fault_policy::default_config(policy)) return any_fault_policy{*cfg};
  std::string known;
  for (std::string_view n : fault_policy_names()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  throw config_error("fault policy: unknown name '" + std::string(policy) + "' (known: " + known +
                     ")");
}

}  // namespace tgs
