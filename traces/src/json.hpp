// SPDX-License-Identifier: Apache-2.0
/// @file
/// Internal: strict JSON (RFC 8259, parsed by nlohmann::json) into a tree whose values remember
/// their line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tgs::traces::detail {

struct json_member;

/// One JSON value. Numbers keep their literal text so integer fields can be checked exactly.
struct json_value {
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };

  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  /// A string's decoded contents, or a number's literal text.
  std::string text;
  std::vector<json_value> items;
  std::vector<json_member> members;
  /// 1-based line where the value starts.
  std::size_t line = 0;

  /// The member named `key` of an object, or null when absent (keys are unique: the parser
  /// rejects duplicates).
  [[nodiscard]] const json_value* find(std::string_view key) const noexcept;
};

struct json_member {
  std::string key;
  json_value value;
};

/// How a value's kind reads in a message: "null", "a number", "an object", ...
[[nodiscard]] std::string_view describe(json_value::kind k) noexcept;

/// Parses a whole JSON document. Throws `trace_error` naming `source`, the line, the JSON path
/// of the value being parsed and what was expected. Nesting deeper than `max_depth` is refused
/// so hostile input cannot exhaust the stack (the tree is freed recursively). `text` must
/// already be valid UTF-8.
[[nodiscard]] json_value parse_json(std::string_view text, std::string_view source);

/// The deepest nesting of arrays and objects `parse_json` accepts.
inline constexpr std::size_t max_depth = 64;

}  // namespace tgs::traces::detail
