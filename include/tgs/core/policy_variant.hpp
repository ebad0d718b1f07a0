// SPDX-License-Identifier: Apache-2.0
/// @file
/// `policy_variant`: run-time choice among the policies of one family, held by value; the base
/// of `any_rate_controller`, `any_memory_policy` and `any_fault_policy`.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "tgs/core/config_error.hpp"

namespace tgs {

namespace detail {
/// Policies whose `step` is const (memory, fault) can be stepped through a const wrapper.
template <typename P, typename Observation>
concept const_steppable = requires(const P& p, const Observation& o) { p.step(o); };
/// Policies that report their state (`describe()`), as the rate controllers do.
template <typename P>
concept describable = requires(const P& p) { p.describe(); };
}  // namespace detail

/// One of `Policies...` (all models of one family's concept over `Observation` and `Decision`),
/// chosen at run time. The edge of the program (a CLI flag, Python) picks a policy by name or by
/// configuration; hot loops that know the policy at compile time use the concrete type instead.
///
/// The policy lives in a `std::variant`, so copying forks it and `step` neither allocates nor
/// throws. A derived wrapper adds only its family's `name`; it then models the family's concept
/// itself.
///
/// ```cpp
/// struct any_fault_policy
///     : tgs::policy_variant<tgs::fault_observation, tgs::fault_decision,
///                           tgs::separate_contexts, tgs::shared_fault_domain> {
///   using policy_variant::policy_variant;
///   static constexpr std::string_view name = "any-fault-policy";
/// };
/// ```
template <typename Observation, typename Decision, typename... Policies>
class policy_variant {
 public:
  /// The held policy, one of `Policies...` (registry order).
  using model = std::variant<Policies...>;
  /// A configuration of one of them; its alternative picks the policy.
  using config = std::variant<typename Policies::config...>;

  /// Builds the policy `cfg` selects; throws `tgs::config_error` as that policy's constructor does.
  explicit policy_variant(const config& cfg) : model_(build(cfg)), cfg_(cfg) {}

  /// Wraps an already-built policy.
  template <typename P>
  requires(std::is_same_v<std::remove_cvref_t<P>, Policies> ||
           ...) explicit policy_variant(P&& policy)
      : model_(std::forward<P>(policy)),
        cfg_(std::visit([](const auto& m) -> config { return m.settings(); }, model_)) {}

  /// Steps the held policy.
  [[nodiscard]] Decision step(const Observation& obs) noexcept {
    return std::visit([&obs](auto& m) noexcept -> Decision { return m.step(obs); }, model_);
  }

  /// Steps the held policy through a const wrapper, for families whose policies step as const.
  [[nodiscard]] Decision step(const Observation& obs) const noexcept
      requires(detail::const_steppable<Policies, Observation> && ...) {
    return std::visit([&obs](const auto& m) noexcept -> Decision { return m.step(obs); }, model_);
  }

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// The held policy's state report, for families whose policies report one.
  [[nodiscard]] auto describe() const noexcept
      requires(detail::describable<Policies> && ...) {
    return std::visit([](const auto& m) noexcept { return m.describe(); }, model_);
  }

  /// The registry name of the held policy.
  [[nodiscard]] std::string_view policy_name() const noexcept {
    return std::visit(
        [](const auto& m) noexcept -> std::string_view {
          return std::remove_cvref_t<decltype(m)>::name;
        },
        model_);
  }

  /// The held policy, for visiting it.
  [[nodiscard]] const model& held() const noexcept { return model_; }

  /// The held policy if it is a `P`, else null (as `std::function::target`).
  template <typename P>
  [[nodiscard]] P* target() noexcept {
    return std::get_if<P>(&model_);
  }
  template <typename P>
  [[nodiscard]] const P* target() const noexcept {
    return std::get_if<P>(&model_);
  }

  /// The registry names of every policy, in registry order.
  [[nodiscard]] static constexpr std::span<const std::string_view> names() noexcept {
    return names_;
  }

  /// The default configuration of the policy registered as `policy`, if any.
  [[nodiscard]] static std::optional<config> default_config(std::string_view policy) noexcept {
    return default_config_at<0>(policy);
  }

  /// Calls `f.template operator()<P>()` for every registered policy `P`, in registry order: how
  /// a driver walks the registry (to add each policy's flags, say) without naming a policy.
  template <typename F>
  static constexpr void for_each_policy(F&& f) {
    (f.template operator()<Policies>(), ...);
  }

  /// One configuration of every registered policy, each at its defaults until set: what a
  /// command line fills in before it knows which policies it will run. `find(name)` then picks
  /// one by name, with the settings it was given.
  ///
  /// ```cpp
  /// tgs::any_rate_controller::configs all;
  /// all.of<tgs::token_bucket>().budget_blocks = 5000;
  /// tgs::any_rate_controller c{*all.find("token-bucket")};
  /// ```
  class configs {
   public:
    template <typename P>
    [[nodiscard]] typename P::config& of() noexcept {
      return std::get<typename P::config>(all_);
    }
    template <typename P>
    [[nodiscard]] const typename P::config& of() const noexcept {
      return std::get<typename P::config>(all_);
    }
    /// The configuration of the policy registered as `policy`, or empty for an unknown name.
    [[nodiscard]] std::optional<config> find(std::string_view policy) const noexcept {
      return find_at<0>(policy);
    }

   private:
    template <std::size_t I>
    [[nodiscard]] std::optional<config> find_at(std::string_view policy) const noexcept {
      if constexpr (I < sizeof...(Policies)) {
        if (names_[I] == policy) return config{std::in_place_index<I>, std::get<I>(all_)};
        return find_at<I + 1>(policy);
      } else {
        return std::nullopt;
      }
    }
    std::tuple<typename Policies::config...> all_{};
  };

 private:
  static constexpr std::array<std::string_view, sizeof...(Policies)> names_{Policies::name...};

  template <std::size_t I>
  static std::optional<config> default_config_at(std::string_view policy) noexcept {
    if constexpr (I < sizeof...(Policies)) {
      if (names_[I] == policy) return config{std::in_place_index<I>};
      return default_config_at<I + 1>(policy);
    } else {
      return std::nullopt;
    }
  }

  // A config is nested in its policy, so the policy is found by the config's index, not its type.
  template <std::size_t I = 0>
  static model build(const config& cfg) {
    if constexpr (I < sizeof...(Policies)) {
      if (cfg.index() == I) return model{std::in_place_index<I>, std::get<I>(cfg)};
      return build<I + 1>(cfg);
    } else {
      throw config_error("policy_variant: the config holds no policy configuration");
    }
  }

  model model_;
  config cfg_;
};

}  // namespace tgs
