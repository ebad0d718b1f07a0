// SPDX-License-Identifier: Apache-2.0
/// @file
/// What tgs-node remembers of an opportunistic job across its runs (its longest kernel, its peak
/// memory, whether it held a production job below its target, and under which mechanism), keyed
/// by what the job cannot forge, so that the next start of the same job is chosen a mechanism from
/// what was measured (`tgs::mechanism_choice`).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs::cuda::node {

/// Which job a profile is of: its user, its pod or container (from its cgroup, which the kernel
/// keeps), its executable (device and inode of `/proc/<pid>/exe`) and a hash of its command line.
/// Two runs of one training script by one user in one pod share a key. A job can choose its own
/// command line, so it can take another job's key only within its user and its pod or container:
/// every key a job reaches is one of its own tenant's, whose jobs it could harm anyway.
struct profile_key {
  uid_t uid = 0;
  std::string place;  ///< the pod UID, else the container ID, else empty (on the host)
  std::uint64_t exe_device = 0;
  std::uint64_t exe_inode = 0;
  std::uint64_t command_hash = 0;
  auto operator<=>(const profile_key&) const = default;
};

/// The key of the process `pid` (read from /proc: the caller checks afterwards that the process
/// it pinned is still the one running, so the reads were of it); empty when /proc says nothing
/// (the process has ended, or another PID namespace).
[[nodiscard]] std::optional<profile_key> profile_key_of(pid_t pid, uid_t uid, const std::string& place);

/// FNV-1a of the NUL-separated command line: a stable hash, the same in every run of the node.
[[nodiscard]] std::uint64_t command_hash(std::string_view cmdline) noexcept;

/// What is remembered of one job.
struct job_profile {
  /// The longest kernel timed in any run (once enough were timed to count).
  std::optional<duration> longest_kernel;
  /// The most memory (device + managed) it held in any run.
  std::optional<bytes> peak_bytes;
  bool hurt_as_mps_client = false;
  bool hurt_time_sliced = false;
  std::uint64_t runs = 0;
  std::uint64_t last_used = 0;  ///< the store's clock when it was last read or written
};

/// The profiles, at most `capacity` (the least recently used goes first), and at most
/// `per_user` of one user, so that no user's stream of new command lines evicts the others'.
class job_profiles {
 public:
  explicit job_profiles(std::size_t capacity = 4096, std::size_t per_user = 256)
      : capacity_(capacity), per_user_(per_user) {}

  /// The profile of `key`, if any.
  [[nodiscard]] std::optional<job_profile> find(const profile_key& key);
  /// The profile of `key`, made when there is none (evicting as the bounds say).
  job_profile& at(const profile_key& key);
  [[nodiscard]] std::size_t size() const noexcept { return profiles_.size(); }

  /// Every profile, the least recently used first: the order that, read back through `at`,
  /// gives the same recency.
  [[nodiscard]] std::vector<std::pair<profile_key, job_profile>> by_use() const;

 private:
  void evict_one(std::optional<uid_t> of_user);
  std::size_t capacity_;
  std::size_t per_user_;
  std::uint64_t clock_ = 0;
  std::map<profile_key, job_profile> profiles_;
};

/// The largest profiles file a node reads: 4096 profiles of at most about 200 bytes.
inline constexpr std::size_t profiles_max_bytes = std::size_t{1} << 20;

/// The profiles as the node keeps them across its restarts (`<socket>.profiles`, under
/// `--opportunistic-mechanism auto`): a header line, then one line per profile, the least
/// recently used first: `uid place exe_device exe_inode command_hash longest_kernel_ns peak_bytes
/// hurt_as_mps_client hurt_time_sliced runs`, `-` for a place or a value that is not there.
[[nodiscard]] std::string format_profiles(const job_profiles& profiles);

/// The profiles `text` holds, in a store of the default bounds (a file of more keeps its most
/// recently used). Nothing, with `why` naming the line and what is wrong in it, for a text that is
/// not such a file: a node then starts with none rather than trust part of it.
[[nodiscard]] std::optional<job_profiles> parse_profiles(std::string_view text, std::string& why);

}  // namespace tgs::cuda::node
