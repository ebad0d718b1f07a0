// SPDX-License-Identifier: Apache-2.0
// The allocation table and the allocation paths: counting, the memory policy's verdicts, managed
// placement, the job's view of its budget, and the residency plan over the table.
#include "allocations.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <span>

#include "evictor.hpp"
#include "resolve.hpp"
#include "tgs/memory/residency.hpp"

namespace tgs::cuda::intercept {

std::mutex alloc_mutex;
std::mutex evict_mutex;
std::unordered_map<std::uint64_t, alloc_record>* live_allocs = nullptr;

namespace {

std::atomic<std::uint64_t> next_seq{1};

/// The unit of partial residency: the GPU's large page, so a split never shares a page.
constexpr tgs::bytes residency_granule{2ULL << 20};

std::atomic<std::uint64_t>& bytes_counter(abi::job_segment& seg, memory_kind kind) noexcept {
  return kind == memory_kind::managed ? seg.managed_bytes : seg.device_bytes;
}

/// Enters `rec` for `key` in the table and counts it in the segment published now, read under
/// the table's lock: a registration that publishes a new segment rehomes the table under the same
/// lock, so every record is counted exactly once, in the segment it names. Returns that segment.
abi::job_segment* record_and_count(std::uint64_t key, alloc_record rec) noexcept {
  abi::job_segment* seg = nullptr;
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs == nullptr) live_allocs = new std::unordered_map<std::uint64_t, alloc_record>();
    seg = current_link.load(std::memory_order_acquire)->segment;
    rec.counted_in = seg;
    (*live_allocs)[key] = rec;
    if (seg != nullptr) {
      bytes_counter(*seg, rec.kind).fetch_add(rec.bytes, std::memory_order_relaxed);
      if (rec.kind == memory_kind::managed) seg->managed_resident_bytes.fetch_add(rec.resident, std::memory_order_acq_rel);
      seg->alloc_calls.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {
    return nullptr;  // out of host memory: the allocation stands, it just goes uncounted
  }
  return seg;
}

/// Why the GPU's free memory cannot take a managed allocation of `bytes`, if it cannot:
/// oversubscribing a shared card's unified memory can stall every process on it, so it must be
/// the operator's deliberate choice (TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1), not an accident.
bool exceeds_free_memory(std::size_t bytes, const char* what) noexcept {
  if (const char* allow = std::getenv("TGS_ALLOW_MANAGED_OVERSUBSCRIPTION"); allow != nullptr && allow[0] == '1') {
    return false;
  }
  const auto get_info = um_api().mem_get_info;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (get_info == nullptr || get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) return false;
  if (bytes <= free_bytes) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    log(log_level::warn,
        "refused %s of %zu bytes in unified memory: only %zu bytes of GPU memory are free "
        "(set TGS_ALLOW_MANAGED_OVERSUBSCRIPTION=1 to allow oversubscription)",
        what, bytes, free_bytes);
  }
  return true;
}

/// Records a successful managed allocation and places it as the residency plan says, with it
/// counted: its planned prefix on the GPU, the rest straight on host (preferred location host
/// before the first touch, so those pages are never populated on the GPU), both populated at once
/// (`populate`). The GPU maps all of it (accessed-by). Where the plan keeps part of
/// the new allocation by displacing part of older ones (a small allocation, or any table under
/// the even split), that part is evicted here, before the call returns, so the job is never over
/// its limit. Left to the evictor, it was: on an H100 under the even split, eight 2 GiB tables
/// allocated one after another left the job up to 1.2 GB over its limit for seconds, each table
/// displacing a slice of every earlier one.
void place_managed(CUresult r, const CUdeviceptr* dptr, std::size_t bytes, bool converted) noexcept {
  if (r != CUDA_SUCCESS || dptr == nullptr) return;
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  const unified_memory_api& api = um_api();
  alloc_record rec{bytes, memory_kind::managed, seg, next_seq.fetch_add(1, std::memory_order_relaxed), nullptr, 0,
                   bytes};
  const bool movable = api.complete && api.ctx_get_current(&rec.context) == CUDA_SUCCESS &&
                       rec.context != nullptr && api.ctx_get_device(&rec.device) == CUDA_SUCCESS;
  // Without a node memory policy nothing is evicted or prefetched: the memory stays where the
  // driver puts it, as for a job without tgs.
  const bool policy_active = seg != nullptr && seg->memory_policy_active.load(std::memory_order_acquire) != 0;
  std::lock_guard evict_lock(evict_mutex);
  bool displaced_left = false;  // a displaced part the evictor still has to move
  if (seg != nullptr && movable) {
    const managed_entry self{*dptr, rec, 0};
    std::vector<managed_entry> plan = plan_segment(*seg, &self);
    if (!plan.empty()) {
      rec.resident = plan.back().target;
      if (policy_active) displaced_left = !move_toward_plan(*seg, std::span(plan).first(plan.size() - 1), true);
    }
    api.mem_advise(*dptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device_location(rec.device));
    if (rec.resident < bytes) {
      api.mem_advise(*dptr + rec.resident, bytes - rec.resident, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                     host_location());
      seg->host_placed_bytes.fetch_add(bytes - rec.resident, std::memory_order_relaxed);
    }
    if (policy_active) populate(*dptr, rec);
  }
  if (record_and_count(*dptr, rec) != seg || seg == nullptr) return;  // a registration came between
  if (converted) seg->converted_allocs.fetch_add(1, std::memory_order_relaxed);
  if (movable && policy_active) {
    start_evictor();
    // The evictor sleeps on the generation word; a wake without a change makes it reconcile.
    if (displaced_left) {
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seg->memory_generation), FUTEX_WAKE, 1, nullptr, nullptr,
                0);
    }
  }
}

}  // namespace

