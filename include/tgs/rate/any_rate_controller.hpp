// SPDX-License-Identifier: Apache-2.0
/// @file
/// `any_rate_controller`: the type-erased rate controller for run-time choice at the edge (CLI
/// flag, Python), plus the registry of controller names.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "tgs/core/config_error.hpp"
#include "tgs/rate/antman.hpp"
#include "tgs/rate/co_execution.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/exclusive.hpp"
#include "tgs/rate/mig.hpp"
#include "tgs/rate/mps.hpp"
#include "tgs/rate/tgs_rate_control.hpp"
#include "tgs/rate/time_slice_lock.hpp"
#include "tgs/rate/token_bucket.hpp"

namespace tgs {

namespace rate_detail {

/// The concrete controllers, in registry order.
using any_model = std::variant<tgs_rate_control, exclusive, co_execution, mps, mig, antman,
                               token_bucket, time_slice_lock>;

template <std::size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> collect_names(
    std::index_sequence<I...>) noexcept {
  return {std::variant_alternative_t<I, any_model>::name...};
}

/// The registry names, in the order of `any_model`.
inline constexpr auto controller_names =
    collect_names(std::make_index_sequence<std::variant_size_v<any_model>>{});

}  // namespace rate_detail

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
/// std::string_view which = m.policy_name();  // "mps"
/// if (const auto* t = c->target<tgs::tgs_rate_control>()) {
///   std::cout << to_string(t->phase()) << '\n';  // the concrete accessors stay reachable
/// }
/// ```
class any_rate_controller {
 public:
  /// The concrete controllers, in registry order.
  using model = rate_detail::any_model;
  /// A configuration of one of them; its alternative picks the controller.
  using config = std::variant<tgs_rate_control::config, exclusive::config, co_execution::config,
                              mps::config, mig::config, antman::config, token_bucket::config,
                              time_slice_lock::config>;

  static_assert(std::variant_size_v<model> == std::variant_size_v<config>);

  static constexpr std::string_view name = "any";

  /// Builds the controller `cfg` configures; throws `tgs::config_error` as that controller does.
  explicit any_rate_controller(const config& cfg) : model_(build(cfg)), cfg_(cfg) {}

  /// Wraps an already-built controller.
  template <typename C>
    requires(!std::same_as<std::remove_cvref_t<C>, any_rate_controller> &&
             std::is_constructible_v<model, std::remove_cvref_t<C>>)
  explicit any_rate_controller(C&& controller)
      : model_(std::forward<C>(controller)),
        cfg_(std::visit([](const auto& m) -> config { return m.settings(); }, model_)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// Steps the wrapped controller.
  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    return std::visit([&obs](auto& m) noexcept { return m.step(obs); }, model_);
  }

  /// The registry name of the wrapped controller (`"tgs"`, `"mps"`, ...).
  [[nodiscard]] std::string_view policy_name() const noexcept {
    return std::visit([](const auto& m) noexcept -> std::string_view {
      return std::remove_cvref_t<decltype(m)>::name;
    }, model_);
  }

  /// The wrapped controller if it is a `C`, else null (as `std::function::target`).
  template <typename C>
  [[nodiscard]] C* target() noexcept {
    return std::get_if<C>(&model_);
  }
  template <typename C>
  [[nodiscard]] const C* target() const noexcept {
    return std::get_if<C>(&model_);
  }

  /// The registry names of every controller, in registry order.
  [[nodiscard]] static constexpr std::span<const std::string_view> names() noexcept {
    return rate_detail::controller_names;
  }

  /// The default configuration of the controller registered as `policy`, if any.
  [[nodiscard]] static std::optional<config> default_config(std::string_view policy) noexcept {
    return default_config_at<0>(policy);
  }

 private:
  template <std::size_t I>
  static std::optional<config> default_config_at(std::string_view policy) noexcept {
    if constexpr (I < std::variant_size_v<model>) {
      if (rate_detail::controller_names[I] == policy) return config{std::in_place_index<I>};
      return default_config_at<I + 1>(policy);
    } else {
      return std::nullopt;
    }
  }

  template <std::size_t I = 0>
  static model build(const config& cfg) {
    if constexpr (I < std::variant_size_v<model>) {
      if (cfg.index() == I) {
        static_assert(std::is_same_v<typename std::variant_alternative_t<I, model>::config,
                                     std::variant_alternative_t<I, config>>,
                      "model and config alternatives must be in the same order");
        return model{std::in_place_index<I>, std::get<I>(cfg)};
      }
      return build<I + 1>(cfg);
    } else {
      throw config_error("any_rate_controller: config holds no controller configuration");
    }
  }

  model model_;
  config cfg_;
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
