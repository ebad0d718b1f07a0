// SPDX-License-Identifier: Apache-2.0
// The interposer's side of the node protocol: register, map the segment, watch the node, fail open.
#include "job_link.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <thread>

namespace tgs::cuda::intercept {

const link_state unregistered_link{};
std::atomic<const link_state*> current_link{&unregistered_link};

namespace {

/// Published when the node is absent, gone or incompatible: everything passes untouched.
const link_state unmanaged_link{};

std::mutex register_mutex;
/// Serialises memory requests on the registration's socket, and its closing by the watcher.
std::mutex rpc_mutex;
std::atomic<bool> watcher_started{false};
std::atomic<bool> said_absent{false};
std::atomic<bool> said_mismatch{false};
std::atomic<bool> said_lost{false};
std::atomic<int> cached_log_level{-1};

int log_threshold() noexcept {
  int level = cached_log_level.load(std::memory_order_relaxed);
  if (level >= 0) return level;
  level = static_cast<int>(log_level::warn);
  if (const char* s = std::getenv("TGS_LOG_LEVEL")) {
    if (std::strcmp(s, "error") == 0) level = static_cast<int>(log_level::error);
    if (std::strcmp(s, "info") == 0) level = static_cast<int>(log_level::info);
    if (std::strcmp(s, "debug") == 0) level = static_cast<int>(log_level::debug);
  }
  cached_log_level.store(level, std::memory_order_relaxed);
  return level;
}

const char* socket_path() noexcept {
  const char* path = std::getenv("TGS_NODE_SOCKET");
  return (path != nullptr && path[0] != '\0') ? path : "/run/tgs/node.sock";
}

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

abi::register_request make_request() noexcept {
  abi::register_request req;
  // The class is the operator's (set in the container spec or command line); unset means the
  // node applies its own default, so a job cannot promote itself by omission.
  const char* cls = std::getenv("TGS_JOB_CLASS");
  req.job_class = abi::class_code::unspecified;
  if (cls != nullptr && std::strcmp(cls, "production") == 0) req.job_class = abi::class_code::production;
  if (cls != nullptr && std::strcmp(cls, "opportunistic") == 0) req.job_class = abi::class_code::opportunistic;
  req.gpu = job_gpu();
  const char* name = std::getenv("TGS_JOB_NAME");
  if (name != nullptr) {
    std::strncpy(req.name, name, sizeof(req.name) - 1);
  } else if (const int fd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC); fd >= 0) {
    const ssize_t n = ::read(fd, req.name, sizeof(req.name) - 1);
    if (n > 0 && req.name[n - 1] == '\n') req.name[n - 1] = '\0';
    ::close(fd);
  }
  return req;
}

enum class register_outcome { registered, absent, mismatch, rejected };

struct registration {
  register_outcome outcome = register_outcome::absent;
  int socket = -1;
  const link_state* link = nullptr;
  std::uint32_t node_version = 0;
  char reason[256] = {};
};

/// Connects, registers and maps the segment. Never throws; on any failure the socket is closed.
registration register_with_node() noexcept {
  registration out;
  const char* path = socket_path();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof(addr.sun_path)) {
    std::snprintf(out.reason, sizeof(out.reason), "socket path too long: %.200s", path);
    return out;
  }
  std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  auto fail = [&](register_outcome why) {
    ::close(fd);
    out.outcome = why;
    return out;
  };
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::snprintf(out.reason, sizeof(out.reason), "%.150s: %.80s", path, std::strerror(errno));
    return fail(register_outcome::absent);
  }
  // Registration is bounded: a wedged node must not hang the job's first CUDA call.
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));

  const abi::register_request req = make_request();
  if (::send(fd, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
    std::snprintf(out.reason, sizeof(out.reason), "send: %s", std::strerror(errno));
    return fail(register_outcome::absent);
  }

  alignas(8) char buffer[abi::max_message_bytes];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  iovec iov{buffer, sizeof(buffer)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  int segment_fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&segment_fd, CMSG_DATA(c), sizeof(int));
  }
  auto fail_fd = [&](register_outcome why) {
    if (segment_fd >= 0) ::close(segment_fd);
    return fail(why);
  };
  if (n < static_cast<ssize_t>(sizeof(abi::message_header))) {
    std::snprintf(out.reason, sizeof(out.reason), "no reply from the node");
    return fail_fd(register_outcome::absent);
  }
  abi::message_header header;
  std::memcpy(&header, buffer, sizeof(header));
  if (header.magic != abi::message_magic || header.abi_version != abi::version) {
    out.node_version = header.abi_version;
    return fail_fd(register_outcome::mismatch);
  }
  if (header.type == abi::message_type::rejected && n >= static_cast<ssize_t>(sizeof(abi::reject_reply))) {
    abi::reject_reply reject;
    std::memcpy(&reject, buffer, sizeof(reject));
    std::snprintf(out.reason, sizeof(out.reason), "%.*s", static_cast<int>(sizeof(reject.reason)), reject.reason);
    return fail_fd(register_outcome::rejected);
  }
  if (header.type != abi::message_type::registered || n < static_cast<ssize_t>(sizeof(abi::register_reply)) ||
      segment_fd < 0) {
    std::snprintf(out.reason, sizeof(out.reason), "malformed reply from the node");
    return fail_fd(register_outcome::mismatch);
  }
  abi::register_reply reply;
  std::memcpy(&reply, buffer, sizeof(reply));
  void* mapping = ::mmap(nullptr, abi::segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment_fd, 0);
  ::close(segment_fd);
  segment_fd = -1;
  if (mapping == MAP_FAILED) {
    std::snprintf(out.reason, sizeof(out.reason), "mmap: %s", std::strerror(errno));
    return fail(register_outcome::rejected);
  }
  auto* segment = static_cast<abi::job_segment*>(mapping);
  if (segment->magic != abi::segment_magic || segment->abi_version != abi::version ||
      segment->size_bytes < sizeof(abi::job_segment)) {
    ::munmap(mapping, abi::segment_bytes);
    out.node_version = segment->abi_version;
    return fail(register_outcome::mismatch);
  }
  auto* link = new (std::nothrow) link_state{segment, segment->job_class == abi::class_code::opportunistic, fd};
  if (link == nullptr) {
    ::munmap(mapping, abi::segment_bytes);
    return fail(register_outcome::rejected);
  }
  // Memory replies may be held back while the node evicts; the watcher only polls for hangup.
  timeval reply_timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &reply_timeout, sizeof(reply_timeout));
  out.outcome = register_outcome::registered;
  out.socket = fd;
  out.link = link;
  log(log_level::info, "registered with tgs-node as job %u (%s) on GPU %u", segment->job_id,
      link->opportunistic ? "opportunistic" : "production", segment->gpu);
  return out;
}

