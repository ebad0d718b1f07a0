// SPDX-License-Identifier: Apache-2.0
/// @file
/// The versioned ABI between the interposer and tgs-node: the per-job shared-memory segment, the
/// packed launch counter and the registration messages on the node's Unix socket.
///
/// Both sides include this header; a process only trusts a segment or a message whose magic and
/// `abi::version` match its own. The first two fields of every message and of the segment
/// (magic, version) never move, so any two releases can tell that they disagree. A mismatch
/// means the interposer forwards everything untouched (fail open), as NCCL does with a tuner
/// plugin of another version.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <type_traits>

namespace tgs::cuda::abi {

/// Bumped on any change to the segment layout or to the messages. 2: memory policy (segment
/// memory lines, memory_request / memory_reply). 3: a registration reports the memory the job
/// holds (a job registering again with a restarted node), and memory requests carry a sequence
/// number their reply echoes (a reply that came too late is never taken for the next one's).
/// 4: gap filling: a registration reply carries a second descriptor, the GPU's page
/// (`gpu_page`), and the segment gains the gap gate and the production job's busy time.
/// 5: MPS: the registration reply carries the job's MPS client settings (`mps_client`: whether
/// to be a client, the pipe folder of its GPU's control daemon, its client priority and active
/// thread percentage), which the interposer puts in the job's environment before the driver's
/// cuInit reads it. A longer reply is a layout change, and an interposer of version 4 would not
/// make the job the client its node's policy expects.
inline constexpr std::uint32_t version = 5;

/// "TGSJOBSG" read as a little-endian integer: the first eight bytes of a job segment.
inline constexpr std::uint64_t segment_magic = 0x4753424f4a534754ULL;
/// "TGSGPUPG": the first eight bytes of a GPU page.
inline constexpr std::uint64_t gpu_page_magic = 0x4750555047534754ULL;
/// "TGSN": the first four bytes of every socket message.
inline constexpr std::uint32_t message_magic = 0x4e534754U;

// --- the packed launch counter ------------------------------------------------------------------
// One 64-bit word counts both launches and thread blocks, so the launch hot path is a single
// atomic add: the low 40 bits hold blocks, the high 24 bits launches, and each launch adds
// `launch_unit + blocks`. Readers take differences of two snapshots; in modular arithmetic a
// carry out of the block field is exactly cancelled, so a difference decodes correctly while a
// window holds fewer than 2^40 blocks and 2^24 launches (far above any GPU's rate per window).

/// Bits of the block field of the packed counter.
inline constexpr unsigned block_bits = 40;
/// Mask of the block field; block positions are compared modulo 2^40.
inline constexpr std::uint64_t block_mask = (std::uint64_t{1} << block_bits) - 1;
/// What one launch adds to the launch field.
inline constexpr std::uint64_t launch_unit = std::uint64_t{1} << block_bits;
/// Blocks one launch may add: the API allows 2^31 x 65535 x 65535 blocks, which would overflow a
/// window; a launch that large is counted as this many (documented in docs/cuda-backend.md).
inline constexpr std::uint64_t max_blocks_per_launch = (std::uint64_t{1} << 32) - 1;
/// Block positions further apart than this are "behind", not "ahead" (modular comparison).
inline constexpr std::uint64_t half_block_range = std::uint64_t{1} << (block_bits - 1);
/// The allowance lead the node grants an unthrottled job per refill: more than any window holds.
inline constexpr std::uint64_t unthrottled_lead = std::uint64_t{1} << (block_bits - 2);

/// What one launch of `blocks` thread blocks adds to the packed counter.
[[nodiscard]] constexpr std::uint64_t pack_launch(std::uint64_t blocks) noexcept {
  return launch_unit + std::min(blocks, max_blocks_per_launch);
}

/// Launches and blocks between two snapshots of a packed counter.
struct counter_delta {
  std::uint64_t blocks = 0;
  std::uint64_t launches = 0;
  constexpr bool operator==(const counter_delta&) const noexcept = default;
};

/// Decodes the activity between snapshots `before` and `after` of a packed counter.
[[nodiscard]] constexpr counter_delta unpack_delta(std::uint64_t before, std::uint64_t after) noexcept {
  const std::uint64_t d = after - before;
  return {d & block_mask, d >> block_bits};
}

/// Blocks from block position `from` forward to position `to`, modulo 2^40.
[[nodiscard]] constexpr std::uint64_t block_distance(std::uint64_t from, std::uint64_t to) noexcept {
  return (to - from) & block_mask;
}

/// Whether a launch whose counted blocks started at position `blocks_before` may pass under the
/// cumulative `allowance`: it passes while the job's earlier blocks are all within it. Grants are
/// therefore first come first served, and one large grid may overdraw (the debt delays the next
/// launches, as a token bucket's would).
[[nodiscard]] constexpr bool within_allowance(std::uint64_t blocks_before, std::uint64_t allowance) noexcept {
  const std::uint64_t d = block_distance(blocks_before, allowance);
  return d != 0 && d < half_block_range;
}

/// The allowance the node sets at a budget refill. A job that used less than it was allowed
/// starts the window from where it is (unused budget does not pile up: burst of one window); a
/// job in debt or with launches waiting gets `budget_blocks` more on top of its allowance, and its
/// waiting launches pass in order.
[[nodiscard]] constexpr std::uint64_t refill_allowance(std::uint64_t allowance, std::uint64_t used_blocks,
                                                       std::uint64_t budget_blocks) noexcept {
  const bool has_slack = within_allowance(used_blocks, allowance);
  return ((has_slack ? used_blocks : allowance) + budget_blocks) & block_mask;
}

/// The blocks of `used_blocks` that have passed the gate under `allowance`.
[[nodiscard]] constexpr std::uint64_t passed_blocks(std::uint64_t used_blocks, std::uint64_t allowance) noexcept {
  const std::uint64_t d = block_distance(used_blocks, allowance);
  return d < half_block_range ? used_blocks : allowance;
}

/// The furthest block position known passed: through `allowance`, or in a gap up to
/// `gap_passed_to`. The job writes the latter, so only a position between those passed through
/// the allowance and those launched counts.
[[nodiscard]] constexpr std::uint64_t passed_position(std::uint64_t used_blocks, std::uint64_t allowance,
                                                      std::uint64_t gap_passed_to) noexcept {
  const std::uint64_t through_allowance = passed_blocks(used_blocks, allowance);
  const bool gap_ahead =
      block_distance(through_allowance, gap_passed_to) <= block_distance(through_allowance, used_blocks);
  return gap_ahead ? gap_passed_to : through_allowance;
}

/// The allowance the node sets at a budget refill under gap filling. Every launch before the
/// furthest position known passed (through the allowance, or in a gap up to `gap_passed_to`)
/// ran; the window grants `budget_blocks` from there, whatever passed in gaps before. A launch
/// still waiting has its blocks in `used_blocks` but not before that position, so a zero budget
/// keeps it waiting.
[[nodiscard]] constexpr std::uint64_t gap_fill_allowance(std::uint64_t allowance, std::uint64_t used_blocks,
                                                         std::uint64_t gap_passed_to,
                                                         std::uint64_t budget_blocks) noexcept {
  return (passed_position(used_blocks, allowance, gap_passed_to) + budget_blocks) & block_mask;
}

// --- the job segment ----------------------------------------------------------------------------

/// The class byte of a segment and of a registration (values of `tgs::job_class`). A job whose
/// operator set no class registers as `unspecified` and the node applies its configured default.
enum class class_code : std::uint8_t { production = 0, opportunistic = 1, unspecified = 255 };

/// One job's shared-memory segment. The node creates it (a memfd), fills the identity line and
/// hands the descriptor to the job over the socket; after that each line has one writer, so the
/// hot path never shares a written cache line with the node.
struct job_segment {
  // Identity: written by the node before the job sees the segment, read-only afterwards.
  std::uint64_t magic;
  std::uint32_t abi_version;
  std::uint32_t size_bytes;
  std::uint32_t job_id;
  std::uint32_t gpu;
  class_code job_class;

