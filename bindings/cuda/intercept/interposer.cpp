// SPDX-License-Identifier: Apache-2.0
// The interposer's wrappers, generated from hooked_symbols.def, and the dlsym / cuGetProcAddress
// overrides that hand them out instead of the driver's functions.
#include <dlfcn.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_subset.hpp"
#include "hook_table.hpp"
#include "job_link.hpp"
#include "launch_window.hpp"
#include "tgs/memory/residency.hpp"

#define TGS_EXPORT __attribute__((visibility("default")))

namespace tgs::cuda::intercept {
namespace {

// --- the driver's functions ---------------------------------------------------------------------

/// The driver function each wrapper forwards to, filled by whichever lookup sees it first:
/// dlsym, cuGetProcAddress, or a direct call resolving the next definition after this library.
std::atomic<void*> real_fn[hook_count];

using dlsym_fn = void* (*)(void*, const char*);
std::atomic<dlsym_fn> real_dlsym_fn{nullptr};

/// glibc's dlsym, found through dlvsym (which is not overridden, so this cannot recurse).
dlsym_fn real_dlsym() noexcept {
  dlsym_fn f = real_dlsym_fn.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  void* p = nullptr;
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    p = dlvsym(RTLD_NEXT, "dlsym", version);
    if (p != nullptr) break;
  }
  f = reinterpret_cast<dlsym_fn>(p);
  real_dlsym_fn.store(f, std::memory_order_release);
  return f;
}

/// The loaded driver library, if any, to look up exports by name.
void* driver_handle() noexcept {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

}  // namespace

void* wrapper_address(hook_id id) noexcept;
bool is_wrapper(const void* p) noexcept;

namespace {

/// Resolves the driver function behind a wrapper on a direct call: the next definition after
/// this library (the driver when preloaded), else the loaded libcuda.so.1.
void* resolve_real(hook_id id) noexcept {
  const char* symbol = hook_table[index(id)].symbol;
  dlsym_fn dl = real_dlsym();
  if (dl == nullptr) return nullptr;
  void* p = dl(RTLD_NEXT, symbol);
  if (p == nullptr || is_wrapper(p)) {
    void* h = driver_handle();
    p = h != nullptr ? dl(h, symbol) : nullptr;
  }
  if (p == nullptr || is_wrapper(p)) return nullptr;
  real_fn[index(id)].store(p, std::memory_order_release);
  return p;
}

/// Calls the driver's function for `Id`. Without a driver it answers as the driver's stub does.
template <hook_id Id, typename... Args>
CUresult forward(Args... args) noexcept {
  void* p = real_fn[index(Id)].load(std::memory_order_acquire);
  if (p == nullptr) [[unlikely]] {
    p = resolve_real(Id);
    if (p == nullptr) return CUDA_ERROR_STUB_LIBRARY;
  }
  return reinterpret_cast<typename hook_signature<Id>::type>(p)(args...);
}

// --- gates and accounts ---------------------------------------------------------------------------

/// A gate that always lets the call through.
struct pass_token {};
constexpr pass_token gate_pass() noexcept { return {}; }

/// The gate's own answer to the call, if it gave one (a refusal, or the call served another
/// way): the wrapper then returns it without forwarding or accounting.
constexpr std::optional<CUresult> answer(const pass_token&) noexcept { return std::nullopt; }
constexpr std::optional<CUresult> answer(const launch_token&) noexcept { return std::nullopt; }

/// Thread blocks of a grid, saturating instead of wrapping for out-of-range dimensions.
constexpr std::uint64_t grid_blocks(unsigned gx, unsigned gy, unsigned gz) noexcept {
  std::uint64_t xy = 0;
  std::uint64_t xyz = 0;
  if (__builtin_mul_overflow(std::uint64_t{gx}, std::uint64_t{gy}, &xy) ||
      __builtin_mul_overflow(xy, std::uint64_t{gz}, &xyz)) {
    return UINT64_MAX;
  }
  return xyz;
}

std::uint64_t config_blocks(const CUlaunchConfig* config) noexcept {
  return config == nullptr ? 0 : grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ);
}

/// The stream of a `cuLaunchKernelEx` launch (null, the default stream, without a config: the
/// driver refuses that launch anyway).
CUstream launch_stream(const CUlaunchConfig* config) noexcept { return config == nullptr ? nullptr : config->hStream; }

// --- graphs: an executable graph's blocks, counted once at instantiation ---------------------------

std::mutex graph_mutex;
/// Blocks per executable graph. Heap-allocated and never destroyed (as `live_allocs`).
std::unordered_map<CUgraphExec, std::uint64_t>* graph_table = nullptr;

/// `a + b`, saturating: a count that wrapped would let a huge graph through as a small one.
constexpr std::uint64_t add_blocks(std::uint64_t a, std::uint64_t b) noexcept {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

/// The thread blocks of `graph`'s kernel nodes, child graphs included (up to 8 levels deep).
std::uint64_t count_graph_blocks(CUgraph graph, int depth) noexcept;

/// A graph launch's blocks: what its instantiation counted, 0 for an unknown executable graph.
std::uint64_t graph_blocks(CUgraphExec exec) noexcept {
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table == nullptr) return 0;
    const auto it = graph_table->find(exec);
    return it == graph_table->end() ? 0 : it->second;
  } catch (...) {
    return 0;
  }
}

/// Which counter an allocation lands in.
enum class memory_kind : std::uint8_t { device, managed, physical };

/// A live allocation, and the segment it was counted in (a registration that came later must not
/// see a free of bytes it never counted). Managed allocations also carry what the evictor needs.
struct alloc_record {
  std::uint64_t bytes = 0;
  memory_kind kind = memory_kind::device;
  abi::job_segment* counted_in = nullptr;
  std::uint64_t seq = 0;       ///< allocation order, for the residency plan
  CUcontext context = nullptr;  ///< the context it was allocated in (the evictor makes it current)
  CUdevice device = 0;
  /// Managed: the bytes on the GPU, a prefix of the allocation; the rest is on host (preferred
  /// location host). Counted in the segment's `managed_resident_bytes`.
  std::uint64_t resident = 0;
};

