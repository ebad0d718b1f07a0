// SPDX-License-Identifier: Apache-2.0
// A stand-in libcuda.so.1 with a simulated device, so CI (no GPU) runs the interposer and
// tgs-node end to end. The device's shared segment is fake_device.hpp.
//
// The device: kernels take `blocks x TGS_FAKE_NS_PER_BLOCK` ns of device time and run one at a
// time across all processes (a real GPU time-slices contexts; here the slice is one kernel). Each
// launch reserves the next free interval on a device timeline kept in a small shared-memory
// segment (one atomic word, compare-and-swap), so no process ever holds a lock a SIGKILL could
// leave behind: a killed process's reserved kernels simply finish, as in-flight kernels would.
// A stream holds at most TGS_FAKE_QUEUE_DEPTH unfinished kernels; a launch into a full stream
// blocks until half of it drained, so a busy job is paced by the device as on a real GPU.
// Synchronisation sleeps until the stream's (or the context's) last kernel ends. MPS clients
// (a process whose CUDA_MPS_PIPE_DIRECTORY at cuInit holds a control daemon's `control` file) at
// below-normal priority run their kernels on a timeline of their own, beside everyone else's, and
// slow normal-priority clients' kernels by an interference term ("MPS clients" below). A CUDA graph
// holds kernel and child-graph nodes; its launch enqueues its kernels as so many launches would.
// An event holds the end of its stream's queued work when it was recorded. A created stream can
// capture (cuStreamBeginCapture_v2 .. cuStreamEndCapture): its kernel launches become a chain of
// kernel nodes instead of running; copies and prefetches are not captured (they run). Querying or
// waiting for an event last recorded in a capturing stream is CUDA_ERROR_CAPTURED_EVENT, and the
// fake also invalidates that capture, so a tool that does it is seen when the capture ends.
//
// Memory: address space only (never backed), but with a device-wide capacity of
// TGS_FAKE_MEMORY_MIB shared by every process of the device, as on a real GPU. The same segment
// holds a table of per-process slots (pid, start time, resident device bytes); a process claims
// one by compare-and-swap at its first allocation. Device-wide use is the sum over slots whose
// process is alive, so a process killed with SIGKILL gives its memory back, as the real driver
// frees a dead context's memory. Unified (managed) memory resides on the device or on the host,
// page by page (64 KiB pages, as the real driver's GPU pages); cuMemPrefetchAsync moves a range
// (taking bytes / TGS_FAKE_LINK_MIB_PER_S on the stream), cuMemAdvise advises a range, and kernels
// of a process with host-resident managed memory run slower (TGS_FAKE_HOST_ACCESS_SLOWDOWN).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_subset.hpp"
#include "fake_device.hpp"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// Graph calls the stream capture uses before their definitions.
FAKE_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned flags);
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph);
FAKE_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                             std::size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2* params);

namespace {

using namespace tgs_fake;

struct settings {
  std::uint64_t ns_per_block = 1000;
  std::size_t queue_depth = 64;
  int device_count = 1;
  std::uint64_t memory_bytes = 16ULL << 30;
  double link_bytes_per_ns = 4096.0 * 1048576.0 / 1e9;  ///< host <-> device copy rate
  double host_access_slowdown = 2.0;
};

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return fallback;
  return std::strtoull(s, nullptr, 10);
}

double env_double(const char* name, double fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return fallback;
  return std::strtod(s, nullptr);
}

