// SPDX-License-Identifier: Apache-2.0
/// @file
/// The production job's GPU activity sampler: a thread of the production job's process that,
/// while the node asks for it (an opportunistic job shares the GPU), queries the streams the job
/// launched on at the period the node sets (`job_segment::sample_activity`) and publishes whether
/// any has unfinished work (the GPU page, which the opportunistic jobs' gates read) and for how
/// long it had (`gpu_busy_ns`, the controller's GPU-side signal). It stays off the launch path: a
/// launch only notes its stream, one load and one compare when the stream is the one it launched
/// on before.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda_subset.hpp"
#include "job_link.hpp"

namespace tgs::cuda::intercept {

/// What one sample found. Pure bookkeeping, so the sampling rule is tested without a driver.
struct activity_sample {
  /// Whether the job had unfinished work at this sample.
  bool pending = false;
  /// Busy time to add: the time since the previous sample when this one found work, at most
  /// `max_sample_gap_ns` (the first sample after a pause counts one gap, not the pause).
  std::uint64_t busy_ns = 0;
};

/// The longest interval one sample may count as busy.
inline constexpr std::uint64_t max_sample_gap_ns = 1'000'000;

/// The rule of one sample. `not_ready`: a queried stream had unfinished work. `launched`: the
/// launch counter moved since the previous sample. `unqueried_streams`: the job launched on a
/// stream the sampler cannot query (a thread's per-thread default stream names another stream in
/// every thread; streams beyond the sampler's table are not kept).
///
/// A launch counts as work only when it may have gone to such a stream. Where every stream is
/// queried, their answer is the truth: a job whose host side launches every few microseconds but
/// whose kernels are done by the next sample leaves the GPU idle, and counting its launches as
/// work would make the busy time follow its launch rate (the host-side jitter this signal exists
/// to avoid; docs/results/rate-control.md).
[[nodiscard]] constexpr activity_sample sample_activity(bool launched, bool unqueried_streams, bool not_ready,
                                                        std::uint64_t previous_ns, std::uint64_t now_ns) noexcept {
  activity_sample s;
  s.pending = not_ready || (launched && unqueried_streams);
  if (s.pending && now_ns > previous_ns) {
    const std::uint64_t gap = now_ns - previous_ns;
    s.busy_ns = gap < max_sample_gap_ns ? gap : max_sample_gap_ns;
  }
  return s;
}

/// The sampling period the node asked for (`job_segment::sample_activity`, microseconds; 0: do
/// not sample), kept within what the gap gate's freshness allows and what a thread can keep up.
[[nodiscard]] constexpr std::uint64_t sample_period_ns(std::uint32_t asked_us) noexcept {
  const std::uint32_t us = std::clamp(asked_us, abi::fastest_sample_period_us, abi::slowest_sample_period_us);
  return std::uint64_t{us} * 1'000;
}

/// Notes the stream a production launch goes to (`per_thread`: a `_ptsz` form, whose null stream
/// is the calling thread's default stream). The common case, the stream of the previous launch,
/// is one relaxed load and one compare.
void note_launch_stream(CUstream stream, bool per_thread) noexcept;

/// Starts the sampler thread once per process (it follows the published link: it samples while
/// the link has a writable GPU page and the node sets `sample_activity`).
void start_activity_sampler() noexcept;

}  // namespace tgs::cuda::intercept
