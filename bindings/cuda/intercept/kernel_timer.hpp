// SPDX-License-Identifier: Apache-2.0
/// @file
/// An opportunistic job's kernel timer: while the node asks (`job_segment::time_kernels`), an event
/// is recorded after each of the job's launches, and a thread of the job polls them, stream by
/// stream, and publishes the longest span a kernel can have run (`longest_kernel_ns`). The node
/// keeps it in the job's profile: a job whose kernels run long is never made an MPS client beside a
/// production job, since a SIGKILL in the middle of a long kernel ends the server's other clients
/// (docs/results/mps-faults.md).
///
/// A span is an upper bound of the kernel's run, measured two ways, of which the shorter counts:
/// - **on the host**: from the launch (or the end of the previous launch on its stream, if later)
///   to when its event is seen complete. The poller's delay lengthens it, and so does work queued
///   on the stream before it that is no launch (a copy, a memset).
/// - **on the GPU**: the time between the previous launch's event and this one's
///   (`cuEventElapsedTime`), exact to the microsecond however late the poller looks, but
///   lengthened by any time the stream stood empty before the launch.
///
/// A host-bound job's stream often stands empty (the GPU span is long, the host span right); a job
/// whose host runs ahead queues hundreds of launches (the GPU span is right). Only both at once,
/// an empty stream and a poller held off the CPU, lengthen a span past the kernel. A launch still
/// pending counts with the span it has had so far on the host, so a job killed in the middle of a
/// long kernel is known to have had one. Launches that could not be timed (a stream's ring full,
/// an event that could not be recorded) are charged to the next timed launch on their stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "cuda_subset.hpp"
#include "job_link.hpp"

namespace tgs::cuda::intercept {

/// The span charged to a timed launch seen complete at `seen_ns`: from `from_ns` (its launch, or
/// that of the first untimed launch before it on its stream) or the end of the previous timed
/// launch on its stream, whichever is later, to `seen_ns`. Pure, so the rule is tested without a
/// driver.
[[nodiscard]] constexpr std::uint64_t kernel_span_ns(std::uint64_t from_ns, std::uint64_t previous_end_ns,
                                                     std::uint64_t seen_ns) noexcept {
  const std::uint64_t start = std::max(from_ns, previous_end_ns);
  return seen_ns > start ? seen_ns - start : 0;
}

/// The span a completed launch is charged: the shorter of its two upper bounds, the host's
/// (`kernel_span_ns`) and the GPU's (from the previous launch's event on its stream to its own;
/// empty where there is none, or the driver could not say).
[[nodiscard]] constexpr std::uint64_t charged_span_ns(std::uint64_t host_span_ns,
                                                      std::optional<std::uint64_t> gpu_span_ns) noexcept {
  return gpu_span_ns ? std::min(host_span_ns, *gpu_span_ns) : host_span_ns;
}

/// Times the launch just made on `stream` (`launch_stream_of`) whose driver call returned at
/// `launched_ns`, for an opportunistic job whose node asked (`seg->time_kernels`). Starts the
/// polling thread on first use. The span starts at the call's return, not its entry: what the call
/// does before it submits the kernel (a first launch loads its module) is not the kernel's time. A
/// kernel can start a few microseconds before the call returns; that much a span may fall short.
void time_kernel(abi::job_segment* seg, CUstream stream, std::uint64_t launched_ns) noexcept;

}  // namespace tgs::cuda::intercept
