// SPDX-License-Identifier: Apache-2.0
/// @file
/// The interposer's link to tgs-node: registration, the job's shared-memory segment, reconnection
/// after a node restart, and the launch gate that reads the segment on every launch.
///
/// Mechanism only: the gate compares the job's packed launch counter with the allowance the node
/// wrote; what the allowance should be is the node's policy. Everything here is `noexcept` and
/// fails open: without a node, or with a node of another ABI version, launches pass untouched.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "exit_drain.hpp"
#include "node_abi.hpp"

namespace tgs::cuda::intercept {

/// What the gate needs about the current registration. Immutable once published: a
/// re-registration publishes a new one, so the hot path reads one pointer and no lock.
struct link_state {
  abi::job_segment* segment = nullptr;  ///< nullptr: not managed, launches pass untouched
  bool opportunistic = false;           ///< only opportunistic launches wait for allowance
  int socket = -1;                      ///< the registration's connection (memory requests use it)
  /// The GPU's page (read-only unless this job writes it); nullptr: no gap filling.
  const abi::gpu_page* page = nullptr;
  /// The same page where this job is its writer (a production job): its activity sampler writes it.
  abi::gpu_page* writable_page = nullptr;
};

/// The published registration; never null.
extern std::atomic<const link_state*> current_link;
/// The state before the first launch or lookup triggered registration.
extern const link_state unregistered_link;

/// Registers with the node on first use, or returns the current (possibly unmanaged) state.
[[nodiscard]] const link_state* ensure_link() noexcept;

/// Asks the node's memory policy about an allocation of `bytes` on `path`; returns the verdict
/// (`tgs::allocation_verdict` values), or empty when the node did not answer (the caller then
/// fails open and allocates as the job asked).
[[nodiscard]] std::optional<std::uint8_t> ask_memory(const link_state& link, std::uint64_t bytes,
                                                     abi::allocation_path path) noexcept;

/// Blocks a launch whose blocks begin at `position` (and end before `end`) until the node's
/// allowance covers it, the production job leaves the GPU idle long enough (gap filling), the
/// node goes silent for `abi::stale_after_ns`, or the link changes (fail open).
void wait_for_allowance(const link_state& link, std::uint64_t position, std::uint64_t end) noexcept;

/// The result of a launch gate: what the account step must undo if the driver refuses the launch.
struct launch_token {
  abi::job_segment* segment = nullptr;
  std::uint64_t packed = 0;
  bool opportunistic = false;  ///< the job's class, for what follows the gate (its launch window)
  /// Every `abi::launch_time_sample_every`-th launch of the job (by its launch counter, which the
  /// gate reads anyway): the launch whose driver call is timed.
  bool timed = false;
};

/// The launch hot path: one atomic add on shared memory, plus one load for an opportunistic job;
/// no lock and no system call unless the job is over its allowance.
[[nodiscard]] inline launch_token gate_launch(std::uint64_t blocks) noexcept {
  // A process that drains before its end launches nothing more (exit_drain.hpp).
  if (exit_draining.load(std::memory_order_relaxed)) [[unlikely]] hold_for_exit();
  const link_state* link = current_link.load(std::memory_order_acquire);
  if (link->segment == nullptr) [[unlikely]] {
    link = ensure_link();
    if (link->segment == nullptr) return {};
  }
  const std::uint64_t packed = abi::pack_launch(blocks);
  const std::uint64_t before = link->segment->launch_counter.fetch_add(packed, std::memory_order_relaxed);
  if (link->opportunistic) {
    const std::uint64_t position = before & abi::block_mask;
    if (!abi::within_allowance(position, link->segment->allowance.load(std::memory_order_acquire)))
        [[unlikely]] {
      wait_for_allowance(*link, position, (position + (packed & abi::block_mask)) & abi::block_mask);
    }
  }
  const bool timed = ((before >> abi::block_bits) % abi::launch_time_sample_every) == 0;
  return {link->segment, packed, link->opportunistic, timed};
}

/// A launch the driver refused never ran: take it out of the count again.
inline void account_launch(const launch_token& token, int result) noexcept {
  if (result != 0 && token.segment != nullptr) [[unlikely]] {
    token.segment->launch_counter.fetch_sub(token.packed, std::memory_order_relaxed);
  }
}

/// A driver call of the job returned `result` (not CUDA_SUCCESS): when it is an error that leaves
/// the context unusable (`abi::sticky_context_error`), the first one is recorded in the job's
/// segment (`job_segment::gpu_error`, now or at its next registration), the node's evidence of a
/// GPU fault. Only error returns reach here: the success path costs one comparison.
void note_failure(int result) noexcept;

/// Verbosity of the interposer's stderr messages, from TGS_LOG_LEVEL (error, warn, info, debug).
enum class log_level : int { error = 0, warn = 1, info = 2, debug = 3 };
/// Prints `tgs-intercept: <message>` on stderr when `level` is enabled.
void log(log_level level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));

/// Sleeps `ns` nanoseconds (under a second) on the monotonic clock, through signals: the pause of
/// the interposer's own threads (the activity sampler, the kernel timer).
void sleep_ns(long ns) noexcept;

}  // namespace tgs::cuda::intercept
