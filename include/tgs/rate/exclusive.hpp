// SPDX-License-Identifier: Apache-2.0
/// @file
/// `exclusive`: the GPU belongs to the production job whenever it is present (the "Ex" baseline
/// of the TGS evaluation).
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"

namespace tgs {

/// Exclusive execution: while a production job is on the GPU the opportunistic job is held (budget
/// 0, `exclusive_turn{production}`); without a production job the opportunistic job has the GPU
/// to itself, unthrottled. This is the "exclusive" sharing mode the TGS artifact runs as the
/// baseline of its comparison (`scripts/test_ex.sh`): the production job's throughput is exactly
/// its standalone throughput and the opportunistic job only uses idle GPUs.
///
/// The decision changes only on job events, so `revisit_at` is always `never`.
///
/// ```cpp
/// tgs::exclusive c{{}};
/// auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
/// assert(d.opportunistic_budget == 0u);
/// ```
class exclusive {
 public:
  /// No settings: exclusive execution has no parameter.
  struct config {};

  static constexpr std::string_view name = "exclusive";
  static constexpr enforcement enforced_by = enforcement::placement;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  /// The classes never share a GPU: a cluster preempts the opportunistic job instead.
  static constexpr bool co_locates = false;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr auto setting_table = no_settings<config>;

  explicit exclusive(const config& cfg) noexcept : cfg_(cfg) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// Nothing changes between steps, so there is no state to report.
  [[nodiscard]] state_report describe() const noexcept { return {}; }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    rate_decision d;
    d.revisit_at = never;
    if (obs.production) {
      d.share = exclusive_turn{job_class::production};
      d.opportunistic_budget = 0;
    } else if (obs.opportunistic) {
      d.share = exclusive_turn{job_class::opportunistic};
      d.opportunistic_budget = std::nullopt;
    } else {
      d.share = time_sliced{};
      d.opportunistic_budget = std::nullopt;
    }
    return d;
  }

 private:
  config cfg_;
};

static_assert(RegisteredRateController<exclusive>);

}  // namespace tgs
