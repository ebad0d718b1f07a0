// SPDX-License-Identifier: Apache-2.0
/// @file
/// `mps`: NVIDIA MPS with a per-class active-thread percentage (the MPS baseline of the TGS
/// evaluation).
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// MPS: both jobs' kernels run concurrently through the MPS server, each limited to a fraction of
/// the SMs by `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`; launches are not throttled.
///
/// Defaults come from the TGS artifact's MPS example (`config/test_mps.csv`, run by
/// `scripts/test_mps.sh`): one job at 30%, the other at 70%. The CSV does not label classes; we
/// give 30% to the production job because the first row (`shufflenet`) is the job the
/// artifact's MIG and AntMan examples treat as the high-priority one (`mig-high`, AntMan
/// `perfControl` 100), and 70% to the opportunistic job (`mobilenet`, AntMan `perfControl` 70).
/// MPS's own default (no variable set) is 100% for both: `{1.0, 1.0}`.
///
/// The partition is static, so `revisit_at` is always `never`.
///
/// ```cpp
/// tgs::mps c{{.production_threads = 0.5, .opportunistic_threads = 0.5}};
/// auto d = c.step({});
/// assert(std::get<tgs::mps_partition>(d.share).production_threads == 0.5);
/// ```
class mps {
 public:
  struct config {
    /// Fraction of SMs the production job may use, in (0, 1]. Artifact: `thread_percentage` 30.
    double production_threads = 0.3;
    /// Fraction of SMs the opportunistic job may use, in (0, 1]. Artifact: 70.
    double opportunistic_threads = 0.7;
    /// The opportunistic client at MPS's below-normal dispatch priority
    /// (`CUDA_MPS_CLIENT_PRIORITY=1`), as `priority-share` runs it, without its launch cap.
    bool opportunistic_below_normal = false;
  };

  static constexpr std::string_view name = "mps";
  static constexpr enforcement enforced_by = enforcement::hardware;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::mps;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"production-threads", "fraction of SMs the production job may use, in (0, 1]",
                      &config::production_threads},
      setting<config>{"opportunistic-threads",
                      "fraction of SMs the opportunistic job may use, in (0, 1]",
                      &config::opportunistic_threads},
      setting<config>{"opportunistic-below-normal",
                      "the opportunistic client at MPS's below-normal dispatch priority",
                      &config::opportunistic_below_normal},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit mps(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// The static partition.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("production_threads", cfg_.production_threads);
    r.add("opportunistic_threads", cfg_.opportunistic_threads);
    r.add("opportunistic_below_normal", std::int64_t{cfg_.opportunistic_below_normal ? 1 : 0});
    return r;
  }

  [[nodiscard]] rate_decision step(const rate_observation&) noexcept {
    rate_decision d;
    d.share = mps_partition{cfg_.production_threads, cfg_.opportunistic_threads, cfg_.opportunistic_below_normal};
    d.opportunistic_budget = std::nullopt;
    d.revisit_at = never;
    return d;
  }

 private:
  static config validated(const config& c) {
    using rate_detail::check;
    check(c.production_threads > 0.0 && c.production_threads <= 1.0, "mps",
          "production_threads", "in (0, 1]", c.production_threads);
    check(c.opportunistic_threads > 0.0 && c.opportunistic_threads <= 1.0, "mps",
          "opportunistic_threads", "in (0, 1]", c.opportunistic_threads);
    return c;
  }

  config cfg_;
};

static_assert(RegisteredRateController<mps>);

}  // namespace tgs
