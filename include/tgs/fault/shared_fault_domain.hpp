// SPDX-License-Identifier: Apache-2.0
/// @file
/// `shared_fault_domain`: the jobs are clients of one MPS server, so a fatal GPU exception in
/// one ends the other too.
#pragma once

#include <array>
#include <chrono>
#include <string_view>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"
#include "tgs/fault/concepts.hpp"
#include "tgs/fault/detail/validate.hpp"

namespace tgs {

/// Fault propagation between MPS clients, for comparison with `separate_contexts`.
///
/// What ends the co-runner, by `fault_kind` (NVIDIA Multi-Process Service documentation,
/// Architecture chapter, "Memory Protection and Error Containment"):
/// - `gpu_exception`: always. A fatal GPU exception raised by one MPS client is reported to the
///   other clients without saying which one caused it, and they have to exit; the server then
///   waits for all of them to exit and refuses new clients on that GPU until it has recreated
///   its context. On pre-Volta GPUs the exception reaches every client of the server; from
///   Volta on it is contained to the clients that share the faulting GPU. A policy sees one GPU
///   with its two jobs, and both generations end both of them, so this does not depend on the
///   GPU generation. (The wider pre-Volta blast radius, over every GPU one server covers, is
///   the driver's to avoid by running one server per GPU.)
/// - `out_of_memory`: never. A failed allocation is an error returned to the one client's API
///   call, not a GPU exception; the job exits on its own.
/// - `crashed`, `killed`: a configuration choice. The MPS documentation warns that a client
///   terminated abruptly (signal, Ctrl-C) without synchronizing its outstanding GPU work can
///   leave the server and the other clients in an undefined state (hangs, failures); whether
///   that happens depends on what was in flight. `abrupt_exit_ends_co_runner` says which
///   outcome to assume. By default the co-runner survives: we assume the server cleans up a
///   departed client as it does for its own `terminate_client` command, which the MPS
///   troubleshooting guide says does not affect the other connected clients.
///
/// Measured on an H200 with driver 580 (docs/results/mps-faults.md): the undefined case is
/// decided on the GPU. A client that ended (SIGKILL, SIGTERM, even `_exit(0)`) while one of its
/// kernels had run for 300 ms or more took the other client down (10 of 10); one that ended during
/// a 30 ms kernel or with only short kernels queued did not (4 of 4); a device fault of one client
/// ended the other (2 of 2). So under MPS the GPU itself ends the co-runner that a client's end
/// harms, and a driver need not. tgs-node steps `killed` for an abrupt end without evidence of a
/// GPU fault and never ends a co-runner on it, whatever `abrupt_exit_ends_co_runner` says: an exit
/// is no evidence, and acting on it would let any user end another's job by registering a job
/// and exiting (docs/trust-model.md). It steps `gpu_exception` when the failed job's CUDA calls
/// returned an error that leaves its context unusable. `abrupt_exit_ends_co_runner` stays for
/// models that compare the outcomes.
///
/// In every case the failed job's share and memory return (to the survivor, or to the next job
/// when both ended) within `reclaim_within`.
///
/// ```cpp
/// tgs::shared_fault_domain mps{{}};
/// tgs::fault_decision d = mps.step({.failed = tgs::job_class::opportunistic,
///                                   .kind = tgs::fault_kind::gpu_exception,
///                                   .co_runner_present = true});
/// // d.co_runner_terminated == true: the production job goes down with it.
/// ```
class shared_fault_domain {
 public:
  struct config {
    /// Whether a crash or kill of one client ends the co-runner too (see above: the MPS
    /// documentation leaves the outcome undefined). `false` models the common case, `true` the
    /// pessimistic one. A model's setting: tgs-node ends no co-runner on a bare crash or kill.
    bool abrupt_exit_ends_co_runner = false;
    /// Longest time the driver may take to reclaim the failed job's share and memory; the same
    /// one-second target as `separate_contexts`. Must be positive.
    duration reclaim_within = std::chrono::seconds{1};

    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "shared-fault-domain";
  static constexpr std::array setting_table{
      setting<config>{"abrupt-exit-ends-co-runner",
                      "in a model, a crash or kill of one job ends its co-runner too (the MPS "
                      "documentation leaves the outcome undefined; off: the co-runner survives); "
                      "tgs-node ends a co-runner only on a GPU fault, never on a bare exit",
                      &config::abrupt_exit_ends_co_runner},
      setting<config>{"reclaim-within-ms",
                      "longest time the driver may take to reclaim a failed job's share and "
                      "memory",
                      &config::reclaim_within},
  };

  /// Throws `config_error` naming `reclaim_within` when it is not positive.
  explicit shared_fault_domain(config cfg) : config_(cfg) {
    detail::require_positive_reclaim_within("shared_fault_domain", config_.reclaim_within);
  }

  [[nodiscard]] constexpr fault_decision step(const fault_observation& obs) const noexcept {
    return fault_decision{
        .co_runner_terminated = obs.co_runner_present && takes_down_co_runner(obs.kind),
        .reclaim_share = true,
        .reclaim_memory = true,
        .reclaim_within = config_.reclaim_within};
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  [[nodiscard]] constexpr bool takes_down_co_runner(fault_kind kind) const noexcept {
    switch (kind) {
      case fault_kind::gpu_exception:
        return true;
      case fault_kind::out_of_memory:
        return false;
      case fault_kind::crashed:
      case fault_kind::killed:
        return config_.abrupt_exit_ends_co_runner;
    }
    // An out-of-range kind (a newer driver's value): assume the worst a shared domain allows.
    return true;
  }

  config config_;
};

static_assert(FaultPolicy<shared_fault_domain>);

}  // namespace tgs
