// SPDX-License-Identifier: Apache-2.0
/// @file
/// Policy settings from Python values, by the names of the policies' settings tables: the flags
/// of tgs-sim and tgs-node without their dashes (`tgs.dead-band`, `memory.tgs.reserve-mib`), in
/// the flags' units (a duration in milliseconds, a byte count in MiB).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/core/settings_flags.hpp"
#include "tgs/sim/commands.hpp"

namespace tgs::python {

/// Sets `cfg.*member` from `value`, in the unit of the setting's flag; fails naming `what`. Any
/// arithmetic member type works, so a settings table that gains one needs nothing here.
template <typename Config, typename Member>
void set_member(Config& cfg, Member member, py::handle value, std::string_view what) {
  using T = std::remove_cvref_t<decltype(cfg.*member)>;
  if constexpr (std::is_same_v<T, bool>) {
    cfg.*member = to_bool(value, what);
  } else if constexpr (std::is_floating_point_v<T>) {
    cfg.*member = static_cast<T>(to_double(value, what));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    const std::int64_t v = to_integer(value, what);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      fail(fmt::format("{}: {} is out of range", what, v));
    }
    cfg.*member = static_cast<T>(v);
  } else if constexpr (std::is_integral_v<T>) {
    const std::uint64_t v = to_count(value, what);
    if (v > std::numeric_limits<T>::max()) fail(fmt::format("{}: {} is out of range", what, v));
    cfg.*member = static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, duration>) {
    // Milliseconds, as the flag (`--tgs.production-window-ms`).
    cfg.*member = from_seconds(to_double(value, what) / 1e3);
  } else {
    static_assert(std::is_same_v<T, bytes> || std::is_same_v<T, std::optional<bytes>>,
                  "a setting of a type the Python module does not convert");
    if constexpr (std::is_same_v<T, std::optional<bytes>>) {
      if (value.is_none()) {
        cfg.*member = std::nullopt;
        return;
      }
    }
    // MiB, as the flag (`--memory.tgs.reserve-mib`), converted as the flag converts it.
    const double mib = to_double(value, what);
    if (!(mib >= 0)) fail(fmt::format("{}: must not be negative, got {}", what, mib));
    cfg.*member = bytes{static_cast<std::uint64_t>(mib * detail::bytes_per_mib)};
  }
}

/// `cfg.*member` as a Python value in the flag's unit.
template <typename Config, typename Member>
py::object member_value(const Config& cfg, Member member) {
  using T = std::remove_cvref_t<decltype(cfg.*member)>;
  const T& v = cfg.*member;
  if constexpr (std::is_same_v<T, bool>) {
    return py::bool_(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return py::float_(static_cast<double>(v));
  } else if constexpr (std::is_integral_v<T>) {
    return py::int_(v);
  } else if constexpr (std::is_same_v<T, duration>) {
    return py::float_(std::chrono::duration<double, std::milli>(v).count());
  } else if constexpr (std::is_same_v<T, bytes>) {
    return py::float_(static_cast<double>(v.count()) / detail::bytes_per_mib);
  } else {
    static_assert(std::is_same_v<T, std::optional<bytes>>,
                  "a setting of a type the Python module does not convert");
    if (!v) return py::none();
    return py::float_(static_cast<double>(v->count()) / detail::bytes_per_mib);
  }
}

/// The unit and Python type a setting's member takes.
template <typename Config, typename Member>
std::pair<std::string_view, std::string_view> unit_and_type(Member) {
  using T = std::remove_cvref_t<decltype(std::declval<Config&>().*std::declval<Member>())>;
  if constexpr (std::is_same_v<T, bool>) return {"", "bool"};
  if constexpr (std::is_floating_point_v<T>) return {"", "float"};
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return {"", "int"};
  if constexpr (std::is_same_v<T, duration>) return {"ms", "float"};
  if constexpr (std::is_same_v<T, bytes>) return {"MiB", "float"};
  if constexpr (std::is_same_v<T, std::optional<bytes>>) return {"MiB", "float or None"};
}

/// The setting names of `Policy` ("dead-band", ...).
template <typename Policy>
std::vector<std::string_view> setting_names() {
  std::vector<std::string_view> out;
  for (const auto& s : Policy::setting_table) out.push_back(s.flag);
  return out;
}

/// Sets the setting `flag` of `Policy` in `cfg`; fails naming `shown` when the policy has no such
/// setting or the value does not fit it.
template <typename Policy>
void set_setting(typename Policy::config& cfg, std::string_view flag, py::handle value,
                 std::string_view shown) {
  for (const auto& s : Policy::setting_table) {
    if (s.flag != flag) continue;
    std::visit([&](auto member) { set_member(cfg, member, value, shown); }, s.member);
    return;
  }
  const auto names = setting_names<Policy>();
  fail(fmt::format("unknown setting \"{}\": {} has {}", shown, Policy::name,
                   names.empty() ? std::string("no settings")
                                 : fmt::format("the settings {}", fmt::join(names, ", "))));
}

/// Sets one setting given as `<policy>.<flag>` in the configs of `Registry`; returns the policy's
/// name. Fails for an unknown policy or setting, naming `shown`.
template <typename Registry>
std::string set_registry_setting(typename Registry::configs& configs, std::string_view key,
                                 py::handle value, std::string_view shown) {
  const auto dot = key.find('.');
  const std::string_view policy = key.substr(0, dot);
  std::string found;
  Registry::for_each_policy([&]<typename P>() {
    if (!found.empty() || P::name != policy) return;
    found = std::string(P::name);
    if (dot == std::string_view::npos) {
      fail(fmt::format("unknown setting \"{}\": expected <policy>.<setting> (settings of {}: {})",
                       shown, P::name, fmt::join(setting_names<P>(), ", ")));
    }
    set_setting<P>(configs.template of<P>(), key.substr(dot + 1), value, shown);
  });
  if (found.empty()) {
    const auto names = Registry::names();
    fail(fmt::format("unknown setting \"{}\": no policy \"{}\" (known: {})", shown, policy,
                     fmt::join(names, ", ")));
  }
  return found;
}

/// The settings of a run from a dict such as `{"tgs.dead-band": 0.05,
/// "memory.hard-limit.production-fraction": 0.6}` (None: all defaults), remembering which were
/// given so the run can refuse one of a policy it does not use.
sim::run_settings run_settings_of(py::handle settings);

/// The settings table of every policy of both registries, for `tgs.settings()`.
py::list settings_table();

}  // namespace tgs::python
