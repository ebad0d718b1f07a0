// SPDX-License-Identifier: Apache-2.0
// tgs-node's profiles of opportunistic jobs across their runs: the key read from /proc, and the
// bounded store.
#include "job_profiles.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

}  // namespace tgs::cuda::node
