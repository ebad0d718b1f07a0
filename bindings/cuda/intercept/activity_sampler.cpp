// SPDX-License-Identifier: Apache-2.0
// The production job's GPU activity sampler: the streams its launches noted, queried from a
// thread of its own while the node asks, published in the GPU page and the job's segment.
#include "activity_sampler.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <array>
#include <atomic>
#include <mutex>
#include <thread>

#include "resolve.hpp"

namespace tgs::cuda::intercept {

namespace {

/// The driver calls the sampler makes itself (not hooked: looked up in the driver).
struct sampler_api {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*stream_query)(CUstream) = nullptr;
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  bool complete = false;
};

const sampler_api& api() noexcept {
  static const sampler_api a = [] {
    sampler_api s;
    bool ok = lookup(s.ctx_get_current, "cuCtxGetCurrent");
    ok &= lookup(s.ctx_set_current, "cuCtxSetCurrent");
    ok &= lookup(s.stream_query, "cuStreamQuery");
    ok &= lookup(s.exchange_capture_mode, "cuThreadExchangeStreamCaptureMode");
    s.complete = ok;
    return s;
  }();
  return a;
}

/// A stream the job launched on, in its context. A thread's per-thread default stream names a
/// different stream in every thread, so the sampler cannot query it: launches on it are seen
/// through the launch counter alone.
struct noted_stream {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  bool queryable = false;
};

/// Streams beyond this many are not queried (a training job launches on one or two); the launch
/// counter still sees their launches.
constexpr std::size_t max_streams = 8;

std::mutex streams_mutex;
std::array<noted_stream, max_streams> streams;  // under streams_mutex
std::size_t stream_count = 0;                   // under streams_mutex
std::size_t next_slot = 0;                      // under streams_mutex: the slot a new stream replaces
std::atomic<std::uint64_t> streams_generation{0};
/// Whether the job launched on a stream the sampler does not query: a per-thread default stream,
/// or one that fell out of the table. Then a launch between samples counts as work.
std::atomic<bool> unqueried_streams{false};

/// Not a stream handle: the first launch always takes the slow path.
const auto no_stream = reinterpret_cast<CUstream>(~std::uintptr_t{0});
std::atomic<CUstream> last_noted{no_stream};

void note_slow(CUstream key) noexcept {
  const sampler_api& a = api();
  if (!a.complete) return;
  CUcontext ctx = nullptr;
  if (a.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  try {
    std::lock_guard lock(streams_mutex);
    for (std::size_t i = 0; i < stream_count; ++i) {
      if (streams[i].stream == key && streams[i].context == ctx) {
        last_noted.store(key, std::memory_order_relaxed);
        return;
      }
    }
    const noted_stream s{ctx, key, key != CU_STREAM_PER_THREAD};
    if (!s.queryable) unqueried_streams.store(true, std::memory_order_relaxed);
    if (stream_count < max_streams) {
      streams[stream_count++] = s;
    } else {
      streams[next_slot] = s;  // the oldest noted goes, and its launches are no longer queried
      next_slot = (next_slot + 1) % max_streams;
      unqueried_streams.store(true, std::memory_order_relaxed);
    }
    streams_generation.fetch_add(1, std::memory_order_release);
  } catch (...) {
    return;  // a lock that cannot be taken: this stream is simply not queried
  }
  last_noted.store(key, std::memory_order_relaxed);
}

/// Forgets `stream` (its context is gone, or its handle no longer valid).
void forget(const noted_stream& gone) noexcept {
  try {
    std::lock_guard lock(streams_mutex);
    for (std::size_t i = 0; i < stream_count; ++i) {
      if (streams[i].stream == gone.stream && streams[i].context == gone.context) {
        streams[i] = streams[--stream_count];
        streams_generation.fetch_add(1, std::memory_order_release);
        break;
      }
    }
  } catch (...) {
  }
  last_noted.store(no_stream, std::memory_order_relaxed);
}

/// The pause between looks at the node's request while it asks for no samples.
constexpr long idle_period_ns = 5'000'000;
static_assert(sample_period_ns(~std::uint32_t{0}) < abi::gap_sample_fresh_ns,
              "a gate must see a fresh sample between two of the slowest sampler's");

void run_sampler() noexcept {
  const sampler_api& a = api();
  // A fine timer for this thread only (the default slack of 50 us would stretch every period),
  // and queries that never invalidate a graph capture another thread runs in global mode.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  (void)a.exchange_capture_mode(&relaxed);
  std::array<noted_stream, max_streams> local{};
  std::size_t local_count = 0;
  std::uint64_t local_generation = ~std::uint64_t{0};
  CUcontext current = nullptr;
  std::uint64_t previous_ns = 0;
  std::uint64_t previous_counter = 0;
  bool sampling = false;
  for (;;) {
    const link_state* link = current_link.load(std::memory_order_acquire);
    abi::gpu_page* page = link->writable_page;
    abi::job_segment* seg = link->segment;
    const std::uint32_t asked_us = seg == nullptr ? 0 : seg->sample_activity.load(std::memory_order_relaxed);
    if (page == nullptr || asked_us == 0) {
      sampling = false;
      sleep_ns(idle_period_ns);
      continue;
    }
    const std::uint64_t generation = streams_generation.load(std::memory_order_acquire);
    if (generation != local_generation) {
      try {
        std::lock_guard lock(streams_mutex);
        local = streams;
        local_count = stream_count;
      } catch (...) {
      }
      local_generation = generation;
    }
    const std::uint64_t now = abi::monotonic_ns();
    const std::uint64_t counter = seg->launch_counter.load(std::memory_order_relaxed);
    if (!sampling) {
      // Sampling (re)starts: the first interval counts from now, and a launch counter that moved
      // while it was off says nothing about this moment.
      previous_ns = now;
      previous_counter = counter;
      sampling = true;
    }
    bool not_ready = false;
    for (std::size_t i = 0; i < local_count && !not_ready; ++i) {
      const noted_stream& s = local[i];
      if (!s.queryable) continue;
      if (s.context != current) {
        if (a.ctx_set_current(s.context) != CUDA_SUCCESS) {
          forget(s);
          continue;
        }
        current = s.context;
      }
      const CUresult r = a.stream_query(s.stream);
      if (r == CUDA_ERROR_NOT_READY) {
        not_ready = true;
      } else if (r != CUDA_SUCCESS && r != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
                 r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
        forget(s);  // a destroyed stream or context: nothing more to learn from it
      }
    }
    const activity_sample sample =
        sample_activity(counter != previous_counter, unqueried_streams.load(std::memory_order_relaxed), not_ready,
                        previous_ns, now);
    if (sample.pending) {
      page->last_pending_ns.store(now, std::memory_order_relaxed);
      page->pending.store(1, std::memory_order_release);
      seg->gpu_busy_ns.fetch_add(sample.busy_ns, std::memory_order_relaxed);
      seg->busy_samples.fetch_add(1, std::memory_order_relaxed);
    } else {
      page->pending.store(0, std::memory_order_release);
    }
    page->sample_ns.store(now, std::memory_order_release);
    seg->activity_samples.fetch_add(1, std::memory_order_relaxed);
    previous_ns = now;
    previous_counter = counter;
    sleep_ns(static_cast<long>(sample_period_ns(asked_us)));
  }
}

std::atomic<bool> sampler_started{false};

}  // namespace

void note_launch_stream(CUstream stream, bool per_thread) noexcept {
  const CUstream key = launch_stream_of(stream, per_thread);
  if (key == last_noted.load(std::memory_order_relaxed)) [[likely]] return;
  note_slow(key);
}

void start_activity_sampler() noexcept {
  if (sampler_started.exchange(true)) return;
  if (!api().complete) {
    log(log_level::warn, "the driver lacks cuStreamQuery: this production job's GPU activity is not sampled");
    return;
  }
  try {
    std::thread(run_sampler).detach();
  } catch (...) {
    log(log_level::warn, "could not start the GPU activity sampler");
  }
}

}  // namespace tgs::cuda::intercept
