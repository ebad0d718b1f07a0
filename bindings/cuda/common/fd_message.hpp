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

/// Sends the `size` bytes at `data` with descriptor `fd` attached, without blocking; true when the
/// whole message went.
inline bool send_with_fd(int socket, const void* data, std::size_t size, int fd) noexcept {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(size);
}

/// Receives one message into `buffer` and the descriptor sent with it into `fd` (-1 when none;
/// any further one is closed, so a peer cannot leak descriptors into the receiver). Returns the
/// message's bytes, or -1.
inline ssize_t receive_with_fd(int socket, void* buffer, std::size_t size, int& fd) noexcept {
  fd = -1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  iovec iov{buffer, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fd < 0) {
        fd = received;
      } else {
        ::close(received);
      }
    }
  }
  return n;
}

}  // namespace tgs::cuda
