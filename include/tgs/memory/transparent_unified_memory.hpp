// SPDX-License-Identifier: Apache-2.0
/// @file
/// `transparent_unified_memory`: the TGS memory policy, production memory pinned on the GPU and
/// opportunistic memory in unified memory that is evicted when the GPU is oversubscribed.
#pragma once

#include <array>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/detail/byte_math.hpp"

namespace tgs {

/// TGS transparent unified memory (NSDI'23 §5).
///
/// - Production allocations are granted in device memory and pinned: they are never evicted.
///   (The released code turns the production job's `cuMemAlloc` into `cuMemAllocManaged` with
///   `CU_MEM_ADVISE_SET_PREFERRED_LOCATION` = the device, `hijack/src/high_priority_hijack_call.c`;
///   a driver may do the same, what matters is that the pages stay on the GPU.)
/// - Opportunistic allocations are granted in managed memory (released code:
///   `cuMemAllocManaged` + `CU_MEM_ADVISE_SET_ACCESSED_BY`, `low_priority_hijack_call.c`), so they
///   never fail for lack of GPU memory and may be evicted to host memory. An opportunistic
///   allocation the driver cannot serve from managed memory (`allocation_request::movable` false:
///   pools, `cuMemCreate`) is granted in device memory only while the opportunistic job's resident
///   bytes plus it stay within its resident limit, and denied with out-of-memory otherwise.
/// - The opportunistic job may keep `capacity - reserve - production allocated` bytes resident
///   (saturating at zero). When the GPU is oversubscribed the driver evicts it down to that; when
///   the production job frees memory the limit rises, and when the production job leaves the cap
///   is lifted (`bytes::max()`) and the driver prefetches the opportunistic job back, as the
///   released code does when the production job disconnects (`memory_transfer_routine`).
/// - A production allocation that does not fit beside the opportunistic job is still granted:
///   the resident limit in the same decision already counts it, so the driver evicts the
///   opportunistic job first. Only when the production job alone would exceed
///   `capacity - reserve` is it denied with out-of-memory, the error it would get on a GPU of its
///   own; spilling production pages to host would break TGS's promise of (almost) standalone
///   throughput without the job knowing why.
///
/// The policy holds no state besides its settings: each decision depends on one observation only.
///
/// ```cpp
/// using namespace tgs::literals;
/// tgs::transparent_unified_memory tum{{}};
/// tgs::memory_decision d = tum.step({.capacity = 40_GiB,
///                                    .production = tgs::job_memory{30_GiB, 30_GiB},
///                                    .opportunistic = tgs::job_memory{20_GiB, 20_GiB}});
/// // d.opportunistic_resident_limit == 9_GiB: evict 11 GiB of the opportunistic job.
/// ```
class transparent_unified_memory {
 public:
  struct config {
    /// GPU memory kept free of both jobs' allocations, for CUDA contexts, the driver's own
    /// structures and allocator slack. The released code hides 1 GiB from both jobs
    /// (`g_spare_memory = 1ull << 30`, subtracted in its `cuMemGetInfo` and `cuDeviceTotalMem`
    /// hooks). Any value is valid; one at or above the budget leaves nothing to allocate.
    bytes reserve = bytes{1ULL << 30};

    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "tgs";
  static constexpr memory_paging paging = memory_paging::policy_eviction;
  static constexpr std::array setting_table{
      setting<config>{"reserve-mib",
                      "part of the budget kept free of both jobs (contexts, driver; released code "
                      "1024)",
                      &config::reserve},
  };

  /// Every `reserve` is valid, so this constructor never throws.
  constexpr explicit transparent_unified_memory(config cfg) noexcept : config_(cfg) {}

  [[nodiscard]] constexpr memory_decision step(const memory_observation& obs) const noexcept {
    const bytes budget = obs.capacity - config_.reserve;
    bytes production = detail::allocated(obs.production);
    bool production_here = obs.production.has_value();

    memory_decision decision;
    if (obs.request) {
      const allocation_request& request = *obs.request;
      if (request.requester == job_class::opportunistic) {
        // Memory that cannot be managed cannot be evicted either: it may only take room the
        // opportunistic job may keep resident anyway, or it would squeeze the production job.
        const bytes resident = obs.opportunistic ? obs.opportunistic->resident : bytes{};
        const bytes limit = production_here ? budget - production : budget;
        decision.verdict = request.movable                      ? allocation_verdict::grant_managed
                           : detail::fits(resident, request.size, limit) ? allocation_verdict::grant_device
                                                                          : allocation_verdict::deny_out_of_memory;
      } else if (detail::fits(production, request.size, budget)) {
        decision.verdict = allocation_verdict::grant_device;
        production += request.size;
        // A production job's first allocation can arrive before the driver reports the job.
        production_here = true;
      } else {
        decision.verdict = allocation_verdict::deny_out_of_memory;
      }
    }
    decision.opportunistic_resident_limit = production_here ? budget - production : bytes::max();
    decision.production_pinned = true;
    decision.revisit_at = never;
    return decision;
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  config config_;
};

static_assert(MemoryPolicy<transparent_unified_memory>);
static_assert(SettingsTable<transparent_unified_memory>);

}  // namespace tgs
