// SPDX-License-Identifier: Apache-2.0
/// @file
/// The rate-control seam: what a sharing policy observes on one GPU, what it decides, and the
/// `RateController` concept every sharing mode and rate controller models.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "tgs/core/settings.hpp"
#include "tgs/core/units.hpp"

namespace tgs {

/// Who carries out a policy's decisions on a real GPU. The drivers ask this instead of knowing
/// policies by name: the simulator charges the interposer's cost to jobs under `interposer`
/// policies, and `tgs-node` runs only the policies it can enforce.
enum class enforcement : std::uint8_t {
  /// Nothing beyond placement: the jobs run as the GPU schedules them (exclusive, co-execution).
  placement,
  /// The interposer's launch gate, with budgets set by `tgs-node` (TGS, token bucket, ...).
  interposer,
  /// The GPU itself divides its SMs (MPS's thread percentages, MIG slices).
  hardware,
  /// The training framework (AntMan schedules inside the framework, from iteration times).
  framework,
};

[[nodiscard]] constexpr std::string_view to_string(enforcement e) noexcept {
  switch (e) {
    case enforcement::placement: return "placement";
    case enforcement::interposer: return "interposer";
    case enforcement::hardware: return "hardware";
    case enforcement::framework: return "framework";
  }
  return "unknown";
}

/// How the two jobs' kernels share the GPU's compute, as a contention model sees it: the
/// simulator's pair model has one set of parameters per mechanism.
enum class sharing_mechanism : std::uint8_t { time_slicing, mps, mig };

[[nodiscard]] constexpr std::string_view to_string(sharing_mechanism m) noexcept {
  switch (m) {
    case sharing_mechanism::time_slicing: return "time-slicing";
    case sharing_mechanism::mps: return "mps";
    case sharing_mechanism::mig: return "mig";
  }
  return "unknown";
}

/// What one job did on the GPU since the controller's previous step.
struct job_activity {
  /// Thread blocks (grid size summed over launches) the job launched in the window. This is the
  /// signal TGS uses (NSDI'23 §4.1): an interposer sees it without knowing the framework.
  std::uint64_t blocks_launched = 0;
  /// Kernel launches in the window (for policies finer than TGS; TGS ignores it).
  std::uint64_t launches = 0;
  /// Mean training-iteration time over the window, when the driver knows it. Only a
  /// framework-level policy (AntMan) may use it; an interposer-only driver leaves it empty.
  std::optional<duration> mean_iteration_time{};
  /// Time the job spent blocked in its synchronisation calls in the window (waiting for its GPU
  /// work), when the driver knows it. It grows with GPU contention and not with the job's
  /// host-side work, which the launch rate cannot tell apart. The real backend measures it; the
  /// simulator leaves it empty.
  std::optional<duration> sync_wait{};
  /// Time in the window the job had unfinished work on the GPU, when the driver knows it: the
  /// real backend samples the job's streams from its interposer, the simulator computes it from
  /// its model. Blocks per such second is the job's GPU-side speed, which the job's host side
  /// does not move and an opportunistic kernel it waits for does (`idle_harvest`).
  std::optional<duration> gpu_busy{};
  /// The same speed's two parts measured between the job's synchronisations instead of over the
  /// window: the blocks it had launched before one synchronisation and not before an earlier one
  /// (all complete when the later one returned), and its GPU busy time between the two. Empty
  /// when the job did not synchronise in the window. A job launches an iteration's kernels in a
  /// burst, so the blocks launched in a fixed window move by an iteration with where the bursts
  /// fall; between synchronisations they are whole iterations.
  std::optional<std::uint64_t> synced_blocks{};
  std::optional<duration> synced_gpu_busy{};
  /// The wall-clock time between those two synchronisations, when the driver knows it:
  /// `synced_blocks` over it is the job's throughput in whole iterations, which is what its user
  /// sees (host and GPU together) and what a launch-count window misreads by an iteration.
  std::optional<duration> synced_span{};
  /// The time the job blocked in its synchronisation calls between those two synchronisations:
  /// waiting for its GPU work, which an opportunistic job's kernels lengthen and the job's own
  /// host side does not (a job whose host work overlaps its GPU work waits less than its GPU time).
  std::optional<duration> synced_sync_wait{};
};

/// Everything a rate controller may look at when it is stepped.
struct rate_observation {
  /// The instant of this step (policy time; the driver's clock).
  instant now = epoch;
  /// Time since the previous step; `blocks_launched` etc. cover exactly this span.
  duration window{};
  /// The production job's activity, or empty when no production job is on the GPU.
  std::optional<job_activity> production{};
  /// The opportunistic job's activity, or empty when no opportunistic job is on the GPU.
  std::optional<job_activity> opportunistic{};
};

/// Plain time slicing between contexts: the hardware default when several processes share a GPU.
struct time_sliced {
  constexpr bool operator==(const time_sliced&) const noexcept = default;
};

/// MPS: kernels of both jobs run concurrently, each limited to a share of the SMs
/// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), memory shared without oversubscription.
struct mps_partition {
  double production_threads = 1.0;     ///< fraction of SMs, in (0, 1]
  double opportunistic_threads = 1.0;  ///< fraction of SMs, in (0, 1]
  /// The opportunistic client runs at MPS's below-normal dispatch priority
  /// (`CUDA_MPS_CLIENT_PRIORITY=1`) and the production client at normal (0): the MPS server
  /// dispatches the production client's pending blocks first, so an opportunistic job takes the
  /// SMs the production job leaves free rather than a share of its time.
  bool opportunistic_below_normal = false;
  constexpr bool operator==(const mps_partition&) const noexcept = default;
};

/// MIG: static slices with their own SMs, memory and bandwidth (e.g. 4g.20gb + 3g.20gb of an
/// A100-40GB: `production_slices = 4`, `opportunistic_slices = 3`, `total_slices = 7`).
struct mig_partition {
  int production_slices = 4;
  int opportunistic_slices = 3;
  int total_slices = 7;
  constexpr bool operator==(const mig_partition&) const noexcept = default;
};

/// Exclusive turns: only `holder` may run until the next decision (nvshare's lock, exclusive).
struct exclusive_turn {
  job_class holder = job_class::production;
  constexpr bool operator==(const exclusive_turn&) const noexcept = default;
};

/// Gap filling: opportunistic launches pass while the production job leaves the GPU idle.
struct gap_fill {
  /// An opportunistic launch passes once the production job has had no unfinished GPU work for
  /// this long (0: as soon as it has none).
  duration holdoff{};
  /// At most this many of the opportunistic job's launches may be unfinished at once, so a
  /// production job that resumes waits for at most that many of its kernels.
  std::uint32_t max_inflight = 1;
  constexpr bool operator==(const gap_fill&) const noexcept = default;
};

/// How the GPU's compute is divided between the two classes.
using gpu_share = std::variant<time_sliced, mps_partition, mig_partition, exclusive_turn>;

/// What a rate controller decides at a step.
struct rate_decision {
  /// The execution mechanism the jobs share the GPU under.
  gpu_share share = time_sliced{};
  /// Thread blocks the opportunistic job may launch per `budget_window`; empty means unthrottled
  /// and 0 means held (no launch passes). The interposer enforces it with one atomic per launch.
  /// With `fill_gaps` it bounds only the launches beside the production job's busy periods.
  std::optional<std::uint64_t> opportunistic_budget;
  /// The refill period of the budget (TGS: 50 ms, the released code's `rate_watcher`).
  duration budget_window = std::chrono::milliseconds{50};
  /// When the controller wants its next observation. `never` means "only on a job event".
  instant revisit_at = never;
  /// When set, an opportunistic launch also passes, whatever the budget, while the production job
  /// leaves the GPU idle as this says.
  std::optional<gap_fill> fill_gaps{};
  /// Set when the controller holds the opportunistic jobs at its floor and the production job is
  /// still measurably below its target: nothing the controller does protects it any more, so a
  /// driver may hold them or change how they share (tgs-node's mechanism correction).
  bool production_unprotected = false;

