// SPDX-License-Identifier: Apache-2.0
/// @file
/// `separate_contexts`: each job in its own CUDA context, as under TGS, so a failure ends only
/// the job that failed and its share and memory return to the survivor.
#pragma once

#include <array>
#include <chrono>
#include <string_view>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"
#include "tgs/fault/concepts.hpp"
#include "tgs/fault/detail/validate.hpp"

namespace tgs {

/// Fault isolation by separate CUDA contexts, as under TGS (NSDI'23): each container keeps its
/// own process and CUDA context, and the GPU time-slices between the contexts.
///
/// Whatever the failure (crash, kill, out-of-memory exit, device-side exception), it ends only
/// the failed job: a device-side exception makes the faulting context unusable, not the others,
/// and the driver tears down a dead process's context and frees its memory. The survivor gets
/// the failed job's share back (its controller is reset) and its memory accounting is released,
/// so evicted opportunistic memory may be restored. The released code does this when the
/// production process dies: its Unix socket closes, the opportunistic side's `limit_manager`
/// reads end-of-file, lifts the throttle and prefetches its memory back to the GPU
/// (`hijack/src/low_priority_hijack_call.c`). Here the driver has `reclaim_within` to do it.
///
/// Out of scope: hardware faults that need a GPU reset (for example an uncorrectable ECC error
/// or the GPU falling off the bus) end every context on the GPU under any policy; they are not a
/// `fault_kind`.
///
/// ```cpp
/// tgs::separate_contexts isolation{{}};
/// tgs::fault_decision d = isolation.step({.failed = tgs::job_class::opportunistic,
///                                         .kind = tgs::fault_kind::killed,
///                                         .co_runner_present = true});
/// // d.co_runner_terminated == false, d.reclaim_share == true, d.reclaim_within == 1s
/// ```
class separate_contexts {
 public:
  struct config {
    /// Longest time the driver may take to hand the failed job's share and memory to the
    /// survivor. The TGS target is one second (`fault_decision::reclaim_within`); the released
    /// code reacts as soon as the socket closes, well within it. Must be positive.
    duration reclaim_within = std::chrono::seconds{1};

    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "separate-contexts";
  static constexpr std::array setting_table{
      setting<config>{"reclaim-within-ms",
                      "longest time the driver may take to hand a failed job's share and memory "
                      "to the survivor",
                      &config::reclaim_within},
  };

  /// Throws `config_error` naming `reclaim_within` when it is not positive.
  explicit separate_contexts(config cfg) : config_(cfg) {
    detail::require_positive_reclaim_within("separate_contexts", config_.reclaim_within);
  }

  [[nodiscard]] constexpr fault_decision step(const fault_observation& /*obs*/) const noexcept {
    // Every fault kind and either class get the same answer: that is what isolation means.
    return fault_decision{.co_runner_terminated = false,
                          .reclaim_share = true,
                          .reclaim_memory = true,
                          .reclaim_within = config_.reclaim_within};
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  config config_;
};

static_assert(FaultPolicy<separate_contexts>);

}  // namespace tgs
