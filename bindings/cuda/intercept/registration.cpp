// SPDX-License-Identifier: Apache-2.0
// One bounded registration attempt: connect without blocking, register, check and map the segment.
#include "registration.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "fd_message.hpp"
#include "mps_env.hpp"

namespace tgs::cuda::intercept {

namespace {

/// The GPU index the job runs on: operator-set TGS_GPU, else the first entry of
/// CUDA_VISIBLE_DEVICES when it is an index, else 0.
std::uint32_t job_gpu() noexcept {
  for (const char* var : {"TGS_GPU", "CUDA_VISIBLE_DEVICES"}) {
    const char* s = std::getenv(var);
    if (s == nullptr || *s < '0' || *s > '9') continue;
    return static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10));
  }
  return 0;
}

/// The class the job asks for: the operator's TGS_JOB_CLASS (set in the container spec or command
/// line); unset means the node applies its own default, so a job cannot promote itself by omission.
abi::class_code requested_class() noexcept {
  const char* cls = std::getenv("TGS_JOB_CLASS");
  if (cls != nullptr && std::strcmp(cls, "production") == 0) return abi::class_code::production;
  if (cls != nullptr && std::strcmp(cls, "opportunistic") == 0) return abi::class_code::opportunistic;
  return abi::class_code::unspecified;
}

abi::register_request make_request(const abi::job_holdings& holdings) noexcept {
  abi::register_request req;
  req.job_class = requested_class();
  req.gpu = job_gpu();
  const char* name = std::getenv("TGS_JOB_NAME");
  if (name != nullptr) {
    std::strncpy(req.name, name, sizeof(req.name) - 1);
  } else if (const int fd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC); fd >= 0) {
    const ssize_t n = ::read(fd, req.name, sizeof(req.name) - 1);
    if (n > 0 && req.name[n - 1] == '\n') req.name[n - 1] = '\0';
    ::close(fd);
  }
  req.holdings = holdings;
  // Said so the node knows a job whose CUDA started outside the MPS settings it gives now, and
  // that this interposer's synchronisation marks carry the job's wait.
  req.flags = cuda_register_flags() | abi::register_flag_marks_wait;
  return req;
}

/// Why the shared file behind `fd` cannot be used, or nullptr when it can: it must be at least
/// `bytes` long and sealed against shrinking, so no access to it can ever raise SIGBUS.
const char* unusable_file(int fd, std::uint32_t bytes) noexcept {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return "cannot stat the segment";
  if (static_cast<std::uint64_t>(st.st_size) < bytes) return "the segment is shorter than a page";
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return "the segment is not sealed against shrinking";
  return nullptr;
}

