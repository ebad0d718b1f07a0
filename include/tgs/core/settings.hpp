// SPDX-License-Identifier: Apache-2.0
/// @file
/// What every policy says about itself to the drivers: the table of its tunable settings (which
/// both tools turn into command-line flags) and a report of its state (which `tgs-node status`
/// prints), so that no driver needs to know a policy by name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "tgs/core/units.hpp"

namespace tgs {

/// One tunable setting of a policy's `Config`: its flag name (without dashes or the policy's
/// prefix), its help, and the member it sets. The member's type gives the flag's unit: a
/// `duration` is given in milliseconds and a byte count in MiB (so their flag names end in `-ms`
/// and `-mib`), a `bool` is a switch, and an optional byte count is unset unless given.
///
/// The policy's constructor validates the values, so a table holds no ranges: one rule, in one
/// place, whether the settings come from a flag, a config file or code.
///
/// ```cpp
/// static constexpr std::array setting_table{
///     tgs::setting<config>{"budget-blocks", "blocks per budget window", &config::budget_blocks},
///     tgs::setting<config>{"budget-window-ms", "refill period", &config::budget_window}};
/// ```
template <typename Config>
struct setting {
  using member_pointer =
      std::variant<double Config::*, int Config::*, std::uint32_t Config::*, std::uint64_t Config::*,
                   bool Config::*,
                   duration Config::*, bytes Config::*, std::optional<bytes> Config::*>;
  std::string_view flag;
  std::string_view help;
  member_pointer member;
};

/// A policy that lists its tunable settings (`P::setting_table`), from which the tools make their
/// flags. Every registered policy of every family models it.
template <typename P>
concept SettingsTable = requires { std::span<const setting<typename P::config>>{P::setting_table}; };

/// The settings table of a policy without settings.
template <typename Config>
inline constexpr std::array<setting<Config>, 0> no_settings{};

/// One entry of a policy's state report: a name and a number, a count or a word.
struct state_field {
  std::string_view key;
  std::variant<double, std::int64_t, std::string_view> value;
  constexpr bool operator==(const state_field&) const noexcept = default;
};

/// A policy's state as name/value pairs, for status lines and metrics: a fixed-capacity list, so
/// a policy describes itself without allocating. Keys and words must be string literals (or
/// otherwise outlive the report).
///
/// ```cpp
/// tgs::state_report r;
/// r.add("phase", "slow_start");
/// r.add("budget_blocks", std::int64_t{20000});
/// for (const tgs::state_field& f : r.fields()) { ... }
/// ```
class state_report {
 public:
  static constexpr std::size_t capacity = 12;

  /// Appends a field; beyond `capacity` fields are dropped (a policy's own tests keep it within).
  constexpr void add(std::string_view key, double value) noexcept { push({key, value}); }
  constexpr void add(std::string_view key, std::int64_t value) noexcept { push({key, value}); }
  constexpr void add(std::string_view key, std::string_view word) noexcept { push({key, word}); }
  constexpr void add(std::string_view key, const char* word) noexcept {
    push({key, std::string_view{word}});
  }

  [[nodiscard]] constexpr std::span<const state_field> fields() const noexcept {
    return {fields_.data(), size_};
  }

  /// The value of `key`, if the report has it.
  [[nodiscard]] constexpr const state_field* find(std::string_view key) const noexcept {
    for (std::size_t i = 0; i < size_; ++i) {
      if (fields_[i].key == key) return &fields_[i];
    }
    return nullptr;
  }

 private:
  constexpr void push(state_field f) noexcept {
    if (size_ < capacity) fields_[size_++] = f;
  }

  std::array<state_field, capacity> fields_{};
  std::size_t size_ = 0;
};

}  // namespace tgs
