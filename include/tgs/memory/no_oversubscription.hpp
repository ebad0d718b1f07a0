// SPDX-License-Identifier: Apache-2.0
/// @file
/// `no_oversubscription`: device memory only, first come first served, as under MPS; a
/// co-location whose memory does not fit is refused.
#pragma once

#include <array>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/detail/byte_math.hpp"

namespace tgs {

/// Memory as MPS clients share it: plain device memory, no eviction, no per-class limit.
///
/// An allocation is granted in device memory while both jobs together stay within the capacity
/// and denied with out-of-memory otherwise, whichever job asks. So an opportunistic job that
/// does not fit beside the production job fails on the allocation that crosses the line (the
/// co-location is refused), and a production job that grows into memory the opportunistic job
/// already holds fails too: nothing gives it priority. This is what MPS clients get from plain
/// `cudaMalloc`; `plain_unified_memory` models the baselines run with unified memory instead.
///
/// ```cpp
/// using namespace tgs::literals;
/// tgs::no_oversubscription mps_memory{{}};
/// tgs::memory_decision d = mps_memory.step({
///     .capacity = 40_GiB,
///     .production = tgs::job_memory{30_GiB, 30_GiB},
///     .request = tgs::allocation_request{tgs::job_class::opportunistic, 12_GiB}});
/// // *d.verdict == tgs::allocation_verdict::deny_out_of_memory
/// ```
class no_oversubscription {
 public:
  /// No settings: MPS's per-client pinned-memory limit is modelled by `hard_limit`.
  struct config {
    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "no-oversubscription";
  static constexpr memory_paging paging = memory_paging::none;
  static constexpr auto setting_table = no_settings<config>;

  constexpr explicit no_oversubscription(config cfg) noexcept : config_(cfg) {}

  [[nodiscard]] constexpr memory_decision step(const memory_observation& obs) const noexcept {
    memory_decision decision;
    if (obs.request) {
      const bytes both = detail::saturating_add(detail::allocated(obs.production),
                                                detail::allocated(obs.opportunistic));
      decision.verdict = detail::fits(both, obs.request->size, obs.capacity)
                             ? allocation_verdict::grant_device
                             : allocation_verdict::deny_out_of_memory;
    }
    decision.opportunistic_resident_limit = bytes::max();
    decision.production_pinned = true;
    decision.revisit_at = never;
    return decision;
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  config config_;
};

static_assert(MemoryPolicy<no_oversubscription>);
static_assert(SettingsTable<no_oversubscription>);

}  // namespace tgs
