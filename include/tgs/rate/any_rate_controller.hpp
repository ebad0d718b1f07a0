// SPDX-License-Identifier: Apache-2.0
/// @file
/// `any_rate_controller`: the registry of rate controllers and the type-erased controller for
/// run-time choice at the edge (CLI flag, Python). Adding a controller is its own header plus one
/// entry in the list below; `RegisteredRateController` makes the compiler ask for everything
/// the drivers need.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tgs/core/policy_variant.hpp"
#include "tgs/rate/antman.hpp"
#include "tgs/rate/co_execution.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/exclusive.hpp"
#include "tgs/rate/idle_harvest.hpp"
#include "tgs/rate/mig.hpp"
#include "tgs/rate/mps.hpp"
#include "tgs/rate/priority_share.hpp"
#include "tgs/rate/tgs_rate_control.hpp"
#include "tgs/rate/time_slice_lock.hpp"
#include "tgs/rate/token_bucket.hpp"

namespace tgs {

/// Any of the library's rate controllers, chosen at run time. It models `RateController` itself,
/// so code written against the concept takes it unchanged; hot loops that know their policy at
/// compile time should use the concrete type instead.
///
/// The erasure is a `std::variant` over the concrete controllers, not a heap-allocated interface:
/// copying deep-copies the controller's state and `step` dispatches without allocating.
///
/// ```cpp
/// std::optional<tgs::any_rate_controller> c = tgs::make_rate_controller("tgs");  // defaults
/// tgs::any_rate_controller m{tgs::mps::config{.production_threads = 0.5}};
/// tgs::rate_decision d = c->step({});
/// std::string_view which = m.policy_name();      // "mps"
/// bool gated = c->traits().enforced_by == tgs::enforcement::interposer;
/// tgs::state_report state = c->describe();        // what `tgs-node status` prints
/// ```
class any_rate_controller
    // The registry: one line per controller, in the order tools list them.
    : public policy_variant<rate_observation, rate_decision, tgs_rate_control, idle_harvest,
                            priority_share, exclusive, co_execution, mps, mig, antman, token_bucket,
                            time_slice_lock> {
 public:
  using policy_variant::policy_variant;
  static constexpr std::string_view name = "any";

  /// The held controller's traits.
  [[nodiscard]] rate_policy_traits traits() const noexcept {
    return std::visit(
        [](const auto& m) noexcept {
          return traits_of<std::remove_cvref_t<decltype(m)>>();
        },
        held());
  }

  /// The traits of the controller registered as `policy`, or empty for an unknown name.
  [[nodiscard]] static constexpr std::optional<rate_policy_traits> traits_of_policy(
      std::string_view policy) noexcept {
    std::optional<rate_policy_traits> found;
    for_each_policy([&]<typename P>() {
      static_assert(RegisteredRateController<P>);
      if (!found && P::name == policy) found = traits_of<P>();
    });
    return found;
  }
};

static_assert(RateController<any_rate_controller>);

/// Every registered controller name, in registry order: for a CLI's "known: ..." message.
///
/// ```cpp
/// for (std::string_view n : tgs::rate_controller_names()) std::cout << n << '\n';
/// ```
[[nodiscard]] constexpr std::span<const std::string_view> rate_controller_names() noexcept {
  return any_rate_controller::names();
}

/// The controller registered as `policy`, with its default configuration, or empty when no
/// controller has that name.
///
/// ```cpp
/// auto c = tgs::make_rate_controller(flag);
/// if (!c) throw std::invalid_argument("unknown policy '" + flag + "'; known: " +
///                                     tgs::rate_controller_list());
/// ```
[[nodiscard]] inline std::optional<any_rate_controller> make_rate_controller(
    std::string_view policy) {
  auto cfg = any_rate_controller::default_config(policy);
  if (!cfg) return std::nullopt;
  return any_rate_controller{*cfg};
}

/// The registered names joined by `separator` ("tgs, exclusive, ...").
[[nodiscard]] inline std::string rate_controller_list(std::string_view separator = ", ") {
  std::string out;
  for (std::string_view n : rate_controller_names()) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

}  // namespace tgs