std::vector<managed_entry> plan_segment(abi::job_segment& seg, const managed_entry* extra) noexcept {
  std::vector<managed_entry> entries;
  try {
    std::lock_guard lock(alloc_mutex);
    if (live_allocs != nullptr) {
      for (const auto& [key, rec] : *live_allocs) {
        if (rec.kind == memory_kind::managed && rec.counted_in == &seg) entries.push_back({key, rec, 0});
      }
    }
    if (extra != nullptr) entries.push_back(*extra);
    std::vector<tgs::managed_allocation> allocs;
    allocs.reserve(entries.size());
    for (const managed_entry& e : entries) allocs.push_back({tgs::bytes{e.rec.bytes}, e.rec.seq});
    const auto split = seg.residency_split.load(std::memory_order_acquire) ==
                               static_cast<std::uint32_t>(tgs::residency_split::even)
                           ? tgs::residency_split::even
                           : tgs::residency_split::in_order;
    const std::vector<tgs::bytes> plan = tgs::plan_residency(
        allocs, tgs::bytes{seg.resident_limit.load(std::memory_order_acquire)}, residency_granule, split);
    for (std::size_t i = 0; i < entries.size(); ++i) entries[i].target = plan[i].count();
  } catch (...) {
    entries.clear();
  }
  return entries;
}

void mark_resident(CUdeviceptr ptr, std::uint64_t resident) noexcept {
  std::lock_guard lock(alloc_mutex);
  if (auto it = live_allocs->find(ptr); it != live_allocs->end()) it->second.resident = resident;
}

void account_alloc(CUresult r, const unsigned long long* key, std::size_t bytes, memory_kind kind) noexcept {
  if (r != CUDA_SUCCESS || key == nullptr) return;
  (void)record_and_count(*key, alloc_record{bytes, kind, nullptr});
}

namespace {
/// The table's sums; with `rehome`, every record is counted in that segment from now on. Under
/// `alloc_mutex`.
abi::job_holdings sum_table(abi::job_segment* rehome) noexcept {
  abi::job_holdings h;
  if (live_allocs == nullptr) return h;
  for (auto& [key, rec] : *live_allocs) {
    if (rehome != nullptr) rec.counted_in = rehome;
    if (rec.kind == memory_kind::managed) {
      h.managed_bytes += rec.bytes;
      h.managed_resident_bytes += rec.resident;
    } else {
      h.device_bytes += rec.bytes;
    }
  }
  return h;
}
}  // namespace

abi::job_holdings current_holdings() noexcept {
  std::lock_guard lock(alloc_mutex);
  return sum_table(nullptr);
}

void rehome_allocations(abi::job_segment& seg) noexcept {
  // The evictor moves managed memory under evict_mutex and counts the moves in the segment it
  // planned for: no move may straddle the change of segment.
  std::lock_guard evict_lock(evict_mutex);
  std::lock_guard lock(alloc_mutex);
  const abi::job_holdings h = sum_table(&seg);
  seg.device_bytes.store(h.device_bytes, std::memory_order_relaxed);
  seg.managed_bytes.store(h.managed_bytes, std::memory_order_relaxed);
  seg.managed_resident_bytes.store(h.managed_resident_bytes, std::memory_order_release);
}

void account_alloc_pitch(CUresult r, const CUdeviceptr* dptr, const std::size_t* pitch, std::size_t height) noexcept {
  if (pitch != nullptr) account_alloc(r, dptr, *pitch * height, memory_kind::device);
}

