// SPDX-License-Identifier: Apache-2.0
/// @file
/// The gate of every launch path and of the synchronisation calls: the rate gate
/// (`gate_launch`, job_link.hpp), then, for an opportunistic job with a launch window, room in
/// the window (`launch_window.hpp`); after the call, the count undone for a refused launch, the
/// launch marked outstanding, and one launch in `abi::launch_time_sample_every` timed.
///
/// The common path (`gate_paced_launch`, `account_paced_launch`) is inline: a production
/// launch costs one atomic add on the job segment and the test of the sample bit. Everything
/// slower is out of line in launch_gate.cpp.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "activity_sampler.hpp"
#include "cuda_subset.hpp"
#include "job_link.hpp"
#include "kernel_timer.hpp"

namespace tgs::cuda::intercept {

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

/// The blocks of a `cuLaunchKernelEx` launch (0 without a config: the driver refuses it anyway).
constexpr std::uint64_t config_blocks(const CUlaunchConfig* config) noexcept {
  return config == nullptr ? 0 : grid_blocks(config->gridDimX, config->gridDimY, config->gridDimZ);
}

/// The stream of a `cuLaunchKernelEx` launch (null, the default stream, without a config).
constexpr CUstream launch_stream(const CUlaunchConfig* config) noexcept {
  return config == nullptr ? nullptr : config->hStream;
}

/// The event entry points the launch window uses (not hooked: looked up in the driver itself).
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

struct context_window;

/// A launch through the rate gate and the window. While `window` is set, the window's mutex is
/// held (by `lock`) from before the launch until its event is recorded, so the job's launches
/// and their events keep one order.
struct paced_launch_token {
  launch_token launch;
  context_window* window = nullptr;
  CUstream stream = nullptr;
  std::unique_lock<std::mutex> lock;
  /// Whether the launch is timed (an opportunistic job whose node asked: `kernel_timer.hpp`); its
  /// stream is then `stream`.
  bool time_kernel = false;
};
inline std::optional<CUresult> answer(const paced_launch_token&) noexcept { return std::nullopt; }

/// Room in the window of the current context for an opportunistic job's launch (the slow part
/// of `gate_paced_launch`, out of line so the common gate stays small).
void enter_window(paced_launch_token& t, abi::job_segment* seg, std::uint32_t limit, CUstream stream,
                  bool per_thread) noexcept;
/// Marks a windowed launch outstanding (the slow part of `account_paced_launch`).
void record_in_window(const paced_launch_token& t) noexcept;
/// The sampled launch's clock reads, out of line and cold: the common launch path keeps only the
/// test of `launch_token::timed`.
[[gnu::cold]] void begin_launch_sample() noexcept;
[[gnu::cold]] void end_launch_sample(abi::job_segment* seg) noexcept;

/// The launch gate of every launch path: the rate gate, then, for an opportunistic job with a
/// window, room in the window. Under gap filling the window comes first: a launch that waited
/// for its own earlier kernels must still find the production job idle when it goes. A
/// production job notes the stream, for its activity sampler. `per_thread` is set for the
/// `_ptsz` forms, whose null stream is the calling thread's default stream.
inline paced_launch_token gate_paced_launch(std::uint64_t blocks, CUstream stream, bool per_thread) noexcept {
  paced_launch_token t{};
  const link_state* link = current_link.load(std::memory_order_acquire);
  abi::job_segment* early = link->segment;
  if (early != nullptr && link->opportunistic && early->gap_fill.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    const std::uint32_t limit = early->max_inflight_launches.load(std::memory_order_relaxed);
    if (limit != 0) enter_window(t, early, limit, stream, per_thread);
  }
  t.launch = gate_launch(blocks);
  abi::job_segment* seg = t.launch.segment;
  if (seg == nullptr) return t;
  // The class first (the rate gate read it): a production job never reads the node's refill line.
  if (t.launch.opportunistic) {
    const std::uint32_t limit = seg->max_inflight_launches.load(std::memory_order_relaxed);
    if (limit != 0 && t.window == nullptr) [[unlikely]] enter_window(t, seg, limit, stream, per_thread);
    if (seg->time_kernels.load(std::memory_order_relaxed) != 0) {
      t.time_kernel = true;
      t.stream = launch_stream_of(stream, per_thread);
    }
  } else if (link->writable_page != nullptr) {
    note_launch_stream(stream, per_thread);
  }
  // Last, so the sample is the driver's call alone (not the gate's or the window's waits).
  if (t.launch.timed) [[unlikely]] begin_launch_sample();
  return t;
}

/// After the launch: a sampled launch adds its driver time; undo the count if the driver refused
/// it, else mark it outstanding in the window.
inline void account_paced_launch(const paced_launch_token& t, CUresult r) noexcept {
  if (t.launch.timed) [[unlikely]] end_launch_sample(t.launch.segment);
  account_launch(t.launch, r);
  if (t.window != nullptr && r == CUDA_SUCCESS) [[unlikely]] record_in_window(t);
  if (t.time_kernel && r == CUDA_SUCCESS) [[unlikely]] time_kernel(t.launch.segment, t.stream, abi::monotonic_ns());
}

/// A synchronisation call's start, for the time it blocks, and for a production job the blocks it
/// had launched (complete once the call returns): its synchronisation mark.
struct sync_token {
  abi::job_segment* segment = nullptr;
  std::uint64_t start_ns = 0;
  std::optional<std::uint64_t> blocks_before;
};
constexpr std::optional<CUresult> answer(const sync_token&) noexcept { return std::nullopt; }

inline sync_token gate_sync() noexcept {
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg == nullptr) return {};
  sync_token t{seg, abi::monotonic_ns(), std::nullopt};
  // Every production job marks its synchronisations (a load here and four stores after the call,
  // once per synchronisation): the node reads its throughput from them, sampled or not.
  if (!current_link.load(std::memory_order_acquire)->opportunistic) {
    t.blocks_before = seg->launch_counter.load(std::memory_order_acquire) & abi::block_mask;
  }
  return t;
}

/// Counts a synchronisation that returned: all the job's work before it on that stream (or event)
/// is complete, and the job waited this long for it.
inline void account_sync(const sync_token& t, CUresult r) noexcept {
  if (t.segment == nullptr || r != CUDA_SUCCESS) return;
  const std::uint64_t now = abi::monotonic_ns();
  t.segment->sync_calls.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t waited = now - t.start_ns;
  const std::uint64_t wait_total = t.segment->sync_wait_ns.fetch_add(waited, std::memory_order_relaxed) + waited;
  t.segment->last_sync_ns.store(now, std::memory_order_relaxed);
  if (t.blocks_before) {
    abi::write_sync_mark(*t.segment, *t.blocks_before, t.segment->gpu_busy_ns.load(std::memory_order_relaxed), now,
                         wait_total);
  }
}

}  // namespace tgs::cuda::intercept
