// SPDX-License-Identifier: Apache-2.0
// The interposer's side of the node protocol: publish a registration, watch the node, register
// again after a restart, ask for memory, wait for allowance; fail open whenever the node is
// absent, silent or incompatible.
#include "job_link.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "activity_sampler.hpp"
#include "allocations.hpp"
#include "mps_env.hpp"
#include "registration.hpp"

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
std::atomic<bool> said_silent{false};
std::atomic<int> cached_log_level{-1};
/// Numbers memory requests, so a reply that arrives after its request gave up is recognised.
std::uint32_t next_sequence = 1;  // under rpc_mutex
/// The first error of the job's driver calls that left its context unusable (0: none), kept for
/// the segment of a registration made after it (a node restart).
std::atomic<std::uint32_t> first_gpu_error{0};

/// Writes the job's GPU error into `segment` unless one is there.
void record_gpu_error(abi::job_segment& segment, std::uint32_t code) noexcept {
  std::uint32_t none = 0;
  segment.gpu_error.compare_exchange_strong(none, code, std::memory_order_acq_rel);
}

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

/// Whether the node has written no heartbeat for `abi::stale_after_ns`: wedged, stopped or gone.
/// The heartbeat is read on our own clock (both sides use CLOCK_MONOTONIC), so one further ahead
/// of it than that allowance was never written by a live node: a corrupt or hostile segment must
/// not hold the job for ever with a heartbeat in the future.
bool node_silent(const abi::job_segment& seg) noexcept {
  const std::uint64_t now = abi::monotonic_ns();
  const std::uint64_t heartbeat = seg.heartbeat_ns.load(std::memory_order_acquire);
  if (heartbeat > now) return heartbeat - now > abi::stale_after_ns;
  return now - heartbeat > abi::stale_after_ns;
}

/// The process exits in order: the node is to see a clean end, not a fault. A forked child's
/// link is the unmanaged one, so its exit marks nothing.
void mark_orderly_exit() noexcept {
  const link_state* link = current_link.load(std::memory_order_acquire);
  if (link->segment != nullptr) link->segment->exited.store(1, std::memory_order_release);
}

