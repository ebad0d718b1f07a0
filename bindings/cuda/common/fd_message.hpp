// SPDX-License-Identifier: Apache-2.0
/// @file
/// One `SOCK_SEQPACKET` message with a file descriptor beside it (`SCM_RIGHTS`): how the node hands
/// a job its segment. Both sides (and the tests' clients and fake nodes) use these two functions.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

namespace tgs::cuda {

/// Sends the `size` bytes at `data` with the `count` descriptors at `fds` attached (at most
/// `max_message_fds`), without blocking; true when the whole message went.
inline constexpr std::size_t max_message_fds = 4;
inline bool send_with_fds(int socket, const void* data, std::size_t size, const int* fds, std::size_t count) noexcept {
  if (count == 0 || count > max_message_fds) return false;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_message_fds)] = {};
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * count);
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(size);
}

/// One descriptor with the message.
inline bool send_with_fd(int socket, const void* data, std::size_t size, int fd) noexcept {
  return send_with_fds(socket, data, size, &fd, 1);
}

/// Receives one message into `buffer` and up to `max` descriptors sent with it into `fds` (the
/// rest -1; any further one is closed, so a peer cannot leak descriptors into the receiver).
/// Returns the message's bytes, or -1.
inline ssize_t receive_with_fds(int socket, void* buffer, std::size_t size, int* fds, std::size_t max) noexcept {
  for (std::size_t i = 0; i < max; ++i) fds[i] = -1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_message_fds)];
  iovec iov{buffer, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return -1;
  std::size_t kept = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (kept < max) {
        fds[kept++] = received;
      } else {
        ::close(received);
      }
    }
  }
  return n;
}

/// One descriptor with the message (`fd`; -1 when none came).
inline ssize_t receive_with_fd(int socket, void* buffer, std::size_t size, int& fd) noexcept {
  return receive_with_fds(socket, buffer, size, &fd, 1);
}

}  // namespace tgs::cuda
