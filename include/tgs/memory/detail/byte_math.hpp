// SPDX-License-Identifier: Apache-2.0
/// @file
/// Overflow-safe byte arithmetic shared by the memory policies.
#pragma once

#include <algorithm>
#include <optional>

#include "tgs/core/units.hpp"
#include "tgs/memory/concepts.hpp"

namespace tgs::detail {

/// `a + b`, saturating at `bytes::max()`. An observation comes from a driver's accounting, and a
/// wrapped sum would turn an absurd footprint into a small one that passes every check.
[[nodiscard]] constexpr bytes saturating_add(bytes a, bytes b) noexcept {
  return b > bytes::max() - a ? bytes::max() : a + b;
}

/// Whether `size` more bytes on top of `held` stay within `limit`, without overflowing.
[[nodiscard]] constexpr bool fits(bytes held, bytes size, bytes limit) noexcept {
  return size <= limit && held <= limit - size;
}

/// The bytes a job holds, or zero when the job is not on the GPU.
[[nodiscard]] constexpr bytes allocated(const std::optional<job_memory>& job) noexcept {
  return job ? job->allocated : bytes{};
}

}  // namespace tgs::detail