  /// Written by the job on every launch (`pack_launch`); read by the node.
  alignas(64) std::atomic<std::uint64_t> launch_counter;

  // Written by the node on every refill; read by the job's gate.
  /// Cumulative block allowance (a block position, modulo 2^40); see `within_allowance`.
  alignas(64) std::atomic<std::uint64_t> allowance;
  /// The node's CLOCK_MONOTONIC at its latest refill, in ns. A waiting launch that sees no
  /// refill for `stale_after_ns` fails open.
  std::atomic<std::uint64_t> heartbeat_ns;
  /// The budget per window the node applies (informational; `UINT64_MAX` = unthrottled).
  std::atomic<std::uint64_t> budget_blocks;
  /// The refill period in ns (informational).
  std::atomic<std::uint64_t> budget_window_ns;
  /// A futex word bumped at every refill: throttled launches sleep on it instead of spinning.
  std::atomic<std::uint32_t> refill_generation;
  /// How many of the job's launches may be unfinished on the GPU at once (its launch window,
  /// `--max-inflight-launches`); 0, the zero-filled default: no bound. Only an opportunistic
  /// job's interposer reads it. It took spare bytes of this line, so the ABI version did not
  /// change: an interposer built before it keeps no window (pacing, not a limit: nothing is
  /// oversubscribed).
  std::atomic<std::uint32_t> max_inflight_launches;
  /// Gap filling (`tgs::gap_fill`), for an opportunistic job: 1 while a launch may also pass,
  /// over its allowance, once the production job has left the GPU idle for `gap_holdoff_ns`
  /// (read from the GPU's page). 0, the zero-filled default: allowance only.
  std::atomic<std::uint32_t> gap_fill;
  /// For a production job: the period, in microseconds, at which the node wants its GPU activity
  /// sampled while an opportunistic job shares its GPU (0: not sampled); the sampler then writes
  /// the GPU page and `gpu_busy_ns`.
  std::atomic<std::uint32_t> sample_activity;
  std::atomic<std::uint64_t> gap_holdoff_ns;

