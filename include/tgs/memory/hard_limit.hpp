// SPDX-License-Identifier: Apache-2.0
/// @file
/// `hard_limit`: per-job hard memory limits in device memory, as HAMi and KubeShare enforce them;
/// an allocation beyond the limit fails cleanly and nothing is ever evicted.
#pragma once

#include <array>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "tgs/core/config_error.hpp"
#include "tgs/core/units.hpp"
#include "tgs/core/settings.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/detail/byte_math.hpp"

namespace tgs {

/// Per-job hard limits, as HAMi (HAMi-core's allocation hooks check the container's
/// `nvidia.com/gpumem` limit) and KubeShare (a per-pod GPU-memory request, checked by its
/// interposed CUDA library) enforce them.
///
/// - Each class has a limit: an explicit byte count, or by default a split of the capacity,
///   `production_fraction` for the production job and the rest for the opportunistic job.
/// - An allocation that would take its job beyond its limit, or both jobs together beyond the
///   capacity, is denied with out-of-memory: the job sees a clean CUDA error, as under HAMi,
///   instead of the co-runner being evicted.
/// - Everything else is granted in device memory. Nothing is evicted, so the opportunistic
///   resident limit is uncapped and production memory is pinned.
///
/// ```cpp
/// using namespace tgs::literals;
/// tgs::hard_limit limits{{.production_fraction = 0.75}};
/// tgs::memory_decision d = limits.step({
///     .capacity = 40_GiB,
///     .opportunistic = tgs::job_memory{9_GiB, 9_GiB},
///     .request = tgs::allocation_request{tgs::job_class::opportunistic, 2_GiB}});
/// // *d.verdict == tgs::allocation_verdict::deny_out_of_memory: 11 GiB > 10 GiB.
/// ```
class hard_limit {
 public:
  struct config {
    /// The production job's share of the capacity when `production_limit` is not set; the
    /// opportunistic job gets the rest. In (0, 1). HAMi and KubeShare take each limit from the
    /// pod's request and have no two-class default; an even split is the one default that
    /// favours neither class. (HAMi's own default, the whole card for every container, would
    /// make this policy the same as `no_oversubscription`.)
    double production_fraction = 0.5;
    /// An explicit limit for the production job, overriding the fraction; at most the capacity
    /// is used. Must be positive.
    std::optional<bytes> production_limit{};
    /// An explicit limit for the opportunistic job, overriding the fraction. Must be positive.
    std::optional<bytes> opportunistic_limit{};

    constexpr bool operator==(const config&) const noexcept = default;
  };

  static constexpr std::string_view name = "hard-limit";
  static constexpr memory_paging paging = memory_paging::none;
  static constexpr std::array setting_table{
      setting<config>{"production-fraction",
                      "the production job's share of the budget when no limit is given",
                      &config::production_fraction},
      setting<config>{"production-limit-mib", "the production job's limit",
                      &config::production_limit},
      setting<config>{"opportunistic-limit-mib", "the opportunistic job's limit",
                      &config::opportunistic_limit},
  };

  /// Throws `config_error` naming the field when a setting is out of range.
  explicit hard_limit(config cfg) : config_(cfg) {
    require(std::isfinite(config_.production_fraction) && config_.production_fraction > 0.0 &&
                config_.production_fraction < 1.0,
            "hard_limit: production_fraction must be in (0, 1), got " +
                shortest(config_.production_fraction));
    require(!config_.production_limit || config_.production_limit->count() > 0,
            "hard_limit: production_limit must be positive, got 0 bytes");
    require(!config_.opportunistic_limit || config_.opportunistic_limit->count() > 0,
            "hard_limit: opportunistic_limit must be positive, got 0 bytes");
  }

  [[nodiscard]] constexpr memory_decision step(const memory_observation& obs) const noexcept {
    memory_decision decision;
    if (obs.request) {
      const allocation_request& request = *obs.request;
      const bool production = request.requester == job_class::production;
      const bytes held = detail::allocated(production ? obs.production : obs.opportunistic);
      const bytes both = detail::saturating_add(detail::allocated(obs.production),
                                                detail::allocated(obs.opportunistic));
      const bool within_limit =
          detail::fits(held, request.size, limit(request.requester, obs.capacity));
      const bool within_capacity = detail::fits(both, request.size, obs.capacity);
      decision.verdict = within_limit && within_capacity ? allocation_verdict::grant_device
                                                         : allocation_verdict::deny_out_of_memory;
    }
    decision.opportunistic_resident_limit = bytes::max();
    decision.production_pinned = true;
    decision.revisit_at = never;
    // Each class sees its own limit as its GPU's memory: a framework sizing its caches from
    // cuMemGetInfo then stays within it.
    decision.production_view = limit(job_class::production, obs.capacity);
    decision.opportunistic_view = limit(job_class::opportunistic, obs.capacity);
    return decision;
  }

  /// The limit of `job` on a GPU with `capacity` bytes.
  [[nodiscard]] constexpr bytes limit(job_class job, bytes capacity) const noexcept {
    // f < 1 keeps the product below 2^64 even for the largest capacity, so the cast is defined.
    const bytes production_share{static_cast<std::uint64_t>(static_cast<double>(capacity.count()) *
                                                            config_.production_fraction)};
    if (job == job_class::production) {
      return config_.production_limit ? std::min(*config_.production_limit, capacity)
                                      : production_share;
    }
    return config_.opportunistic_limit ? std::min(*config_.opportunistic_limit, capacity)
                                       : capacity - production_share;
  }

  [[nodiscard]] constexpr const config& settings() const noexcept { return config_; }

 private:
  /// The shortest text that reads back as `value`, for error messages (`1.5`, not `1.500000`).
  static std::string shortest(double value) {
    char text[32];
    const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
    return ec == std::errc{} ? std::string(text, end) : std::string("?");
  }

  config config_;
};

static_assert(MemoryPolicy<hard_limit>);
static_assert(SettingsTable<hard_limit>);

}  // namespace tgs
