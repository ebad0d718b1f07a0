// SPDX-License-Identifier: Apache-2.0
// A client that speaks tgs-node's protocol directly (no interposer): what a hostile local user can
// do with the socket and with the segment the node hands out. The fault tests use it as the
// attacker, and as a fake node's peer.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "fd_message.hpp"
#include "node_abi.hpp"

namespace tgs_e2e {

namespace abi = tgs::cuda::abi;

/// A connection to a node's socket.
class node_client {
 public:
  /// Connects to `path` (non-blocking connect: empty when nothing accepts at once).
  static std::optional<node_client> connect(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return std::nullopt;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return std::nullopt;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    timeval timeout{3, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return node_client(fd);
  }
  node_client(node_client&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), memfd_(std::exchange(o.memfd_, -1)), segment_(std::exchange(o.segment_, nullptr)) {}
  node_client& operator=(node_client&&) = delete;
  ~node_client() {
    if (segment_ != nullptr) ::munmap(segment_, abi::segment_bytes);
    if (memfd_ >= 0) ::close(memfd_);
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] abi::job_segment* segment() const { return segment_; }

  /// The ABI version the client speaks: this build's, or `TGS_TEST_ABI` (to attack an older node).
  static std::uint32_t abi_version() {
    const char* s = std::getenv("TGS_TEST_ABI");
    return s != nullptr && *s != '\0' ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10)) : abi::version;
  }

  bool send_bytes(const void* data, std::size_t size) {
    return ::send(fd_, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
  }

  /// Registers as `cls` on `gpu`; true when the node accepted and the segment is mapped.
  bool register_as(abi::class_code cls, std::uint32_t gpu, const std::string& name,
                   const abi::register_request& base = abi::register_request{}) {
    abi::register_request req = base;
    req.header.abi_version = abi_version();
    req.job_class = cls;
    req.gpu = gpu;
    std::strncpy(req.name, name.c_str(), sizeof(req.name) - 1);
    if (!send_bytes(&req, sizeof(req))) return false;
    const int memfd = receive_reply();
    if (memfd < 0) return false;
    void* p = ::mmap(nullptr, abi::segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    memfd_ = memfd;
    if (p == MAP_FAILED) return false;
    segment_ = static_cast<abi::job_segment*>(p);
    return true;
  }

  /// The segment's descriptor, after `register_as` (kept open: a hostile client may resize it).
  [[nodiscard]] int memfd() const { return memfd_; }

  /// The type of the node's first reply, and its descriptor (-1 when none came with it).
  int receive_reply() {
    alignas(8) char buffer[abi::max_message_bytes];
    int memfd = -1;
    const ssize_t n = tgs::cuda::receive_with_fd(fd_, buffer, sizeof(buffer), memfd);
    if (n >= static_cast<ssize_t>(sizeof(abi::message_header))) std::memcpy(&last_header_, buffer, sizeof(last_header_));
    last_size_ = n;
    if (n < static_cast<ssize_t>(sizeof(abi::register_reply)) || last_header_.type != abi::message_type::registered) {
      if (memfd >= 0) ::close(memfd);
      return -1;
    }
    std::memcpy(&registered_, buffer, sizeof(registered_));
    return memfd;
  }
  [[nodiscard]] const abi::message_header& last_header() const { return last_header_; }
  /// The node's acceptance, after `register_as` succeeded (its MPS client settings, say).
  [[nodiscard]] const abi::register_reply& registered() const { return registered_; }

  /// Asks for `bytes` on `path`; the verdict, or empty when no answer came within the timeout.
  std::optional<std::uint8_t> ask_memory(std::uint64_t bytes, abi::allocation_path path) {
    abi::memory_request req;
    req.header.abi_version = abi_version();
    req.bytes = bytes;
    req.path = path;
    req.sequence = ++sequence_;
    if (!send_bytes(&req, sizeof(req))) return std::nullopt;
    abi::memory_reply reply;
    if (::recv(fd_, &reply, sizeof(reply), 0) != static_cast<ssize_t>(sizeof(reply))) return std::nullopt;
    return reply.verdict;
  }

 private:
  explicit node_client(int fd) : fd_(fd) {}
  int fd_ = -1;
  int memfd_ = -1;
  abi::job_segment* segment_ = nullptr;
  abi::message_header last_header_{};
  abi::register_reply registered_{};
  std::uint32_t sequence_ = 0;
  ssize_t last_size_ = 0;
};

}  // namespace tgs_e2e
