// SPDX-License-Identifier: Apache-2.0
/// @file
/// `plain_unified_memory`: both jobs in unified memory with no priority, so the driver's page
/// replacement alone decides what stays on the GPU.
#pragma once

#include <array>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/memory/concepts.hpp"

namespace tgs {

/// Unified memory for everyone: what the TGS paper's co-execution and MPS baselines ran with
/// when memory was oversubscribed (NSDI'23 §7: a PyTorch image whose allocator uses unified
/// memory, with no priority between the jobs).
///
/// Every allocation the driver can serve from managed memory is granted there (the rest in
/// device memory), production memory is not pinned and the
/// opportunistic job has no resident cap: the CUDA driver's fault-driven migration moves pages
/// of both jobs back and forth, so under oversubscription both thrash and the production job
/// loses the throughput TGS protects. Nothing is denied: managed memory can exceed the GPU's,
/// and host memory is not in the observation (when it runs out, `cuMemAllocManaged` itself
/// fails in the job).
///
/// ```cpp
/// using namespace tgs::literals;
/// tgs::plain_unified_memory um{{}};
/// tgs::memory_decision d = um.step({
///     .capacity = 40_GiB,
///     .production = tgs::job_memory{30_GiB, 25_GiB},
///     .request = tgs::allocation_request{tgs::job_class::production, 20_GiB}});
/// // *d.verdict == grant_managed, d.production_pinned == false
/// ```
class plain_unified_memory {
 public:
  /// No settings: the driver's page replacement has none a policy could set.
  struct config {
    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "unified-memory";
  static constexpr memory_paging paging = memory_paging::driver_demand;
  static constexpr auto setting_table = no_settings<config>;

  constexpr explicit plain_unified_memory(config cfg) noexcept : config_(cfg) {}

  [[nodiscard]] constexpr memory_decision step(const memory_observation& obs) const noexcept {
    memory_decision decision;
    // What cannot be managed stays plain device memory: the baseline has no budget to keep.
    if (obs.request) {
      decision.verdict = obs.request->movable ? allocation_verdict::grant_managed : allocation_verdict::grant_device;
    }
    decision.opportunistic_resident_limit = bytes::max();
    decision.production_pinned = false;
    decision.revisit_at = never;
    return decision;
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  config config_;
};

static_assert(MemoryPolicy<plain_unified_memory>);
static_assert(SettingsTable<plain_unified_memory>);

}  // namespace tgs
