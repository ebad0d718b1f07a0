// SPDX-License-Identifier: Apache-2.0
/// @file
/// Builds the `config_error` messages of the rate controllers: "policy: field must be rule, got v".
#pragma once

#include <concepts>
#include <sstream>
#include <string>
#include <string_view>

#include "tgs/core/config_error.hpp"
#include "tgs/core/units.hpp"

namespace tgs::rate_detail {

/// Renders a rejected value the way a user typed it (`1.5`, `0`, `50000000ns`).
template <typename T>
[[nodiscard]] std::string show(const T& value) {
  if constexpr (std::same_as<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::same_as<T, duration>) {
    return std::to_string(value.count()) + "ns";
  } else {
    std::ostringstream out;
    out << value;
    return out.str();
  }
}

/// Throws `config_error` naming `policy` and `field` unless `ok`. Constructors only.
template <typename T>
void check(bool ok, std::string_view policy, std::string_view field, std::string_view rule,
           const T& got) {
  if (ok) return;
  std::string message{policy};
  message += ": ";
  message += field;
  message += " must be ";
  message += rule;
  message += ", got ";
  message += show(got);
  throw config_error(message);
}

}  // namespace tgs::rate_detail