  // Written by the job's slow paths (allocation, throttling); read by the node for status.
  alignas(64) std::atomic<std::uint64_t> device_bytes;
  std::atomic<std::uint64_t> managed_bytes;
  std::atomic<std::uint64_t> alloc_calls;
  std::atomic<std::uint64_t> free_calls;
  std::atomic<std::uint64_t> map_calls;  ///< cuMemMap and cuMemUnmap
  std::atomic<std::uint64_t> throttled_launches;
  std::atomic<std::uint64_t> throttled_ns;
  /// 1 once the job's process exits in order (`exit`, a return from `main`: the interposer's
  /// exit handler ran); 0, the zero-filled default, when it ends abruptly (a signal, SIGKILL, a
  /// crash), which the node then handles as a fault. It took spare bytes of this line, so the
  /// ABI version did not change: an interposer built before it has every end handled as a fault,
  /// as nodes before it did.
  std::atomic<std::uint32_t> exited;
  /// The first CUDA error that leaves the job's context unusable (`sticky_context_error`: an
  /// illegal address, a launch failure, a device-side assert...) that a driver call of the job
  /// returned, as the driver's code; 0, the zero-filled default: none. Written once by the job's
  /// interposer; read by the node when the job ends, as the evidence of a GPU fault that a fault
  /// policy may end the job's co-runner on (a bare exit is none). The job can write anything
  /// here: docs/trust-model.md says what a false claim can do. It took the last spare bytes of
  /// this line, so the ABI version did not change: an interposer built before it reports no GPU
  /// fault, and its job's end ends no co-runner.
  std::atomic<std::uint32_t> gpu_error;

  // Written by the node at every memory step; read by the job's allocation paths and evictor.
  /// Bytes of the job's managed memory it may keep on the GPU; `no_resident_limit`: no cap. The
  /// job evicts (preferred location host, prefetch to host) above it and restores below it.
  alignas(64) std::atomic<std::uint64_t> resident_limit;
  /// What `cuMemGetInfo` / `cuDeviceTotalMem` tell the job as the total (its budget); 0: the
  /// driver's answer.
  std::atomic<std::uint64_t> view_total_bytes;
  /// Of that total, what other jobs hold; the job subtracts its own current bytes itself, so its
  /// free memory is exact right after its own allocations.
  std::atomic<std::uint64_t> view_others_bytes;
  /// A futex word bumped whenever `resident_limit` changes: the job's evictor sleeps on it.
  std::atomic<std::uint32_t> memory_generation;
  /// 1 while the node runs a memory policy: allocations then ask it first (`memory_request`).
  std::atomic<std::uint32_t> memory_policy_active;
  /// How the job's residency plan shares its limit among its allocations: a `tgs::residency_split`
  /// value (0, the zero-filled default: `in_order`; 1: `even`). It took spare bytes of this line,
  /// so the ABI version did not change: an interposer built before it plans in order whatever
  /// the node says (a placement preference, not a limit, so nothing is oversubscribed).
  std::atomic<std::uint32_t> residency_split;

  // Written by the job's memory paths; read by the node (observation and status).
  /// Of `managed_bytes`, those the job keeps on the GPU (not evicted to host).
  alignas(64) std::atomic<std::uint64_t> managed_resident_bytes;
  std::atomic<std::uint64_t> evictions;             ///< moves to host (an allocation or part of one)
  std::atomic<std::uint64_t> restores;              ///< moves back to the GPU
  std::atomic<std::uint64_t> evicted_bytes_total;
  std::atomic<std::uint64_t> restored_bytes_total;
  std::atomic<std::uint64_t> evict_ns_total;        ///< time spent in evictions (prefetch + sync)
  std::atomic<std::uint64_t> restore_ns_total;
  std::atomic<std::uint64_t> denied_allocs;         ///< allocations failed with out-of-memory by policy
  std::atomic<std::uint64_t> converted_allocs;      ///< device allocations served from managed memory
  /// Managed bytes placed on host at allocation (the residency plan had no room for them under
  /// the job's limit): never populated on the GPU, so never evicted.
  std::atomic<std::uint64_t> host_placed_bytes;

