// SPDX-License-Identifier: Apache-2.0
/// @file
/// The job's evictor: it moves managed allocations between the GPU and the host so the job's
/// resident bytes follow its residency plan under the resident limit the node writes
/// (`job_segment::resident_limit`). Evictions first (preferred location host, prefetch to host on
/// its own non-blocking stream, then a sync), then restores (preferred location the GPU,
/// prefetch), smallest first. A thread wakes on the segment's generation word (futex) or every
/// 200 ms and reconciles.
#pragma once

#include <cstdint>
#include <span>

#include "allocations.hpp"
#include "cuda_subset.hpp"

namespace tgs::cuda::intercept {

/// The unified-memory entry points (CUDA 12.2+ `_v2` forms, which take a `CUmemLocation`).
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
[[nodiscard]] const unified_memory_api& um_api() noexcept;

constexpr CUmemLocation host_location() noexcept { return {CU_MEM_LOCATION_TYPE_HOST, 0}; }
constexpr CUmemLocation device_location(CUdevice d) noexcept { return {CU_MEM_LOCATION_TYPE_DEVICE, d}; }

/// Moves `entries` toward their plan (`target`) in one direction, and counts it: to host what
/// they hold on the GPU beyond it (`to_host`), or back to the GPU what they hold below it.
/// Needs `evict_mutex`. False when a move failed (that part stays where it was).
bool move_toward_plan(abi::job_segment& seg, std::span<managed_entry> entries, bool to_host) noexcept;

/// Populates a new managed allocation where the plan puts it, before the job first touches it:
/// the host part on the host, the planned prefix on the GPU. In its current context, under
/// `evict_mutex`.
void populate(CUdeviceptr ptr, const alloc_record& rec) noexcept;

/// Starts the evictor thread once (says once why not, when the driver lacks the calls).
void start_evictor() noexcept;

}  // namespace tgs::cuda::intercept
