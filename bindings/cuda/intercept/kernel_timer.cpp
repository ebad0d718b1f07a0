// SPDX-License-Identifier: Apache-2.0
// The kernel timer's driver side: per-stream rings of events recorded after an opportunistic
// job's launches, and the thread that polls them (kernel_timer.hpp says what it measures).
#include "kernel_timer.hpp"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "resolve.hpp"

namespace tgs::cuda::intercept {

namespace {

/// The driver calls the timer makes itself (not hooked: looked up in the driver).
struct timer_api {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  /// Optional: without it spans are measured on the host alone.
  CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  bool complete = false;
};

const timer_api& api() noexcept {
  static const timer_api a = [] {
    timer_api s;
    bool ok = lookup(s.ctx_get_current, "cuCtxGetCurrent");
    ok &= lookup(s.ctx_set_current, "cuCtxSetCurrent");
    ok &= lookup(s.event_create, "cuEventCreate");
    ok &= lookup(s.event_record, "cuEventRecord");
    ok &= lookup(s.event_query, "cuEventQuery");
    ok &= lookup(s.stream_is_capturing, "cuStreamIsCapturing");
    ok &= lookup(s.exchange_capture_mode, "cuThreadExchangeStreamCaptureMode");
    s.complete = ok;
    (void)lookup(s.event_elapsed, "cuEventElapsedTime");
    return s;
  }();
  return a;
}

/// Launches of one stream still to be seen complete, oldest first, and the last one seen complete
/// (whose event the next one's GPU span starts from). A stream holds about a thousand launches
/// before the driver makes the next one wait: a job whose host runs far ahead fills the ring only
/// where the ring is smaller, and then its untimed launches are charged as one span.
constexpr std::size_t ring_size = 1024;
/// Streams timed at once; a launch on a further one, while every ring has launches pending, is
/// not timed and makes the job's measurement incomplete (published as the longest possible).
constexpr std::size_t max_streams = 8;

struct pending_launch {
  CUevent event = nullptr;
  std::uint64_t from_ns = 0;
};

struct timed_stream {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  pid_t thread = 0;  ///< the launching thread for a per-thread default stream (another stream in each)
  bool used = false;
  std::array<pending_launch, ring_size> ring{};
  std::array<bool, ring_size> created{};
  std::size_t head = 0;
  std::size_t count = 0;  ///< at most ring_size - 1: the slot before `head` holds the previous event
  /// Whether the slot before `head` holds the event of the previous timed launch, seen complete.
  bool previous_event = false;
  /// No later than the previous timed launch ended (the last time it was seen still pending, or
  /// when it could have started): the earliest the next launch on the stream can have started.
  std::uint64_t previous_end_ns = 0;
  /// When the oldest pending launch was last seen still pending (0: not yet seen so).
  std::uint64_t head_pending_ns = 0;
  std::uint64_t untimed_from_ns = 0;  ///< the first launch since the last timed one that went untimed; 0: none
};

std::mutex timer_mutex;
std::array<timed_stream, max_streams> streams;  // under timer_mutex
std::atomic<bool> poller_started{false};
/// Whether the poller's last pass found nothing pending, so it sleeps its long sleep: a launch then
/// wakes it, so a span is seen to end within the short period, not the long one. Set by the pass
/// under timer_mutex, where a launch is recorded and reads it: a launch either was polled by that
/// pass or sees it idle.
std::atomic<bool> poller_idle{false};
std::mutex wake_mutex;
std::condition_variable wake_cv;
/// Longest span seen and launches timed, published to the current link's segment by the poller.
std::uint64_t longest_ns = 0;  // under timer_mutex
std::uint64_t timed = 0;       // under timer_mutex
bool incomplete = false;       // under timer_mutex
/// For the log: the longest span said so far, and the longest the poller was late (its passes'
/// spacing beyond its sleep), which lengthens host spans.
std::uint64_t logged_ns = 0;        // under timer_mutex
std::uint64_t poller_late_ns = 0;   // under timer_mutex

/// A new longest span: kept, and said at info level where it grew by a quarter (the log's words say
/// which bound made it, so a job kept out of MPS by its spans shows why).
void note_span(std::uint64_t span, const char* how, std::uint64_t host_ns, std::optional<std::uint64_t> gpu_ns) noexcept {
  if (span <= longest_ns) return;
  longest_ns = span;
  if (span < 1'000'000 || span < logged_ns + logged_ns / 4) return;
  logged_ns = span;
  char gpu[32] = "not measured";
  if (gpu_ns) (void)std::snprintf(gpu, sizeof gpu, "%.1f ms", static_cast<double>(*gpu_ns) / 1e6);
  log(log_level::info,
      "kernel timer: the longest kernel span is now %.1f ms (%s; on the host %.1f ms, on the GPU %s), "
      "%" PRIu64 " launches timed, the poller up to %.1f ms late",
      static_cast<double>(span) / 1e6, how, static_cast<double>(host_ns) / 1e6, gpu, timed,
      static_cast<double>(poller_late_ns) / 1e6);
}

/// The slot of (`ctx`, `stream`, `thread`), claimed on first use (a slot with nothing pending is
/// taken over); nullptr when every slot has launches pending. Under timer_mutex.
timed_stream* slot_of(CUcontext ctx, CUstream stream, pid_t thread) noexcept {
  timed_stream* idle = nullptr;
  for (timed_stream& s : streams) {
    if (s.used && s.context == ctx && s.stream == stream && s.thread == thread) return &s;
    if (idle == nullptr && (!s.used || (s.count == 0 && s.untimed_from_ns == 0))) idle = &s;
  }
  if (idle == nullptr) return nullptr;
  // Its events belong to its old context: that one may be gone, so they are not reused.
  if (idle->context != ctx) idle->created.fill(false);
  idle->context = ctx;
  idle->stream = stream;
  idle->thread = thread;
  idle->used = true;
  idle->head = idle->count = 0;
  idle->previous_event = false;
  idle->previous_end_ns = 0;
  idle->head_pending_ns = 0;
  idle->untimed_from_ns = 0;
  return idle;
}

void publish(abi::job_segment* seg) noexcept {
  if (seg == nullptr) return;
  seg->longest_kernel_ns.store(incomplete ? UINT64_MAX : longest_ns, std::memory_order_relaxed);
  seg->kernels_timed.store(timed, std::memory_order_relaxed);
}

/// One pass over every stream's oldest pending launches. Under timer_mutex.
bool poll_once() noexcept {
  const timer_api& a = api();
  CUcontext current = nullptr;
  bool pending = false;
  for (timed_stream& s : streams) {
    while (s.used && s.count > 0) {
      if (s.context != current) {
        if (a.ctx_set_current(s.context) != CUDA_SUCCESS) {
          s.used = false;  // the context is gone: so are its events
          break;
        }
        current = s.context;
      }
      pending_launch& p = s.ring[s.head];
      const CUresult r = a.event_query(p.event);
      const std::uint64_t now = abi::monotonic_ns();
      if (r == CUDA_ERROR_NOT_READY) {
        // Still running (or waiting for its turn): it has run at most this long so far, which
        // already counts. A process killed in the middle of a long kernel never sees it end, and
        // its profile must say it had one.
        const std::uint64_t so_far = kernel_span_ns(p.from_ns, s.previous_end_ns, now);
        note_span(so_far, "still running", so_far, std::nullopt);
        s.head_pending_ns = now;
        pending = true;
        break;
      }
      if (r != CUDA_SUCCESS) {  // a context that is gone, or a sticky error: nothing more to learn
        s.used = false;
        break;
      }
      // It ended after it was last seen pending and no later than now: the span to now is an upper
      // bound, and the earlier moment a lower bound of its end, hence of the next one's start. So
      // a late poll lengthens a span and never shortens the next.
      const std::uint64_t host = kernel_span_ns(p.from_ns, s.previous_end_ns, now);
      std::optional<std::uint64_t> gpu;
      float ms = 0;
      if (s.previous_event && a.event_elapsed != nullptr &&
          a.event_elapsed(&ms, s.ring[(s.head + ring_size - 1) % ring_size].event, p.event) == CUDA_SUCCESS && ms >= 0) {
        gpu = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
      }
      ++timed;
      note_span(charged_span_ns(host, gpu), "complete", host, gpu);
      s.previous_end_ns = std::max({p.from_ns, s.previous_end_ns, s.head_pending_ns});
      s.head_pending_ns = 0;
      s.head = (s.head + 1) % ring_size;
      --s.count;
      s.previous_event = true;
    }
  }
  return pending;
}

void run_poller() noexcept {
  // A fine timer, and queries that never invalidate a graph capture another thread runs.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  (void)api().exchange_capture_mode(&relaxed);
  std::uint64_t due_ns = 0;  // when this pass should have come
  for (;;) {
    bool pending = false;
    try {
      std::lock_guard lock(timer_mutex);
      const std::uint64_t now = abi::monotonic_ns();
      if (due_ns != 0 && now > due_ns) poller_late_ns = std::max(poller_late_ns, now - due_ns);
      pending = poll_once();
      poller_idle.store(!pending);
      publish(current_link.load(std::memory_order_acquire)->segment);
    } catch (...) {
    }
    // Every 10 ms while launches are pending: a completion seen late lengthens its span on the host
    // by at most that. Otherwise up to 50 ms, until a launch wakes it.
    if (pending) {
      due_ns = abi::monotonic_ns() + 10'000'000;
      sleep_ns(10'000'000);
      continue;
    }
    due_ns = 0;  // a wait cut short is no lateness, and one run to its end none either
    try {
      std::unique_lock lock(wake_mutex);
      wake_cv.wait_for(lock, std::chrono::milliseconds{50}, [] { return !poller_idle.load(); });
    } catch (...) {
      sleep_ns(10'000'000);
    }
  }
}

}  // namespace

void time_kernel(abi::job_segment* seg, CUstream key, std::uint64_t launched_ns) noexcept {
  const timer_api& a = api();
  if (!a.complete) return;
  if (!poller_started.exchange(true)) {
    try {
      std::thread(run_poller).detach();
    } catch (...) {
      log(log_level::warn, "could not start the kernel timer: this job's kernels are not timed");
      return;
    }
  }
  // A launch into a capturing stream adds a node to a graph: nothing runs now.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (a.stream_is_capturing(key, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE) return;
  CUcontext ctx = nullptr;
  if (a.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  const pid_t thread = key == CU_STREAM_PER_THREAD ? static_cast<pid_t>(::syscall(SYS_gettid)) : 0;
  bool wake = false;
  try {
    std::lock_guard lock(timer_mutex);
    timed_stream* s = slot_of(ctx, key, thread);
    if (s == nullptr) {
      incomplete = true;
      publish(seg);
      return;
    }
    const std::uint64_t from = s->untimed_from_ns != 0 ? s->untimed_from_ns : launched_ns;
    const std::size_t slot = (s->head + s->count) % ring_size;
    bool recorded = s->count < ring_size - 1;
    if (recorded && !s->created[slot]) {
      // Timing events where the driver can say the time between two: the GPU's spans.
      recorded = a.event_create(&s->ring[slot].event,
                                a.event_elapsed != nullptr ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
      s->created[slot] = recorded;
    }
    if (recorded) recorded = a.event_record(s->ring[slot].event, key) == CUDA_SUCCESS;
    if (!recorded) {
      if (s->untimed_from_ns == 0) s->untimed_from_ns = launched_ns;
      return;
    }
    s->ring[slot].from_ns = from;
    s->untimed_from_ns = 0;
    ++s->count;
    wake = poller_idle.load(std::memory_order_relaxed);
  } catch (...) {
    // A lock that cannot be taken: this launch goes untimed.
    return;
  }
  if (wake) {
    try {
      {
        std::lock_guard lock(wake_mutex);
        poller_idle.store(false);
      }
      wake_cv.notify_one();
    } catch (...) {
    }
  }
}

}  // namespace tgs::cuda::intercept