const settings& config() {
  static const settings s = [] {
    settings out;
    out.ns_per_block = env_u64("TGS_FAKE_NS_PER_BLOCK", out.ns_per_block);
    out.queue_depth = std::max<std::size_t>(2, env_u64("TGS_FAKE_QUEUE_DEPTH", out.queue_depth));
    out.device_count = static_cast<int>(std::clamp<std::uint64_t>(env_u64("TGS_FAKE_DEVICE_COUNT", 1), 1, max_devices));
    out.memory_bytes = env_u64("TGS_FAKE_MEMORY_MIB", out.memory_bytes >> 20) << 20;
    out.link_bytes_per_ns = std::max(1.0, env_double("TGS_FAKE_LINK_MIB_PER_S", 4096.0)) * 1048576.0 / 1e9;
    out.host_access_slowdown = std::max(0.0, env_double("TGS_FAKE_HOST_ACCESS_SLOWDOWN", out.host_access_slowdown));
    return out;
  }();
  return s;
}

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(std::uint64_t t) {
  const timespec ts{static_cast<time_t>(t / 1'000'000'000ULL), static_cast<long>(t % 1'000'000'000ULL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

/// Raises `word` to at least `value`.
void raise_to(std::atomic<std::uint64_t>& word, std::uint64_t value) {
  std::uint64_t prev = word.load(std::memory_order_relaxed);
  while (prev < value && !word.compare_exchange_weak(prev, value, std::memory_order_relaxed)) {
  }
}

/// This process: pid and start time, read again after a fork.
struct self_identity {
  std::int32_t pid = 0;
  std::uint64_t start_time = 0;
};

self_identity self() {
  self_identity me;
  me.pid = static_cast<std::int32_t>(::getpid());
  proc_stat st;
  if (read_proc_stat(me.pid, st)) me.start_time = st.start_time;
  return me;
}

/// Device-wide resident bytes: the sum over the slots of live processes. Sequentially
/// consistent loads, paired with the reservation's fetch_add, so of two processes reserving at
/// once at least one sees the other (see reserve()).
std::uint64_t device_used(device_state& d, const self_identity& me) {
  std::uint64_t used = 0;
  for (process_slot& s : d.slots) {
    const std::int32_t pid = s.pid.load();
    if (pid <= 0) continue;  // free, or being claimed (its bytes are 0)
    const std::uint64_t bytes = s.device_bytes.load();
    if (bytes == 0) continue;  // nothing to count: spare the /proc read
    const std::uint64_t start = s.start_time.load();
    if (!(pid == me.pid && start == me.start_time) && !process_alive(pid, start)) continue;
    used += bytes;
  }
  return used;
}

/// Claims a slot for this process: a free one, or one whose process is dead. Lock-free: the
/// claim is one compare-and-swap of the pid to `-pid`; the slot is then reset and published.
process_slot* claim_slot(device_state& d, const self_identity& me) {
  for (process_slot& s : d.slots) {
    std::int32_t pid = s.pid.load();
    const bool reclaimable = pid == 0 || (pid > 0 && !process_alive(pid, s.start_time.load())) ||
                             (pid < 0 && !process_alive(-pid, 0));
    if (!reclaimable || !s.pid.compare_exchange_strong(pid, -me.pid)) continue;
    s.device_bytes.store(0);
    s.start_time.store(me.start_time);
    s.pid.store(me.pid);
    return &s;
  }
  return nullptr;
}

/// Takes `bytes` of the device for `slot` if they fit under the capacity. Add first, then check
/// the sum (and take them back if over): two processes reserving at once never both exceed the
/// capacity; at worst both fail although one would have fit (an accepted, rare false
/// out-of-memory near the limit, where a real driver would serialise the two).
bool reserve(device_state& d, process_slot& slot, std::uint64_t bytes, const self_identity& me) {
  if (bytes > config().memory_bytes) return false;
  slot.device_bytes.fetch_add(bytes);
  if (device_used(d, me) > config().memory_bytes) {
    slot.device_bytes.fetch_sub(bytes);
    return false;
  }
  return true;
}

/// A stream: the end times of its unfinished kernels, in order, and of its last work (kernel or
/// copy), which synchronisation waits for.
struct fake_stream {
  std::mutex mutex;
  std::deque<std::uint64_t> ends;
  std::uint64_t last_end = 0;
  // Capture: set while the stream captures, read without the lock by every launch.
  std::atomic<bool> capturing{false};
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;  // the rest under `mutex`
  CUgraph captured = nullptr;
  CUgraphNode capture_last = nullptr;
};

fake_stream default_stream;
std::atomic<std::uint64_t> context_last_end{0};
thread_local int current_device = 0;
thread_local CUcontext current_context = nullptr;
std::atomic<bool> initialised{false};

// Managed memory of this process, for the kernel slowdown: read on every launch without a lock.
std::atomic<std::uint64_t> managed_bytes{0};
std::atomic<std::uint64_t> managed_host_bytes{0};

/// The stream behind a handle; the null stream and the special handles (legacy, per-thread) are
/// all the one default stream here.
fake_stream& stream_of(CUstream s) {
  return (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) ? default_stream
                                                                               : *reinterpret_cast<fake_stream*>(s);
}

/// This process's unfinished kernels (their end times) on any stream, and the most there ever
/// were right after a launch: what a launch window bounds (`tgsFakeProcessCounters`).
struct unfinished_kernels {
  std::mutex mutex;
  std::multiset<std::uint64_t> ends;
  std::uint64_t most = 0;

  void add(std::uint64_t end, std::uint64_t now) {
    std::lock_guard lock(mutex);
    ends.erase(ends.begin(), ends.upper_bound(now));
    ends.insert(end);
    most = std::max<std::uint64_t>(most, ends.size());
  }
};
unfinished_kernels process_kernels;

/// Device time of a kernel of `blocks` blocks: stretched by the share of this process's managed
/// memory that resides on the host (a crude model: each kernel touches its memory evenly).
std::uint64_t kernel_duration(std::uint64_t blocks) {
  const std::uint64_t base = std::min<std::uint64_t>(blocks, 1ULL << 32) * config().ns_per_block;
  const std::uint64_t managed = managed_bytes.load(std::memory_order_relaxed);
  if (base == 0 || managed == 0) return base;
  const double host_share = std::min(1.0, static_cast<double>(managed_host_bytes.load(std::memory_order_relaxed)) /
                                              static_cast<double>(managed));
  const double stretched = static_cast<double>(base) * (1.0 + config().host_access_slowdown * host_share) + 0.5;
  return static_cast<std::uint64_t>(std::min(stretched, 0x1p62));  // a silly slowdown must not overflow
}

// --- MPS clients ----------------------------------------------------------------------------------
//
// A process is an MPS client when CUDA_MPS_PIPE_DIRECTORY, at its cuInit, names a folder holding
// a control daemon's `control` file (the fake daemon's FIFO, or a real daemon's): the folder where
// the daemon runs. (The real driver also tries /tmp/nvidia-mps when the variable is unset; the
// fake does not, so a process that names no folder is never a client.) Its priority is
// CUDA_MPS_CLIENT_PRIORITY as it was then: 1 is below normal, anything else normal.
//
// The model, per device:
// - Below-normal-priority clients' kernels do not take turns with anyone else's: they reserve
//   their device time on a timeline of their own (`mps_low_busy_until_ns`), as the MPS server
//   runs a low-priority client's blocks on the SMs the others leave free. They take turns only
//   with each other.
// - Normal-priority clients and processes that are no clients share the device's timeline as
//   before (one kernel at a time: time slicing at kernel granularity).
// - Interference: priority orders dispatch, not the SMs' caches, memory bandwidth and in-flight
//   blocks. A normal-priority client's kernel takes `1 + c x load` times its device time, where
//   `load` is the below-normal-priority kernel time issued on the device over the last ~100 ms
//   (12 buckets of 8.4 ms in the shared segment, each one lock-free word), as a fraction of that
//   span, at most 1; `c` is TGS_FAKE_MPS_INTERFERENCE (default 0: priority is perfect). It is a
//   number, or the absolute path of a file holding one, which the driver reads again at most every
//   100 ms (missing or unreadable: 0), so a test can hurt and heal the production job mid-run.
// A process that is no client keeps today's behaviour exactly: no interference, the one timeline.

enum class mps_role : std::uint8_t { none, normal, below_normal };
std::atomic<mps_role> mps_client{mps_role::none};

const char* to_string(mps_role r) {
  switch (r) {
    case mps_role::none: return "none";
    case mps_role::normal: return "normal";
    case mps_role::below_normal: return "below-normal";
  }
  return "none";
}

/// Whether the folder `pipe` holds a control daemon's `control` file.
bool mps_daemon_at(const char* pipe) {
  if (pipe == nullptr || *pipe == '\0') return false;
  char control[4200];
  std::snprintf(control, sizeof(control), "%s/control", pipe);
  struct stat st{};
  return ::stat(control, &st) == 0;
}

/// Decides, at cuInit, whether and how this process is an MPS client.
void join_mps() {
  if (!mps_daemon_at(std::getenv("CUDA_MPS_PIPE_DIRECTORY"))) return;
  const char* priority = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
  const bool low = priority != nullptr && std::strcmp(priority, "1") == 0;
  mps_client.store(low ? mps_role::below_normal : mps_role::normal, std::memory_order_release);
}

/// The interference coefficient `c`: TGS_FAKE_MPS_INTERFERENCE, a number or a file's content.
double mps_interference() {
  struct source {
    bool from_file = false;
    double value = 0.0;
    const char* path = nullptr;
  };
  static const source src = [] {
    source out;
    const char* v = std::getenv("TGS_FAKE_MPS_INTERFERENCE");
    if (v == nullptr || *v == '\0') return out;
    if (*v == '/') {
      out.from_file = true;
      out.path = v;  // the environment's string: setenv never frees a replaced one in glibc
    } else {
      out.value = std::clamp(std::strtod(v, nullptr), 0.0, 100.0);
    }
    return out;
  }();
  if (!src.from_file) return src.value;
  static std::atomic<std::uint64_t> next_read{0};
  static std::atomic<double> cached{0.0};
  const std::uint64_t now = now_ns();
  std::uint64_t due = next_read.load(std::memory_order_relaxed);
  // One thread reads the file when it is due; the others use the value it read last.
  if (now >= due && next_read.compare_exchange_strong(due, now + 100'000'000ULL, std::memory_order_relaxed)) {
    double value = 0.0;
    const int fd = ::open(src.path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[64];
      const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
      ::close(fd);
      if (n > 0) {
        buf[n] = '\0';
        value = std::clamp(std::strtod(buf, nullptr), 0.0, 100.0);
      }
    }
    cached.store(value, std::memory_order_relaxed);
  }
  return cached.load(std::memory_order_relaxed);
}

constexpr int mps_value_bits = 40;
constexpr std::uint64_t mps_value_mask = (std::uint64_t{1} << mps_value_bits) - 1;
constexpr std::uint64_t mps_tag_mask = (std::uint64_t{1} << (64 - mps_value_bits)) - 1;

/// Adds `ns` of below-normal-priority kernel time issued at `now` to its bucket: one word, its
/// bucket number's low bits over the nanoseconds, so a stale bucket is restarted by the same
/// compare-and-swap that adds to it.
void note_low_issued(device_state& d, std::uint64_t now, std::uint64_t ns) {
  const std::uint64_t bucket = now >> mps_bucket_shift;
  const std::uint64_t tag = (bucket & mps_tag_mask) << mps_value_bits;
  std::atomic<std::uint64_t>& word = d.mps_low_issued[bucket % mps_buckets];
  std::uint64_t old = word.load(std::memory_order_relaxed);
  std::uint64_t next = 0;
  do {
    const std::uint64_t before = (old & ~mps_value_mask) == tag ? old & mps_value_mask : 0;
    next = tag | std::min(before + std::min(ns, mps_value_mask), mps_value_mask);
  } while (!word.compare_exchange_weak(old, next, std::memory_order_relaxed));
}

/// The below-normal-priority kernel time issued on the device over the last ~100 ms, as a
/// fraction of that span (at most 1).
double low_load(const device_state& d, std::uint64_t now) {
  const std::uint64_t bucket = now >> mps_bucket_shift;
  if (bucket < static_cast<std::uint64_t>(mps_buckets)) return 0.0;
  std::uint64_t issued = 0;
  for (int i = 0; i < mps_buckets; ++i) {
    const std::uint64_t b = bucket - static_cast<std::uint64_t>(i);
    const std::uint64_t word = d.mps_low_issued[b % mps_buckets].load(std::memory_order_relaxed);
    if ((word >> mps_value_bits) == (b & mps_tag_mask)) issued += word & mps_value_mask;
  }
  const std::uint64_t span = (std::uint64_t{mps_buckets - 1} << mps_bucket_shift) + (now - (bucket << mps_bucket_shift));
  return std::min(1.0, static_cast<double>(issued) / static_cast<double>(span));
}

/// A normal-priority client's kernel beside below-normal-priority work: `1 + c x load` times as
/// long.
std::uint64_t with_interference(std::uint64_t duration, const device_state& d, std::uint64_t now) {
  const double c = mps_interference();
  if (c <= 0.0) return duration;
  const double load = low_load(d, now);
  if (load <= 0.0) return duration;
  const double stretched = static_cast<double>(duration) * (1.0 + c * load) + 0.5;
  return static_cast<std::uint64_t>(std::min(stretched, 0x1p62));
}

/// A device fault of this process's context (`tgsFakeInjectFault`): `armed_fault` makes the next
/// launch fail with it, and from then on `context_fault` fails every launch and synchronisation,
/// as the real driver's sticky errors (an illegal address) do. 0: none.
std::atomic<int> armed_fault{0};
std::atomic<int> context_fault{0};

/// Queues a kernel of `blocks` blocks on `stream` and reserves its device time.
CUresult capture_launch(fake_stream& stream, std::uint64_t blocks);

CUresult enqueue(CUstream s, std::uint64_t blocks) {
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (const int armed = armed_fault.exchange(0, std::memory_order_acq_rel); armed != 0) [[unlikely]] {
    context_fault.store(armed, std::memory_order_release);
  }
  if (const int fault = context_fault.load(std::memory_order_acquire); fault != 0) [[unlikely]] {
    return static_cast<CUresult>(fault);
  }
  fake_stream& stream = stream_of(s);
  if (stream.capturing.load(std::memory_order_acquire)) [[unlikely]] return capture_launch(stream, blocks);
  std::uint64_t duration = kernel_duration(blocks);
  if (duration == 0) return CUDA_SUCCESS;  // zero-cost kernels: the benchmark's driver floor
  device_state* dev = device(current_device);
  if (dev == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(stream.mutex);
  std::uint64_t now = now_ns();
  while (!stream.ends.empty() && stream.ends.front() <= now) stream.ends.pop_front();
  if (stream.ends.size() >= config().queue_depth) {
    // Full: block until half the queue has run, like a launch into a full hardware queue.
    sleep_until_ns(stream.ends[stream.ends.size() / 2]);
    now = now_ns();
    while (!stream.ends.empty() && stream.ends.front() <= now) stream.ends.pop_front();
  }
  const std::uint64_t ready = std::max(now, stream.last_end);
  // An MPS client's kernel (see "MPS clients"): below normal priority on the device's second
  // timeline, normal priority slowed by the below-normal work beside it. Others: as ever.
  const mps_role role = mps_client.load(std::memory_order_relaxed);
  if (role == mps_role::normal) [[unlikely]] duration = with_interference(duration, *dev, now);
  std::atomic<std::uint64_t>& timeline = role == mps_role::below_normal ? dev->mps_low_busy_until_ns : dev->busy_until_ns;
  std::uint64_t busy = timeline.load(std::memory_order_relaxed);
  std::uint64_t end = 0;
  do {
    end = std::max(ready, busy) + duration;
  } while (!timeline.compare_exchange_weak(busy, end, std::memory_order_acq_rel));
  if (role == mps_role::below_normal) [[unlikely]] {
    note_low_issued(*dev, now, duration);
    dev->mps_low_kernels.fetch_add(1, std::memory_order_relaxed);
  }
  dev->kernels.fetch_add(1, std::memory_order_relaxed);
  dev->kernel_ns.fetch_add(duration, std::memory_order_relaxed);
  stream.last_end = end;
  stream.ends.push_back(end);
  raise_to(context_last_end, end);
  process_kernels.add(end, now);
  return CUDA_SUCCESS;
}

/// Queues a host <-> device copy of `bytes` on `stream`: it follows the stream's earlier work but
/// takes no slot on the kernel timeline (copy engines run beside kernels).
void enqueue_copy(CUstream s, std::uint64_t bytes) {
  const auto duration = static_cast<std::uint64_t>(static_cast<double>(bytes) / config().link_bytes_per_ns);
  fake_stream& stream = stream_of(s);
  std::lock_guard lock(stream.mutex);
  stream.last_end = std::max(now_ns(), stream.last_end) + duration;
  raise_to(context_last_end, stream.last_end);
}

std::uint64_t grid(unsigned gx, unsigned gy, unsigned gz) {
  return std::uint64_t{gx} * std::uint64_t{gy} * std::uint64_t{gz};
}

// --- memory of this process ------------------------------------------------------------------------
//
// Address space only: a bump allocator per process, never backed. Each allocation's bytes count
// in this process's slot of the device it resides on; host-resident managed memory counts
// nowhere.

constexpr int on_host = -1;

/// The unit in which managed memory resides, moves and takes advice.
constexpr std::uint64_t managed_page_bytes = 64ULL << 10;

/// Where one page of a managed allocation is, and its preferred location.
struct managed_page {
  int device = on_host;  ///< the ordinal whose slot counts it, or on_host
  CUmemLocation preferred{CU_MEM_LOCATION_TYPE_INVALID, 0};  ///< cuMemAdvise preferred location
};

/// An allocation (or a cuMemCreate handle, which shares the address space).
struct allocation {
  std::uint64_t bytes = 0;
  int device = on_host;  ///< plain memory: the ordinal whose slot counts it (managed: per page)
  bool managed = false;
  unsigned accessed_by = 0;  ///< cuMemAdvise accessed-by: bit d for device d, bit max_devices for host
  std::vector<managed_page> pages;  ///< managed memory only

  /// The bytes of page `i` (the last one may be short).
  [[nodiscard]] std::uint64_t page_bytes(std::size_t i) const {
    return std::min(managed_page_bytes, bytes - i * managed_page_bytes);
  }
  /// The pages [first, last) that [offset, offset + count) touches.
  [[nodiscard]] std::pair<std::size_t, std::size_t> page_span(std::uint64_t offset, std::uint64_t count) const {
    return {offset / managed_page_bytes, (offset + count + managed_page_bytes - 1) / managed_page_bytes};
  }
};

struct process_memory {
  std::mutex mutex;
  self_identity me;  ///< whose tables these are; a forked child starts afresh
  std::uint64_t next_address = 0x7e0000000000ULL;
  std::map<std::uint64_t, allocation> allocations;
  process_slot* slots[max_devices] = {};
};

process_memory memory;

/// The tables of this process, under `memory.mutex`. A forked child does not own its parent's
/// memory (the real driver does not let it use the parent's context at all): it starts empty.
process_memory& own_memory() {
  const auto pid = static_cast<std::int32_t>(::getpid());
  if (memory.me.pid != pid) {
    memory.me = self();
    memory.allocations.clear();
    std::fill(std::begin(memory.slots), std::end(memory.slots), nullptr);
    managed_bytes.store(0);
    managed_host_bytes.store(0);
  }
  return memory;
}

/// This process's slot on device `ordinal`, claimed on first use; nullptr when the device's
/// segment is unavailable or all its slots are held by live processes.
process_slot* own_slot(process_memory& m, int ordinal) {
  if (ordinal < 0 || ordinal >= max_devices) return nullptr;
  if (m.slots[ordinal] == nullptr) {
    device_state* d = device(ordinal);
    if (d != nullptr) m.slots[ordinal] = claim_slot(*d, m.me);
  }
  return m.slots[ordinal];
}

std::uint64_t take_address(process_memory& m, std::size_t bytes) {
  const std::uint64_t address = m.next_address;
  m.next_address += (bytes + 511) & ~std::uint64_t{255};
  return address;
}

/// A plain device allocation on the current device; out of memory beyond the device's capacity.
CUresult fake_alloc(unsigned long long* dptr, std::size_t bytes) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  const int ordinal = current_device;
  std::lock_guard lock(memory.mutex);
  process_memory& m = own_memory();
  process_slot* slot = own_slot(m, ordinal);
  if (slot == nullptr || !reserve(*device(ordinal), *slot, bytes, m.me)) return CUDA_ERROR_OUT_OF_MEMORY;
  *dptr = take_address(m, bytes);
  m.allocations[*dptr] = allocation{bytes, ordinal, false, 0, {}};
  return CUDA_SUCCESS;
}

/// A managed allocation: on the current device if it fits in the device's free memory, else on
/// the host. (The real driver populates pages on first touch and evicts under pressure.)
CUresult fake_alloc_managed(CUdeviceptr* dptr, std::size_t bytes, unsigned flags) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  const int ordinal = current_device;
  std::lock_guard lock(memory.mutex);
  process_memory& m = own_memory();
  process_slot* slot = own_slot(m, ordinal);
  const bool resident = slot != nullptr && reserve(*device(ordinal), *slot, bytes, m.me);
  allocation a{bytes, on_host, true, 0, {}};
  try {
    a.pages.assign((bytes + managed_page_bytes - 1) / managed_page_bytes, managed_page{resident ? ordinal : on_host});
  } catch (...) {
    if (resident) slot->device_bytes.fetch_sub(bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = take_address(m, bytes);
  m.allocations[*dptr] = std::move(a);
  // Host share first, so a concurrent launch never sees more host bytes than managed bytes.
  if (!resident) managed_host_bytes.fetch_add(bytes);
  managed_bytes.fetch_add(bytes);
  return CUDA_SUCCESS;
}

CUresult fake_free(unsigned long long key) {
  std::lock_guard lock(memory.mutex);
  process_memory& m = own_memory();
  const auto it = m.allocations.find(key);
  if (it == m.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  const allocation& a = it->second;
  if (!a.managed) {
    m.slots[a.device]->device_bytes.fetch_sub(a.bytes);
  } else {
    std::uint64_t host = 0;
    for (std::size_t i = 0; i < a.pages.size(); ++i) {
      if (a.pages[i].device == on_host) {
        host += a.page_bytes(i);
      } else {
        m.slots[a.pages[i].device]->device_bytes.fetch_sub(a.page_bytes(i));
      }
    }
    managed_host_bytes.fetch_sub(host);
    managed_bytes.fetch_sub(a.bytes);
  }
  m.allocations.erase(it);
  return CUDA_SUCCESS;
}

/// The allocation holding all of [ptr, ptr + count), or nullptr.
allocation* allocation_range(process_memory& m, CUdeviceptr ptr, std::size_t count) {
  if (count == 0) return nullptr;
  auto it = m.allocations.upper_bound(ptr);
  if (it == m.allocations.begin()) return nullptr;
  --it;
  allocation& a = it->second;
  if (ptr - it->first > a.bytes || count > a.bytes - (ptr - it->first)) return nullptr;
  return &a;
}

/// The managed allocation holding all of [ptr, ptr + count), or nullptr; `offset` (when given)
/// is where ptr lies in it.
allocation* managed_range(process_memory& m, CUdeviceptr ptr, std::size_t count, std::uint64_t* offset = nullptr) {
  allocation* a = allocation_range(m, ptr, count);
  if (a == nullptr || !a->managed) return nullptr;
  if (offset != nullptr) *offset = ptr - std::prev(m.allocations.upper_bound(ptr))->first;
  return a;
}

bool valid_device(int ordinal) { return ordinal >= 0 && ordinal < config().device_count; }

bool valid_location(CUmemLocation location) {
  if (location.type == CU_MEM_LOCATION_TYPE_HOST) return true;
  return location.type == CU_MEM_LOCATION_TYPE_DEVICE && valid_device(location.id);
}

unsigned location_bit(CUmemLocation location) {
  return location.type == CU_MEM_LOCATION_TYPE_HOST ? 1U << max_devices : 1U << location.id;
}

/// Moves the pages of [ptr, ptr + count) (inside one managed allocation) to `location`.
/// Accounting changes at once; the copy takes bytes / TGS_FAKE_LINK_MIB_PER_S on `stream`. A move
/// to a device that lacks the room fails with out-of-memory and moves nothing (the real driver
/// would evict other pages to make room).
CUresult fake_prefetch(CUdeviceptr ptr, std::size_t count, CUmemLocation location, unsigned flags, CUstream stream) {
  if (flags != 0 || !valid_location(location)) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  const int target = location.type == CU_MEM_LOCATION_TYPE_HOST ? on_host : location.id;
  std::uint64_t moved = 0;
  int counted_on = target == on_host ? current_device : target;
  {
    std::lock_guard lock(memory.mutex);
    process_memory& m = own_memory();
    std::uint64_t offset = 0;
    allocation* a = managed_range(m, ptr, count, &offset);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto [first, last] = a->page_span(offset, count);
    for (std::size_t i = first; i < last; ++i) {
      if (a->pages[i].device != target) moved += a->page_bytes(i);
    }
    if (target != on_host && moved != 0) {
      process_slot* slot = own_slot(m, target);
      if (slot == nullptr || !reserve(*device(target), *slot, moved, m.me)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::uint64_t from_host = 0;
    for (std::size_t i = first; i < last; ++i) {
      managed_page& page = a->pages[i];
      if (page.device == target) continue;
      if (page.device == on_host) {
        from_host += a->page_bytes(i);
      } else {
        m.slots[page.device]->device_bytes.fetch_sub(a->page_bytes(i));
        if (target == on_host) counted_on = page.device;
      }
      page.device = target;
    }
    if (target == on_host) managed_host_bytes.fetch_add(moved);
    managed_host_bytes.fetch_sub(from_host);
  }
  if (device_state* d = device(counted_on); d != nullptr) {
    d->prefetches.fetch_add(1, std::memory_order_relaxed);
    d->prefetched_bytes.fetch_add(moved, std::memory_order_relaxed);
  }
  if (moved != 0) enqueue_copy(stream, moved);
  return CUDA_SUCCESS;
}

// --- graphs ------------------------------------------------------------------------------------
//
// A graph is a list of nodes run in insertion order (dependencies are checked, not followed): a
// kernel node keeps its parameters, a child-graph node owns a copy of the graph it was given (as
// CUDA copies it at add time). An executable graph is a snapshot: the grid sizes of its kernels,
// flattened in order, child graphs included; a launch enqueues them as so many kernel launches.
// Handles are numbers never reused (not addresses), so a stale or made-up handle is an error,
// not a crash nor another object. One mutex guards it all; a launch copies the snapshot out and
// enqueues without it.

struct fake_graph;

struct fake_node {
  std::uintptr_t handle = 0;
  fake_graph* owner = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_KERNEL;
  CUDA_KERNEL_NODE_PARAMS_v2 params{};  ///< kernel nodes
  fake_graph* child = nullptr;          ///< child-graph nodes: the embedded copy, owned here
};

struct fake_graph {
  std::uintptr_t handle = 0;
  std::vector<fake_node*> nodes;     ///< owned, in insertion order
  fake_node* embedded_in = nullptr;  ///< the child-graph node owning this graph, if any
};

/// The kernels of an executable graph: their grid sizes, in launch order.
using graph_snapshot = std::vector<std::uint64_t>;

struct fake_exec {
  std::uintptr_t handle = 0;
  std::shared_ptr<const graph_snapshot> kernels;
};

struct graph_registry {
  std::mutex mutex;
  std::uintptr_t last_handle = 0x6000'0000'0000;  ///< handles look like (aligned) addresses
  std::unordered_map<std::uintptr_t, fake_graph*> graphs;
  std::unordered_map<std::uintptr_t, fake_node*> nodes;
  std::unordered_map<std::uintptr_t, fake_exec*> execs;

  std::uintptr_t issue() { return last_handle += 16; }
};

/// Never destroyed: a thread may still use graphs while the process exits.
graph_registry& graph_table() {
  static graph_registry* r = new graph_registry;
  return *r;
}

template <class T, class Handle>
T* find_handle(const std::unordered_map<std::uintptr_t, T*>& table, Handle h) {
  const auto it = table.find(reinterpret_cast<std::uintptr_t>(h));
  return it == table.end() ? nullptr : it->second;
}

fake_graph* live_graph(graph_registry& r, CUgraph g) { return find_handle(r.graphs, g); }
fake_node* live_node(graph_registry& r, CUgraphNode n) { return find_handle(r.nodes, n); }
fake_exec* live_exec(graph_registry& r, CUgraphExec e) { return find_handle(r.execs, e); }

template <class Handle, class T>
Handle handle_of(const T* object) {
  return reinterpret_cast<Handle>(object->handle);
}

fake_graph* new_graph(graph_registry& r) {
  auto* g = new fake_graph;
  g->handle = r.issue();
  r.graphs.emplace(g->handle, g);
  return g;
}

void delete_graph(graph_registry& r, fake_graph* g) {
  for (fake_node* n : g->nodes) {
    if (n->child != nullptr) delete_graph(r, n->child);
    r.nodes.erase(n->handle);
    delete n;
  }
  r.graphs.erase(g->handle);
  delete g;
}

fake_node* add_node(graph_registry& r, fake_graph* g) {
  auto* n = new fake_node;
  n->handle = r.issue();
  n->owner = g;
  g->nodes.push_back(n);
  r.nodes.emplace(n->handle, n);
  return n;
}

/// A deep copy of `from` (embedded graphs copied too), registered.
fake_graph* copy_graph(graph_registry& r, const fake_graph* from) {
  fake_graph* to = new_graph(r);
  for (const fake_node* n : from->nodes) {
    fake_node* copy = add_node(r, to);
    copy->type = n->type;
    copy->params = n->params;
    if (n->child != nullptr) {
      copy->child = copy_graph(r, n->child);
      copy->child->embedded_in = copy;
    }
  }
  return to;
}

void flatten(const fake_graph* g, graph_snapshot& out) {
  for (const fake_node* n : g->nodes) {
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) {
      out.push_back(grid(n->params.gridDimX, n->params.gridDimY, n->params.gridDimZ));
    } else if (n->child != nullptr) {
      flatten(n->child, out);
    }
  }
}

/// The checks of every cuGraphAdd*Node: an output, and dependencies that are nodes of `g`.
CUresult check_add(graph_registry& r, CUgraphNode* node, fake_graph* g, const CUgraphNode* deps, std::size_t ndeps) {
  if (node == nullptr || (deps == nullptr && ndeps != 0)) return CUDA_ERROR_INVALID_VALUE;
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (std::size_t i = 0; i < ndeps; ++i) {
    const fake_node* d = live_node(r, deps[i]);
    if (d == nullptr || d->owner != g) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/// Instantiation, shared by every cuGraphInstantiate* form.
CUresult instantiate(CUgraphExec* exec, CUgraph graph) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  const fake_graph* g = live_graph(r, graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto kernels = std::make_shared<graph_snapshot>();
  flatten(g, *kernels);
  auto* e = new fake_exec{r.issue(), std::move(kernels)};
  r.execs.emplace(e->handle, e);
  *exec = handle_of<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

CUresult graph_launch(CUgraphExec exec, CUstream s) {
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::shared_ptr<const graph_snapshot> kernels;
  {
    graph_registry& r = graph_table();
    std::lock_guard lock(r.mutex);
    const fake_exec* e = live_exec(r, exec);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    kernels = e->kernels;
  }
  for (const std::uint64_t blocks : *kernels) {
    if (const CUresult res = enqueue(s, blocks); res != CUDA_SUCCESS) return res;
  }
  return CUDA_SUCCESS;
}

// --- MPS: what a client would be ------------------------------------------------------------------

/// Appends what this process's environment makes of it as an MPS client to the file named by
/// TGS_FAKE_MPS_RECORD (one line per event, written whole with O_APPEND, so processes never
/// interleave): the real driver reads these variables at cuInit (the pipe folder: whether and
/// where to connect) and when it creates the context (priority, thread percentage). `connected`
/// says whether the pipe folder holds a control daemon's `control` pipe (the fake daemon's too),
/// `client` what the fake made of the process at cuInit (none, normal, below-normal: "MPS clients").
void record_mps_client(const char* event) {
  const char* file = std::getenv("TGS_FAKE_MPS_RECORD");
  if (file == nullptr || *file == '\0') return;
  const auto value = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "-";
  };
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  char control[4200];
  std::snprintf(control, sizeof(control), "%s/control", pipe != nullptr ? pipe : "/tmp/nvidia-mps");
  struct stat st{};
  const bool connected = ::stat(control, &st) == 0;
  char line[4608];
  const int n = std::snprintf(line, sizeof(line), "pid=%d event=%s pipe=%s priority=%s threads=%s visible=%s connected=%d client=%s\n",
                              static_cast<int>(::getpid()), event, value("CUDA_MPS_PIPE_DIRECTORY"),
                              value("CUDA_MPS_CLIENT_PRIORITY"), value("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                              value("CUDA_VISIBLE_DEVICES"), connected ? 1 : 0,
                              to_string(mps_client.load(std::memory_order_acquire)));
  const int fd = ::open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || n <= 0) {
    if (fd >= 0) ::close(fd);
    return;
  }
  (void)!::write(fd, line, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(line) - 1));
  ::close(fd);
}

std::atomic<bool> context_recorded{false};

}  // namespace

// --- the exported driver API (the subset the tests and tgs-fake-train use) -------------------------

FAKE_EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.exchange(true, std::memory_order_acq_rel)) {
    join_mps();
    record_mps_client("init");
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = config().device_count;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice dev) {
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(length), "tgs fake GPU %d", dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = config().memory_bytes;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(dev) + 1);
  if (!context_recorded.exchange(true, std::memory_order_acq_rel)) record_mps_client("context");
  // A context puts the process on the device (a real one holds memory, and NVML lists the
  // process from then on): the fake NVML reads the slot.
  std::lock_guard lock(memory.mutex);
  (void)own_slot(own_memory(), dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = context_recorded.load(std::memory_order_acquire) ? 1 : 0;  // retained once: active from then on
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_STUB_LIBRARY: *name = "CUDA_ERROR_STUB_LIBRARY"; break;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    default: *name = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  const auto dev = reinterpret_cast<std::uintptr_t>(ctx);
  if (dev == 0 || dev > static_cast<std::uintptr_t>(config().device_count)) return CUDA_ERROR_INVALID_CONTEXT;
  current_device = static_cast<int>(dev - 1);
  current_context = ctx;
  return CUDA_SUCCESS;
}
// The current context is per thread, as in the real driver: a thread that never set one (the
// interposer's background thread) has none.
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current_context;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = current_device;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(new fake_stream);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<fake_stream*>(stream);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  if (const int fault = context_fault.load(std::memory_order_acquire); fault != 0) return static_cast<CUresult>(fault);
  fake_stream& stream = stream_of(s);
  std::uint64_t end = 0;
  {
    std::lock_guard lock(stream.mutex);
    end = stream.last_end;
  }
  sleep_until_ns(end);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }
/// Whether the stream's queued kernels have all ended. A capturing stream cannot say (as the real
/// driver answers).
FAKE_EXPORT CUresult cuStreamQuery(CUstream s) {
  fake_stream& stream = stream_of(s);
  if (stream.capturing.load(std::memory_order_acquire)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::uint64_t end = 0;
  {
    std::lock_guard lock(stream.mutex);
    end = stream.last_end;
  }
  return now_ns() >= end ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
FAKE_EXPORT CUresult cuStreamQuery_ptsz(CUstream s) { return cuStreamQuery(s); }
FAKE_EXPORT CUresult cuCtxSynchronize() {
  sleep_until_ns(context_last_end.load(std::memory_order_relaxed));
  return CUDA_SUCCESS;
}

// Events: an event holds when the work queued on its stream before it ends (its GPU timestamp:
// the end of that work, or its record if the stream stood empty).
namespace {
struct fake_event {
  std::atomic<std::uint64_t> at{0};
  std::atomic<bool> recorded{false};
  bool timing = true;  ///< created without CU_EVENT_DISABLE_TIMING
  std::atomic<fake_stream*> captured_in{nullptr};  ///< last recorded in this capturing stream
};

/// The answer for an event last recorded in a capturing stream (none when it was not): an error,
/// and that capture is invalidated. The event keeps a pointer to that stream, so the stream must
/// outlive such a query (the fake's tests and tgs-fake-train keep their streams).
std::optional<CUresult> captured_event(fake_event* e) {
  fake_stream* s = e->captured_in.load(std::memory_order_acquire);
  if (s == nullptr) return std::nullopt;
  std::lock_guard lock(s->mutex);
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return CUDA_ERROR_CAPTURED_EVENT;
}
thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}  // namespace
FAKE_EXPORT CUresult cuEventCreate(CUevent* event, unsigned flags) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new fake_event;
  e->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  *event = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<fake_event*>(event);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream s) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake_stream& stream = stream_of(s);
  std::lock_guard lock(stream.mutex);
  auto* e = reinterpret_cast<fake_event*>(event);
  if (stream.capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    e->captured_in.store(&stream, std::memory_order_release);
    return CUDA_SUCCESS;
  }
  e->captured_in.store(nullptr, std::memory_order_release);
  e->at.store(std::max(stream.last_end, now_ns()), std::memory_order_release);
  e->recorded.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent event, CUstream s) { return cuEventRecord(event, s); }
FAKE_EXPORT CUresult cuEventQuery(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (const auto r = captured_event(reinterpret_cast<fake_event*>(event))) return *r;
  return now_ns() >= reinterpret_cast<fake_event*>(event)->at.load(std::memory_order_acquire) ? CUDA_SUCCESS
                                                                                              : CUDA_ERROR_NOT_READY;
}
/// As the driver: an event never recorded, or created without timing, has no time; one not yet
/// complete is not ready.
FAKE_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* a = reinterpret_cast<fake_event*>(start);
  auto* b = reinterpret_cast<fake_event*>(end);
  if (a == nullptr || b == nullptr || !a->timing || !b->timing || !a->recorded.load(std::memory_order_acquire) ||
      !b->recorded.load(std::memory_order_acquire)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const std::uint64_t from = a->at.load(std::memory_order_acquire);
  const std::uint64_t to = b->at.load(std::memory_order_acquire);
  if (now_ns() < std::max(from, to)) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>((static_cast<double>(to) - static_cast<double>(from)) / 1e6);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (const auto r = captured_event(reinterpret_cast<fake_event*>(event))) return *r;
  sleep_until_ns(reinterpret_cast<fake_event*>(event)->at.load(std::memory_order_acquire));
  return CUDA_SUCCESS;
}
// Stream capture into a graph. The default stream cannot capture (the legacy stream cannot on a
// real GPU either). The thread's capture mode is kept, so a caller can exchange it and back; the
// fake does not enforce it.
FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode) {
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  fake_stream& stream = stream_of(s);
  if (&stream == &default_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::lock_guard lock(stream.mutex);
  if (stream.capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (const CUresult r = cuGraphCreate(&stream.captured, 0); r != CUDA_SUCCESS) return r;
  stream.capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  stream.capture_last = nullptr;
  stream.capturing.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fake_stream& stream = stream_of(s);
  std::lock_guard lock(stream.mutex);
  if (stream.capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  const bool invalidated = stream.capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  CUgraph captured = stream.captured;
  stream.capture = CU_STREAM_CAPTURE_STATUS_NONE;
  stream.captured = nullptr;
  stream.capture_last = nullptr;
  stream.capturing.store(false, std::memory_order_release);
  if (invalidated) {
    (void)cuGraphDestroy(captured);
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *graph = captured;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fake_stream& stream = stream_of(s);
  std::lock_guard lock(stream.mutex);
  *status = stream.capture;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(s, status);
}
FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, capture_mode);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(const_cast<void*>(image));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (f == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *f = reinterpret_cast<CUfunction>(const_cast<char*>(name));
  return CUDA_SUCCESS;
}

// Launches: every path the interposer hooks. `_ptsz` forms share the default stream here.
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned, unsigned,
                                    unsigned, unsigned, CUstream s, void**, void**) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(s, grid(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shmem, CUstream s, void** p, void** e) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void**, void**) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(c->hStream, grid(c->gridDimX, c->gridDimY, c->gridDimZ));
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  return cuLaunchKernelEx(c, f, p, e);
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned,
                                               unsigned, unsigned, unsigned, CUstream s, void**) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(s, grid(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                    CUstream s, void** p) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, p);
}
// Graphs: built, inspected, instantiated into snapshots, and launched as their kernels (see the
// graph model above). Null or unknown handles are CUDA_ERROR_INVALID_HANDLE.
FAKE_EXPORT CUresult cuGraphCreate(CUgraph* graph, unsigned flags) {
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  *graph = handle_of<CUgraph>(new_graph(r));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  fake_graph* g = live_graph(r, graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (g->embedded_in != nullptr) return CUDA_ERROR_INVALID_VALUE;  // owned by its child-graph node
  delete_graph(r, g);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                             std::size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2* params) {
  if (params == nullptr || (params->func == nullptr && params->kern == nullptr) || params->gridDimX == 0 ||
      params->gridDimY == 0 || params->gridDimZ == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  fake_graph* g = live_graph(r, graph);
  if (const CUresult res = check_add(r, node, g, deps, ndeps); res != CUDA_SUCCESS) return res;
  fake_node* n = add_node(r, g);
  n->type = CU_GRAPH_NODE_TYPE_KERNEL;
  n->params = *params;
  *node = handle_of<CUgraphNode>(n);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                              std::size_t ndeps, CUgraph child) {
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  fake_graph* g = live_graph(r, graph);
  if (const CUresult res = check_add(r, node, g, deps, ndeps); res != CUDA_SUCCESS) return res;
  const fake_graph* c = live_graph(r, child);
  if (c == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake_graph* copy = copy_graph(r, c);  // before the node is added: `child` may be `graph` itself
  fake_node* n = add_node(r, g);
  n->type = CU_GRAPH_NODE_TYPE_GRAPH;
  n->child = copy;
  copy->embedded_in = n;
  *node = handle_of<CUgraphNode>(n);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, std::size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  const fake_graph* g = live_graph(r, graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  // CUDA: up to *count nodes, the rest of the array nulled, *count the number returned.
  const std::size_t n = std::min(*count, g->nodes.size());
  for (std::size_t i = 0; i < *count; ++i) nodes[i] = i < n ? handle_of<CUgraphNode>(g->nodes[i]) : nullptr;
  *count = n;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  const fake_node* n = live_node(r, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *type = n->type;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  const fake_node* n = live_node(r, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *params = n->params;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* child) {
  if (child == nullptr) return CUDA_ERROR_INVALID_VALUE;
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  const fake_node* n = live_node(r, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *child = handle_of<CUgraph>(n->child);
  return CUDA_SUCCESS;
}
// The instantiation flags of CUDA 12/13 (auto free on launch, upload, device launch, node
// priority); others are invalid.
FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  if ((flags & ~0xFULL) != 0) return CUDA_ERROR_INVALID_VALUE;
  return instantiate(exec, graph);
}
FAKE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                           std::size_t log_size) {
  const CUresult res = instantiate(exec, graph);
  if (res == CUDA_SUCCESS) {
    if (error_node != nullptr) *error_node = nullptr;
    if (log != nullptr && log_size > 0) log[0] = '\0';
  }
  return res;
}
FAKE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;  // its fields are not simulated
  return instantiate(exec, graph);
}
FAKE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(exec, graph, params);
}
FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  fake_exec* e = live_exec(r, exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  r.execs.erase(e->handle);
  delete e;  // a launch in flight holds its own reference to the snapshot
  return CUDA_SUCCESS;
}
// Any graph may replace the snapshot (the real driver insists on the same topology).
FAKE_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo*) {
  graph_registry& r = graph_table();
  std::lock_guard lock(r.mutex);
  fake_exec* e = live_exec(r, exec);
  const fake_graph* g = live_graph(r, graph);
  if (e == nullptr || g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto kernels = std::make_shared<graph_snapshot>();
  flatten(g, *kernels);
  e->kernels = std::move(kernels);
  return CUDA_SUCCESS;
}
// A launch enqueues the snapshot's kernels on the stream, as that many cuLaunchKernel calls would.
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return graph_launch(exec, s); }
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return graph_launch(exec, s); }

// Memory: address space only, with a device-wide capacity of TGS_FAKE_MEMORY_MIB shared by all
// processes of the device.
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) { return fake_alloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                        std::size_t height, unsigned) {
  if (pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~std::size_t{511};
  return fake_alloc(dptr, *pitch * height);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream) { return fake_alloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream s) {
  return cuMemAllocAsync(dptr, bytes, s);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool, CUstream) {
  return fake_alloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                                  CUstream s) {
  return cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned flags) {
  return fake_alloc_managed(dptr, bytes, flags);
}
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes, const CUmemAllocationProp*,
                                 unsigned long long) {
  return fake_alloc(handle, bytes);
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return fake_free(handle); }
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, std::size_t bytes, std::size_t, CUmemGenericAllocationHandle handle,
                              unsigned long long) {
  return (ptr == 0 || bytes == 0 || handle == 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t bytes) {
  return (ptr == 0 || bytes == 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return fake_free(dptr); }
// Memory is address space only: a memset checks its range and takes no time.
FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr ptr, unsigned char, std::size_t count) {
  std::lock_guard lock(memory.mutex);
  return allocation_range(own_memory(), ptr, count) == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return cuMemFree_v2(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return cuMemFreeAsync(dptr, s); }
FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  device_state* d = device(current_device);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  // Identity only (no tables): a monitoring thread never waits for an allocation here.
  const std::uint64_t used = device_used(*d, self());
  *total_bytes = config().memory_bytes;
  *free_bytes = config().memory_bytes - std::min(used, config().memory_bytes);
  return CUDA_SUCCESS;
}

// Unified memory: advice is recorded per page (it moves nothing; accessed-by per allocation); a
// prefetch moves the pages of its range.
FAKE_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, CUmemLocation location) {
  // The real driver ignores the location of UNSET_PREFERRED_LOCATION; every other advice needs one.
  if (advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION && !valid_location(location)) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(memory.mutex);
  std::uint64_t offset = 0;
  allocation* a = managed_range(own_memory(), ptr, count, &offset);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto [first, last] = a->page_span(offset, count);
  switch (advice) {
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      for (std::size_t i = first; i < last; ++i) a->pages[i].preferred = location;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      for (std::size_t i = first; i < last; ++i) a->pages[i].preferred = CUmemLocation{CU_MEM_LOCATION_TYPE_INVALID, 0};
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
      a->accessed_by |= location_bit(location);
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      a->accessed_by &= ~location_bit(location);
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // read-mostly and the rest are not simulated
}
FAKE_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, std::size_t count, CUmemLocation location, unsigned flags,
                                           CUstream stream) {
  return fake_prefetch(ptr, count, location, flags, stream);
}
FAKE_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, std::size_t count, CUmemLocation location,
                                                unsigned flags, CUstream stream) {
  return fake_prefetch(ptr, count, location, flags, stream);
}

// --- for tests only (not driver API, not in cuGetProcAddress): what the simulation did ---------------

/// The counters of device `ordinal`'s shared segment (any pointer may be null).
FAKE_EXPORT CUresult tgsFakeDeviceCounters(int ordinal, unsigned long long* kernels, unsigned long long* kernel_ns,
                                           unsigned long long* prefetches, unsigned long long* prefetched_bytes) {
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  device_state* d = device(ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (kernels != nullptr) *kernels = d->kernels.load();
  if (kernel_ns != nullptr) *kernel_ns = d->kernel_ns.load();
  if (prefetches != nullptr) *prefetches = d->prefetches.load();
  if (prefetched_bytes != nullptr) *prefetched_bytes = d->prefetched_bytes.load();
  return CUDA_SUCCESS;
}

/// Device `ordinal`'s MPS model (any pointer may be null): below-normal-priority kernels run, and
/// the share of the last ~100 ms that such kernels issued (the `load` of "MPS clients").
FAKE_EXPORT CUresult tgsFakeMpsCounters(int ordinal, unsigned long long* low_kernels, double* recent_low_load) {
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  device_state* d = device(ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (low_kernels != nullptr) *low_kernels = d->mps_low_kernels.load();
  if (recent_low_load != nullptr) *recent_low_load = low_load(*d, now_ns());
  return CUDA_SUCCESS;
}

/// Makes this process's next kernel launch fail with `error` (CUDA_ERROR_ILLEGAL_ADDRESS, say), and
/// every launch and stream synchronisation after it: a device fault of the process's context.
FAKE_EXPORT CUresult tgsFakeInjectFault(CUresult error) {
  if (error == CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  armed_fault.store(static_cast<int>(error), std::memory_order_release);
  return CUDA_SUCCESS;
}

/// The most kernels this process had unfinished at once (on all its streams), counted at each
/// launch: what an opportunistic job's launch window bounds.
FAKE_EXPORT CUresult tgsFakeProcessCounters(unsigned long long* most_unfinished_kernels) {
  if (most_unfinished_kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(process_kernels.mutex);
  *most_unfinished_kernels = process_kernels.most;
  return CUDA_SUCCESS;
}

/// This process's managed memory, split by where its pages reside (any pointer may be null): what
/// the driver really holds, for checking a caller's own accounting against it.
FAKE_EXPORT CUresult tgsFakeManagedResidency(unsigned long long* device_bytes, unsigned long long* host_bytes) {
  std::lock_guard lock(memory.mutex);
  std::uint64_t on_device = 0;
  std::uint64_t on_host_total = 0;
  for (const auto& [address, a] : own_memory().allocations) {
    for (std::size_t i = 0; a.managed && i < a.pages.size(); ++i) {
      (a.pages[i].device == on_host ? on_host_total : on_device) += a.page_bytes(i);
    }
  }
  if (device_bytes != nullptr) *device_bytes = on_device;
  if (host_bytes != nullptr) *host_bytes = on_host_total;
  return CUDA_SUCCESS;
}

/// Bytes of the managed allocation that starts at `ptr` whose pages reside on a device: the
/// driver's view of one allocation, for checking which part a residency plan kept on the GPU.
FAKE_EXPORT CUresult tgsFakeAllocationResidency(CUdeviceptr ptr, unsigned long long* device_bytes) {
  if (device_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(memory.mutex);
  std::uint64_t offset = 0;
  const allocation* a = managed_range(own_memory(), ptr, 1, &offset);
  if (a == nullptr || offset != 0) return CUDA_ERROR_INVALID_VALUE;
  std::uint64_t on_device = 0;
  for (std::size_t i = 0; i < a->pages.size(); ++i) {
    if (a->pages[i].device != on_host) on_device += a->page_bytes(i);
  }
  *device_bytes = on_device;
  return CUDA_SUCCESS;
}

/// Where the page holding `ptr` of a managed allocation resides (a device ordinal, or -1 for the
/// host), its preferred location (type CU_MEM_LOCATION_TYPE_INVALID: none) and the allocation's
/// accessed-by set (bit d: device d; bit 8: the host). Any output pointer may be null.
FAKE_EXPORT CUresult tgsFakeManagedState(CUdeviceptr ptr, int* resident_device, CUmemLocation* preferred,
                                         unsigned* accessed_by) {
  std::lock_guard lock(memory.mutex);
  std::uint64_t offset = 0;
  const allocation* a = managed_range(own_memory(), ptr, 1, &offset);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const managed_page& page = a->pages[offset / managed_page_bytes];
  if (resident_device != nullptr) *resident_device = page.device;
  if (preferred != nullptr) *preferred = page.preferred;
  if (accessed_by != nullptr) *accessed_by = a->accessed_by;
  return CUDA_SUCCESS;
}

// --- cuGetProcAddress: the driver's symbol table, with its version and stream rules --------------

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status);
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

namespace {
struct export_entry {
  const char* symbol;
  const char* base;
  bool ptds;
  int since;
  void* address;
};

#define FAKE_SYMBOL(symbol, base, ptds, since) {#symbol, #base, ptds, since, reinterpret_cast<void*>(&::symbol)}
const export_entry exports[] = {
    FAKE_SYMBOL(cuInit, cuInit, false, 2000),
    FAKE_SYMBOL(cuDriverGetVersion, cuDriverGetVersion, false, 2020),
    FAKE_SYMBOL(cuDeviceGetCount, cuDeviceGetCount, false, 2000),
    FAKE_SYMBOL(cuDeviceGet, cuDeviceGet, false, 2000),
    FAKE_SYMBOL(cuDeviceGetName, cuDeviceGetName, false, 2000),
    FAKE_SYMBOL(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, false, 7000),
    FAKE_SYMBOL(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, false, 7000),
    FAKE_SYMBOL(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, false, 11000),
    FAKE_SYMBOL(cuGetErrorName, cuGetErrorName, false, 6000),
    FAKE_SYMBOL(cuCtxSetCurrent, cuCtxSetCurrent, false, 4000),
    FAKE_SYMBOL(cuCtxGetCurrent, cuCtxGetCurrent, false, 4000),
    FAKE_SYMBOL(cuCtxGetDevice, cuCtxGetDevice, false, 2000),
    FAKE_SYMBOL(cuDeviceTotalMem_v2, cuDeviceTotalMem, false, 3020),
    FAKE_SYMBOL(cuStreamCreate, cuStreamCreate, false, 2000),
    FAKE_SYMBOL(cuStreamDestroy_v2, cuStreamDestroy, false, 4000),
    FAKE_SYMBOL(cuStreamSynchronize, cuStreamSynchronize, false, 2000),
    FAKE_SYMBOL(cuStreamSynchronize_ptsz, cuStreamSynchronize, true, 7000),
    FAKE_SYMBOL(cuCtxSynchronize, cuCtxSynchronize, false, 2000),
    FAKE_SYMBOL(cuStreamQuery, cuStreamQuery, false, 2000),
    FAKE_SYMBOL(cuStreamQuery_ptsz, cuStreamQuery, true, 7000),
    FAKE_SYMBOL(cuEventCreate, cuEventCreate, false, 2000),
    FAKE_SYMBOL(cuEventDestroy_v2, cuEventDestroy, false, 4000),
    FAKE_SYMBOL(cuEventRecord, cuEventRecord, false, 2000),
    FAKE_SYMBOL(cuEventRecord_ptsz, cuEventRecord, true, 7000),
    FAKE_SYMBOL(cuEventQuery, cuEventQuery, false, 2000),
    FAKE_SYMBOL(cuEventElapsedTime, cuEventElapsedTime, false, 2000),
    FAKE_SYMBOL(cuEventSynchronize, cuEventSynchronize, false, 2000),
    FAKE_SYMBOL(cuStreamIsCapturing, cuStreamIsCapturing, false, 10000),
    FAKE_SYMBOL(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, true, 10000),
    FAKE_SYMBOL(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, false, 10010),
    FAKE_SYMBOL(cuModuleLoadData, cuModuleLoadData, false, 2000),
    FAKE_SYMBOL(cuModuleGetFunction, cuModuleGetFunction, false, 2000),
    FAKE_SYMBOL(cuLaunchKernel, cuLaunchKernel, false, 4000),
    FAKE_SYMBOL(cuLaunchKernel_ptsz, cuLaunchKernel, true, 7000),
    FAKE_SYMBOL(cuLaunchKernelEx, cuLaunchKernelEx, false, 11060),
    FAKE_SYMBOL(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, true, 11060),
    FAKE_SYMBOL(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, false, 9000),
    FAKE_SYMBOL(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, true, 9000),
    FAKE_SYMBOL(cuGraphLaunch, cuGraphLaunch, false, 10000),
    FAKE_SYMBOL(cuGraphLaunch_ptsz, cuGraphLaunch, true, 10000),
    FAKE_SYMBOL(cuGraphCreate, cuGraphCreate, false, 10000),
    FAKE_SYMBOL(cuGraphDestroy, cuGraphDestroy, false, 10000),
    FAKE_SYMBOL(cuGraphAddKernelNode_v2, cuGraphAddKernelNode, false, 12000),
    FAKE_SYMBOL(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode, false, 10000),
    FAKE_SYMBOL(cuGraphGetNodes, cuGraphGetNodes, false, 10000),
    FAKE_SYMBOL(cuGraphNodeGetType, cuGraphNodeGetType, false, 10000),
    FAKE_SYMBOL(cuGraphKernelNodeGetParams_v2, cuGraphKernelNodeGetParams, false, 12000),
    FAKE_SYMBOL(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, false, 10000),
    // As the real driver: "cuGraphInstantiate" is the _v2 signature from 11.0 and the WithFlags
    // one from 12.0; WithFlags also has its own name (since 11.4).
    FAKE_SYMBOL(cuGraphInstantiate_v2, cuGraphInstantiate, false, 11000),
    FAKE_SYMBOL(cuGraphInstantiateWithFlags, cuGraphInstantiate, false, 12000),
    FAKE_SYMBOL(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, false, 11040),
    FAKE_SYMBOL(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, false, 12000),
    FAKE_SYMBOL(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, true, 12000),
    FAKE_SYMBOL(cuGraphExecDestroy, cuGraphExecDestroy, false, 10000),
    FAKE_SYMBOL(cuGraphExecUpdate_v2, cuGraphExecUpdate, false, 12000),
    FAKE_SYMBOL(cuMemAlloc_v2, cuMemAlloc, false, 3020),
    FAKE_SYMBOL(cuMemAllocPitch_v2, cuMemAllocPitch, false, 3020),
    FAKE_SYMBOL(cuMemAllocAsync, cuMemAllocAsync, false, 11020),
    FAKE_SYMBOL(cuMemAllocAsync_ptsz, cuMemAllocAsync, true, 11020),
    FAKE_SYMBOL(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, false, 11020),
    FAKE_SYMBOL(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, true, 11020),
    FAKE_SYMBOL(cuMemAllocManaged, cuMemAllocManaged, false, 6000),
    FAKE_SYMBOL(cuMemCreate, cuMemCreate, false, 10020),
    FAKE_SYMBOL(cuMemRelease, cuMemRelease, false, 10020),
    FAKE_SYMBOL(cuMemMap, cuMemMap, false, 10020),
    FAKE_SYMBOL(cuMemUnmap, cuMemUnmap, false, 10020),
    FAKE_SYMBOL(cuMemFree_v2, cuMemFree, false, 3020),
    FAKE_SYMBOL(cuMemFreeAsync, cuMemFreeAsync, false, 11020),
    FAKE_SYMBOL(cuMemFreeAsync_ptsz, cuMemFreeAsync, true, 11020),
    FAKE_SYMBOL(cuMemGetInfo_v2, cuMemGetInfo, false, 3020),
    FAKE_SYMBOL(cuMemsetD8_v2, cuMemsetD8, false, 3020),
    // Only the _v2 forms (CUmemLocation) exist here: a caller asking for version < 12020 gets
    // CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, where the real driver would hand out v1.
    FAKE_SYMBOL(cuMemAdvise_v2, cuMemAdvise, false, 12020),
    FAKE_SYMBOL(cuMemPrefetchAsync_v2, cuMemPrefetchAsync, false, 12020),
    FAKE_SYMBOL(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync, true, 12020),
    FAKE_SYMBOL(cuGetProcAddress, cuGetProcAddress, false, 11030),
    FAKE_SYMBOL(cuGetProcAddress_v2, cuGetProcAddress, false, 12000),
};
#undef FAKE_SYMBOL

/// The driver's rule: the per-thread variant if asked for (and one exists), else the legacy one;
/// of those, the newest the requested version reaches.
CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool found_any = false;
  bool has_ptds = false;
  for (const export_entry& e : exports) {
    if (std::strcmp(e.base, symbol) == 0 && e.ptds) has_ptds = true;
  }
  const export_entry* best = nullptr;
  for (const export_entry& e : exports) {
    if (std::strcmp(e.base, symbol) != 0) continue;
    found_any = true;
    if (has_ptds && e.ptds != want_ptds) continue;
    if (e.since <= version && (best == nullptr || e.since > best->since)) best = &e;
  }
  if (best == nullptr) {
    if (status != nullptr) {
      *status = found_any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->address;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status);
}
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr);
}

namespace {
/// A launch into a capturing stream: a kernel node after the stream's last captured one. A launch
/// into an invalidated capture fails, as on a real GPU.
CUresult capture_launch(fake_stream& stream, std::uint64_t blocks) {
  static const char captured_kernel[] = "captured";
  std::lock_guard lock(stream.mutex);
  if (stream.capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  params.func = reinterpret_cast<CUfunction>(const_cast<char*>(captured_kernel));
  params.gridDimX = static_cast<unsigned>(std::clamp<std::uint64_t>(blocks, 1, 0xffffffffULL));
  params.gridDimY = params.gridDimZ = params.blockDimX = params.blockDimY = params.blockDimZ = 1;
  CUgraphNode node = nullptr;
  const CUgraphNode* deps = stream.capture_last != nullptr ? &stream.capture_last : nullptr;
  const CUresult r = cuGraphAddKernelNode_v2(&node, stream.captured, deps, deps != nullptr ? 1 : 0, &params);
  if (r == CUDA_SUCCESS) stream.capture_last = node;
  return r;
}
}  // namespace