/// Publishes the outcome of a registration attempt and says once why a job runs unmanaged.
void publish(const registration& r) noexcept {
  switch (r.outcome) {
    case register_outcome::registered:
      current_link.store(r.link, std::memory_order_release);
      return;
    case register_outcome::absent:
      if (!said_absent.exchange(true)) {
        log(log_level::warn, "tgs-node not reachable (%s); launches run unthrottled", r.reason);
      }
      break;
    case register_outcome::mismatch:
      if (!said_mismatch.exchange(true)) {
        log(log_level::warn, "tgs-node speaks ABI version %u, this interposer %u; launches run unthrottled",
            r.node_version, abi::version);
      }
      break;
    case register_outcome::rejected:
      if (!said_mismatch.exchange(true)) {
        log(log_level::warn, "tgs-node refused this job (%s); launches run unthrottled", r.reason);
      }
      break;
  }
  current_link.store(&unmanaged_link, std::memory_order_release);
}

/// Watches the connection; when the node goes away (restart, crash), fails open at once and
/// registers again when a node is back, so a node restart never stops a running job.
void watch(int socket, register_outcome last) noexcept {
  for (;;) {
    if (socket >= 0) {
      // Wait for the node to hang up without reading: replies to memory requests on this socket
      // belong to the thread that asked.
      for (;;) {
        pollfd p{socket, POLLRDHUP, 0};
        const int n = ::poll(&p, 1, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) break;
      }
      {
        std::lock_guard lock(rpc_mutex);
        current_link.store(&unmanaged_link, std::memory_order_release);
        ::close(socket);
        socket = -1;
      }
      if (!said_lost.exchange(true)) log(log_level::warn, "lost tgs-node; launches run unthrottled until it is back");
    }
    // Quick retries while no node answers (a restart takes well under a second); slow ones
    // against a node that answers but refuses, so it is not flooded.
    std::this_thread::sleep_for(std::chrono::milliseconds{last == register_outcome::absent ? 200 : 2000});
    registration r = register_with_node();
    last = r.outcome;
    if (r.outcome == register_outcome::registered) {
      socket = r.socket;
      publish(r);
      log(log_level::info, "connected to tgs-node");
    }
  }
}

