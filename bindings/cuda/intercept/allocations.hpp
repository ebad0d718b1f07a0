// SPDX-License-Identifier: Apache-2.0
/// @file
/// The allocation table: every live allocation of the job, which counter of the job segment it
/// is counted in, and, for managed memory, how much of it is on the GPU. The allocation paths'
/// gates and accounts, the memory policy's verdicts, the job's view of its budget, and the
/// residency plan (`tgs::plan_residency`) over the table.
///
/// The memory policy's side in the job: the node rules on every allocation (when it runs a
/// policy) and sets this job's resident limit; the job carries it out. A cuMemAlloc the policy
/// grants in managed memory is served by cuMemAllocManaged here, and the evictor thread
/// (evictor.hpp) moves managed allocations to host and back to keep within the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cuda_subset.hpp"
#include "job_link.hpp"

namespace tgs::cuda::intercept {

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

/// Guards `live_allocs`.
extern std::mutex alloc_mutex;
/// Held while managed allocations are placed, moved or freed (taken before `alloc_mutex`), so the
/// evictor never prefetches a pointer the job is freeing and the resident count stays exact.
extern std::mutex evict_mutex;
/// Live allocations by device pointer (or cuMemCreate handle). Heap-allocated and never
/// destroyed: frees may arrive from other libraries' exit handlers.
extern std::unordered_map<std::uint64_t, alloc_record>* live_allocs;

/// A managed allocation of one segment, with its place in the residency plan.
struct managed_entry {
  CUdeviceptr ptr = 0;
  alloc_record rec;
  std::uint64_t target = 0;  ///< bytes the plan keeps on the GPU
};

/// The plan for every managed allocation counted in `seg` (plus `extra`, not yet in the table,
/// when given), under the segment's resident limit. Needs `evict_mutex`; takes `alloc_mutex`.
/// Empty when the table is missing or memory ran out (then nothing moves).
[[nodiscard]] std::vector<managed_entry> plan_segment(abi::job_segment& seg, const managed_entry* extra) noexcept;
/// Records that the allocation at `ptr` now has `resident` bytes on the GPU.
void mark_resident(CUdeviceptr ptr, std::uint64_t resident) noexcept;

/// What the job holds now, summed over the table: what a registration reports, so a node that
/// restarted counts the memory its predecessor granted.
[[nodiscard]] abi::job_holdings current_holdings() noexcept;
/// Counts every live allocation in `seg`, a segment just published by a new registration: its
/// byte counters are set to the table's sums and every record is counted in it from now on
/// (frees included). Takes `evict_mutex`, then `alloc_mutex`.
void rehome_allocations(abi::job_segment& seg) noexcept;

// --- the allocation paths' gates and accounts (hooked_symbols.def) ---------------------------------

/// Counts a successful allocation of `bytes` at `*key` (a device pointer or a cuMemCreate handle).
void account_alloc(CUresult r, const unsigned long long* key, std::size_t bytes, memory_kind kind) noexcept;
void account_alloc_pitch(CUresult r, const CUdeviceptr* dptr, const std::size_t* pitch, std::size_t height) noexcept;

/// The record a free takes out of the table before the driver call, so a concurrent allocation
/// reusing the address cannot be confused with it.
struct free_token {
  std::uint64_t key = 0;
  std::optional<alloc_record> record;
};
constexpr std::optional<CUresult> answer(const free_token&) noexcept { return std::nullopt; }
[[nodiscard]] free_token gate_free(std::uint64_t key, memory_kind kind) noexcept;
void account_free(const free_token& token, CUresult r) noexcept;
void account_map(CUresult r) noexcept;

/// What the memory gate decided for an allocation.
struct alloc_token {
  std::optional<CUresult> result;  ///< set when the gate answered the call itself
};
constexpr std::optional<CUresult> answer(const alloc_token& t) noexcept { return t.result; }

/// Asks the node's memory policy (when it runs one) before an allocation of `bytes` on `path`.
/// A denial fails the call with out-of-memory and says why; a cuMemAlloc the policy wants in
/// managed memory is served by cuMemAllocManaged here. No node or no answer: as the job asked.
[[nodiscard]] alloc_token gate_alloc(unsigned long long* out, std::size_t bytes, abi::allocation_path path) noexcept;
/// The gate of the job's own cuMemAllocManaged: the policy may deny it, and the card's free
/// memory must hold it (see `exceeds_free_memory`).
[[nodiscard]] alloc_token gate_managed(CUdeviceptr* out, std::size_t bytes) noexcept;
void account_managed(CUresult r, const CUdeviceptr* dptr, std::size_t bytes) noexcept;

/// The job's view of memory: its budget when the node runs a memory policy, never more than the
/// driver reports.
void account_mem_info(CUresult r, std::size_t* free_bytes, std::size_t* total_bytes) noexcept;
void account_total_mem(CUresult r, std::size_t* total_bytes) noexcept;

}  // namespace tgs::cuda::intercept
