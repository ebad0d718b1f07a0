// SPDX-License-Identifier: Apache-2.0
/// @file
/// `mechanism_choice`: how one opportunistic job shares its GPU (a below-normal MPS client under
/// the launch cap, a time-sliced context of its own, or held), chosen from measured facts.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tgs/core/config_error.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"

namespace tgs {

/// How an opportunistic job shares its GPU with the production job.
enum class opportunistic_mechanism : std::uint8_t {
  /// A client of the production job's MPS server at below-normal dispatch priority, its launches
  /// under the rate controller's cap. Shares the production job's fault domain.
  mps_client,
  /// A CUDA context of its own, time-sliced against the production job's, its launches under the
  /// same cap, its managed memory evictable (transparent unified memory). Its faults are its own.
  time_sliced,
  /// Registered but launching nothing while a production job is on its GPU.
  held,
};

[[nodiscard]] constexpr std::string_view to_string(opportunistic_mechanism m) noexcept {
  switch (m) {
    case opportunistic_mechanism::mps_client: return "mps-client";
    case opportunistic_mechanism::time_sliced: return "time-sliced";
    case opportunistic_mechanism::held: return "held";
  }
  return "unknown";
}

/// What the operator allows an opportunistic job (`tgs-node --opportunistic-mechanism`).
enum class mechanism_preference : std::uint8_t {
  automatic,    ///< the choice's rules below
  mps,          ///< an MPS client wherever that is possible and the tenants are the same
  time_sliced,  ///< never an MPS client
};

[[nodiscard]] constexpr std::string_view to_string(mechanism_preference p) noexcept {
  switch (p) {
    case mechanism_preference::automatic: return "auto";
    case mechanism_preference::mps: return "mps";
    case mechanism_preference::time_sliced: return "time-sliced";
  }
  return "unknown";
}

[[nodiscard]] constexpr std::optional<mechanism_preference> parse_mechanism_preference(std::string_view s) noexcept {
  if (s == "auto") return mechanism_preference::automatic;
  if (s == "mps") return mechanism_preference::mps;
  if (s == "time-sliced") return mechanism_preference::time_sliced;
  return std::nullopt;
}

/// Why the choice is what it is: the first fact that decided it.
enum class choice_reason : std::uint8_t {
  operator_time_sliced,     ///< the operator allows no MPS client
  operator_mps,             ///< the operator asked for MPS clients and every hard condition holds
  no_mps,                   ///< MPS is not available on the job's GPU
  no_production,            ///< no production job on the GPU: whose MPS server it would join is unknown
  other_tenant,             ///< the production job is another tenant's: MPS would join their fault domains
  hurt_under_both,          ///< this job held production below its target under both mechanisms before
  hurt_under_mps,           ///< this job held production below its target as an MPS client before
  hurt_time_sliced,         ///< it did so time-sliced before, and time slicing is all that is left
  memory_oversubscribed,    ///< the two jobs' memory exceeds the GPU's: only a context of its own pages
  kernels_unmeasured,       ///< the job's kernel lengths are not known yet
  long_kernels,             ///< its longest kernel is long enough for a SIGKILL in it to end production
  production_unmeasured,    ///< how GPU-bound the production job is is not known yet
  production_host_bound,    ///< the production job leaves the GPU idle: time slicing shares as well
  measured_safe,            ///< every condition for an MPS client holds, as measured
};

[[nodiscard]] constexpr std::string_view to_string(choice_reason r) noexcept {
  switch (r) {
    case choice_reason::operator_time_sliced: return "operator-time-sliced";
    case choice_reason::operator_mps: return "operator-mps";
    case choice_reason::no_mps: return "no-mps";
    case choice_reason::no_production: return "no-production";
    case choice_reason::other_tenant: return "other-tenant";
    case choice_reason::hurt_under_both: return "hurt-under-both";
    case choice_reason::hurt_under_mps: return "hurt-under-mps";
    case choice_reason::hurt_time_sliced: return "hurt-time-sliced";
    case choice_reason::memory_oversubscribed: return "memory-oversubscribed";
    case choice_reason::kernels_unmeasured: return "kernels-unmeasured";
    case choice_reason::long_kernels: return "long-kernels";
    case choice_reason::production_unmeasured: return "production-unmeasured";
    case choice_reason::production_host_bound: return "production-host-bound";
    case choice_reason::measured_safe: return "measured-safe";
  }
  return "unknown";
}

/// What the driver knows when an opportunistic job registers, before its CUDA context exists.
/// Every fact a driver cannot establish stays empty: the choice then takes the safe side.
struct choice_facts {
  /// The operator's setting for the job's class.
  mechanism_preference preference = mechanism_preference::automatic;
  /// Whether the job's GPU has an MPS server the job could join.
  bool mps_available = false;
  /// Whether the job is the same tenant (user, or the pod's namespace where containers all run as
  /// one user) as the production job on its GPU, read from what the job cannot forge; empty: no
  /// production job is there.
  std::optional<bool> same_tenant;
  /// The fraction of its time the production job's host waits for its GPU (blocked in its
  /// synchronisation calls), measured while it ran: near 1 for a GPU-bound job, small for one
  /// bound by its host (data loading, Python, launch overhead); empty: not measured yet.
  std::optional<double> production_gpu_wait;
  /// The longest kernel of this job seen in earlier runs (its remembered profile); empty: none.
  std::optional<duration> longest_kernel;
  /// Memory the production job holds on the GPU now, the most this job held in earlier runs
  /// (empty: not known), and what the GPU (or the operator's budget) holds in all.
  bytes production_bytes{};
  std::optional<bytes> opportunistic_peak_bytes;
  std::optional<bytes> capacity;
  /// Whether, in earlier runs, this job kept the production job below its target with the cap at
  /// its floor, as an MPS client and as a time-sliced context (the correction's record).
  bool hurt_as_mps_client = false;
  bool hurt_time_sliced = false;
};

/// The choice and the fact that decided it.
struct mechanism_verdict {
  opportunistic_mechanism mechanism = opportunistic_mechanism::time_sliced;
  choice_reason reason = choice_reason::no_mps;
  constexpr bool operator==(const mechanism_verdict&) const noexcept = default;
};

/// Chooses each opportunistic job's mechanism from measured facts (tgs-node at registration; the
/// simulator for the pairs it predicts).
///
/// **Why a choice.** Measured on H100 and H200 (docs/results/priority-sharing.md, ../GPU.md): a
/// below-normal MPS client under an adaptive launch cap protects a GPU-bound production job
/// (0.96-0.99 of alone) where time slicing cannot, but beside a host-bound production job plain
/// time slicing gives both jobs more (0.95 / 0.92 against 0.85 / 0.69), under memory
/// oversubscription the MPS pair collapsed (0.65 / 0.15), and MPS joins the two jobs' fault
/// domains: a SIGKILL of a client in the middle of a kernel of 150 ms or more ended the production
/// client (H200; 120 ms and less did not), and an illegal address in one client ended the other.
///
/// **The rules**, in order; the first that applies decides, and its fact is the reason:
/// 1. The operator's `time_sliced`: time-sliced.
/// 2. No MPS on the GPU: time-sliced. Another tenant's production job: time-sliced, whatever the
///    operator asked, since MPS would join their fault domains and a server serves one user at a
///    time.
/// 3. The operator's `mps`: an MPS client (the operator takes the fault risk, for a node whose
///    GPUs serve one tenant). Otherwise no production job on the GPU (whose server, whose
///    tenant?): time-sliced.
/// 4. Hurt production as an MPS client before: time-sliced.
/// 5. Memory oversubscribed (the production job's bytes and this job's remembered peak exceed the
///    capacity): time-sliced, so its managed memory can be evicted.
/// 6. Kernel lengths unknown, or the longest at least `long_kernel`: time-sliced. A first run is
///    time-sliced while its kernels are measured; the next start may be an MPS client.
/// 7. Where the operator sets `gpu_bound_wait` (off by default): how long the production job's
///    host waits for its GPU unknown, or below that share of its time: time-sliced.
/// 8. Otherwise: an MPS client.
///
/// Then a job that hurt production time-sliced before and is to be time-sliced again is held.
/// A held job waits for the production job to leave; the driver says so and why.
///
/// ```cpp
/// tgs::mechanism_choice choice{{}};
/// tgs::mechanism_verdict v = choice.step({.mps_available = true, .same_tenant = true,
///                                         .production_gpu_wait = 0.8,
///                                         .longest_kernel = std::chrono::milliseconds{3}});
/// assert(v.mechanism == tgs::opportunistic_mechanism::mps_client);
/// ```
class mechanism_choice {
 public:
  struct config {
    /// A kernel at least this long makes a job unsafe as an MPS client beside production. Our
    /// choice: 100 ms, below the H200's measured threshold (a SIGKILL during a 120 ms kernel
    /// spared production, one during 150 ms did not; ../GPU.md, 2026-11-29).
    duration long_kernel = std::chrono::milliseconds{100};
    /// Above 0: a production job whose host waits for its GPU less than this fraction of its time
    /// (or not measured yet) gets no MPS co-runner, only a time-sliced one. Our choice: 0, off.
    /// Rule 7 was written when the MPS client beside a host-bound production job lost to time
    /// slicing, under the speed signal. Under the GPU-wait signal it no longer does: on an H200,
    /// beside production jobs that wait 0.001-0.15 of their time (ResNet-50 b128 and b32, BERT-base,
    /// MobileNet v2), the time-sliced co-runner of `auto` got 0.10-0.89 where an MPS client got
    /// 0.74-1.16 in the same calls, and production no more (docs/results/mechanism-choice.md).
    double gpu_bound_wait = 0.0;
    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "mechanism-choice";
  static constexpr std::array setting_table{
      setting<config>{"long-kernel-ms", "a kernel this long keeps a job out of MPS", &config::long_kernel},
      setting<config>{"gpu-bound-wait", "production's host waiting for the GPU below which a co-runner is time-sliced (0: off)",
                      &config::gpu_bound_wait},
  };

