// SPDX-License-Identifier: Apache-2.0
/// @file
/// `mig`: static MIG slices per class (the MIG baseline of the TGS evaluation).
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// MIG: the GPU is split into instances with their own SMs, memory and bandwidth; each class runs
/// in its own slice and launches are not throttled.
///
/// Defaults are the TGS artifact's A100 split (`scripts/test_mig.sh` creates GPU-instance
/// profiles 5 and 9 of an A100-40GB, i.e. 4g.20gb and 3g.20gb of its 7 compute slices): 4 for the
/// production job, 3 for the opportunistic job. The split is static (reconfiguring MIG needs an
/// idle GPU), so `revisit_at` is always `never`.
///
/// ```cpp
/// tgs::mig c{{}};
/// auto d = c.step({});
/// assert(std::get<tgs::mig_partition>(d.share).total_slices == 7);
/// ```
class mig {
 public:
  struct config {
    /// Compute slices of the production job's instance. Artifact: 4g.20gb.
    int production_slices = 4;
    /// Compute slices of the opportunistic job's instance. Artifact: 3g.20gb.
    int opportunistic_slices = 3;
    /// Compute slices of the whole GPU. A100: 7.
    int total_slices = 7;
  };

  static constexpr std::string_view name = "mig";
  static constexpr enforcement enforced_by = enforcement::hardware;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::mig;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"production-slices", "compute slices of the production job's instance",
                      &config::production_slices},
      setting<config>{"opportunistic-slices",
                      "compute slices of the opportunistic job's instance",
                      &config::opportunistic_slices},
      setting<config>{"total-slices", "compute slices of the whole GPU", &config::total_slices},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit mig(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// The static slices.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("production_slices", std::int64_t{cfg_.production_slices});
    r.add("opportunistic_slices", std::int64_t{cfg_.opportunistic_slices});
    return r;
  }

  [[nodiscard]] rate_decision step(const rate_observation&) noexcept {
    rate_decision d;
    d.share = mig_partition{cfg_.production_slices, cfg_.opportunistic_slices, cfg_.total_slices};
    d.opportunistic_budget = std::nullopt;
    d.revisit_at = never;
    return d;
  }

 private:
  static config validated(const config& c) {
    using rate_detail::check;
    check(c.production_slices >= 1, "mig", "production_slices", "at least 1",
          c.production_slices);
    check(c.opportunistic_slices >= 1, "mig", "opportunistic_slices", "at least 1",
          c.opportunistic_slices);
    check(c.total_slices >= 2 && c.total_slices <= 64, "mig", "total_slices", "in [2, 64]",
          c.total_slices);
    check(c.production_slices <= c.total_slices - c.opportunistic_slices, "mig",
          "production_slices", "at most total_slices - opportunistic_slices",
          c.production_slices);
    return c;
  }

  config cfg_;
};

static_assert(RegisteredRateController<mig>);

}  // namespace tgs
