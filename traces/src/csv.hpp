// SPDX-License-Identifier: Apache-2.0
/// @file
/// Internal: line-by-line CSV scanning shared by the two CSV readers (RFC 4180 quoting within
/// one line, split by libcsv; CRLF or LF endings, a header naming the columns).
#pragma once

#include <csv.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/core/units.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::traces::detail {

/// Walks `text` one line at a time, skipping blank lines, and splits each line into fields.
/// A line is one row: a quoted field cannot span lines (the formats keep one job per line, so
/// a missing closing quote is reported on its own line instead of swallowing the rows after it).
class csv_scanner {
 public:
  csv_scanner(std::string_view text, std::string_view source);
  ~csv_scanner();
  csv_scanner(const csv_scanner&) = delete;
  csv_scanner& operator=(const csv_scanner&) = delete;

  /// Advances to the next non-blank line; false at the end of the text.
  bool next_line();
  /// The current line without its line ending.
  [[nodiscard]] std::string_view line() const noexcept { return line_; }
  /// The current line's 1-based number.
  [[nodiscard]] std::size_t line_number() const noexcept { return line_number_; }
  /// Splits the current line into fields, quotes removed (RFC 4180, strict); throws
  /// `trace_error` on a broken quoted field. The views live until the next call.
  [[nodiscard]] std::span<const std::string_view> split();

  [[noreturn]] void fail(const std::string& message) const;

 private:
  static void on_field(void* cell, std::size_t size, void* self);
  /// What libcsv's strict mode refused at byte `at` of the line, in the reader's words.
  [[noreturn]] void fail_quote(std::size_t at) const;

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::size_t next_line_number_ = 1;
  std::size_t line_number_ = 0;
  std::string_view line_;
  csv_parser parser_{};
  /// The current line's unquoted fields back to back, and where each one is in it.
  std::string cells_;
  std::vector<std::pair<std::size_t, std::size_t>> spans_;
  std::vector<std::string_view> fields_;
};

/// Maps a header's column names to positions: every name must be one of `known`, appear once,
/// and every name of `required` must be present. Throws `trace_error` at the header line.
class csv_header {
 public:
  csv_header(const csv_scanner& scanner, std::span<const std::string_view> names,
             std::span<const std::string_view> known, std::span<const std::string_view> required);

  /// Position of column `known[k]`, or empty when the header lacks it.
  [[nodiscard]] std::optional<std::size_t> column(std::size_t k) const noexcept {
    return positions_[k];
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::vector<std::optional<std::size_t>> positions_;
  std::size_t size_ = 0;
};

/// Parses non-negative decimal seconds (`66`, `66.0`, `0.000000001`) exactly to nanoseconds;
/// digits beyond the ninth decimal are rounded half up. At most `max_seconds`.
[[nodiscard]] std::optional<tgs::duration> parse_seconds(std::string_view s) noexcept;

/// Formats a duration as decimal seconds that `parse_seconds` reads back exactly.
[[nodiscard]] std::string format_seconds(tgs::duration d);

}  // namespace tgs::traces::detail