  // Written by the job at its synchronisation calls (cuStreamSynchronize, cuEventSynchronize):
  // where a job waits for its GPU work anyway, its completion is known for free. Time blocked
  // there grows with GPU contention and not with the job's own CPU-side work
  // (docs/results/rate-control.md); tgs-node status reports it.
  alignas(64) std::atomic<std::uint64_t> sync_calls;
  std::atomic<std::uint64_t> sync_wait_ns;  ///< time blocked in those calls
  std::atomic<std::uint64_t> last_sync_ns;  ///< CLOCK_MONOTONIC when the latest one returned
  // Written by an opportunistic job's launch window (`max_inflight_launches`), in the spare bytes
  // of the synchronisation line: launches that waited for an earlier launch of the job to
  // finish, the time they waited, and the waits that gave up (`window_wait_limit_ns`).
  std::atomic<std::uint64_t> window_waits;
  std::atomic<std::uint64_t> window_wait_ns;
  std::atomic<std::uint64_t> window_timeouts;
  // Written by the job's launch paths, in the last spare bytes of the synchronisation line: one
  // launch in `launch_time_sample_every` (by `launch_counter`) is timed inside the driver's launch call
  // (after the rate gate and the window), so the node can show what a launch costs the job's
  // host side with and without a co-runner. Diagnostics: no policy reads them.
  std::atomic<std::uint64_t> timed_launches;
  std::atomic<std::uint64_t> timed_launch_ns;

  // Written by a production job's activity sampler while `sample_activity` is set; read by the
  // node. The controller's GPU-side signal (`tgs::job_activity::gpu_busy`).
  /// Time the job had unfinished GPU work, as its samples saw it (ns).
  alignas(64) std::atomic<std::uint64_t> gpu_busy_ns;
  /// Samples taken, and those that found unfinished work (for status).
  std::atomic<std::uint64_t> activity_samples;
  std::atomic<std::uint64_t> busy_samples;
  // Written by an opportunistic job's gate: launches that passed over its allowance because the
  // production job left the GPU idle (gap filling), and the time its launches waited for a gap
  // or an allowance under gap filling.
  std::atomic<std::uint64_t> gap_launches;
  /// The block position just past the latest launch that passed in a gap: the node starts the
  /// job's next budget window there (`gap_fill_allowance`), so what passed in gaps is no debt and
  /// a launch still waiting is not taken for one that passed.
  std::atomic<std::uint64_t> gap_passed_to;

