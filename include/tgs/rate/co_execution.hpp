// SPDX-License-Identifier: Apache-2.0
/// @file
/// `co_execution`: plain time slicing with no control (the "Co-ex" baseline of the TGS
/// evaluation).
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"

namespace tgs {

/// Co-execution: both jobs run in their own contexts and the GPU's hardware time slicing divides
/// it; nothing is throttled. This is what the TGS artifact's `scripts/test_co_ex.sh` runs (two
/// containers on one GPU without the interposer): what the production job suffers when nobody
/// protects it.
///
/// ```cpp
/// tgs::co_execution c{{}};
/// auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
/// assert(!d.opportunistic_budget && d.revisit_at == tgs::never);
/// ```
class co_execution {
 public:
  /// No settings: plain time slicing has no parameter.
  struct config {};

  static constexpr std::string_view name = "co-execution";
  static constexpr enforcement enforced_by = enforcement::placement;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  /// The paper ran its baselines on its unified-memory PyTorch image, so oversubscription
  /// thrashes instead of failing.
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr auto setting_table = no_settings<config>;

  explicit co_execution(const config& cfg) noexcept : cfg_(cfg) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// Nothing changes between steps, so there is no state to report.
  [[nodiscard]] state_report describe() const noexcept { return {}; }

  [[nodiscard]] rate_decision step(const rate_observation&) noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.opportunistic_budget = std::nullopt;
    d.revisit_at = never;
    return d;
  }

 private:
  config cfg_;
};

static_assert(RegisteredRateController<co_execution>);

}  // namespace tgs