std::mutex alloc_mutex;
/// Held while managed allocations are placed, moved or freed (taken before `alloc_mutex`), so the
/// evictor never prefetches a pointer the job is freeing and the resident count stays exact.
std::mutex evict_mutex;
/// Heap-allocated and never destroyed: frees may arrive from other libraries' exit handlers.
std::unordered_map<std::uint64_t, alloc_record>* live_allocs = nullptr;

std::atomic<std::uint64_t>& bytes_counter(abi::job_segment& seg, memory_kind kind) noexcept {
  return kind == memory_kind::managed ? seg.managed_bytes : seg.device_bytes;
}

/// Counts a successful allocation of `bytes` at `*key` (a device pointer or a cuMemCreate handle).
void account_alloc(CUresult r, const unsigned long long* key, std::size_t bytes, memory_kind kind) noexcept {
  if (r != CUDA_SUCCESS || key == nullptr) return;
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs == nullptr) live_allocs = new std::unordered_map<std::uint64_t, alloc_record>();
    (*live_allocs)[*key] = alloc_record{bytes, kind, seg};
  } catch (...) {
    return;  // out of host memory: the allocation stands, it just goes uncounted
  }
  if (seg != nullptr) {
    bytes_counter(*seg, kind).fetch_add(bytes, std::memory_order_relaxed);
    seg->alloc_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void account_alloc_pitch(CUresult r, const CUdeviceptr* dptr, const std::size_t* pitch, std::size_t height) noexcept {
  if (pitch != nullptr) account_alloc(r, dptr, *pitch * height, memory_kind::device);
}

/// The record a free takes out of the table before the driver call, so a concurrent allocation
/// reusing the address cannot be confused with it.
struct free_token {
  std::uint64_t key = 0;
  std::optional<alloc_record> record;
};
constexpr std::optional<CUresult> answer(const free_token&) noexcept { return std::nullopt; }

free_token gate_free(std::uint64_t key, memory_kind) noexcept {
  free_token token{key, std::nullopt};
  try {
    std::unique_lock lock(alloc_mutex);
    if (live_allocs == nullptr) return token;
    auto it = live_allocs->find(key);
    if (it == live_allocs->end()) return token;
    std::unique_lock<std::mutex> evict_lock;
    if (it->second.kind == memory_kind::managed) {
      // Not while the evictor moves managed memory: it must never prefetch a freed pointer.
      // Device frees do not wait for an eviction in progress.
      lock.unlock();
      evict_lock = std::unique_lock(evict_mutex);
      lock.lock();
      it = live_allocs->find(key);
      if (it == live_allocs->end()) return token;
    }
    token.record = it->second;
    live_allocs->erase(it);
  } catch (...) {
  }
  return token;
}

void account_free(const free_token& token, CUresult r) noexcept {
  if (!token.record) return;
  if (r != CUDA_SUCCESS) {  // the driver kept the allocation: so do we
    try {
      std::lock_guard lock(alloc_mutex);
      if (live_allocs != nullptr) live_allocs->emplace(token.key, *token.record);
    } catch (...) {
    }
    return;
  }
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg != nullptr && seg == token.record->counted_in) {
    bytes_counter(*seg, token.record->kind).fetch_sub(token.record->bytes, std::memory_order_relaxed);
    if (token.record->kind == memory_kind::managed) {
      seg->managed_resident_bytes.fetch_sub(token.record->resident, std::memory_order_acq_rel);
    }
    seg->free_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void account_map(CUresult r) noexcept {
  if (r != CUDA_SUCCESS) return;
  if (abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment) {
    seg->map_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

// --- the memory policy's side in the job: verdicts, managed memory, eviction --------------------
// The node's memory policy rules on every allocation (when it runs one) and sets this job's
// resident limit; the job carries it out: a cuMemAlloc the policy grants in managed memory is
// served by cuMemAllocManaged, and the evictor thread moves managed allocations to host and back
// (preferred location + prefetch) to keep the job's resident bytes within the limit.

/// A synchronisation call's start, for the time it blocks.
struct sync_token {
  abi::job_segment* segment = nullptr;
  std::uint64_t start_ns = 0;
};
constexpr std::optional<CUresult> answer(const sync_token&) noexcept { return std::nullopt; }

std::uint64_t monotonic_ns() noexcept;

sync_token gate_sync() noexcept {
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  return {seg, seg != nullptr ? monotonic_ns() : 0};
}

/// Counts a synchronisation that returned: all the job's work before it on that stream (or event)
/// is complete, and the job waited this long for it.
void account_sync(const sync_token& t, CUresult r) noexcept {
  if (t.segment == nullptr || r != CUDA_SUCCESS) return;
  const std::uint64_t now = monotonic_ns();
  t.segment->sync_calls.fetch_add(1, std::memory_order_relaxed);
  t.segment->sync_wait_ns.fetch_add(now - t.start_ns, std::memory_order_relaxed);
  t.segment->last_sync_ns.store(now, std::memory_order_relaxed);
}

/// Driver functions the memory side calls that are not hooked: looked up in the driver itself.
template <typename Fn>
Fn driver_fn(const char* name) noexcept {
  dlsym_fn dl = real_dlsym();
  void* h = driver_handle();
  return (dl == nullptr || h == nullptr) ? nullptr : reinterpret_cast<Fn>(dl(h, name));
}

/// Looks `name` up into `fn`; false when the driver lacks it. A table of such entry points is
/// complete when every lookup succeeded (`ok &= lookup(...)`), so its completeness is derived
/// from the lookups and cannot miss a member added later.
template <typename Fn>
bool lookup(Fn& fn, const char* name) noexcept {
  fn = driver_fn<Fn>(name);
  return fn != nullptr;
}

struct unified_memory_api {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*mem_advise)(CUdeviceptr, std::size_t, CUmem_advise, CUmemLocation) = nullptr;
  CUresult (*mem_prefetch)(CUdeviceptr, std::size_t, CUmemLocation, unsigned, CUstream) = nullptr;
  CUresult (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  bool complete = false;  ///< every entry point was found
};

/// The unified-memory entry points (CUDA 12.2+ `_v2` forms, which take a `CUmemLocation`).
const unified_memory_api& um_api() noexcept {
  static const unified_memory_api api = [] {
    unified_memory_api a;
    bool ok = lookup(a.ctx_get_current, "cuCtxGetCurrent");
    ok &= lookup(a.ctx_set_current, "cuCtxSetCurrent");
    ok &= lookup(a.ctx_get_device, "cuCtxGetDevice");
    ok &= lookup(a.stream_create, "cuStreamCreate");
    ok &= lookup(a.stream_synchronize, "cuStreamSynchronize");
    ok &= lookup(a.mem_advise, "cuMemAdvise_v2");
    ok &= lookup(a.mem_prefetch, "cuMemPrefetchAsync_v2");
    ok &= lookup(a.mem_get_info, "cuMemGetInfo_v2");
    a.complete = ok;
    return a;
  }();
  return api;
}

constexpr CUmemLocation host_location() noexcept { return {CU_MEM_LOCATION_TYPE_HOST, 0}; }
constexpr CUmemLocation device_location(CUdevice d) noexcept { return {CU_MEM_LOCATION_TYPE_DEVICE, d}; }

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

// --- the launch window: at most N of an opportunistic job's launches unfinished on the GPU ---------
//
// The node sets N (`job_segment::max_inflight_launches`, 0: no window); `launch_window.hpp` says
// why. After each of the job's launches an event is recorded on the launch's stream; before the
// next, the job waits for the oldest while N are outstanding. Production jobs never wait here.

/// The event entry points the window uses (not hooked: looked up in the driver itself).
struct event_api {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  bool complete = false;  ///< every entry point was found
};

const event_api& events_api() noexcept {
  static const event_api api = [] {
    event_api a;
    bool ok = lookup(a.ctx_get_current, "cuCtxGetCurrent");
    ok &= lookup(a.event_create, "cuEventCreate");
    ok &= lookup(a.event_record, "cuEventRecord");
    ok &= lookup(a.event_query, "cuEventQuery");
    ok &= lookup(a.event_destroy, "cuEventDestroy_v2");
    ok &= lookup(a.stream_is_capturing, "cuStreamIsCapturing");
    ok &= lookup(a.exchange_capture_mode, "cuThreadExchangeStreamCaptureMode");
    a.complete = ok;
    return a;
  }();
  return api;
}

/// The driver's events as the window's `LaunchEvents`. A wait polls `cuEventQuery`: it yields the
/// core for the first 200 us (a kernel often ends within that), then sleeps 20 us between polls,
/// and gives up after `abi::window_wait_limit_ns`. While it polls, the thread's capture mode is
/// relaxed, so the query cannot invalidate a graph capture another thread runs in global mode.
struct driver_events {
  using event = CUevent;
  using stream = CUstream;
  const event_api* api;

  bool create(CUevent& e) noexcept { return api->event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS; }
  bool record(CUevent& e, CUstream s) noexcept { return api->event_record(e, s) == CUDA_SUCCESS; }
  void destroy(CUevent& e) noexcept { (void)api->event_destroy(e); }
  window_wait wait(CUevent& e) noexcept {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool exchanged = api->exchange_capture_mode(&mode) == CUDA_SUCCESS;
    const std::uint64_t start = monotonic_ns();
    window_wait result = window_wait::finished;
    // Anything but "not ready" ends the wait: done, or the driver can no longer say (a context
    // that is gone, a sticky error), where waiting on would never end.
    while (api->event_query(e) == CUDA_ERROR_NOT_READY) {
      const std::uint64_t waited = monotonic_ns() - start;
      if (waited >= abi::window_wait_limit_ns) {
        result = window_wait::gave_up;
        break;
      }
      if (waited < 200'000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    if (exchanged) (void)api->exchange_capture_mode(&mode);
    return result;
  }
};
static_assert(LaunchEvents<driver_events>);

/// One context's window: events belong to a context, so each context the job launches in has its
/// own (a process with several GPUs has several).
struct context_window {
  CUcontext context = nullptr;
  launch_window<driver_events, abi::max_launch_window> window;
};
/// Contexts with a window; launches in further contexts go unwindowed.
constexpr std::size_t max_window_contexts = 8;
std::mutex window_mutex;  ///< serialises the windows (and so the job's windowed launches)
context_window context_windows[max_window_contexts];

/// The window of `ctx`, claimed on first use; nullptr when all are taken. Under `window_mutex`.
context_window* window_of(CUcontext ctx) noexcept {
  context_window* free_slot = nullptr;
  for (context_window& w : context_windows) {
    if (w.context == ctx) return &w;
    if (w.context == nullptr && free_slot == nullptr) free_slot = &w;
  }
  if (free_slot != nullptr) free_slot->context = ctx;
  return free_slot;
}

/// A launch through the rate gate and the window. While `window` is set, the window's mutex is
/// held (by `lock`) from before the launch until its event is recorded, so the job's launches
/// and their events keep one order.
struct paced_launch_token {
  launch_token launch;
  context_window* window = nullptr;
  CUstream stream = nullptr;
  std::unique_lock<std::mutex> lock;
};

/// When the calling thread's sampled launch (`launch_token::timed`) entered the driver. A
/// thread-local rather than a field of the token: the token of every launch stays as small as
/// it was, and only the sampled one in `abi::launch_time_sample_every` pays for the TLS access.
thread_local std::uint64_t sampled_launch_from_ns = 0;

/// The sampled launch's clock reads, out of line and cold: the common launch path keeps only
/// the test of `launch_token::timed`.
[[gnu::noinline, gnu::cold]] void begin_launch_sample() noexcept { sampled_launch_from_ns = monotonic_ns(); }
[[gnu::noinline, gnu::cold]] void end_launch_sample(abi::job_segment* seg) noexcept {
  seg->timed_launches.fetch_add(1, std::memory_order_relaxed);
  seg->timed_launch_ns.fetch_add(monotonic_ns() - sampled_launch_from_ns, std::memory_order_relaxed);
}
std::optional<CUresult> answer(const paced_launch_token&) noexcept { return std::nullopt; }

/// Room in the window of the current context for an opportunistic job's launch (the slow part
/// of `gate_paced_launch`, out of line so the common gate stays small).
[[gnu::noinline]] void enter_window(paced_launch_token& t, abi::job_segment* seg, std::uint32_t limit, CUstream stream,
                                    bool per_thread) noexcept {
  const event_api& api = events_api();
  if (!api.complete) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      log(log_level::warn, "the driver lacks the event calls a launch window needs: launches are not windowed");
    }
    return;
  }
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  // A launch into a capturing stream only adds a node to a graph: nothing runs, nothing to wait for.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (api.stream_is_capturing(stream, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return;
  }
  CUcontext ctx = nullptr;
  if (api.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  std::unique_lock lock(window_mutex);
  context_window* w = window_of(ctx);
  if (w == nullptr) return;
  driver_events events{&api};
  const std::uint64_t start = monotonic_ns();
  const window_room room = w->window.make_room(events, limit);
  if (room.waited > 0) {
    seg->window_waits.fetch_add(1, std::memory_order_relaxed);
    seg->window_wait_ns.fetch_add(monotonic_ns() - start, std::memory_order_relaxed);
  }
  if (room.gave_up > 0) {
    seg->window_timeouts.fetch_add(room.gave_up, std::memory_order_relaxed);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      log(log_level::warn, "a launch waited %.1f s for an earlier one to finish and went ahead (said once)",
          static_cast<double>(abi::window_wait_limit_ns) / 1e9);
    }
  }
  t.window = w;
  t.stream = stream;
  t.lock = std::move(lock);
}

/// The launch gate of every launch path: the rate gate, then, for an opportunistic job with a
/// window, room in the window. `per_thread` is set for the `_ptsz` forms, whose null stream is
/// the calling thread's default stream.
inline paced_launch_token gate_paced_launch(std::uint64_t blocks, CUstream stream, bool per_thread) noexcept {
  paced_launch_token t{gate_launch(blocks), nullptr, nullptr, {}};
  abi::job_segment* seg = t.launch.segment;
  if (seg == nullptr) return t;
  // The class first (the rate gate read it): a production job never reads the node's refill line.
  if (t.launch.opportunistic) {
    const std::uint32_t limit = seg->max_inflight_launches.load(std::memory_order_relaxed);
    if (limit != 0) [[unlikely]] enter_window(t, seg, limit, stream, per_thread);
  }
  // Last, so the sample is the driver's call alone (not the gate's or the window's waits).
  if (t.launch.timed) [[unlikely]] begin_launch_sample();
  return t;
}

/// Marks a windowed launch outstanding (the slow part of `account_paced_launch`). An event that
/// cannot be recorded means the context is gone (or the driver is out of resources): the window
/// forgets its events, without destroying handles that may be stale, and is bound again by the
/// next launch.
[[gnu::noinline]] void record_in_window(const paced_launch_token& t) noexcept {
  driver_events events{&events_api()};
  if (!t.window->window.record(events, t.stream)) {
    t.window->window.abandon();
    t.window->context = nullptr;
  }
}

/// After the launch: a sampled launch adds its driver time; undo the count if the driver refused
/// it, else mark it outstanding in the window.
inline void account_paced_launch(const paced_launch_token& t, CUresult r) noexcept {
  if (t.launch.timed) [[unlikely]] end_launch_sample(t.launch.segment);
  account_launch(t.launch, r);
  if (t.window != nullptr && r == CUDA_SUCCESS) [[unlikely]] record_in_window(t);
}

std::atomic<std::uint64_t> next_seq{1};
std::atomic<bool> evictor_started{false};

/// Why the GPU's free memory cannot take a managed allocation of `bytes`, if it cannot:
/// oversubscribing a shared card's unified memory can stall every process on it, so it must be
/// the operator's deliberate choice (TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1), not an accident.
bool exceeds_free_memory(std::size_t bytes, const char* what) noexcept {
  if (const char* allow = std::getenv("TGS_ALLOW_MANAGED_OVERSUBSCRIPTION"); allow != nullptr && allow[0] == '1') {
    return false;
  }
  const auto get_info = um_api().mem_get_info;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (get_info == nullptr || get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) return false;
  if (bytes <= free_bytes) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    log(log_level::warn,
        "refused %s of %zu bytes in unified memory: only %zu bytes of GPU memory are free "
        "(set TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1 to allow oversubscription)",
        what, bytes, free_bytes);
  }
  return true;
}

/// The stream the evictor moves memory on in `ctx`: its own non-blocking stream, so it never
/// waits for (or holds up) the job's work on the legacy default stream.
CUstream evictor_stream(CUcontext ctx) noexcept {
  static std::vector<std::pair<CUcontext, CUstream>> streams;  // evictor thread only
  for (const auto& [c, s] : streams) {
    if (c == ctx) return s;
  }
  CUstream s = nullptr;
  constexpr unsigned non_blocking = 0x1;  // CU_STREAM_NON_BLOCKING
  if (um_api().stream_create(&s, non_blocking) != CUDA_SUCCESS) return nullptr;
  try {
    streams.emplace_back(ctx, s);
  } catch (...) {
  }
  return s;
}

/// Moves bytes [from, to) of a managed allocation to host (`to_host`) or back to its GPU, with the
/// advice TGS uses: preferred location host (the GPU still maps it: accessed-by) or the GPU. Runs
/// under `evict_mutex` (which also guards `evictor_stream`) and makes the allocation's context
/// current on the calling thread.
bool move_range(CUdeviceptr ptr, const alloc_record& rec, std::uint64_t from, std::uint64_t to, bool to_host) noexcept {
  const unified_memory_api& api = um_api();
  if (api.ctx_set_current(rec.context) != CUDA_SUCCESS) return false;
  CUstream stream = evictor_stream(rec.context);
  if (stream == nullptr) return false;
  const CUmemLocation where = to_host ? host_location() : device_location(rec.device);
  if (api.mem_advise(ptr + from, to - from, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, where) != CUDA_SUCCESS) return false;
  if (api.mem_prefetch(ptr + from, to - from, where, 0, stream) != CUDA_SUCCESS) return false;
  return api.stream_synchronize(stream) == CUDA_SUCCESS;
}

/// The unit of partial residency: the GPU's large page, so a split never shares a page.
constexpr tgs::bytes residency_granule{2ULL << 20};

/// A managed allocation of one segment, with its place in the residency plan.
struct managed_entry {
  CUdeviceptr ptr = 0;
  alloc_record rec;
  std::uint64_t target = 0;  ///< bytes the plan keeps on the GPU
};

/// The plan for every managed allocation counted in `seg` (plus `extra`, not yet in the table,
/// when given), under the segment's resident limit. Needs `evict_mutex`; takes `alloc_mutex`.
/// Empty when the table is missing or memory ran out (then nothing moves).
std::vector<managed_entry> plan_segment(abi::job_segment& seg, const managed_entry* extra) noexcept {
  std::vector<managed_entry> entries;
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs != nullptr) {
      for (const auto& [key, rec] : *live_allocs) {
        if (rec.kind == memory_kind::managed && rec.counted_in == &seg) entries.push_back({key, rec, 0});
      }
    }
    if (extra != nullptr) entries.push_back(*extra);
    std::vector<tgs::managed_allocation> allocs;
    allocs.reserve(entries.size());
    for (const managed_entry& e : entries) allocs.push_back({tgs::bytes{e.rec.bytes}, e.rec.seq});
    const auto split = seg.residency_split.load(std::memory_order_acquire) ==
                               static_cast<std::uint32_t>(tgs::residency_split::even)
                           ? tgs::residency_split::even
                           : tgs::residency_split::in_order;
    const std::vector<tgs::bytes> plan = tgs::plan_residency(
        allocs, tgs::bytes{seg.resident_limit.load(std::memory_order_acquire)}, residency_granule, split);
    for (std::size_t i = 0; i < entries.size(); ++i) entries[i].target = plan[i].count();
  } catch (...) {
    entries.clear();
  }
  return entries;
}