  // Written by a production job at its synchronisation calls while `sample_activity` is set: a
  // mark of where its GPU work is known complete. `sync_mark_blocks` counts the blocks launched
  // before the call (`launch_counter`'s block part), all complete when it returned, and
  // `sync_mark_busy_ns` the job's `gpu_busy_ns` then. Between two marks the blocks per busy
  // second are exact whole iterations of a job that synchronises once per iteration, where a
  // fixed window's launched blocks move by an iteration with where its bursts fall (the
  // controller's GPU-side speed; docs/cuda-backend.md, "Gap filling"). A sequence count guards
  // the pair: odd while a mark is written (`read_sync_mark`).
  alignas(64) std::atomic<std::uint64_t> sync_mark_seq;
  std::atomic<std::uint64_t> sync_mark_blocks;
  std::atomic<std::uint64_t> sync_mark_busy_ns;
  /// CLOCK_MONOTONIC when the marked call returned: the blocks between two marks over the time
  /// between them is the job's throughput in whole iterations (`tgs::job_activity::synced_span`),
  /// which the priority-share controller reads whether or not the job is sampled. A production
  /// job marks every synchronisation; the mark's busy time means something only while sampled.
  std::atomic<std::uint64_t> sync_mark_ns;
  // In the spare bytes of the sync-mark line: an opportunistic job's kernel timer. The node sets
  // `time_kernels` (1: time every kernel, as the node's mechanism choice needs the job's longest
  // kernel: a SIGKILL in the middle of a long one ends an MPS co-runner); the job's interposer
  // writes the longest kernel it saw (ns, from its launch or the previous kernel's end, whichever
  // is later, to its end: never shorter than the kernel) and how many kernels it timed.
  std::atomic<std::uint32_t> time_kernels;
  std::atomic<std::uint64_t> longest_kernel_ns;
  std::atomic<std::uint64_t> kernels_timed;
  /// The job's `sync_wait_ns` when the marked call returned (an interposer that writes it says so
  /// with `register_flag_marks_wait`): between two marks, the time the job blocked waiting for
  /// its GPU work, which a GPU slowdown lengthens and the job's own host side does not.
  std::atomic<std::uint64_t> sync_mark_wait_ns;
};

/// `resident_limit` when the job may keep all of its memory on the GPU.
inline constexpr std::uint64_t no_resident_limit = UINT64_MAX;

static_assert(std::is_standard_layout_v<job_segment>);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex word");
static_assert(offsetof(job_segment, launch_counter) == 64);
static_assert(offsetof(job_segment, allowance) == 128);
static_assert(offsetof(job_segment, device_bytes) == 192);
static_assert(offsetof(job_segment, resident_limit) == 256);
static_assert(offsetof(job_segment, managed_resident_bytes) == 320);
static_assert(offsetof(job_segment, sync_calls) == 448);
static_assert(offsetof(job_segment, gpu_busy_ns) == 512);
static_assert(offsetof(job_segment, sync_mark_seq) == 576);
static_assert(offsetof(job_segment, sync_mark_wait_ns) + sizeof(std::uint64_t) <= 640, "the sync-mark line's spare bytes");

static_assert(offsetof(job_segment, gap_holdoff_ns) + sizeof(std::uint64_t) <= 192, "the refill line's spare bytes");
static_assert(offsetof(job_segment, gpu_error) + sizeof(std::uint32_t) <= 256, "the slow-path line's spare bytes");
static_assert(offsetof(job_segment, timed_launch_ns) + sizeof(std::uint64_t) <= 512, "the sync line's spare bytes");

/// Whether a CUDA driver status (`CUresult`) leaves the context that got it unusable: `cuda.h`
/// says of each that "any further CUDA work will return the same error" and the process must be
/// terminated (or, for an assert, the context destroyed). These are the errors of a fault on the
/// GPU in the job's own context, what `job_segment::gpu_error` records: CUDA_ERROR_CONTAINED
/// (226), CUDA_ERROR_ILLEGAL_ADDRESS (700), CUDA_ERROR_LAUNCH_TIMEOUT (702), CUDA_ERROR_ASSERT
/// (710), CUDA_ERROR_HARDWARE_STACK_ERROR (714), CUDA_ERROR_ILLEGAL_INSTRUCTION (715),
/// CUDA_ERROR_MISALIGNED_ADDRESS (716), CUDA_ERROR_INVALID_ADDRESS_SPACE (717),
/// CUDA_ERROR_INVALID_PC (718), CUDA_ERROR_LAUNCH_FAILED (719), CUDA_ERROR_TENSOR_MEMORY_LEAK
/// (721). Not an out-of-memory error (an API error of one call), and not
/// CUDA_ERROR_MPS_CLIENT_TERMINATED (the victim's side of another client's fault).
[[nodiscard]] constexpr bool sticky_context_error(std::uint32_t code) noexcept {
  switch (code) {
    case 226: case 700: case 702: case 710: case 714: case 715: case 716: case 717: case 718: case 719: case 721:
      return true;
    default:
      return false;
  }
}

/// Whether a job's GPU fault (`sticky_context_error`) reaches the other clients of its MPS server:
/// the errors a fault policy may end a co-runner on. Every sticky error but a device-side assert
/// (710): the GPU contains that one to the asserting client. Measured on an H200 under a plain MPS
/// daemon and under tgs-node, a PyTorch index out of bounds in the opportunistic client left the
/// production client running, 4 of 4 (../docs/results/mps-faults.md); an illegal address (700)
/// ended it, 2 of 2. The errors not measured stay on the side of a shared fault domain.
[[nodiscard]] constexpr bool fault_crosses_mps_clients(std::uint32_t code) noexcept {
  return sticky_context_error(code) && code != 710;
}

/// A production job's latest synchronisation mark (`job_segment::sync_mark_seq`).
struct sync_mark {
  std::uint64_t seq = 0;
  std::uint64_t blocks = 0;
  std::uint64_t busy_ns = 0;
  std::uint64_t ns = 0;  ///< when the marked call returned
  std::uint64_t wait_ns = 0;
};

/// Writes a mark unless another thread of the job is writing one (that thread's mark stands).
inline void write_sync_mark(job_segment& seg, std::uint64_t blocks, std::uint64_t busy_ns, std::uint64_t ns,
                            std::uint64_t wait_ns = 0) noexcept {
  std::uint64_t seq = seg.sync_mark_seq.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !seg.sync_mark_seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return;
  // Release stores, not a fence (ThreadSanitizer does not model fences): a reader that sees
  // either new value also sees the odd count written before it.
  seg.sync_mark_blocks.store(blocks, std::memory_order_release);
  seg.sync_mark_busy_ns.store(busy_ns, std::memory_order_release);
  seg.sync_mark_ns.store(ns, std::memory_order_release);
  seg.sync_mark_wait_ns.store(wait_ns, std::memory_order_release);
  seg.sync_mark_seq.store(seq + 2, std::memory_order_release);
}

/// The latest mark, or nothing when none was read whole in a few tries (a writer mid-mark, or
/// one that died mid-mark and left the count odd: the job's own signal, lost to it alone).
[[nodiscard]] inline std::optional<sync_mark> read_sync_mark(const job_segment& seg) noexcept {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::uint64_t before = seg.sync_mark_seq.load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;
    // Acquire loads keep the second look at the count after them.
    sync_mark m{before, seg.sync_mark_blocks.load(std::memory_order_acquire),
                seg.sync_mark_busy_ns.load(std::memory_order_acquire),
                seg.sync_mark_ns.load(std::memory_order_acquire), seg.sync_mark_wait_ns.load(std::memory_order_acquire)};
    if (seg.sync_mark_seq.load(std::memory_order_relaxed) == before) return m;
  }
  return std::nullopt;
}

