// SPDX-License-Identifier: Apache-2.0
/// @file
/// Internal helpers shared by the readers: strict field parsers, UTF-8 checking, quoting of
/// bad values in messages, and the bookkeeping of skipped and dropped rows.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tgs/traces/trace.hpp"

namespace tgs::traces::detail {

/// The longest run time or relative submission any reader accepts: 1e9 s (~31.7 years) keeps
/// every sum of nanoseconds far inside `tgs::duration`'s 64-bit range.
inline constexpr double max_seconds = 1e9;

/// Reads a whole file; throws `trace_error` (line 0) naming the file when it cannot.
[[nodiscard]] std::string read_file(const std::filesystem::path& path);

/// Throws `trace_error` at the line of the first byte sequence that is not UTF-8, or of a NUL.
void check_utf8(std::string_view text, std::string_view source);

/// What every reader does first: checks that `text` is UTF-8 (`check_utf8`) and returns it
/// without its UTF-8 byte-order mark, if it starts with one (editors on Windows write one).
[[nodiscard]] std::string_view utf8_text(std::string_view text, std::string_view source);

/// Parses `YYYY-MM-DD HH:MM:SS` (the Philly format) as a civil time on the UTC calendar.
/// Years 1970..2199 only, so differences of two instants fit in `tgs::duration`.
[[nodiscard]] std::optional<std::chrono::sys_seconds> parse_civil_time(std::string_view s) noexcept;

/// Formats a civil time back to `YYYY-MM-DD HH:MM:SS`.
[[nodiscard]] std::string format_civil_time(std::chrono::sys_seconds t);

/// Parses a JSON-style decimal number (`-12`, `3.5`, `1e3`); no `inf`, `nan`, hex or spaces.
[[nodiscard]] std::optional<double> parse_decimal(std::string_view s) noexcept;

/// Parses a non-negative decimal integer made of digits only.
[[nodiscard]] std::optional<std::uint64_t> parse_unsigned(std::string_view s) noexcept;

/// Seconds (already checked to be in [0, max_seconds]) to a duration, rounded to nanoseconds.
[[nodiscard]] tgs::duration seconds_to_duration(double s) noexcept;

/// `value` in double quotes for a message, cut at 40 characters. What would not show is escaped:
/// control bytes as `\x1B`, invisible or formatting characters (a byte-order mark, zero-width
/// and other unusual spaces, direction marks) as `\uFEFF`, bytes that are not UTF-8 as `\xFF`.
[[nodiscard]] std::string quote(std::string_view value);

/// Counts the lines before `offset` (1-based line of the byte at `offset`).
[[nodiscard]] std::size_t line_of(std::string_view text, std::size_t offset) noexcept;

/// Applies `read_options` to row-level problems: rethrows or counts a malformed row, records a
/// dropped one.
class row_accounting {
 public:
  row_accounting(const read_options& options, trace_stats& stats) noexcept
      : options_(options), stats_(stats) {}

  /// Called with a malformed row's error: throws it under `on_malformed::fail`.
  void malformed(const trace_error& e);
  /// Records a well-formed row the format's rule leaves out.
  void dropped(std::string reason);

 private:
  const read_options& options_;
  trace_stats& stats_;
};

}  // namespace tgs::traces::detail
