// SPDX-License-Identifier: Apache-2.0
/// @file
/// The fault-isolation seam: what happens to the jobs on a GPU when one of them fails, and the
/// `FaultPolicy` concept.
#pragma once

#include <concepts>
#include <string_view>

#include "tgs/core/units.hpp"

namespace tgs {

/// How a job ended abnormally.
enum class fault_kind : std::uint8_t {
  crashed,        ///< the process died on a signal (segfault, abort)
  killed,         ///< SIGKILL or a container stop
  out_of_memory,  ///< an allocation failed and the job exited
  gpu_exception,  ///< a kernel raised a device-side error (illegal address, ...)
};

[[nodiscard]] constexpr std::string_view to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::crashed: return "crashed";
    case fault_kind::killed: return "killed";
    case fault_kind::out_of_memory: return "out_of_memory";
    case fault_kind::gpu_exception: return "gpu_exception";
  }
  return "unknown";
}

/// A job failure on one GPU.
struct fault_observation {
  instant now = epoch;
  /// The class of the job that failed.
  job_class failed = job_class::opportunistic;
  fault_kind kind = fault_kind::crashed;
  /// Whether a job of the other class is running on the same GPU.
  bool co_runner_present = false;
};

/// What a fault policy decides.
struct fault_decision {
  /// Whether the co-running job is ended too (it shares the failed job's fault domain).
  bool co_runner_terminated = false;
  /// Whether the failed job's rate share returns to the survivor (the controller is reset).
  bool reclaim_share = true;
  /// Whether the failed job's memory accounting is released (and evicted survivor memory may be
  /// restored).
  bool reclaim_memory = true;
  /// Longest time the driver may take to carry the reclaim out (TGS target: within 1 s).
  duration reclaim_within = std::chrono::seconds{1};

  constexpr bool operator==(const fault_decision&) const noexcept = default;
};

/// A fault policy decides which jobs a failure ends and what returns to the survivors.
///
/// Requirements: as `RateController`, over `fault_observation` and `fault_decision`.
/// Models: `separate_contexts`, `shared_fault_domain`, and the type-erased `any_fault_policy`.
/// Counter-example: a policy that sends the signal itself; ending processes is the driver's job.
template <typename P>
concept FaultPolicy =
    std::copy_constructible<P> && std::is_copy_assignable_v<P> &&
    std::constructible_from<P, typename P::config> &&
    requires(P p, const P cp, const fault_observation& obs) {
      { p.step(obs) } noexcept -> std::same_as<fault_decision>;
      { P::name } -> std::convertible_to<std::string_view>;
      { cp.settings() } noexcept -> std::same_as<const typename P::config&>;
    };

}  // namespace tgs