/// One launch in this many (every one whose `launch_counter` count before it is a multiple) is
/// timed into `timed_launches` / `timed_launch_ns`: two clock reads and two atomic adds on every
/// launch would cost each launch tens of ns (a real driver's launch call: 5-6 us on an H100).
inline constexpr std::uint32_t launch_time_sample_every = 64;

/// CLOCK_MONOTONIC in ns: the clock of `heartbeat_ns` and `last_sync_ns`, which the node and the
/// job both read, so both sides take it from here.
[[nodiscard]] inline std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

/// A waiting launch gives up on the node (fails open) when no refill came for this long.
inline constexpr std::uint64_t stale_after_ns = 1'000'000'000;

/// How long any one socket operation of a job (connect, send, a reply to its registration) may
/// take before the job gives up on the node and fails open: a wedged or stopped node must not hang
/// the job's first CUDA call. A memory request waits longer while the node is alive (it may hold
/// the reply back while an opportunistic job evicts), never past `memory_reply_limit_ns`, and gives
/// up once the node's heartbeat is `stale_after_ns` old.
inline constexpr std::uint64_t job_socket_timeout_ns = 1'000'000'000;
inline constexpr std::uint64_t memory_reply_limit_ns = 30'000'000'000;

/// The largest launch window the node may set: the interposer keeps one event per slot.
inline constexpr std::uint32_t max_launch_window = 256;
/// A launch waits at most this long for an earlier launch of its job to finish, then goes ahead
/// (fails open): a kernel that waits for a later one of the same job (a flag a later kernel sets)
/// must not deadlock the job.
inline constexpr std::uint64_t window_wait_limit_ns = 1'000'000'000;

/// Bytes the node maps per job (one page; the layout uses the first `sizeof(job_segment)`).
inline constexpr std::uint32_t segment_bytes = 4096;
static_assert(sizeof(job_segment) <= segment_bytes);

// --- the GPU page -------------------------------------------------------------------------------

/// One GPU's shared page: whether its production job has unfinished work on the GPU, which the
/// opportunistic jobs' gates read on every launch that is over its allowance (gap filling), with
/// no daemon on the path. The node creates one per GPU and sends it with every registration on
/// that GPU: writable to the production job it chose as the writer, read-only to every other job,
/// so no opportunistic job can open a gap for itself or hold another's. The node clears the line
/// when the writer leaves.
struct gpu_page {
  // Identity: written by the node before any job sees the page.
  std::uint64_t magic;
  std::uint32_t abi_version;
  std::uint32_t size_bytes;
  std::uint32_t gpu;
  /// The job the node lets write the activity line (0: none).
  std::atomic<std::uint32_t> writer_job_id;

  // Written by the writer's activity sampler; read by the opportunistic gates and the node.
  /// 1 while the latest sample found unfinished work (or a launch since the one before).
  alignas(64) std::atomic<std::uint32_t> pending;
  /// CLOCK_MONOTONIC of the latest sample that found work, in ns: the production job has been
  /// idle since then.
  std::atomic<std::uint64_t> last_pending_ns;
  /// CLOCK_MONOTONIC of the latest sample, in ns. A gate trusts a sample at most
  /// `gap_sample_fresh_ns` old: a sampler that stopped (its job stopped, or died before the node
  /// noticed) opens no gap.
  std::atomic<std::uint64_t> sample_ns;
};

static_assert(std::is_standard_layout_v<gpu_page>);
static_assert(offsetof(gpu_page, pending) == 64);

/// Bytes of a GPU page's mapping (one page).
inline constexpr std::uint32_t gpu_page_bytes = 4096;
static_assert(sizeof(gpu_page) <= gpu_page_bytes);

/// The node's default period of a production job's activity samples (`job_segment::sample_activity`),
/// in microseconds. Our choice: a query per 50 us is a few percent of one driver lock's time for a
/// job that launches every 10 us, and still sees the gaps worth filling (docs/cuda-backend.md).
inline constexpr std::uint32_t default_sample_period_us = 50;
/// The periods a sampler keeps to, whatever a segment asks: below 10 us a thread cannot keep up,
/// and above 1 ms a gap gate would see stale samples.
inline constexpr std::uint32_t fastest_sample_period_us = 10;
inline constexpr std::uint32_t slowest_sample_period_us = 1'000;

/// How old the latest sample may be for a gate to open a gap on it.
inline constexpr std::uint64_t gap_sample_fresh_ns = 5'000'000;