/// Records that the allocation at `ptr` now has `resident` bytes on the GPU.
void mark_resident(CUdeviceptr ptr, std::uint64_t resident) noexcept {
  std::lock_guard lock(alloc_mutex);
  if (auto it = live_allocs->find(ptr); it != live_allocs->end()) it->second.resident = resident;
}

/// Moves `entries` toward their plan (`target`) in one direction, and counts it: to host what
/// they hold on the GPU beyond it (`to_host`), or back to the GPU what they hold below it.
/// Needs `evict_mutex`. False when a move failed (that part stays where it was).
bool move_toward_plan(abi::job_segment& seg, std::span<managed_entry> entries, bool to_host) noexcept {
  auto& moves = to_host ? seg.evictions : seg.restores;
  auto& moved_total = to_host ? seg.evicted_bytes_total : seg.restored_bytes_total;
  auto& ns_total = to_host ? seg.evict_ns_total : seg.restore_ns_total;
  bool all_moved = true;
  for (managed_entry& e : entries) {
    if (to_host ? e.target >= e.rec.resident : e.target <= e.rec.resident) continue;
    const std::uint64_t start = monotonic_ns();
    const std::uint64_t low = std::min(e.target, e.rec.resident);
    const std::uint64_t high = std::max(e.target, e.rec.resident);
    if (!move_range(e.ptr, e.rec, low, high, to_host)) {
      log(log_level::warn, to_host ? "could not evict %llu bytes of unified memory to host"
                                   : "could not restore %llu bytes of unified memory to the GPU",
          static_cast<unsigned long long>(high - low));
      all_moved = false;
      continue;
    }
    mark_resident(e.ptr, e.target);
    e.rec.resident = e.target;
    if (to_host) {
      seg.managed_resident_bytes.fetch_sub(high - low, std::memory_order_acq_rel);
    } else {
      seg.managed_resident_bytes.fetch_add(high - low, std::memory_order_acq_rel);
    }
    moves.fetch_add(1, std::memory_order_relaxed);
    moved_total.fetch_add(high - low, std::memory_order_relaxed);
    ns_total.fetch_add(monotonic_ns() - start, std::memory_order_relaxed);
  }
  return all_moved;
}

