// SPDX-License-Identifier: Apache-2.0
/// @file
/// Strict field parsers, UTF-8 checking and row bookkeeping shared by the trace readers.
#include "text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <system_error>

namespace tgs::traces {

trace_error::trace_error(std::string file, std::size_t line, const std::string& message)
    : std::runtime_error(line == 0 ? fmt::format("{}: {}", file, message)
                                   : fmt::format("{}:{}: {}", file, line, message)),
      file_(std::move(file)),
      line_(line) {
}

void normalise(trace& t) {
  std::stable_sort(t.jobs.begin(), t.jobs.end(),
                   [](const job_record& a, const job_record& b) { return a.submit < b.submit; });
  if (!t.jobs.empty()) {
    const tgs::duration first = t.jobs.front().submit - tgs::epoch;
    for (job_record& j : t.jobs) j.submit -= first;
    if (t.origin) *t.origin += first;
  }
  for (std::size_t i = 0; i < t.jobs.size(); ++i) {
    t.jobs[i].id = tgs::job_id{static_cast<std::uint32_t>(i)};
  }
}

namespace detail {

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw trace_error(path.string(), 0, "cannot read: it is a directory");
  }
  std::ifstream in{path, std::ios::binary | std::ios::ate};
  if (!in) {
    throw trace_error(path.string(), 0, fmt::format("cannot open: {}", std::strerror(errno)));
  }
  // One read of the known size: the readers then work on a contiguous view of the file.
  const std::streamoff size = in.tellg();
  if (size < 0) throw trace_error(path.string(), 0, "cannot determine the file size");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) {
    throw trace_error(path.string(), 0, "read error");
  }
  return text;
}

void check_utf8(std::string_view text, std::string_view source) {
  std::size_t line = 1;
  std::size_t i = 0;
  const std::size_t n = text.size();
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const auto fail = [&](std::string_view what) {
    throw trace_error(std::string{source}, line,
                      fmt::format("expected UTF-8 text, got {} (byte offset {})", what, i));
  };
  while (i < n) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      if (c == 0) fail("a NUL byte");
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07u;
    } else {
      fail(fmt::format("the byte 0x{:02X}", c));
    }
    if (n - i < len) fail("a truncated multi-byte sequence");
    for (std::size_t k = 1; k < len; ++k) {
      const unsigned char cc = byte(i + k);
      if ((cc & 0xC0u) != 0x80u) fail(fmt::format("the byte 0x{:02X} inside a sequence", cc));
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      fail("an overlong or out-of-range sequence");
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) fail("an encoded surrogate");
    i += len;
  }
}

namespace {

bool digits(std::string_view s, std::size_t pos, std::size_t count, int& out) noexcept {
  int v = 0;
  for (std::size_t k = pos; k < pos + count; ++k) {
    const char c = s[k];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

}  // namespace

std::optional<std::chrono::sys_seconds> parse_civil_time(std::string_view s) noexcept {
  // Exactly "YYYY-MM-DD HH:MM:SS": the one shape every Philly source uses.
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' ||
      s[16] != ':') {
    return std::nullopt;
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  if (!digits(s, 0, 4, y) || !digits(s, 5, 2, mo) || !digits(s, 8, 2, d) || !digits(s, 11, 2, h) ||
      !digits(s, 14, 2, mi) || !digits(s, 17, 2, se)) {
    return std::nullopt;
  }
  if (y < 1970 || y > 2199 || h > 23 || mi > 59 || se > 59) return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year{y},
                                        std::chrono::month{static_cast<unsigned>(mo)},
                                        std::chrono::day{static_cast<unsigned>(d)}};
  if (!ymd.ok()) return std::nullopt;
  return std::chrono::sys_days{ymd} + std::chrono::hours{h} + std::chrono::minutes{mi} +
         std::chrono::seconds{se};
}

std::string format_civil_time(std::chrono::sys_seconds t) {
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<std::chrono::seconds> hms{t - day};
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                     hms.hours().count(), hms.minutes().count(), hms.seconds().count());
}

std::optional<double> parse_decimal(std::string_view s) noexcept {
  // The JSON number grammar, checked by hand: from_chars alone would accept "inf", "nan" and
  // leading zeros such as "007".
  std::size_t i = 0;
  const std::size_t n = s.size();
  const auto is_digit = [&](std::size_t k) { return k < n && s[k] >= '0' && s[k] <= '9'; };
  if (i < n && s[i] == '-') ++i;
  if (!is_digit(i)) return std::nullopt;
  if (s[i] == '0') {
    ++i;
  } else {
    while (is_digit(i)) ++i;
  }
  if (i < n && s[i] == '.') {
    ++i;
    if (!is_digit(i)) return std::nullopt;
    while (is_digit(i)) ++i;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (!is_digit(i)) return std::nullopt;
    while (is_digit(i)) ++i;
  }
  if (i != n) return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + n, value);
  // A result out of double's range is an error too: "1e999" is not a trace value.
  if (ec != std::errc{} || end != s.data() + n || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> parse_unsigned(std::string_view s) noexcept {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return value;
}

tgs::duration seconds_to_duration(double s) noexcept {
  return tgs::from_seconds(s);
}

std::string quote(std::string_view value) {
  constexpr std::size_t limit = 40;
  std::string out = "\"";
  std::size_t shown = 0;
  for (const char c : value) {
    if (shown == limit) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02X}", u);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
    ++shown;
  }
  out += '"';
  return out;
}

std::size_t line_of(std::string_view text, std::size_t offset) noexcept {
  const auto end = text.begin() + static_cast<std::ptrdiff_t>(std::min(offset, text.size()));
  return 1 + static_cast<std::size_t>(std::count(text.begin(), end, '\n'));
}

void row_accounting::malformed(const trace_error& e) {
  if (options_.malformed == on_malformed::fail) throw e;
  ++stats_.rows_skipped;
  if (stats_.skip_reasons.size() < options_.max_reasons) stats_.skip_reasons.emplace_back(e.what());
}

void row_accounting::dropped(std::string reason) {
  ++stats_.rows_dropped;
  if (stats_.drop_reasons.size() < options_.max_reasons) {
    stats_.drop_reasons.push_back(std::move(reason));
  }
}

}  // namespace detail
}  // namespace tgs::traces