  /// Throws `config_error` naming the field when `long_kernel` is not positive or
  /// `gpu_bound_wait` is outside [0, 1].
  explicit mechanism_choice(const config& cfg) : cfg_(cfg) {
    require(cfg_.long_kernel > duration::zero(), "mechanism_choice: long_kernel must be positive, got " +
                                                     std::to_string(cfg_.long_kernel.count()) + " ns");
    require(cfg_.gpu_bound_wait >= 0.0 && cfg_.gpu_bound_wait <= 1.0,
            "mechanism_choice: gpu_bound_wait must be in [0, 1], got " + std::to_string(cfg_.gpu_bound_wait));
  }

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  [[nodiscard]] constexpr mechanism_verdict step(const choice_facts& f) const noexcept {
    const mechanism_verdict v = by_rules(f);
    // A job that held production below its target in a context of its own before, and would get
    // one again, waits instead.
    if (v.mechanism == opportunistic_mechanism::time_sliced && f.hurt_time_sliced) {
      return {opportunistic_mechanism::held,
              f.hurt_as_mps_client ? choice_reason::hurt_under_both : choice_reason::hurt_time_sliced};
    }
    return v;
  }

 private:
  [[nodiscard]] constexpr mechanism_verdict by_rules(const choice_facts& f) const noexcept {
    using enum opportunistic_mechanism;
    if (f.preference == mechanism_preference::time_sliced) return {time_sliced, choice_reason::operator_time_sliced};
    if (!f.mps_available) return {time_sliced, choice_reason::no_mps};
    if (f.same_tenant == false) return {time_sliced, choice_reason::other_tenant};
    if (f.preference == mechanism_preference::mps) return {mps_client, choice_reason::operator_mps};
    if (!f.same_tenant) return {time_sliced, choice_reason::no_production};
    if (f.hurt_as_mps_client) return {time_sliced, choice_reason::hurt_under_mps};
    if (f.capacity && f.opportunistic_peak_bytes &&
        f.production_bytes.count() + f.opportunistic_peak_bytes->count() > f.capacity->count()) {
      return {time_sliced, choice_reason::memory_oversubscribed};
    }
    if (!f.longest_kernel) return {time_sliced, choice_reason::kernels_unmeasured};
    if (*f.longest_kernel >= cfg_.long_kernel) return {time_sliced, choice_reason::long_kernels};
    if (cfg_.gpu_bound_wait > 0.0) {
      if (!f.production_gpu_wait) return {time_sliced, choice_reason::production_unmeasured};
      if (*f.production_gpu_wait < cfg_.gpu_bound_wait) return {time_sliced, choice_reason::production_host_bound};
    }
    return {mps_client, choice_reason::measured_safe};
  }

  config cfg_;
};

}  // namespace tgs
