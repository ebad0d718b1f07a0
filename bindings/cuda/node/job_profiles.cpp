// SPDX-License-Identifier: Apache-2.0
// tgs-node's profiles of opportunistic jobs across their runs: the key read from /proc, and the
// bounded store.
#include "job_profiles.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>

namespace tgs::cuda::node {

std::uint64_t command_hash(std::string_view cmdline) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : cmdline) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::optional<profile_key> profile_key_of(pid_t pid, uid_t uid, const std::string& place) {
  const std::string proc = "/proc/" + std::to_string(pid);
  struct stat exe {};
  if (::stat((proc + "/exe").c_str(), &exe) != 0) return std::nullopt;
  // The command line, up to 64 KiB: a longer one is hashed by its start (a key, not a record).
  std::string cmdline;
  const int fd = ::open((proc + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0 || cmdline.size() >= 65536) break;
    cmdline.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return profile_key{uid, place, static_cast<std::uint64_t>(exe.st_dev), static_cast<std::uint64_t>(exe.st_ino),
                     command_hash(cmdline)};
}

std::optional<job_profile> job_profiles::find(const profile_key& key) {
  const auto it = profiles_.find(key);
  if (it == profiles_.end()) return std::nullopt;
  it->second.last_used = ++clock_;
  return it->second;
}

job_profile& job_profiles::at(const profile_key& key) {
  auto it = profiles_.find(key);
  if (it == profiles_.end()) {
    const auto of_user = static_cast<std::size_t>(
        std::count_if(profiles_.begin(), profiles_.end(), [&](const auto& e) { return e.first.uid == key.uid; }));
    if (of_user >= per_user_) {
      evict_one(key.uid);
    } else if (profiles_.size() >= capacity_) {
      evict_one(std::nullopt);
    }
    it = profiles_.emplace(key, job_profile{}).first;
  }
  it->second.last_used = ++clock_;
  return it->second;
}

void job_profiles::evict_one(std::optional<uid_t> of_user) {
  auto oldest = profiles_.end();
  for (auto it = profiles_.begin(); it != profiles_.end(); ++it) {
    if (of_user && it->first.uid != *of_user) continue;
    if (oldest == profiles_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
  }
  if (oldest != profiles_.end()) profiles_.erase(oldest);
}

std::vector<std::pair<profile_key, job_profile>> job_profiles::by_use() const {
  std::vector<std::pair<profile_key, job_profile>> out(profiles_.begin(), profiles_.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
  return out;
}

namespace {

constexpr std::string_view profiles_header = "tgs-node job profiles 1";

/// A pod UID or a container ID: hexadecimal digits and dashes, at most 64.
bool is_place(std::string_view s) {
  return !s.empty() && s.size() <= 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == '-'; });
}

std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string format_profiles(const job_profiles& profiles) {
  std::string out = std::string(profiles_header) + "\n";
  const auto opt = [](const auto& v, auto value) { return v ? std::to_string(value(*v)) : std::string("-"); };
  for (const auto& [k, p] : profiles.by_use()) {
    out += fmt::format("{} {} {} {} {} {} {} {} {} {}\n", k.uid, k.place.empty() ? "-" : k.place, k.exe_device,
                       k.exe_inode, k.command_hash, opt(p.longest_kernel, [](duration d) { return d.count(); }),
                       opt(p.peak_bytes, [](bytes b) { return b.count(); }), p.hurt_as_mps_client ? 1 : 0,
                       p.hurt_time_sliced ? 1 : 0, p.runs);
  }
  return out;
}

std::optional<job_profiles> parse_profiles(std::string_view text, std::string& why) {
  job_profiles out;
  std::size_t line_no = 0;
  bool header = false;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      why = fmt::format("line {}: no end of line (a file cut short)", line_no + 1);
      return std::nullopt;
    }
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    ++line_no;
    if (!header) {
      if (line != profiles_header) {
        why = fmt::format("line 1: not \"{}\"", profiles_header);
        return std::nullopt;
      }
      header = true;
      continue;
    }
    std::vector<std::string_view> f;
    for (std::string_view rest = line; !rest.empty();) {
      const std::size_t space = rest.find(' ');
      f.push_back(rest.substr(0, space));
      rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
    }
    const auto bad = [&](std::string_view what) {
      why = fmt::format("line {}: {}", line_no, what);
      return std::nullopt;
    };
    if (f.size() != 10) return bad(fmt::format("{} fields, not 10", f.size()));
    const auto uid = number(f[0]);
    const auto dev = number(f[2]);
    const auto ino = number(f[3]);
    const auto hash = number(f[4]);
    const auto runs = number(f[9]);
    if (!uid || *uid > std::numeric_limits<uid_t>::max() || !dev || !ino || !hash || !runs) {
      return bad("a uid, executable, command hash or run count that is not a number");
    }
    if (f[1] != "-" && !is_place(f[1])) return bad("a place that is neither \"-\" nor a pod or container ID");
    const auto optional_number = [&](std::string_view s, bool& ok) -> std::optional<std::uint64_t> {
      if (s == "-") return std::nullopt;
      const auto v = number(s);
      ok = ok && v && *v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      return v;
    };
    bool ok = true;
    const auto longest = optional_number(f[5], ok);
    const auto peak = optional_number(f[6], ok);
    if (!ok) return bad("a longest kernel or peak memory that is neither \"-\" nor a number");
    if ((f[7] != "0" && f[7] != "1") || (f[8] != "0" && f[8] != "1")) return bad("a hurt flag that is not 0 or 1");
    const profile_key key{static_cast<uid_t>(*uid), f[1] == "-" ? std::string{} : std::string(f[1]), *dev, *ino, *hash};
    if (out.find(key)) return bad("a profile listed twice");
    job_profile& p = out.at(key);
    if (longest) p.longest_kernel = duration{static_cast<std::int64_t>(*longest)};
    if (peak) p.peak_bytes = bytes{*peak};
    p.hurt_as_mps_client = f[7] == "1";
    p.hurt_time_sliced = f[8] == "1";
    p.runs = *runs;
  }
  if (!header) {
    why = "empty";
    return std::nullopt;
  }
  return out;
}

}  // namespace tgs::cuda::node