/// One pass of the evictor: moves every managed allocation of the job to what the residency plan
/// (`tgs::plan_residency`: smallest allocations on the GPU first, then the larger ones in order or
/// in equal prefixes, as the node's `residency_split` says) keeps on the GPU under the job's
/// limit. Evictions first, to make room; then restores.
void reconcile(abi::job_segment& seg) noexcept {
  std::lock_guard evict_lock(evict_mutex);
  std::vector<managed_entry> entries = plan_segment(seg, nullptr);
  move_toward_plan(seg, entries, true);
  move_toward_plan(seg, entries, false);
}

/// The evictor thread: wakes when the node changes this job's resident limit (futex on the
/// segment's generation word) or every 200 ms, and reconciles.
void evictor() noexcept {
  for (;;) {
    abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
    if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
      continue;
    }
    const std::uint32_t generation = seg->memory_generation.load(std::memory_order_acquire);
    reconcile(*seg);
    timespec timeout{0, 200'000'000};
    // Not FUTEX_PRIVATE: the node, another process, does the wake.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seg->memory_generation), FUTEX_WAIT, generation, &timeout,
              nullptr, 0);
  }
}

void start_evictor() noexcept {
  if (evictor_started.exchange(true)) return;
  if (!um_api().complete) {
    log(log_level::warn, "the driver lacks the unified-memory calls (CUDA 12.2+): managed memory is not evicted");
    return;
  }
  try {
    std::thread(evictor).detach();
  } catch (...) {
    log(log_level::warn, "could not start the unified-memory evictor thread");
  }
}