/// Publishes the outcome of a registration attempt and says once why a job runs unmanaged. A new
/// registration takes over the job's live allocations (`rehome_allocations`) once it is published,
/// so every allocation made from then on counts in the new segment.
void publish(const registration& r) noexcept {
  switch (r.outcome) {
    case register_outcome::registered:
      // Before the link is published: before the driver's cuInit. An MPS client drains its GPU
      // work before SIGTERM ends it: its abrupt end can take the server's other clients down.
      if (apply_mps_client(r.mps)) install_exit_drain();
      current_link.store(r.link, std::memory_order_seq_cst);
      // After the link is published: an error noted before it is carried over here, one noted
      // after it is written by `note_failure` (both sequentially consistent, so one of them does).
      if (const std::uint32_t code = first_gpu_error.load(std::memory_order_seq_cst); code != 0) {
        record_gpu_error(*r.link->segment, code);
      }
      rehome_allocations(*r.link->segment);
      // Registered after the interposer's statics, so it runs before their destructors: the mark
      // is in the segment before anything of the job's closes its connection.
      {
        static std::once_flag exit_handler;
        std::call_once(exit_handler, [] { std::atexit(mark_orderly_exit); });
      }
      if (r.link->writable_page != nullptr) start_activity_sampler();
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
      if (r.then == abi::refused_then::ended) {
        // The node ends a process that uses a GPU unregistered (--unregistered-action kill): the
        // job ends itself now, saying why, rather than die of a SIGKILL nobody explains.
        log(log_level::error,
            "tgs-node refused this job (%s) and ends unregistered GPU processes; exiting with status %d",
            r.reason, abi::refused_exit_status);
        std::fflush(nullptr);
        ::_exit(abi::refused_exit_status);
      }
      if (!said_mismatch.exchange(true)) {
        log(log_level::warn, "tgs-node refused this job (%s); launches run unthrottled%s", r.reason,
            r.then == abi::refused_then::held ? " (held while a production job runs on its GPU)" : "");
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
      last = register_outcome::absent;  // a restarting node: look again soon
    }
    // Quick retries while no node answers (a restart takes well under a second); slow ones
    // against a node that answers but refuses, so it is not flooded.
    std::this_thread::sleep_for(last == register_outcome::absent ? absent_retry : std::chrono::milliseconds{2000});
    registration r = register_with_node(current_holdings());
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

/// The reply to memory request `sequence`, or empty once the node is silent, the link changed,
/// or `abi::memory_reply_limit_ns` passed. Replies to earlier requests that gave up are skipped.
std::optional<std::uint8_t> await_memory_reply(const link_state& link, std::uint32_t sequence) noexcept {
  const std::uint64_t limit = abi::monotonic_ns() + abi::memory_reply_limit_ns;
  alignas(8) char buffer[abi::max_message_bytes];
  for (;;) {
    // Short slices: between them the node's heartbeat says whether it is still there.
    const std::uint64_t slice = std::min(limit, abi::monotonic_ns() + 100'000'000);
    if (!wait_ready(link.socket, POLLIN, slice)) {
      if (abi::monotonic_ns() >= limit || node_silent(*link.segment)) return std::nullopt;
      continue;
    }
    const ssize_t n = ::recv(link.socket, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < static_cast<ssize_t>(sizeof(abi::memory_reply))) return std::nullopt;
    abi::memory_reply reply;
    std::memcpy(&reply, buffer, sizeof(reply));
    if (reply.header.magic != abi::message_magic || reply.header.type != abi::message_type::memory_reply) {
      return std::nullopt;
    }
    if (reply.sequence == sequence) return reply.verdict;
  }
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
    registration r = register_with_node(current_holdings());
    // A node that is there and does not answer yet (restarting, busy, its caps full) is waited
    // for, bounded, before CUDA starts: a job whose CUDA starts without it starts outside the
    // node's MPS for good (the node then holds it if it is opportunistic). No node: no wait.
    if (r.outcome == register_outcome::absent && r.node_there) {
      const std::uint64_t wait_ns = first_registration_wait_ns();
      const std::uint64_t since = abi::monotonic_ns();
      log(log_level::warn, "tgs-node does not answer (%s); waiting up to %.1f s for it before CUDA starts", r.reason,
          static_cast<double>(wait_ns) / 1e9);
      while (r.outcome == register_outcome::absent && r.node_there && abi::monotonic_ns() - since < wait_ns) {
        std::this_thread::sleep_for(absent_retry);
        r = register_with_node(current_holdings());
      }
      if (r.outcome == register_outcome::absent) {
        log(log_level::warn, "tgs-node did not answer within %.1f s: CUDA starts without it (outside its MPS)",
            static_cast<double>(abi::monotonic_ns() - since) / 1e9);
      } else {
        log(log_level::info, "tgs-node answered after %.1f s", static_cast<double>(abi::monotonic_ns() - since) / 1e9);
      }
    }
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
    if (node_silent(*link.segment)) {
      if (!said_silent.exchange(true)) {
        log(log_level::warn, "tgs-node does not answer (no heartbeat for %.1f s); allocating as asked (said once)",
            static_cast<double>(abi::stale_after_ns) / 1e9);
      }
      return std::nullopt;
    }
    abi::memory_request req;
    req.bytes = bytes;
    req.path = path;
    req.sequence = next_sequence++;
    // The socket's buffer has room unless the node stopped reading: wait (bounded) only then.
    ssize_t sent = ::send(link.socket, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EAGAIN && wait_ready(link.socket, POLLOUT, abi::monotonic_ns() + abi::job_socket_timeout_ns)) {
      sent = ::send(link.socket, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (sent != static_cast<ssize_t>(sizeof(req))) return std::nullopt;
    const std::optional<std::uint8_t> verdict = await_memory_reply(link, req.sequence);
    if (!verdict) log(log_level::warn, "no answer from tgs-node to a memory request; allocating as asked");
    return verdict;
  } catch (...) {
    return std::nullopt;
  }
}

namespace {

/// Whether the production job has left the GPU idle long enough for an opportunistic launch
/// (gap filling): the node turned it on for this job, and the GPU page says so.
bool in_gap(const link_state& link) noexcept {
  const abi::job_segment& seg = *link.segment;
  if (link.page == nullptr || seg.gap_fill.load(std::memory_order_relaxed) == 0) return false;
  const abi::gpu_page& p = *link.page;
  return abi::gap_open(p.pending.load(std::memory_order_acquire), p.last_pending_ns.load(std::memory_order_relaxed),
                       p.sample_ns.load(std::memory_order_acquire),
                       seg.gap_holdoff_ns.load(std::memory_order_relaxed), abi::monotonic_ns());
}

}  // namespace

void wait_for_allowance(const link_state& link, std::uint64_t position, std::uint64_t end) noexcept {
  abi::job_segment& seg = *link.segment;
  const std::uint64_t start = abi::monotonic_ns();
  for (;;) {
    const std::uint32_t generation = seg.refill_generation.load(std::memory_order_acquire);
    if (abi::within_allowance(position, seg.allowance.load(std::memory_order_acquire))) break;
    if (in_gap(link)) {
      seg.gap_launches.fetch_add(1, std::memory_order_relaxed);
      seg.gap_passed_to.store(end, std::memory_order_release);  // where the node's next window starts
      if (abi::monotonic_ns() - start < 1'000) return;  // passed at once: it was never throttled
      break;
    }
    if (current_link.load(std::memory_order_acquire) != &link) break;  // node gone or replaced
    if (node_silent(seg)) break;                                        // node wedged: fail open
    if (seg.gap_fill.load(std::memory_order_relaxed) != 0 && link.page != nullptr) {
      // A gap can open at any sample of the production job (every ~20 us): look that often for
      // the first 20 us without giving the core away, then every 50 us (a gap worth filling
      // lasts longer), so a waiting job does not take the CPU its co-runner's host side needs.
      if (abi::monotonic_ns() - start < 20'000) {
        std::this_thread::yield();
      } else {
        futex_wait(&seg.refill_generation, generation, 50'000);
      }
      continue;
    }
    // Sleep until the next refill wakes us; the timeout bounds the time to notice a dead node.
    futex_wait(&seg.refill_generation, generation, 2'000'000);
  }
  seg.throttled_launches.fetch_add(1, std::memory_order_relaxed);
  seg.throttled_ns.fetch_add(abi::monotonic_ns() - start, std::memory_order_relaxed);
}

void note_failure(int result) noexcept {
  const auto code = static_cast<std::uint32_t>(result);
  if (!abi::sticky_context_error(code)) return;
  std::uint32_t none = 0;
  if (first_gpu_error.compare_exchange_strong(none, code, std::memory_order_seq_cst)) {
    log(log_level::warn, "a CUDA call returned error %u, which leaves this job's context unusable; tgs-node is told",
        code);
  }
  const link_state* link = current_link.load(std::memory_order_seq_cst);
  if (link->segment != nullptr) record_gpu_error(*link->segment, first_gpu_error.load(std::memory_order_relaxed));
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

void sleep_ns(long ns) noexcept {
  timespec ts{0, ns};
  while (::clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

}  // namespace tgs::cuda::intercept
