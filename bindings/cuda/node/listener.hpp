// SPDX-License-Identifier: Apache-2.0
/// @file
/// The node's listening socket, owned safely: one node per socket path, decided by a lock file
/// beside it (`<socket>.lock`, `flock`), and only what this process created is ever removed.
///
/// A second node on a live node's path fails before it touches anything; a node whose
/// predecessor died (SIGKILL leaves the socket file) takes the stale socket over; a path that
/// names anything but a socket (a regular file, a directory) is refused, never replaced. Two nodes
/// started at once cannot both bind: the lock admits one.
#pragma once

#include <sys/types.h>

#include <string>

namespace tgs::cuda::node {

/// A bound, listening `SOCK_SEQPACKET` Unix socket and the lock that makes it this process's.
class socket_listener {
 public:
  socket_listener() = default;
  /// Takes the lock, replaces a stale socket, binds and listens (non-blocking, close-on-exec), and
  /// sets the file mode. Throws `std::runtime_error` saying why it could not.
  socket_listener(const std::string& path, unsigned mode, int backlog);
  ~socket_listener();
  socket_listener(socket_listener&& other) noexcept;
  socket_listener& operator=(socket_listener&& other) noexcept;
  socket_listener(const socket_listener&) = delete;
  socket_listener& operator=(const socket_listener&) = delete;

  /// The listening descriptor (-1 when not bound).
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  int fd_ = -1;
  int lock_fd_ = -1;
  /// The socket file this process created (device and inode), removed at the end only if the
  /// path still names it.
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool created_ = false;
};

}  // namespace tgs::cuda::node