/// Populates a new managed allocation where the plan puts it before the job first touches it:
/// the host part on the host, the planned prefix on the GPU. Without this the job's first kernel
/// over it (PyTorch initialises every parameter on the device) populates it by GPU page faults.
/// Faults that populate host memory are slow enough to hold the GPU for seconds (measured on an
/// H100: a DLRM-like job initialising 8 GiB of host-placed tables held its co-runner to 30–55% of
/// its rate for 6 s), and faults that populate the GPU prefix still stalled the co-runner when
/// the rate controller first let the job launch (its wait rose to 10–17% of its time for the
/// 2 s that ended the controller's slow start). A prefetch populates both in bulk, on the
/// allocating thread, before anything runs over them. In its current context, under
/// `evict_mutex` (which guards `evictor_stream`).
void populate(CUdeviceptr ptr, const alloc_record& rec) noexcept {
  const unified_memory_api& api = um_api();
  CUstream stream = evictor_stream(rec.context);
  if (stream == nullptr) return;
  bool queued = false;
  if (rec.resident > 0) {
    queued |= api.mem_prefetch(ptr, rec.resident, device_location(rec.device), 0, stream) == CUDA_SUCCESS;
  }
  if (rec.resident < rec.bytes) {
    const std::uint64_t host_part = rec.bytes - rec.resident;
    queued |= api.mem_prefetch(ptr + rec.resident, host_part, host_location(), 0, stream) == CUDA_SUCCESS;
  }
  if (queued) api.stream_synchronize(stream);
}

