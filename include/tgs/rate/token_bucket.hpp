// SPDX-License-Identifier: Apache-2.0
/// @file
/// `token_bucket`: a fixed opportunistic share, refilled every window, as HAMi and Gemini enforce.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// A fixed share: the opportunistic job may launch `budget_blocks` thread blocks per
/// `budget_window`, whatever the production job does. This is the static-quota family: HAMi-core
/// limits a container's SM utilisation to `CUDA_DEVICE_SM_LIMIT` with a token bucket its launch
/// hook drains, and Gemini (Chen et al., 2021) hands out fixed time-slice tokens per quota. Unlike
/// TGS it never learns how much the production job can spare, so the share is either too small
/// (idle GPU) or too large (a slowed production job): the weakness of fixed limits that TGS's
/// adaptive control addresses.
///
/// With `release_when_alone` (off by default, as HAMi-core's limit holds regardless of
/// co-runners) the opportunistic job runs unthrottled while no production job is present.
/// The decision changes only on job events, so `revisit_at` is always `never`.
///
/// ```cpp
/// tgs::token_bucket c{{.budget_blocks = 5000}};
/// auto d = c.step({});
/// assert(d.opportunistic_budget == 5000u);
/// ```
class token_bucket {
 public:
  struct config {
    /// Thread blocks per window. Our default: TGS's starting budget (`LIMIT_INITIALIZER` =
    /// 20000), so a fixed share and TGS start from the same point.
    std::uint64_t budget_blocks = 20'000;
    /// Refill period. Our default: the 50 ms window of the TGS interposer (`rate_watcher`), which
    /// the same enforcement code then serves.
    duration budget_window = std::chrono::milliseconds{50};
    /// Unthrottle the opportunistic job while no production job is on the GPU.
    bool release_when_alone = false;
  };

  static constexpr std::string_view name = "token-bucket";
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = true;
  static constexpr std::array setting_table{
      setting<config>{"budget-blocks", "the opportunistic job's fixed share, blocks per budget window",
                      &config::budget_blocks},
      setting<config>{"budget-window-ms", "refill period of the share", &config::budget_window},
      setting<config>{"release-when-alone",
                      "unthrottle the opportunistic job while no production job is on the GPU",
                      &config::release_when_alone},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit token_bucket(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// The fixed share.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("budget_blocks", static_cast<std::int64_t>(cfg_.budget_blocks));
    return r;
  }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.budget_window = cfg_.budget_window;
    d.revisit_at = never;
    if (cfg_.release_when_alone && !obs.production) {
      d.opportunistic_budget = std::nullopt;
    } else {
      d.opportunistic_budget = cfg_.budget_blocks;
    }
    return d;
  }

 private:
  static config validated(const config& c) {
    using rate_detail::check;
    check(c.budget_blocks >= 1, "token_bucket", "budget_blocks",
          "at least 1 (a zero share is the exclusive policy)", c.budget_blocks);
    check(c.budget_window > duration::zero(), "token_bucket", "budget_window", "positive",
          c.budget_window);
    return c;
  }

  config cfg_;
};

static_assert(RegisteredRateController<token_bucket>);

}  // namespace tgs