free_token gate_free(std::uint64_t key, memory_kind) noexcept {
  free_token token{key, std::nullopt};
  try {
    std::unique_lock lock(alloc_mutex);
    if (live_allocs == nullptr) return token;
    auto it = live_allocs->find(key);
    if (it == live_allocs->end()) return token;
    std::unique_lock<std::mutex> evict_lock;
    if (it->second.kind == memory_kind::managed) {
      // Not while the evictor moves managed memory: it must never prefetch a freed pointer.
      // Device frees do not wait for an eviction in progress.
      lock.unlock();
      evict_lock = std::unique_lock(evict_mutex);
      lock.lock();
      it = live_allocs->find(key);
      if (it == live_allocs->end()) return token;
    }
    token.record = it->second;
    live_allocs->erase(it);
  } catch (...) {
  }
  return token;
}

void account_free(const free_token& token, CUresult r) noexcept {
  if (!token.record) return;
  if (r != CUDA_SUCCESS) {  // the driver kept the allocation: so do we
    try {
      std::lock_guard lock(alloc_mutex);
      if (live_allocs != nullptr) live_allocs->emplace(token.key, *token.record);
    } catch (...) {
    }
    return;
  }
  abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg != nullptr && seg == token.record->counted_in) {
    bytes_counter(*seg, token.record->kind).fetch_sub(token.record->bytes, std::memory_order_relaxed);
    if (token.record->kind == memory_kind::managed) {
      seg->managed_resident_bytes.fetch_sub(token.record->resident, std::memory_order_acq_rel);
    }
    seg->free_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void account_map(CUresult r) noexcept {
  if (r != CUDA_SUCCESS) return;
  if (abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment) {
    seg->map_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

alloc_token gate_alloc(unsigned long long* out, std::size_t bytes, abi::allocation_path path) noexcept {
  const link_state* link = current_link.load(std::memory_order_acquire);
  if (link->segment == nullptr) link = ensure_link();
  abi::job_segment* seg = link->segment;
  if (seg == nullptr || out == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return {};
  const std::optional<std::uint8_t> verdict = ask_memory(*link, bytes, path);
  if (!verdict) return {};
  switch (*verdict) {
    case 2: {  // deny_out_of_memory
      seg->denied_allocs.fetch_add(1, std::memory_order_relaxed);
      log(log_level::warn,
          "out of memory: tgs-node's memory policy refused an allocation of %zu bytes (job %u, %s; it holds "
          "%llu bytes of its budget)",
          bytes, seg->job_id, link->opportunistic ? "opportunistic" : "production",
          static_cast<unsigned long long>(seg->device_bytes.load() + seg->managed_bytes.load()));
      return {CUDA_ERROR_OUT_OF_MEMORY};
    }
    case 1: {  // grant_managed
      if (path != abi::allocation_path::convertible) return {};
      if (exceeds_free_memory(bytes, "cuMemAlloc")) {
        seg->denied_allocs.fetch_add(1, std::memory_order_relaxed);
        return {CUDA_ERROR_OUT_OF_MEMORY};
      }
      const CUresult r = forward<hook_id::cuMemAllocManaged>(static_cast<CUdeviceptr*>(out), bytes,
                                                             static_cast<unsigned>(CU_MEM_ATTACH_GLOBAL));
      place_managed(r, out, bytes, true);
      return {r};
    }
    default: return {};  // grant_device
  }
}

alloc_token gate_managed(CUdeviceptr* out, std::size_t bytes) noexcept {
  if (exceeds_free_memory(bytes, "cuMemAllocManaged")) return {CUDA_ERROR_OUT_OF_MEMORY};
  return gate_alloc(out, bytes, abi::allocation_path::managed);
}

void account_managed(CUresult r, const CUdeviceptr* dptr, std::size_t bytes) noexcept {
  place_managed(r, dptr, bytes, false);
}

void account_mem_info(CUresult r, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  if (r != CUDA_SUCCESS || free_bytes == nullptr || total_bytes == nullptr) return;
  const abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return;
  const std::uint64_t total = seg->view_total_bytes.load(std::memory_order_relaxed);
  if (total == 0) return;
  const std::uint64_t held = seg->view_others_bytes.load(std::memory_order_relaxed) +
                             seg->device_bytes.load(std::memory_order_relaxed) +
                             seg->managed_resident_bytes.load(std::memory_order_relaxed);
  *total_bytes = std::min<std::uint64_t>(*total_bytes, total);
  *free_bytes = std::min<std::uint64_t>({*free_bytes, held >= total ? 0 : total - held, *total_bytes});
}

void account_total_mem(CUresult r, std::size_t* total_bytes) noexcept {
  if (r != CUDA_SUCCESS || total_bytes == nullptr) return;
  const abi::job_segment* seg = current_link.load(std::memory_order_acquire)->segment;
  if (seg == nullptr || seg->memory_policy_active.load(std::memory_order_acquire) == 0) return;
  if (const std::uint64_t total = seg->view_total_bytes.load(std::memory_order_relaxed); total != 0) {
    *total_bytes = std::min<std::uint64_t>(*total_bytes, total);
  }
}

}  // namespace tgs::cuda::intercept