/// Records a successful managed allocation and places it as the residency plan says, with it
/// counted: its planned prefix on the GPU, the rest straight on host (preferred location host
/// before the first touch, so those pages are never populated on the GPU), both populated at once
/// (`populate`). The GPU maps all of it (accessed-by). Where the plan keeps part of
/// the new allocation by displacing part of older ones (a small allocation, or any table under
/// the even split), that part is evicted here, before the call returns, so the job is never over
/// its limit. Left to the evictor, it was: on an H100 under the even split, eight 2 GiB tables
/// allocated one after another left the job up to 1.2 GB over its limit for seconds, each table
/// displacing a slice of every earlier one.
void place_managed(CUresult r, const CUdeviceptr* dptr, std::size_t bytes, bool converted) noexcept {
  if (r != CUDA_SUCCESS || dptr == nullptr) return;
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  const unified_memory_api& api = um_api();
  alloc_record rec{bytes, memory_kind::managed, seg, next_seq.fetch_add(1, std::memory_order_relaxed), nullptr, 0,
                   bytes};
  const bool movable = api.complete && api.ctx_get_current(&rec.context) == CUDA_SUCCESS &&
                       rec.context != nullptr && api.ctx_get_device(&rec.device) == CUDA_SUCCESS;
  // Without a node memory policy nothing is evicted or prefetched: the memory stays where the
  // driver puts it, as for a job without tgs.
  const bool policy_active = seg != nullptr && seg->memory_policy_active.load(std::memory_order_acquire) != 0;
  std::lock_guard evict_lock(evict_mutex);
  bool displaced_left = false;  // a displaced part the evictor still has to move
  if (seg != nullptr && movable) {
    const managed_entry self{*dptr, rec, 0};
    std::vector<managed_entry> plan = plan_segment(*seg, &self);
    if (!plan.empty()) {
      rec.resident = plan.back().target;
      if (policy_active) displaced_left = !move_toward_plan(*seg, std::span(plan).first(plan.size() - 1), true);
    }
    api.mem_advise(*dptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device_location(rec.device));
    if (rec.resident < bytes) {
      api.mem_advise(*dptr + rec.resident, bytes - rec.resident, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                     host_location());
      seg->host_placed_bytes.fetch_add(bytes - rec.resident, std::memory_order_relaxed);
    }
    if (policy_active) populate(*dptr, rec);
  }
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs == nullptr) live_allocs = new std::unordered_map<std::uint64_t, alloc_record>();
    (*live_allocs)[*dptr] = rec;
  } catch (...) {
    return;
  }
  if (seg == nullptr) return;
  seg->managed_bytes.fetch_add(bytes, std::memory_order_relaxed);
  seg->managed_resident_bytes.fetch_add(rec.resident, std::memory_order_acq_rel);
  seg->alloc_calls.fetch_add(1, std::memory_order_relaxed);
  if (converted) seg->converted_allocs.fetch_add(1, std::memory_order_relaxed);
  if (movable && policy_active) {
    start_evictor();
    // The evictor sleeps on the generation word; a wake without a change makes it reconcile.
    if (displaced_left) {
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seg->memory_generation), FUTEX_WAKE, 1, nullptr, nullptr,
                0);
    }
  }
}

/// What the memory gate decided for an allocation.
struct alloc_token {
  std::optional<CUresult> result;  ///< set when the gate answered the call itself
};
constexpr std::optional<CUresult> answer(const alloc_token& t) noexcept { return t.result; }

