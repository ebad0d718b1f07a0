// SPDX-License-Identifier: Apache-2.0
// The slow parts of the launch gate: an opportunistic job's launch window (at most N of its
// launches unfinished on the GPU) and the sampled launch time.
//
// The node sets N (`job_segment::max_inflight_launches`, 0: no window); `launch_window.hpp` says
// why. After each of the job's launches an event is recorded on the launch's stream; before the
// next, the job waits for the oldest while N are outstanding. Production jobs never wait here.
#include "launch_gate.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include "launch_window.hpp"
#include "resolve.hpp"

namespace tgs::cuda::intercept {

namespace {

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
    const std::uint64_t start = abi::monotonic_ns();
    window_wait result = window_wait::finished;
    // Anything but "not ready" ends the wait: done, or the driver can no longer say (a context
    // that is gone, a sticky error), where waiting on would never end.
    while (api->event_query(e) == CUDA_ERROR_NOT_READY) {
      const std::uint64_t waited = abi::monotonic_ns() - start;
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

}  // namespace

/// One context's window: events belong to a context, so each context the job launches in has its
/// own (a process with several GPUs has several).
struct context_window {
  CUcontext context = nullptr;
  launch_window<driver_events, abi::max_launch_window> window;
};

namespace {

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

/// When the calling thread's sampled launch (`launch_token::timed`) entered the driver. A
/// thread-local rather than a field of the token: the token of every launch stays as small as
/// it was, and only the sampled one in `abi::launch_time_sample_every` pays for the TLS access.
thread_local std::uint64_t sampled_launch_from_ns = 0;

}  // namespace

void begin_launch_sample() noexcept { sampled_launch_from_ns = abi::monotonic_ns(); }

void end_launch_sample(abi::job_segment* seg) noexcept {
  seg->timed_launches.fetch_add(1, std::memory_order_relaxed);
  seg->timed_launch_ns.fetch_add(abi::monotonic_ns() - sampled_launch_from_ns, std::memory_order_relaxed);
}

void enter_window(paced_launch_token& t, abi::job_segment* seg, std::uint32_t limit, CUstream stream,
                  bool per_thread) noexcept {
  const event_api& api = events_api();
  if (!api.complete) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      log(log_level::warn, "the driver lacks the event calls a launch window needs: launches are not windowed");
    }
    return;
  }
  stream = launch_stream_of(stream, per_thread);
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
  const std::uint64_t start = abi::monotonic_ns();
  const window_room room = w->window.make_room(events, limit);
  if (room.waited > 0) {
    seg->window_waits.fetch_add(1, std::memory_order_relaxed);
    seg->window_wait_ns.fetch_add(abi::monotonic_ns() - start, std::memory_order_relaxed);
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

// An event that cannot be recorded means the context is gone (or the driver is out of
// resources): the window forgets its events, without destroying handles that may be stale, and
// is bound again by the next launch.
void record_in_window(const paced_launch_token& t) noexcept {
  driver_events events{&events_api()};
  if (!t.window->window.record(events, t.stream)) {
    t.window->window.abandon();
    t.window->context = nullptr;
  }
}

}  // namespace tgs::cuda::intercept