void start_watcher(int socket, register_outcome last) noexcept {
  if (watcher_started.exchange(true)) return;
  try {
    std::thread(watch, socket, last).detach();
  } catch (...) {
    // No thread, no reconnection: the job keeps its current state (managed or fail-open).
    log(log_level::warn, "could not start the tgs-node watcher thread");
  }
}

/// A forked child is not the registered process: its launches must not count against the
/// parent's budget, and it has no watcher thread. It runs unmanaged.
void on_fork_child() noexcept {
  current_link.store(&unmanaged_link, std::memory_order_release);
  watcher_started.store(true, std::memory_order_relaxed);
}

long futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, long timeout_ns) noexcept {
  timespec ts{0, timeout_ns};
  // Not FUTEX_PRIVATE: the word is in a mapping shared with the node, which does the wake.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

}  // namespace

const link_state* ensure_link() noexcept {
  const link_state* link = current_link.load(std::memory_order_acquire);
  if (link != &unregistered_link) return link;
  try {
    std::lock_guard lock(register_mutex);
    link = current_link.load(std::memory_order_acquire);
    if (link != &unregistered_link) return link;
    static const int atfork = pthread_atfork(nullptr, nullptr, on_fork_child);
    (void)atfork;
    const registration r = register_with_node();
    publish(r);
    start_watcher(r.socket, r.outcome);
  } catch (...) {
    current_link.store(&unmanaged_link, std::memory_order_release);
  }
  return current_link.load(std::memory_order_acquire);
}

std::optional<std::uint8_t> ask_memory(const link_state& link, std::uint64_t bytes,
                                       abi::allocation_path path) noexcept {
  try {
    std::lock_guard lock(rpc_mutex);
    // The watcher closes the socket under this lock after unpublishing the link: a link that is
    // still current has an open socket.
    if (current_link.load(std::memory_order_acquire) != &link || link.socket < 0) return std::nullopt;
    abi::memory_request req;
    req.bytes = bytes;
    req.path = path;
    if (::send(link.socket, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
      return std::nullopt;
    }
    alignas(8) char buffer[abi::max_message_bytes];
    for (;;) {
      const ssize_t n = ::recv(link.socket, buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < static_cast<ssize_t>(sizeof(abi::memory_reply))) {
        log(log_level::warn, "no answer from tgs-node to a memory request; allocating as asked");
        return std::nullopt;
      }
      abi::memory_reply reply;
      std::memcpy(&reply, buffer, sizeof(reply));
      if (reply.header.magic != abi::message_magic || reply.header.type != abi::message_type::memory_reply) {
        return std::nullopt;
      }
      return reply.verdict;
    }
  } catch (...) {
    return std::nullopt;
  }
}

void wait_for_allowance(const link_state& link, std::uint64_t position) noexcept {
  abi::job_segment& seg = *link.segment;
  const std::uint64_t start = abi::monotonic_ns();
  for (;;) {
    const std::uint32_t generation = seg.refill_generation.load(std::memory_order_acquire);
    if (abi::within_allowance(position, seg.allowance.load(std::memory_order_acquire))) break;
    if (current_link.load(std::memory_order_acquire) != &link) break;  // node gone or replaced
    const std::uint64_t now = abi::monotonic_ns();
    const std::uint64_t heartbeat = seg.heartbeat_ns.load(std::memory_order_acquire);
    if (now > heartbeat && now - heartbeat > abi::stale_after_ns) break;  // node wedged: fail open
    // Sleep until the next refill wakes us; the timeout bounds the time to notice a dead node.
    futex_wait(&seg.refill_generation, generation, 2'000'000);
  }
  seg.throttled_launches.fetch_add(1, std::memory_order_relaxed);
  seg.throttled_ns.fetch_add(abi::monotonic_ns() - start, std::memory_order_relaxed);
}

void log(log_level level, const char* format, ...) noexcept {
  if (static_cast<int>(level) > log_threshold()) return;
  char line[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  if (n < 0) return;
  std::fprintf(stderr, "tgs-intercept[%d]: %s\n", static_cast<int>(::getpid()), line);
}

}  // namespace tgs::cuda::intercept