/// Asks the node's memory policy (when it runs one) before an allocation of `bytes` on `path`.
/// A denial fails the call with out-of-memory and says why; a cuMemAlloc the policy wants in
/// managed memory is served by cuMemAllocManaged here. No node or no answer: as the job asked.
alloc_token gate_alloc(unsigned long long* out, std::size_t bytes, abi::allocation_path path) noexcept {
  const link_state* link = current_link.load(std::memory_order_acquire);
  if (link->segment == nullptr) link = ensure_link();
  abi::job_segment* seg = link->segment;
  if (seg == nullptr || out == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return {};
  const std::optional<std::uint8_t> verdict = ask_memory(*link, bytes, path);
  if (!verdict) return {};
  switch (*verdict) {
    case 2: {  // deny_out_of_memory
      seg->denied_allocs.fetch_add(1, std::memory_order_relaxed);
      log(log_level::warn,
          "out of memory: tgs-node's memory policy refused an allocation of %zu bytes (job %u, %s; it holds "
          "%llu bytes of its budget)",
          bytes, seg->job_id, link->opportunistic ? "opportunistic" : "production",
          static_cast<unsigned long long>(seg->device_bytes.load() + seg->managed_bytes.load()));
      return {CUDA_ERROR_OUT_OF_MEMORY};
    }
    case 1: {  // grant_managed
      if (path != abi::allocation_path::convertible) return {};
      if (exceeds_free_memory(bytes, "cuMemAlloc")) {
        seg->denied_allocs.fetch_add(1, std::memory_order_relaxed);
        return {CUDA_ERROR_OUT_OF_MEMORY};
      }
      const CUresult r = forward<hook_id::cuMemAllocManaged>(static_cast<CUdeviceptr*>(out), bytes,
                                                             static_cast<unsigned>(CU_MEM_ATTACH_GLOBAL));
      place_managed(r, out, bytes, true);
      return {r};
    }
    default: return {};  // grant_device
  }
}

/// The gate of the job's own cuMemAllocManaged: the policy may deny it, and the card's free
/// memory must hold it (see `exceeds_free_memory`).
alloc_token gate_managed(CUdeviceptr* out, std::size_t bytes) noexcept {
  if (exceeds_free_memory(bytes, "cuMemAllocManaged")) return {CUDA_ERROR_OUT_OF_MEMORY};
  return gate_alloc(out, bytes, abi::allocation_path::managed);
}

void account_managed(CUresult r, const CUdeviceptr* dptr, std::size_t bytes) noexcept {
  place_managed(r, dptr, bytes, false);
}

/// The job's view of memory: its budget when the node runs a memory policy, never more than the
/// driver reports.
void account_mem_info(CUresult r, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  if (r != CUDA_SUCCESS || free_bytes == nullptr || total_bytes == nullptr) return;
  const abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return;
  const std::uint64_t total = seg->view_total_bytes.load(std::memory_order_relaxed);
  if (total == 0) return;
  const std::uint64_t held = seg->view_others_bytes.load(std::memory_order_relaxed) +
                             seg->device_bytes.load(std::memory_order_relaxed) +
                             seg->managed_resident_bytes.load(std::memory_order_relaxed);
  *total_bytes = std::min<std::uint64_t>(*total_bytes, total);
  *free_bytes = std::min<std::uint64_t>({*free_bytes, held >= total ? 0 : total - held, *total_bytes});
}

void account_total_mem(CUresult r, std::size_t* total_bytes) noexcept {
  if (r != CUDA_SUCCESS || total_bytes == nullptr) return;
  const abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return;
  if (const std::uint64_t total = seg->view_total_bytes.load(std::memory_order_relaxed); total != 0) {
    *total_bytes = std::min<std::uint64_t>(*total_bytes, total);
  }
}

struct graph_api {
  CUresult (*get_nodes)(CUgraph, CUgraphNode*, std::size_t*) = nullptr;
  CUresult (*node_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*kernel_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;
  CUresult (*child_graph)(CUgraphNode, CUgraph*) = nullptr;
};

const graph_api& graphs() noexcept {
  static const graph_api api = [] {
    graph_api a;
    a.get_nodes = driver_fn<decltype(a.get_nodes)>("cuGraphGetNodes");
    a.node_type = driver_fn<decltype(a.node_type)>("cuGraphNodeGetType");
    a.kernel_params = driver_fn<decltype(a.kernel_params)>("cuGraphKernelNodeGetParams_v2");
    a.child_graph = driver_fn<decltype(a.child_graph)>("cuGraphChildGraphNodeGetGraph");
    return a;
  }();
  return api;
}

std::uint64_t count_graph_blocks(CUgraph graph, int depth) noexcept {
  const graph_api& api = graphs();
  if (depth > 8 || api.get_nodes == nullptr || api.node_type == nullptr || api.kernel_params == nullptr) return 0;
  std::size_t n = 0;
  if (api.get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return 0;
  std::vector<CUgraphNode> nodes;
  try {
    nodes.resize(n);
  } catch (...) {
    return 0;
  }
  if (api.get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return 0;
  std::uint64_t blocks = 0;
  for (std::size_t i = 0; i < n && i < nodes.size(); ++i) {
    CUgraphNodeType type{};
    if (nodes[i] == nullptr || api.node_type(nodes[i], &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS_v2 params{};
      if (api.kernel_params(nodes[i], &params) == CUDA_SUCCESS) {
        blocks = add_blocks(blocks, grid_blocks(params.gridDimX, params.gridDimY, params.gridDimZ));
      }
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && api.child_graph != nullptr) {
      CUgraph child = nullptr;
      if (api.child_graph(nodes[i], &child) == CUDA_SUCCESS && child != nullptr) {
        blocks = add_blocks(blocks, count_graph_blocks(child, depth + 1));
      }
    }
  }
  return blocks;
}

/// Counts the blocks of an executable graph just instantiated (or updated) from `graph`.
void record_graph(CUresult r, const CUgraphExec* exec, CUgraph graph) noexcept {
  if (r != CUDA_SUCCESS || exec == nullptr || *exec == nullptr) return;
  const std::uint64_t blocks = count_graph_blocks(graph, 0);
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table == nullptr) graph_table = new std::unordered_map<CUgraphExec, std::uint64_t>();
    (*graph_table)[*exec] = blocks;
  } catch (...) {
    // Out of host memory: its launches count 0 blocks, as before this was counted.
  }
}

void forget_graph(CUresult r, CUgraphExec exec) noexcept {
  if (r != CUDA_SUCCESS) return;
  try {
    std::lock_guard lock(graph_mutex);
    if (graph_table != nullptr) graph_table->erase(exec);
  } catch (...) {
  }
}

/// Replaces a driver function pointer handed out by cuGetProcAddress with its wrapper. The
/// variant comes from the driver's rule (`classify`), checked against the driver's exports: if
/// the pointer is the export of a sibling variant, that sibling is the one wrapped.
void account_proc_address(CUresult r, const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) noexcept {
  (void)ensure_link();  // the runtime's first driver call: register before the first launch
  if (r != CUDA_SUCCESS || symbol == nullptr || pfn == nullptr || *pfn == nullptr) return;
  std::optional<hook_id> id = classify(symbol, cuda_version, flags);
  if (!id) return;
  void* p = *pfn;
  if (is_wrapper(p)) return;
  dlsym_fn dl = real_dlsym();
  void* h = driver_handle();
  if (dl != nullptr && h != nullptr && dl(h, hook_table[index(*id)].symbol) != p) {
    for (std::size_t i = 0; i < hook_count; ++i) {
      if (std::strcmp(hook_table[i].base, symbol) == 0 && dl(h, hook_table[i].symbol) == p) {
        id = static_cast<hook_id>(i);
        break;
      }
    }
  }
  real_fn[index(*id)].store(p, std::memory_order_release);
  *pfn = wrapper_address(*id);
}

}  // namespace
}  // namespace tgs::cuda::intercept

// --- the wrappers: gate -> forward -> account, one per listed symbol --------------------------------

#define TGS_HOOK(symbol, base, ptds, since, params, args, gate, account)         \
  extern "C" TGS_EXPORT CUresult symbol params noexcept {                         \
    using namespace tgs::cuda::intercept;                                         \
    namespace abi = tgs::cuda::abi;                                               \
    const auto g = gate;                                                          \
    if (const std::optional<CUresult> a = answer(g)) return *a;                   \
    const CUresult r = forward<hook_id::symbol> args;                             \
    account;                                                                      \
    return r;                                                                     \
  }
#include "hooked_symbols.def"

namespace tgs::cuda::intercept {

namespace {
/// The wrappers' addresses, indexed by `hook_id`.
void* const wrappers[hook_count] = {
#define TGS_HOOK(symbol, ...) reinterpret_cast<void*>(&::symbol),
#include "hooked_symbols.def"
};
}  // namespace

void* wrapper_address(hook_id id) noexcept { return wrappers[index(id)]; }

bool is_wrapper(const void* p) noexcept {
  for (const void* w : wrappers) {
    if (w == p) return true;
  }
  return false;
}

}  // namespace tgs::cuda::intercept

// --- dlsym ---------------------------------------------------------------------------------------
// Programs (and the CUDA runtime) find driver functions with dlsym; a hooked name gets its wrapper.
// Every other lookup must behave exactly as glibc's, including RTLD_NEXT, which glibc resolves
// relative to its caller's return address. On x86-64 a small entry stub therefore asks
// `tgs_dlsym_route` first and then *jumps* to glibc's dlsym with the caller's registers and return
// address intact. Both glibc symbol versions of dlsym are defined (GLIBC_2.2.5 for binaries
// linked before glibc 2.34, GLIBC_2.34 after).

/// Where a dlsym call goes: a wrapper to return, or glibc's dlsym to jump to.
struct dlsym_route {
  void* result;
  void* jump;
};

extern "C" __attribute__((visibility("hidden"))) dlsym_route tgs_dlsym_route(void* handle, const char* name) noexcept {
  using namespace tgs::cuda::intercept;
  dlsym_fn real = real_dlsym();
  if (real != nullptr && name != nullptr && name[0] == 'c' && name[1] == 'u') {
    if (const std::optional<hook_id> id = find_symbol(name)) {
      // A hooked name resolves relative to this library: the driver is after it in every order.
      if (void* p = real(handle, name)) {
        if (!is_wrapper(p)) real_fn[index(*id)].store(p, std::memory_order_release);
        return {wrapper_address(*id), nullptr};
      }
    }
  }
  return {nullptr, reinterpret_cast<void*>(real)};
}

#if defined(__x86_64__)
asm(R"(
    .text
    .globl tgs_dlsym_glibc_2_34
    .globl tgs_dlsym_glibc_2_2_5
    .type tgs_dlsym_glibc_2_34, @function
    .type tgs_dlsym_glibc_2_2_5, @function
    .p2align 4
tgs_dlsym_glibc_2_34:
tgs_dlsym_glibc_2_2_5:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call tgs_dlsym_route
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rdx, %rdx
    jnz 1f
    ret
1:
    jmp *%rdx
    .cfi_endproc
    .size tgs_dlsym_glibc_2_34, .-tgs_dlsym_glibc_2_34
    .size tgs_dlsym_glibc_2_2_5, .-tgs_dlsym_glibc_2_2_5
    .symver tgs_dlsym_glibc_2_34, dlsym@@GLIBC_2.34
    .symver tgs_dlsym_glibc_2_2_5, dlsym@GLIBC_2.2.5
)");
#else
// Elsewhere dlsym is overridden in C++: RTLD_NEXT lookups of other names then resolve relative
// to this library instead of their caller (documented in docs/cuda-backend.md).
extern "C" TGS_EXPORT void* dlsym(void* handle, const char* name) noexcept {
  const dlsym_route route = tgs_dlsym_route(handle, name);
  if (route.jump == nullptr) return route.result;
  return reinterpret_cast<tgs::cuda::intercept::dlsym_fn>(route.jump)(handle, name);
}
#endif
