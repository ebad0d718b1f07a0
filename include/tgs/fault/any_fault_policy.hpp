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
class any_fault_policy {
 public:
  /// The settings of whichever policy is held; the alternative selects the policy.
  using config = std::variant<separate_contexts::config, shared_fault_domain::config>;

  /// The wrapper's own name; `policy_name()` is the name of the policy it holds.
  static constexpr std::string_view name = "any-fault-policy";

  /// Builds the policy `cfg` selects; throws `config_error` as that policy's constructor does.
  explicit any_fault_policy(config cfg) : config_(cfg), policy_(std::visit(from_config{}, cfg)) {}

  [[nodiscard]] fault_decision step(const fault_observation& obs) const noexcept {
    return std::visit([&obs](const auto& policy) noexcept { return policy.step(obs); }, policy_);
  }

  /// The registry name of the held policy (`"separate-contexts"`, `"shared-fault-domain"`).
  [[nodiscard]] std::string_view policy_name() const noexcept {
    return std::visit([](const auto& policy) noexcept { return std::string_view{policy.name}; },
                      policy_);
  }

  [[nodiscard]] const config& settings() const noexcept { return config_; }

 private:
  using policies = std::variant<separate_contexts, shared_fault_domain>;

  // Each config is nested in its policy, so the policy cannot be deduced from it: spell it out.
  struct from_config {
    policies operator()(const separate_contexts::config& c) const { return separate_contexts{c}; }
    policies operator()(const shared_fault_domain::config& c) const {
      return shared_fault_domain{c};
    }
  };

  config config_;
  policies policy_;
};

static_assert(FaultPolicy<any_fault_policy>);

namespace detail {
inline constexpr std::array<std::string_view, 2> fault_policy_names{separate_contexts::name,
                                                                    shared_fault_domain::name};
}  // namespace detail

/// The registry names of the fault policies, in a stable order (the order of
/// `any_fault_policy::config`'s alternatives).
[[nodiscard]] constexpr std::span<const std::string_view> fault_policy_names() noexcept {
  return detail::fault_policy_names;
}

/// The fault policy registered as `policy`, with its default settings. Throws `config_error`
/// listing the known names when there is none.
///
/// ```cpp
/// auto policy = tgs::make_fault_policy("separate-contexts");
/// ```
[[nodiscard]] inline any_fault_policy make_fault_policy(std::string_view policy) {
  if (policy == separate_contexts::name) return any_fault_policy{separate_contexts::config{}};
  if (policy == shared_fault_domain::name) return any_fault_policy{shared_fault_domain::config{}};
  std::string known;
  for (std::string_view n : fault_policy_names()) {
    known += known.empty() ? "" : ", ";
    known += n;
  }
  throw config_error("fault policy: unknown name '" + std::string(policy) + "' (known: " + known +
                     ")");
}

}  // namespace tgs