  constexpr bool operator==(const rate_decision&) const noexcept = default;
};

/// A rate controller decides, from the jobs' recent activity on one GPU, how the opportunistic
/// job may use it.
///
/// Requirements:
/// - `C::config` is an aggregate of settings with defaults; `C{cfg}` validates it and throws
///   `tgs::config_error` naming the field when it is out of range.
/// - `c.step(obs)` is `noexcept`, deterministic (the same sequence of observations gives the same
///   sequence of decisions, on any machine), reads no clock, does no I/O, does not allocate and
///   does not block.
/// - `C::name` is the policy's registry name (`"tgs"`, `"mps"`, ...).
/// - `C` is a copyable value: copying a controller forks its state.
/// - `cc.describe()` reports its state for status lines and metrics (`tgs::state_report`),
///   without allocating.
///
/// Semantics the compiler cannot check: a driver steps the controller no later than the
/// `revisit_at` it was given and also on job events (arrival, departure); the observation's
/// counters cover exactly `window`.
///
/// Models: every `RegisteredRateController` and the type-erased `any_rate_controller`.
/// Counter-example: a controller that reads `std::chrono::steady_clock` inside `step`, since the
/// simulator could then not replay it.
///
/// ```cpp
/// tgs::tgs_rate_control c{{}};
/// tgs::rate_decision d = c.step({.now = tgs::epoch, .window = {}, .production = {}, .opportunistic = {}});
/// ```
template <typename C>
concept RateController =
    std::copy_constructible<C> && std::is_copy_assignable_v<C> &&
    std::constructible_from<C, typename C::config> &&
    requires(C c, const C cc, const rate_observation& obs) {
      { c.step(obs) } noexcept -> std::same_as<rate_decision>;
      { C::name } -> std::convertible_to<std::string_view>;
      { cc.settings() } noexcept -> std::same_as<const typename C::config&>;
      { cc.describe() } noexcept -> std::same_as<state_report>;
    };

/// A concrete rate controller that drivers run by name through the registry
/// (`any_rate_controller`): it says statically what the drivers need to know about it, so no
/// driver compares policy names.
///
/// Requirements, beyond `RateController`:
/// - `C::enforced_by`: who carries its decisions out on a real GPU (`tgs::enforcement`).
/// - `C::mechanism`: how the two jobs' kernels share the GPU, for contention models.
/// - `C::co_locates`: false only for a policy that never lets the classes share a GPU (a cluster
///   preempts the opportunistic job instead).
/// - `C::default_memory_policy`: the registry name of the memory policy it runs with unless a
///   driver is told otherwise.
/// - `C::adaptive`: it moves the opportunistic job's share to hold the production job near its
///   standalone speed, so a measured pair under it shows what the production job tolerates, not
///   how the two jobs contend unchecked (a contention model's fit reads it so).
/// - `C::fixed_block_budget`: the opportunistic job's share is a fixed number of thread blocks per
///   window, so a measured pair under it ties the job's rate to its blocks per iteration.
/// - `C::setting_table`: its tunable settings (`tgs::setting<config>`), from which both tools make
///   their flags (`no_settings<config>` for none).
///
/// Models: `tgs_rate_control`, `exclusive`, `co_execution`, `mps`, `mig`, `antman`,
/// `token_bucket`, `time_slice_lock`, `idle_harvest`. Counter-example: the type-erased
/// `any_rate_controller`, whose traits depend on the policy it holds (`traits()`).
template <typename C>
concept RegisteredRateController =
    RateController<C> && requires {
      { C::enforced_by } -> std::convertible_to<enforcement>;
      { C::mechanism } -> std::convertible_to<sharing_mechanism>;
      { C::co_locates } -> std::convertible_to<bool>;
      { C::default_memory_policy } -> std::convertible_to<std::string_view>;
      { C::adaptive } -> std::convertible_to<bool>;
      { C::fixed_block_budget } -> std::convertible_to<bool>;
    } && SettingsTable<C>;

/// A registered rate controller's traits as a value, for run-time queries by name.
struct rate_policy_traits {
  std::string_view name;
  enforcement enforced_by = enforcement::placement;
  sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  bool co_locates = true;
  std::string_view default_memory_policy;
  bool adaptive = false;
  /// The opportunistic job's share is a fixed number of thread blocks per window (the simulator's
  /// fit reads a job's blocks per iteration from such cells).
  bool fixed_block_budget = false;
  constexpr bool operator==(const rate_policy_traits&) const noexcept = default;
};

/// The traits of `C`, as a value.
template <RegisteredRateController C>
[[nodiscard]] constexpr rate_policy_traits traits_of() noexcept {
  return {C::name, C::enforced_by, C::mechanism, C::co_locates, C::default_memory_policy,
          C::adaptive, C::fixed_block_budget};
}

}  // namespace tgs
