// SPDX-License-Identifier: Apache-2.0
/// @file
/// Small helpers the rate controllers share: saturating time arithmetic and window scaling.
#pragma once

#include <cstdint>
#include <limits>

#include "tgs/core/units.hpp"

namespace tgs::rate_detail {

/// `t + d`, saturating at `never`, so a controller near the end of policy time never overflows.
[[nodiscard]] constexpr instant later(instant t, duration d) noexcept {
  if (d <= duration::zero()) return t;
  if (t >= never - d) return never;
  return t + d;
}

/// Scales a count observed over `window` to a count per `period`. A non-positive window yields
/// 0: the caller decides what an empty window means, nothing divides by zero.
[[nodiscard]] constexpr double per_period(std::uint64_t count, duration window,
                                          duration period) noexcept {
  if (window <= duration::zero()) return 0.0;
  // Multiply first: integer counts and spans stay exact in a double up to 2^53, so a rate seen
  // through a window of the same length, or a whole multiple of it, scales without rounding.
  return static_cast<double>(count) * static_cast<double>(period.count()) /
         static_cast<double>(window.count());
}

/// `a + b` on unsigned counts, saturating instead of wrapping.
[[nodiscard]] constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > std::numeric_limits<std::uint64_t>::max() - b
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

}  // namespace tgs::rate_detail
