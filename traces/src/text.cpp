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
#include <utility>
#include <vector>

namespace tgs::traces {

trace_error::trace_error(std::string file, std::size_t line, const std::string& message)
    : std::runtime_error(line == 0 ? fmt::format("{}: {}", file, message)
                                   : fmt::format("{}:{}: {}", file, line, message)),
      file_(std::move(file)),
      line_(line) {
}

void normalise(trace& t) {
  // A stable sort by submission, done on (submit, position) keys and applied in place, cycle by
  // cycle: a job_record is large, sorting the records themselves moved each one log n times, and
  // a second vector of them would be as many fresh pages as the trace again.
  const auto by_submit = [](const job_record& a, const job_record& b) {
    return a.submit < b.submit;
  };
  if (!std::is_sorted(t.jobs.begin(), t.jobs.end(), by_submit)) {
    std::vector<std::pair<tgs::instant, std::size_t>> order;
    order.reserve(t.jobs.size());
    for (std::size_t i = 0; i < t.jobs.size(); ++i) order.emplace_back(t.jobs[i].submit, i);
    std::sort(order.begin(), order.end());  // keys are unique: ties keep input order
    // Position k takes the record now at order[k].second. Each cycle of that permutation is
    // rotated through one spare record; a placed position is marked by pointing at itself.
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (order[k].second == k) continue;
      job_record spare = std::move(t.jobs[k]);
      std::size_t to = k;
      while (order[to].second != k) {
        const std::size_t from = order[to].second;
        t.jobs[to] = std::move(t.jobs[from]);
        order[to].second = to;
        to = from;
      }
      t.jobs[to] = std::move(spare);
      order[to].second = to;
    }
  }
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

namespace {

/// What a file that is not a regular file is, for the message that refuses it.
std::string_view kind_of(std::filesystem::file_type type) noexcept {
  switch (type) {
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::character:
      return "a character device";
    default:
      return "not a file";
  }
}

}  // namespace

std::string read_file(const std::filesystem::path& path) {
  // Checked before opening: opening a FIFO for reading waits for a writer, forever if none
  // comes, and a device may never end. A trace is a regular file (symbolic links followed).
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec) throw trace_error(path.string(), 0, fmt::format("cannot open: {}", ec.message()));
  if (status.type() != std::filesystem::file_type::regular) {
    throw trace_error(path.string(), 0,
                      fmt::format("cannot read: not a regular file ({})", kind_of(status.type())));
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

namespace {

/// One UTF-8 sequence decoded, or why the bytes there are not one.
struct utf8_char {
  char32_t code_point = 0;
  /// Bytes of the sequence; 0 when `problem` says it is not UTF-8.
  std::size_t length = 0;
  std::string problem;
};

utf8_char decode_utf8(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return {c, 1, {}};
  std::size_t len = 0;
  char32_t cp = 0;
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
    return {0, 0, fmt::format("the byte 0x{:02X}", c)};
  }
  if (s.size() - i < len) return {0, 0, "a truncated multi-byte sequence"};
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned char cc = byte(i + k);
    if ((cc & 0xC0u) != 0x80u)
      return {0, 0, fmt::format("the byte 0x{:02X} inside a sequence", cc)};
    cp = (cp << 6) | (cc & 0x3Fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return {0, 0, "an overlong or out-of-range sequence"};
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) return {0, 0, "an encoded surrogate"};
  return {cp, len, {}};
}

}  // namespace

void check_utf8(std::string_view text, std::string_view source) {
  std::size_t line = 1;
  std::size_t i = 0;
  const std::size_t n = text.size();
  const auto fail = [&](std::string_view what) {
    throw trace_error(std::string{source}, line,
                      fmt::format("expected UTF-8 text, got {} (byte offset {})", what, i));
  };
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      // The common case, kept out of the decoder: traces are almost all ASCII.
      if (c == 0) fail("a NUL byte");
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    const utf8_char u = decode_utf8(text, i);
    if (u.length == 0) fail(u.problem);
    i += u.length;
  }
}

std::string_view utf8_text(std::string_view text, std::string_view source) {
  check_utf8(text, source);
  constexpr std::string_view bom = "\xEF\xBB\xBF";
  if (text.starts_with(bom)) text.remove_prefix(bom.size());
  return text;
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

namespace {

/// Characters that print as nothing, or as a space that looks like any other, or that reorder
/// text: shown escaped so a message says what is really there (Unicode's default-ignorable and
/// space-separator characters, plus the C1 controls).
bool invisible(char32_t c) noexcept {
  constexpr std::pair<char32_t, char32_t> ranges[] = {
      {0x80, 0xA0},     {0xAD, 0xAD},     {0x34F, 0x34F},     {0x61C, 0x61C},     {0x115F, 0x1160},
      {0x1680, 0x1680}, {0x17B4, 0x17B5}, {0x180B, 0x180F},   {0x2000, 0x200F},   {0x2028, 0x202F},
      {0x205F, 0x206F}, {0x3000, 0x3000}, {0x3164, 0x3164},   {0xFE00, 0xFE0F},   {0xFEFF, 0xFEFF},
      {0xFFA0, 0xFFA0}, {0xFFF0, 0xFFFB}, {0x1D173, 0x1D17A}, {0xE0000, 0xE0FFF},
  };
  for (const auto& [lo, hi] : ranges) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

}  // namespace

std::string quote(std::string_view value) {
  constexpr std::size_t limit = 40;
  std::string out = "\"";
  std::size_t shown = 0;
  for (std::size_t i = 0; i < value.size();) {
    if (shown == limit) {
      out += "...";
      break;
    }
    const utf8_char u = decode_utf8(value, i);
    const char32_t cp = u.code_point;
    const std::size_t len = u.length;
    if (len == 0) {
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(value[i]));
      ++i;
    } else if (cp < 0x20 || cp == 0x7F) {
      out += fmt::format("\\x{:02X}", static_cast<unsigned>(cp));
    } else if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (invisible(cp)) {
      out += cp > 0xFFFF ? fmt::format("\\U{:08X}", static_cast<std::uint32_t>(cp))
                         : fmt::format("\\u{:04X}", static_cast<std::uint32_t>(cp));
    } else {
      out += value.substr(i, len);
    }
    i += len;
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
