// SPDX-License-Identifier: Apache-2.0
// The evictor: carries the residency plan out, range by range, on its own stream per context.
#include "evictor.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "resolve.hpp"

namespace tgs::cuda::intercept {

const unified_memory_api& um_api() noexcept {
  static const unified_memory_api api = [] {
    unified_memory_api a;
    bool ok = lookup(a.ctx_get_current, "cuCtxGetCurrent");
    ok &= lookup(a.ctx_set_current, "cuCtxSetCurrent");
    ok &= lookup(a.ctx_get_device, "cuCtxGetDevice");
    ok &= lookup(a.stream_create, "cuStreamCreate");
    ok &= lookup(a.stream_synchronize, "cuStreamSynchronize");
    ok &= lookup(a.mem_advise, "cuMemAdvise_v2");
    ok &= lookup(a.mem_prefetch, "cuMemPrefetchAsync_v2");
    ok &= lookup(a.mem_get_info, "cuMemGetInfo_v2");
    a.complete = ok;
    return a;
  }();
  return api;
}

namespace {

std::atomic<bool> evictor_started{false};

/// The largest range one prefetch moves: about 70 ms at the 3.7 GB/s an H200 evicted at, so the
/// node sees progress many times within its --eviction-stall-ms. A multiple of the 2 MiB
/// residency granule, so no chunk splits a large page.
constexpr std::uint64_t move_chunk_bytes = 256ULL << 20;

/// The stream the evictor moves memory on in `ctx`: its own non-blocking stream, so it never
/// waits for (or holds up) the job's work on the legacy default stream. Under `evict_mutex`.
CUstream evictor_stream(CUcontext ctx) noexcept {
  static std::vector<std::pair<CUcontext, CUstream>> streams;
  for (const auto& [c, s] : streams) {
    if (c == ctx) return s;
  }
  CUstream s = nullptr;
  constexpr unsigned non_blocking = 0x1;  // CU_STREAM_NON_BLOCKING
  if (um_api().stream_create(&s, non_blocking) != CUDA_SUCCESS) return nullptr;
  try {
    streams.emplace_back(ctx, s);
  } catch (...) {
  }
  return s;
}

/// Moves bytes [from, to) of a managed allocation to host (`to_host`) or back to its GPU, with the
/// advice TGS uses: preferred location host (the GPU still maps it: accessed-by) or the GPU. Runs
/// under `evict_mutex` and makes the allocation's context current on the calling thread.
bool move_range(CUdeviceptr ptr, const alloc_record& rec, std::uint64_t from, std::uint64_t to, bool to_host) noexcept {
  const unified_memory_api& api = um_api();
  if (api.ctx_set_current(rec.context) != CUDA_SUCCESS) return false;
  CUstream stream = evictor_stream(rec.context);
  if (stream == nullptr) return false;
  const CUmemLocation where = to_host ? host_location() : device_location(rec.device);
  if (api.mem_advise(ptr + from, to - from, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, where) != CUDA_SUCCESS) return false;
  if (api.mem_prefetch(ptr + from, to - from, where, 0, stream) != CUDA_SUCCESS) return false;
  return api.stream_synchronize(stream) == CUDA_SUCCESS;
}

/// One pass of the evictor: moves every managed allocation of the job to what the residency plan
/// (`tgs::plan_residency`: smallest allocations on the GPU first, then the larger ones in order or
/// in equal prefixes, as the node's `residency_split` says) keeps on the GPU under the job's
/// limit. Evictions first, to make room; then restores.
void reconcile(abi::job_segment& seg) noexcept {
  std::lock_guard evict_lock(evict_mutex);
  std::vector<managed_entry> entries = plan_segment(seg, nullptr);
  move_toward_plan(seg, entries, true);
  move_toward_plan(seg, entries, false);
}

/// The evictor thread: wakes when the node changes this job's resident limit (futex on the
/// segment's generation word) or every 200 ms, and reconciles.
void evictor() noexcept {
  for (;;) {
    abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
    if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
      continue;
    }
    const std::uint32_t generation = seg->memory_generation.load(std::memory_order_acquire);
    reconcile(*seg);
    timespec timeout{0, 200'000'000};
    // Not FUTEX_PRIVATE: the node, another process, does the wake.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seg->memory_generation), FUTEX_WAIT, generation, &timeout,
              nullptr, 0);
  }
}

}  // namespace