/// Whether an opportunistic launch may pass in a gap at `now_ns`: the production job's latest
/// sample is fresh and found no work, and it found none for `holdoff_ns`. A sample time in the
/// future (the writer's to set) counts as now, so a writer can only close gaps, never open one
/// early.
[[nodiscard]] constexpr bool gap_open(std::uint32_t pending, std::uint64_t last_pending_ns,
                                      std::uint64_t sample_ns, std::uint64_t holdoff_ns,
                                      std::uint64_t now_ns) noexcept {
  if (pending != 0 || sample_ns > now_ns || now_ns - sample_ns > gap_sample_fresh_ns) return false;
  if (last_pending_ns > now_ns) return false;
  return now_ns - last_pending_ns >= holdoff_ns;
}

// --- socket messages ------------------------------------------------------------------------------
// SOCK_SEQPACKET keeps message boundaries. The node replies to `register_job` with `registered`
// plus the segment's descriptor (SCM_RIGHTS), or `rejected`; to `status` with `status_line`
// messages and a final `status_end`.

enum class message_type : std::uint32_t {
  register_job = 1,
  registered = 2,
  rejected = 3,
  status = 4,
  status_line = 5,
  status_end = 6,
  memory_request = 7,
  memory_reply = 8,
};

/// The prefix of every message. `magic` and `abi_version` come first in every version.
struct message_header {
  std::uint32_t magic = message_magic;
  std::uint32_t abi_version = version;
  message_type type = message_type::register_job;
  std::uint32_t size = 0;  ///< bytes of the whole message
};

/// What a job holds when it registers: nothing at its first registration; all of its live
/// allocations when it registers again with a node that restarted. The node takes these as claims,
/// bounded by what it can check (docs/trust-model.md), never as facts.
struct job_holdings {
  std::uint64_t device_bytes = 0;            ///< device and physical (cuMemCreate) memory
  std::uint64_t managed_bytes = 0;           ///< managed memory, wherever it lives
  std::uint64_t managed_resident_bytes = 0;  ///< of that, on the GPU
};

/// `register_request::flags`: CUDA was initialised in this process before this registration, so
/// its MPS client state is fixed whatever the reply says (a registration after the node was
/// away, or after the first one failed).
inline constexpr std::uint8_t register_flag_cuda_started = 1;
/// `register_request::flags`: that CUDA is an MPS client (its environment named a daemon at cuInit).
inline constexpr std::uint8_t register_flag_mps_client = 2;
/// `register_request::flags`: the job's synchronisation marks carry its wait
/// (`job_segment::sync_mark_wait_ns`); an interposer from before it leaves the field at 0.
inline constexpr std::uint8_t register_flag_marks_wait = 4;

/// How long a job's first registration waits for a node that is there and does not answer yet
/// (its socket exists: the node restarts, is busy, or the caps dropped the connection) before
/// CUDA starts without it: an opportunistic job longer, since outside the node's MPS it would be
/// held until it restarts; a production job (`TGS_JOB_CLASS=production`) briefly, since it must
/// not wait long on the node; a job that does not say takes the longer bound. A job whose node's
/// socket does not exist starts at once. `TGS_REGISTRATION_WAIT_MS` changes it for a
/// job (a job that waits less only makes itself late).
inline constexpr std::uint64_t first_registration_wait_opportunistic_ns = 10'000'000'000;
inline constexpr std::uint64_t first_registration_wait_production_ns = 2'000'000'000;

/// A job's registration. Its pid and uid come from SO_PEERCRED, never from the message.
struct register_request {
  message_header header{message_magic, version, message_type::register_job, sizeof(register_request)};
  class_code job_class = class_code::production;  ///< from the operator-set TGS_JOB_CLASS
  std::uint8_t flags = 0;                          ///< `register_flag_*`; a claim, used only for this job
  std::uint8_t reserved[2] = {};
  std::uint32_t gpu = 0;                           ///< from TGS_GPU / CUDA_VISIBLE_DEVICES
  char name[64] = {};                              ///< a label for status (TGS_JOB_NAME or comm)
  job_holdings holdings;                           ///< version 3
};

/// Bytes of `mps_client::pipe_directory`, the NUL included: a Unix socket path's limit
/// (`sockaddr_un::sun_path`), since the driver connects to sockets in that folder.
inline constexpr std::size_t mps_pipe_directory_bytes = 108;

