// SPDX-License-Identifier: Apache-2.0
/// @file
/// The memory seam: what a memory policy observes on one GPU, what it decides, and the
/// `MemoryPolicy` concept.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"

namespace tgs {

/// One job's memory on the GPU, as the driver accounts it.
struct job_memory {
  /// Bytes the job holds (allocated and not freed), wherever they live.
  bytes allocated{};
  /// Of those, bytes currently resident in GPU memory.
  bytes resident{};
};

/// A pending allocation the policy must rule on.
struct allocation_request {
  job_class requester = job_class::production;
  bytes size{};
  /// Whether the driver can serve this allocation from unified (managed) memory. A plain
  /// `cuMemAlloc` can; stream-ordered pool allocations, `cuMemCreate` physical memory (what
  /// expandable segments map) and IPC-shared memory cannot: their pages stay where the driver
  /// put them, so a policy must not count on evicting them.
  bool movable = true;
};

/// Everything a memory policy may look at when it is stepped.
struct memory_observation {
  instant now = epoch;
  /// The per-GPU memory budget (configured by the operator, at most the card's memory).
  bytes capacity{};
  /// The production job's memory, or empty when no production job is on the GPU.
  std::optional<job_memory> production{};
  /// The opportunistic job's memory, or empty when no opportunistic job is on the GPU.
  std::optional<job_memory> opportunistic{};
  /// An allocation waiting for a verdict, if the step was triggered by one.
  std::optional<allocation_request> request{};
};

/// The answer to an `allocation_request`.
enum class allocation_verdict : std::uint8_t {
  /// Allocate in plain device memory.
  grant_device,
  /// Allocate in unified (managed) memory that the driver may evict to host.
  grant_managed,
  /// Fail the allocation with an out-of-memory error (CUDA_ERROR_OUT_OF_MEMORY).
  deny_out_of_memory,
};

[[nodiscard]] constexpr std::string_view to_string(allocation_verdict v) noexcept {
  switch (v) {
    case allocation_verdict::grant_device: return "grant_device";
    case allocation_verdict::grant_managed: return "grant_managed";
    case allocation_verdict::deny_out_of_memory: return "deny_out_of_memory";
  }
  return "unknown";
}

/// What a memory policy decides at a step.
struct memory_decision {
  /// The verdict on `observation.request`; empty when there was no request.
  std::optional<allocation_verdict> verdict{};
  /// How many of the opportunistic job's bytes may stay resident on the GPU; the driver evicts
  /// (prefetch to host) above it and restores (prefetch to GPU) below it. `bytes::max()`: no cap.
  bytes opportunistic_resident_limit = bytes::max();
  /// Whether the production job's memory must stay on the GPU (never evicted).
  bool production_pinned = true;
  /// When the policy wants its next observation; `never`: only on memory events.
  instant revisit_at = never;
  /// The memory a job of each class is told it has (what `cuMemGetInfo` answers it), where the
  /// policy gives each class a fixed share; empty: the budget, less what the other jobs hold.
  std::optional<bytes> production_view{};
  std::optional<bytes> opportunistic_view{};

  constexpr bool operator==(const memory_decision&) const noexcept = default;
};

/// How a memory policy's pages move between the GPU and the host when the jobs' memory does not
/// fit (a contention model reads it: what oversubscription costs depends on who moves pages).
enum class memory_paging : std::uint8_t {
  /// Nothing moves: allocations beyond the budget are refused or limited.
  none,
  /// The driver pages unified memory on demand, with no priority between the jobs.
  driver_demand,
  /// The policy evicts the opportunistic job's memory to keep the production job's resident.
  policy_eviction,
};

/// A memory policy decides where each class's memory lives on a GPU with a memory budget, and
/// whether an allocation may proceed.
///
/// Requirements: as `RateController` (a validated `config`, `noexcept` deterministic `step`
/// that reads no clock, does no I/O, does not allocate and does not block; `name`; copyable;
/// `settings()`), over `memory_observation` and `memory_decision`.
///
/// Semantics the compiler cannot check: a request that is not `movable` is never granted
/// `grant_managed` (the driver could not serve it so). The driver steps the policy on every
/// allocation that would change a job's footprint, on every job arrival and departure, and at
/// `revisit_at`. Residency it reports afterwards reflects the previous decision once the driver
/// has carried it out.
///
/// Models: `transparent_unified_memory`, `hard_limit`, `no_oversubscription`,
/// `plain_unified_memory`, and the type-erased `any_memory_policy`.
/// Counter-example: a policy that calls `cuMemPrefetchAsync` itself; moving pages is the
/// driver's job.
template <typename P>
concept MemoryPolicy =
    std::copy_constructible<P> && std::is_copy_assignable_v<P> &&
    std::constructible_from<P, typename P::config> &&
    requires(P p, const P cp, const memory_observation& obs) {
      { p.step(obs) } noexcept -> std::same_as<memory_decision>;
      { P::name } -> std::convertible_to<std::string_view>;
      { cp.settings() } noexcept -> std::same_as<const typename P::config&>;
    };

}  // namespace tgs