bool move_toward_plan(abi::job_segment& seg, std::span<managed_entry> entries, bool to_host) noexcept {
  auto& moves = to_host ? seg.evictions : seg.restores;
  auto& moved_total = to_host ? seg.evicted_bytes_total : seg.restored_bytes_total;
  auto& ns_total = to_host ? seg.evict_ns_total : seg.restore_ns_total;
  bool all_moved = true;
  for (managed_entry& e : entries) {
    if (to_host ? e.target >= e.rec.resident : e.target <= e.rec.resident) continue;
    const std::uint64_t start = abi::monotonic_ns();
    const std::uint64_t low = std::min(e.target, e.rec.resident);
    const std::uint64_t high = std::max(e.target, e.rec.resident);
    // Chunk by chunk, each counted when it has moved: the node sees the job's resident bytes fall
    // while it evicts (and stops waiting for a job whose bytes do not), and a failure leaves
    // the count exact. The GPU part stays a prefix: evictions take chunks off its end, restores
    // add them to it.
    std::uint64_t moved = 0;
    while (moved < high - low) {
      const std::uint64_t chunk = std::min(move_chunk_bytes, high - low - moved);
      const std::uint64_t from = to_host ? high - moved - chunk : low + moved;
      if (!move_range(e.ptr, e.rec, from, from + chunk, to_host)) {
        log(log_level::warn, to_host ? "could not evict %llu bytes of unified memory to host"
                                     : "could not restore %llu bytes of unified memory to the GPU",
            static_cast<unsigned long long>(high - low - moved));
        all_moved = false;
        break;
      }
      moved += chunk;
      e.rec.resident = to_host ? high - moved : low + moved;
      mark_resident(e.ptr, e.rec.resident);
      if (to_host) {
        seg.managed_resident_bytes.fetch_sub(chunk, std::memory_order_acq_rel);
      } else {
        seg.managed_resident_bytes.fetch_add(chunk, std::memory_order_acq_rel);
      }
      moved_total.fetch_add(chunk, std::memory_order_relaxed);
    }
    if (moved == 0) continue;
    moves.fetch_add(1, std::memory_order_relaxed);
    ns_total.fetch_add(abi::monotonic_ns() - start, std::memory_order_relaxed);
  }
  return all_moved;
}

void start_evictor() noexcept {
  if (evictor_started.exchange(true)) return;
  if (!um_api().complete) {
    log(log_level::warn, "the driver lacks the unified-memory calls (CUDA 12.2+): managed memory is not evicted");
    return;
  }
  try {
    std::thread(evictor).detach();
  } catch (...) {
    log(log_level::warn, "could not start the unified-memory evictor thread");
  }
}

// Without this the job's first kernel over a new allocation (PyTorch initialises every parameter
// on the device) populates it by GPU page faults. Faults that populate host memory are slow enough
// to hold the GPU for seconds (measured on an H100: a DLRM-like job initialising 8 GiB of
// host-placed tables held its co-runner to 30-55% of its rate for 6 s), and faults that populate
// the GPU prefix still stalled the co-runner when the rate controller first let the job launch
// (its wait rose to 10-17% of its time for the 2 s that ended the controller's slow start). A
// prefetch populates both in bulk, on the allocating thread, before anything runs over them.
void populate(CUdeviceptr ptr, const alloc_record& rec) noexcept {
  const unified_memory_api& api = um_api();
  CUstream stream = evictor_stream(rec.context);
  if (stream == nullptr) return;
  bool queued = false;
  if (rec.resident > 0) {
    queued |= api.mem_prefetch(ptr, rec.resident, device_location(rec.device), 0, stream) == CUDA_SUCCESS;
  }
  if (rec.resident < rec.bytes) {
    const std::uint64_t host_part = rec.bytes - rec.resident;
    queued |= api.mem_prefetch(ptr + rec.resident, host_part, host_location(), 0, stream) == CUDA_SUCCESS;
  }
  if (queued) api.stream_synchronize(stream);
}

}  // namespace tgs::cuda::intercept
