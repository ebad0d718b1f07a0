// SPDX-License-Identifier: Apache-2.0
/// @file
/// The node's listening socket, owned safely: one node per socket path, decided by a lock file
/// beside it (`<socket>.lock`, `flock`), and only what this process created is ever removed.
///
/// A second node on a live node's path fails before it touches anything; a node whose
/// predecessor died (SIGKILL leaves the socket file) takes the stale socket over; a node whose
/// predecessor is still stopping (it no longer listens, but holds the lock until its MPS daemons
/// and metrics are stopped) waits for it, a bounded time; a path that
/// names anything but a socket (a regular file, a directory) is refused, never replaced. Two nodes
/// started at once cannot both bind: the lock admits one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace tgs::cuda::node {

/// Where a socket may be made and who else gets it.
struct socket_folder_rules {
  /// Accept a folder that users other than its owner may write to (`--allow-shared-folders`).
  bool allow_shared = false;
  /// The socket file's group, set with its mode.
  std::optional<gid_t> group;
};

/// A bound, listening `SOCK_SEQPACKET` Unix socket and the lock that makes it this process's.
class socket_listener {
 public:
  /// How long a node waits for a predecessor that holds the lock but no longer listens: a node
  /// stopping MPS daemons waits up to 3 s for each to quit (`mps_options::stop_timeout`), and its
  /// metrics server takes up to 2 s to end its threads.
  static constexpr std::chrono::milliseconds default_takeover_wait{10000};

  socket_listener() = default;
  /// Makes the socket's folder if it is missing and opens it (refused if it is a symlink, owned
  /// by another user than this process's or root, or writable by others unless
  /// `rules.allow_shared`), takes the lock, replaces a stale socket, binds and listens
  /// (non-blocking, close-on-exec), and sets the file's mode and group, all relative to the
  /// opened folder and never through a symlink. Throws `std::runtime_error` saying why it could not.
  socket_listener(const std::string& path, unsigned mode, int backlog,
                  std::chrono::milliseconds takeover_wait = default_takeover_wait, const socket_folder_rules& rules = {});
  ~socket_listener();
  socket_listener(socket_listener&& other) noexcept;
  socket_listener& operator=(socket_listener&& other) noexcept;
  socket_listener(const socket_listener&) = delete;
  socket_listener& operator=(const socket_listener&) = delete;

  /// The listening descriptor (-1 when not bound).
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Closes the listening descriptor and keeps the socket file and the lock: new clients are
  /// refused, and a node started now waits for the lock instead of taking a path this process
  /// still cleans up after.
  void stop_listening() noexcept;

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;
  int lock_fd_ = -1;
  /// The socket's folder, opened once: every name below is made and removed relative to it.
  int folder_fd_ = -1;
  std::string name_;
  /// The socket file this process created (device and inode), removed at the end only if the
  /// path still names it.
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool created_ = false;
};

}  // namespace tgs::cuda::node
