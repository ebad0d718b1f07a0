// SPDX-License-Identifier: Apache-2.0
/// @file
/// A process pinned by a pidfd: the peer of a connection as the kernel recorded it at connect, or a
/// process seen with a given start time. Every signal tgs-node sends to a job or to an unregistered
/// GPU process goes through one, so it reaches that process or nothing, never another process that
/// was given its pid later (docs/trust-model.md, "Signals").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tgs::cuda::node {

/// What /proc/<pid>/stat says of a process: its state (field 3), parent (4) and start time (22,
/// clock ticks since boot).
struct process_stat {
  char state = '?';
  pid_t parent = 0;
  std::uint64_t start = 0;
};

/// Process `pid`'s stat fields, zombies included; empty when there is no such process.
[[nodiscard]] std::optional<process_stat> read_process_stat(pid_t pid);

/// The start time of process `pid` while it runs (not a zombie); empty when it is gone. The start
/// time tells a recycled pid from the process that had it.
[[nodiscard]] std::optional<std::uint64_t> process_start(pid_t pid);

/// How this kernel lets the node pin a process, best first.
enum class pinning : std::uint8_t {
  /// `SO_PEERPIDFD` (Linux 6.5): the kernel hands out a pidfd of the very process that connected.
  peer_pidfd,
  /// `pidfd_open` of the `SO_PEERCRED` pid at accept (Linux 5.3): the pid could name another
  /// process already if the peer ended and its pid was given out again between its connect and
  /// the accept (a few milliseconds at most); a process of another user is told apart.
  pidfd_open,
  /// No pidfd: the start time is checked right before each signal, and a pid recycled between the
  /// check and the signal would be hit.
  start_time,
};

[[nodiscard]] std::string_view to_string(pinning p) noexcept;

/// What this kernel offers, probed once (a socket pair and a pidfd of the calling process).
[[nodiscard]] pinning kernel_pinning();

struct pin_result;

/// What a signal came to.
enum class signal_outcome : std::uint8_t {
  sent,   ///< delivered to the pinned process
  gone,   ///< the process has ended (or its pid names another process now): nothing was sent
  failed, ///< the kernel refused (`errno` says why); nothing was sent
};

/// A process pinned at a moment: its pid, its start time and, where the kernel has them, a pidfd
/// that names it and no other. Move-only (it owns the pidfd). A default-constructed one pins
/// nothing: it has ended, and every signal to it is `gone`.
///
/// ```
/// pin_result r = pinned_process::open(pid, start_seen);
/// if (r.process && r.process->signal(SIGSTOP) == signal_outcome::sent) { /* held */ }
/// ```
class pinned_process {
 public:
  pinned_process() = default;
  pinned_process(pinned_process&& o) noexcept;
  pinned_process& operator=(pinned_process&& o) noexcept;
  pinned_process(const pinned_process&) = delete;
  pinned_process& operator=(const pinned_process&) = delete;
  ~pinned_process();

  /// The peer of the connected Unix socket `socket`, pinned as it was at its connect: its pid,
  /// user and groups from the kernel's record of the connect (`SO_PEERCRED`, `SO_PEERGROUPS`), its
  /// pidfd (`SO_PEERPIDFD`, else `pidfd_open`), and its start time, read while the pidfd shows it
  /// running. Empty with the reason when the peer has ended already, or the descriptors ran out.
  [[nodiscard]] static pin_result peer_of(int socket);
  /// Process `pid` if it still is the process that had start time `start_ticks`. Empty when it
  /// ended, or its pid names another process now.
  [[nodiscard]] static pin_result open(pid_t pid, std::uint64_t start_ticks);

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] std::uint64_t start_ticks() const noexcept { return start_ticks_; }
  /// The effective user and group it connected as (a peer's; 0 for a process opened by pid).
  [[nodiscard]] uid_t uid() const noexcept { return uid_; }
  [[nodiscard]] gid_t gid() const noexcept { return gid_; }
  /// Whether it is pinned by a pidfd (else by its start time only).
  [[nodiscard]] bool by_pidfd() const noexcept { return fd_ >= 0; }
  /// Whether its primary or one of its supplementary groups (at connect) is `gid`.
  [[nodiscard]] bool in_group(gid_t gid) const;
  /// Whether it has ended (a zombie has): its pidfd is readable, or without one its start time no
  /// longer matches its pid.
  [[nodiscard]] bool exited() const;
  /// Sends `signal` to it through its pidfd (without one, by pid right after checking its start
  /// time); nothing when it has ended.
  signal_outcome signal(int signal) const;

 private:
  pid_t pid_ = 0;
  std::uint64_t start_ticks_ = 0;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::vector<gid_t> groups_;
  int fd_ = -1;
};

/// What pinning a process came to: the process, or why not.
struct pin_result {
  std::optional<pinned_process> process;
  /// An `errno` value when the kernel refused (`EMFILE`: the node is out of descriptors); 0 when
  /// the process has ended or is not the one meant.
  int error = 0;
  std::string why;
};

}  // namespace tgs::cuda::node
