// SPDX-License-Identifier: Apache-2.0
// The record of held processes: its format, written and read (held_record.hpp).
#include "held_record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace tgs::cuda::node {

namespace {

/// The record's first line; a record that does not start with it (or with the previous version's,
/// whose lines have no cgroup) is not read.
constexpr std::string_view held_record_header = "tgs-node paused v2\n";
constexpr std::string_view held_record_header_v1 = "tgs-node paused v1\n";
/// The largest pid Linux gives (PID_MAX_LIMIT).
constexpr long long max_pid = 4194304;

/// An unsigned decimal number that is the whole of `text` (no sign, no space, at most 20 digits).
template <typename T>
std::optional<T> whole_number(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// A cgroup path as the record may name one: absolute, printable, no `..`.
bool record_cgroup(std::string_view text) {
  if (text.empty() || text.front() != '/' || text.find("/..") != std::string_view::npos) return false;
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
}

}  // namespace

std::optional<held_entries> parse_held_record(std::string_view text, std::string& why) {
  const bool v1 = text.substr(0, held_record_header_v1.size()) == held_record_header_v1;
  if (!v1 && text.substr(0, held_record_header.size()) != held_record_header) {
    why = "malformed: it does not start with '" + std::string(held_record_header.substr(0, held_record_header.size() - 1)) + "'";
    return std::nullopt;
  }
  text.remove_prefix(held_record_header.size());
  held_entries out;
  for (std::size_t line = 2; !text.empty(); ++line) {
    const std::size_t end = text.find('\n');
    const std::size_t space = text.find(' ');
    if (end == std::string_view::npos || space == std::string_view::npos || space > end) {
      why = fmt::format("malformed: line {} is not 'PID START [CGROUP]' ending in a newline", line);
      return std::nullopt;
    }
    const std::string_view rest = text.substr(space + 1, end - space - 1);
    const std::size_t second = v1 ? std::string_view::npos : rest.find(' ');
    const std::optional<long long> pid = whole_number<long long>(text.substr(0, space));
    const std::optional<std::uint64_t> start = whole_number<std::uint64_t>(rest.substr(0, second));
    const std::string_view cgroup = second == std::string_view::npos ? std::string_view{} : rest.substr(second + 1);
    if (!pid || !start || *pid <= 1 || *pid > max_pid || (second != std::string_view::npos && !record_cgroup(cgroup))) {
      why = fmt::format("malformed: line {} is not 'PID START [CGROUP]' (a pid from 2 to {}, a start time, an absolute "
                        "cgroup)", line, max_pid);
      return std::nullopt;
    }
    out.emplace(static_cast<pid_t>(*pid), *start, std::string(cgroup));
    text.remove_prefix(end + 1);
  }
  return out;
}

std::string format_held_record(const held_entries& entries) {
  std::string text(held_record_header);
  for (const auto& [pid, start, cgroup] : entries) {
    text += cgroup.empty() ? fmt::format("{} {}\n", pid, start) : fmt::format("{} {} {}\n", pid, start, cgroup);
  }
  return text;
}

}  // namespace tgs::cuda::node