/// How the job becomes an MPS client (version 5): the node derives it from its policy's
/// `tgs::mps_partition` where MPS is available on the job's GPU. The interposer sets the job's
/// `CUDA_MPS_PIPE_DIRECTORY`, `CUDA_MPS_CLIENT_PRIORITY` and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
/// from it (unsetting those left unset here) before the driver's cuInit; the job's own values
/// count for nothing.
struct mps_client {
  /// 1: be a client of the control daemon in `pipe_directory`; 0: leave the job's environment
  /// as it is (no MPS on this node or GPU, or a policy that does not use it).
  std::uint8_t client = 0;
  /// `CUDA_MPS_CLIENT_PRIORITY`: 0 normal, 1 below normal.
  std::uint8_t priority = 0;
  /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, 1-100; 0: unset (all of the GPU's SMs).
  std::uint8_t active_thread_percentage = 0;
  std::uint8_t reserved = 0;
  /// The control daemon's pipe folder, an absolute path, NUL-terminated within the array.
  char pipe_directory[mps_pipe_directory_bytes] = {};
};

/// Whether `m` is one a job may apply: a client with an absolute, NUL-terminated printable pipe
/// folder, a priority of 0 or 1 and a percentage of at most 100; or not a client at all. The
/// interposer checks this on receipt and runs unmanaged by MPS (as before version 5) otherwise.
[[nodiscard]] constexpr bool valid_mps_client(const mps_client& m) noexcept {
  if (m.client == 0) return true;
  if (m.client != 1 || m.priority > 1 || m.active_thread_percentage > 100) return false;
  if (m.pipe_directory[0] != '/') return false;
  for (const char c : m.pipe_directory) {
    if (c == '\0') return true;
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) return false;
  }
  return false;  // no NUL within the array
}

/// The node's acceptance; the segment's descriptor travels with it, and the GPU page's after it
/// (writable to the page's writer, read-only otherwise).
struct register_reply {
  message_header header{message_magic, version, message_type::registered, sizeof(register_reply)};
  std::uint32_t job_id = 0;
  class_code job_class = class_code::production;
  std::uint8_t reserved[3] = {};
  mps_client mps;  ///< version 5
};

/// What the node does about a job it refused once that job uses a GPU (`--unregistered-action`),
/// in a refusal: the interposer of a job the node would end exits by itself, saying why.
enum class refused_then : std::uint8_t {
  runs = 0,   ///< reported only (`report`, or an exempt user); also what a node before this field says
  held = 1,   ///< held with SIGSTOP while a production job is on its GPU (`pause`)
  ended = 2,  ///< ended (`kill`): the interposer exits with `refused_exit_status` instead
};

/// The exit status of a job whose interposer ends it because the node refused it and would end
/// it (`refused_then::ended`): EX_TEMPFAIL of sysexits.h, the job may run again later.
inline constexpr int refused_exit_status = 75;

/// The node's refusal, with a reason for the job's log. Also sent on an ABI mismatch, with the
/// node's own version in the header.
struct reject_reply {
  message_header header{message_magic, version, message_type::rejected, sizeof(reject_reply)};
  char reason[120] = {};
  /// Appended after `reason` without a version change: a node before it sends the shorter reply
  /// (read as `runs`), an interposer before it reads only the reason.
  refused_then then = refused_then::runs;
  std::uint8_t reserved[7] = {};
};

/// A status query (from `tgs-node status`); any local user may ask.
struct status_request {
  message_header header{message_magic, version, message_type::status, sizeof(status_request)};
  std::uint32_t json = 0;  ///< 1: one JSON object per line; 0: text for people
};

/// One line of a status answer: the header, then the text (not NUL-terminated; `header.size`
/// bounds it).
struct status_line_header {
  message_header header{message_magic, version, message_type::status_line, sizeof(message_header)};
};

/// What the driver can do with an allocation the job is about to make.
enum class allocation_path : std::uint8_t {
  /// `cuMemAlloc`: the interposer can serve it from managed memory instead.
  convertible = 0,
  /// `cuMemAllocManaged` called by the job itself: managed already.
  managed = 1,
  /// Pools, pitched and stream-ordered allocations, `cuMemCreate`: device memory only.
  fixed = 2,
};

/// A job asks the node's memory policy before an allocation (only while the segment's
/// `memory_policy_active` is 1). The node answers with `memory_reply`, possibly after it has
/// evicted an opportunistic job's memory to make room.
struct memory_request {
  message_header header{message_magic, version, message_type::memory_request, sizeof(memory_request)};
  std::uint64_t bytes = 0;
  allocation_path path = allocation_path::convertible;
  std::uint8_t reserved[3] = {};
  std::uint32_t sequence = 0;  ///< echoed by the reply (version 3)
};

/// The verdict (values of `tgs::allocation_verdict`: 0 device, 1 managed, 2 out of memory).
struct memory_reply {
  message_header header{message_magic, version, message_type::memory_reply, sizeof(memory_reply)};
  std::uint8_t verdict = 0;
  std::uint8_t reserved[3] = {};
  std::uint32_t sequence = 0;  ///< the request's
};

/// The largest message either side sends (status lines included).
inline constexpr std::size_t max_message_bytes = 4096;

static_assert(sizeof(register_request) == 112 && sizeof(memory_request) == 32 && sizeof(memory_reply) == 24 &&
                  sizeof(register_reply) == 136,
              "a message's size is part of the ABI: bump `version` when it changes");

}  // namespace tgs::cuda::abi