/// Maps the GPU page behind `fd` (closing it), writable when the node opened it so for us, after
/// the same checks as the segment, or returns nullptr and says why: without its page a job runs
/// without gap filling (an opportunistic job only within its allowance; a production job's
/// activity is not sampled), never unmanaged.
abi::gpu_page* map_gpu_page(int fd, std::uint32_t gpu, bool& writable) noexcept {
  writable = false;
  if (fd < 0) return nullptr;
  const int flags = ::fcntl(fd, F_GETFL);
  writable = flags >= 0 && (flags & O_ACCMODE) == O_RDWR;
  void* mapping = nullptr;
  if (unusable_file(fd, abi::gpu_page_bytes) == nullptr) {
    mapping = ::mmap(nullptr, abi::gpu_page_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (mapping == nullptr || mapping == MAP_FAILED) {
    log(log_level::warn, "the node's GPU page cannot be mapped: no gap filling for this job");
    return nullptr;
  }
  auto* page = static_cast<abi::gpu_page*>(mapping);
  if (page->magic != abi::gpu_page_magic || page->abi_version != abi::version || page->gpu != gpu ||
      page->size_bytes < sizeof(abi::gpu_page) || page->size_bytes > abi::gpu_page_bytes) {
    ::munmap(mapping, abi::gpu_page_bytes);
    log(log_level::warn, "the node's GPU page is not one this interposer reads: no gap filling for this job");
    return nullptr;
  }
  return page;
}

}  // namespace

const char* socket_path() noexcept {
  const char* path = std::getenv("TGS_NODE_SOCKET");
  return (path != nullptr && path[0] != '\0') ? path : "/run/tgs/node.sock";
}

bool wait_ready(int fd, short events, std::uint64_t deadline_ns) noexcept {
  for (;;) {
    const std::uint64_t now = abi::monotonic_ns();
    if (now >= deadline_ns) return false;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>((deadline_ns - now + 999'999) / 1'000'000);
    const int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    return (p.revents & events) != 0 || (p.revents & (POLLHUP | POLLERR)) != 0;
  }
}

std::uint64_t first_registration_wait_ns() noexcept {
  if (const char* ms = std::getenv("TGS_REGISTRATION_WAIT_MS"); ms != nullptr && *ms >= '0' && *ms <= '9') {
    return std::min<std::uint64_t>(std::strtoull(ms, nullptr, 10), 600'000) * 1'000'000;
  }
  // A job that does not say its class (one in a container, whose class is its class socket's)
  // may be opportunistic, so it takes that bound.
  return requested_class() == abi::class_code::production ? abi::first_registration_wait_production_ns
                                                          : abi::first_registration_wait_opportunistic_ns;
}

registration register_with_node(const abi::job_holdings& holdings) noexcept {
  registration out;
  const char* path = socket_path();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof(addr.sun_path)) {
    std::snprintf(out.reason, sizeof(out.reason), "socket path too long: %.200s", path);
    return out;
  }
  std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
  // Non-blocking throughout: a Unix connect to a node whose backlog is full (wedged, stopped, out
  // of descriptors) would otherwise block the job's first CUDA call for as long as the node does.
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return out;
  auto fail = [&](register_outcome why) {
    ::close(fd);
    out.outcome = why;
    return out;
  };
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    // No socket at all: no node on this host. A socket nobody listens on, or a full backlog: a
    // node that restarts or is busy, worth waiting for.
    out.node_there = errno != ENOENT && errno != ENOTDIR;
    std::snprintf(out.reason, sizeof(out.reason), "%.150s: %.80s", path,
                  errno == EAGAIN ? "the node accepts no connection now" : std::strerror(errno));
    return fail(register_outcome::absent);
  }
  out.node_there = true;
  const std::uint64_t deadline = abi::monotonic_ns() + abi::job_socket_timeout_ns;
  const abi::register_request req = make_request(holdings);
  if (!wait_ready(fd, POLLOUT, deadline)) {
    std::snprintf(out.reason, sizeof(out.reason), "%.150s: the node takes no message now", path);
    return fail(register_outcome::absent);
  }
  if (::send(fd, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
    std::snprintf(out.reason, sizeof(out.reason), "send: %s", std::strerror(errno));
    return fail(register_outcome::absent);
  }

  alignas(8) char buffer[abi::max_message_bytes];
  int fds[2] = {-1, -1};  // the segment, the GPU page
  const ssize_t n = wait_ready(fd, POLLIN, deadline) ? receive_with_fds(fd, buffer, sizeof(buffer), fds, 2) : -1;
  int& segment_fd = fds[0];
  auto fail_fd = [&](register_outcome why) {
    for (int& f : fds) {
      if (f >= 0) ::close(f);
      f = -1;
    }
    return fail(why);
  };
  if (n < static_cast<ssize_t>(sizeof(abi::message_header))) {
    std::snprintf(out.reason, sizeof(out.reason), "no reply from the node within %.1f s",
                  static_cast<double>(abi::job_socket_timeout_ns) / 1e9);
    return fail_fd(register_outcome::absent);
  }
  abi::message_header header;
  std::memcpy(&header, buffer, sizeof(header));
  if (header.magic != abi::message_magic || header.abi_version != abi::version) {
    out.node_version = header.abi_version;
    return fail_fd(register_outcome::mismatch);
  }
  if (header.type == abi::message_type::rejected &&
      n >= static_cast<ssize_t>(offsetof(abi::reject_reply, then))) {
    abi::reject_reply reject;  // a node before `then` sends the reason only: `then` stays `runs`
    std::memcpy(&reject, buffer, std::min(sizeof(reject), static_cast<std::size_t>(n)));
    if (reject.then == abi::refused_then::held || reject.then == abi::refused_then::ended) out.then = reject.then;
    std::snprintf(out.reason, sizeof(out.reason), "%.*s", static_cast<int>(strnlen(reject.reason, sizeof(reject.reason))),
                  reject.reason);
    return fail_fd(register_outcome::rejected);
  }
  if (header.type != abi::message_type::registered || n < static_cast<ssize_t>(sizeof(abi::register_reply)) ||
      segment_fd < 0) {
    std::snprintf(out.reason, sizeof(out.reason), "malformed reply from the node");
    return fail_fd(register_outcome::rejected);
  }
  abi::register_reply reply;
  std::memcpy(&reply, buffer, sizeof(reply));
  if (!abi::valid_mps_client(reply.mps)) {
    // A node of this ABI never sends one: the job still registers, outside MPS.
    log(log_level::warn, "the node's MPS client settings are malformed: this job stays out of MPS");
    reply.mps = abi::mps_client{};
  }
  out.mps = reply.mps;
  if (const char* why = unusable_file(segment_fd, abi::segment_bytes)) {
    std::snprintf(out.reason, sizeof(out.reason), "%s", why);
    return fail_fd(register_outcome::rejected);
  }
  void* mapping = ::mmap(nullptr, abi::segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment_fd, 0);
  ::close(segment_fd);
  segment_fd = -1;
  if (mapping == MAP_FAILED) {
    std::snprintf(out.reason, sizeof(out.reason), "mmap: %s", std::strerror(errno));
    return fail_fd(register_outcome::rejected);
  }
  auto* segment = static_cast<abi::job_segment*>(mapping);
  // Read the identity while the mapping is in place: it is gone after munmap.
  const std::uint64_t magic = segment->magic;
  const std::uint32_t version = segment->abi_version;
  const std::uint32_t size = segment->size_bytes;
  const auto job_class = static_cast<std::uint8_t>(segment->job_class);
  if (magic != abi::segment_magic || version != abi::version || size < sizeof(abi::job_segment) ||
      size > abi::segment_bytes ||
      (job_class != static_cast<std::uint8_t>(abi::class_code::production) &&
       job_class != static_cast<std::uint8_t>(abi::class_code::opportunistic))) {
    ::munmap(mapping, abi::segment_bytes);
    out.node_version = version;
    std::snprintf(out.reason, sizeof(out.reason), "the node's segment is not one this interposer reads");
    return fail(magic == abi::segment_magic && version != abi::version ? register_outcome::mismatch
                                                                       : register_outcome::rejected);
  }
  bool page_writable = false;
  abi::gpu_page* page = map_gpu_page(fds[1], segment->gpu, page_writable);
  fds[1] = -1;
  const bool opportunistic = job_class == static_cast<std::uint8_t>(abi::class_code::opportunistic);
  auto* link = new (std::nothrow) link_state{segment, opportunistic, fd, page,
                                             !opportunistic && page_writable ? page : nullptr};
  if (link == nullptr) {
    ::munmap(mapping, abi::segment_bytes);
    if (page != nullptr) ::munmap(page, abi::gpu_page_bytes);
    return fail(register_outcome::rejected);
  }
  out.outcome = register_outcome::registered;
  out.socket = fd;
  out.link = link;
  log(log_level::info, "registered with tgs-node as job %u (%s) on GPU %u", segment->job_id,
      link->opportunistic ? "opportunistic" : "production", segment->gpu);
  return out;
}

}  // namespace tgs::cuda::intercept
