// SPDX-License-Identifier: Apache-2.0
/// @file
/// Command-line flags from the policies' settings tables: one function that both tools call, so
/// one name means one setting in `tgs-sim` and `tgs-node`, and a setting added to a policy's
/// table reaches both.
///
/// The functions take the command line as a template parameter (anything with CLI11's
/// `add_option`, `add_flag` and `add_option_function`), which keeps this header free of the CLI
/// library that only the tools link.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"

namespace tgs {

/// One flag made from a settings table: the policy it belongs to and the option the command
/// line made for it.
template <typename Option>
struct policy_flag {
  std::string_view policy;
  std::string flag;  ///< with its dashes: "--tgs.dead-band"
  Option* option;
};

namespace detail {

inline constexpr double bytes_per_mib = 1024.0 * 1024.0;

/// "0.05", "20000", "50": a default as `--help` shows it.
inline std::string shortest_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.12g", v);
  return text;
}

/// Refuses a leading minus sign for a setting that holds a count (the CLI library would
/// otherwise wrap -1 to 2^64 - 1).
inline std::string refuse_negative(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first != std::string::npos && text[first] == '-') return "must not be negative, got " + text;
  return {};
}

}  // namespace detail

/// Adds one flag per entry of `Policy::setting_table`, named `--<prefix><policy>.<flag>`, bound to
/// `cfg`, and appends it to `out`. Durations are given in milliseconds and byte counts in MiB;
/// a `bool` is a switch. Values are checked by the policy's constructor when it is built, except
/// that a count refuses a minus sign at once.
template <typename Policy, typename App, typename Option>
void add_setting_flags(App& app, typename Policy::config& cfg, std::string_view prefix,
                       std::vector<policy_flag<Option>>& out) {
  using config = typename Policy::config;
  for (const setting<config>& s : Policy::setting_table) {
    std::string flag = "--" + std::string(prefix) + std::string(Policy::name) + "." + std::string(s.flag);
    std::string help = std::string(Policy::name) + ": " + std::string(s.help);
    const std::string group = std::string(prefix) + std::string(Policy::name) + " settings";
    Option* option = std::visit(
        [&](auto member) -> Option* {
          using T = std::remove_cvref_t<decltype(cfg.*member)>;
          if constexpr (std::is_same_v<T, bool>) {
            return app.add_flag(flag, cfg.*member, help);
          } else if constexpr (std::is_same_v<T, duration>) {
            auto* o = app.template add_option_function<double>(
                flag, [&cfg, member](const double& ms) { cfg.*member = from_seconds(ms / 1e3); },
                help + " (ms)");
            o->default_str(detail::shortest_text(
                std::chrono::duration<double, std::milli>(cfg.*member).count()));
            return o;
          } else if constexpr (std::is_same_v<T, bytes>) {
            auto* o = app.template add_option_function<double>(
                flag,
                [&cfg, member](const double& mib) {
                  cfg.*member = bytes{static_cast<std::uint64_t>(mib * detail::bytes_per_mib)};
                },
                help + " (MiB)");
            o->default_str(detail::shortest_text(
                static_cast<double>((cfg.*member).count()) / detail::bytes_per_mib));
            o->check(detail::refuse_negative, "", "");
            return o;
          } else if constexpr (std::is_same_v<T, std::optional<bytes>>) {
            auto* o = app.template add_option_function<double>(
                flag,
                [&cfg, member](const double& mib) {
                  cfg.*member = bytes{static_cast<std::uint64_t>(mib * detail::bytes_per_mib)};
                },
                help + " (MiB; default: unset)");
            o->check(detail::refuse_negative, "", "");
            return o;
          } else {
            auto* o = app.add_option(flag, cfg.*member, help);
            o->capture_default_str();
            if constexpr (std::is_unsigned_v<T>) o->check(detail::refuse_negative, "", "");
            return o;
          }
        },
        s.member);
    option->group(group);
    out.push_back({Policy::name, std::move(flag), option});
  }
}

/// Adds the flags of every policy of `Registry` (a `policy_variant`: `any_rate_controller`,
/// `any_memory_policy`) bound to `configs`, named `--<prefix><policy>.<flag>`.
///
/// ```cpp
/// tgs::any_rate_controller::configs rate;
/// auto flags = tgs::add_registry_flags<tgs::any_rate_controller, CLI::Option>(app, rate, "");
/// app.parse(argc, argv);
/// if (auto why = tgs::unused_policy_flag(flags, {"tgs"})) fail(*why);
/// tgs::any_rate_controller c{*rate.find("tgs")};
/// ```
template <typename Registry, typename Option, typename App>
std::vector<policy_flag<Option>> add_registry_flags(App& app, typename Registry::configs& configs,
                                                     std::string_view prefix) {
  std::vector<policy_flag<Option>> out;
  Registry::for_each_policy([&]<typename P>() {
    add_setting_flags<P, App, Option>(app, configs.template of<P>(), prefix, out);
  });
  return out;
}

/// The complaint about the first flag that was given for a policy outside `running`, or empty.
/// A setting of a policy a run does not use would otherwise be silently ignored.
template <typename Option, typename Names>
[[nodiscard]] std::optional<std::string> unused_policy_flag(
    const std::vector<policy_flag<Option>>& flags, const Names& running) {
  for (const policy_flag<Option>& f : flags) {
    if (f.option->count() == 0) continue;
    bool used = false;
    for (const auto& name : running) used = used || std::string_view(name) == f.policy;
    if (!used) {
      return f.flag + " is a setting of " + std::string(f.policy) +
             ", which this run does not use";
    }
  }
  return std::nullopt;
}

}  // namespace tgs
