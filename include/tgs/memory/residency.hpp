// SPDX-License-Identifier: Apache-2.0
/// @file
/// `plan_residency`: which part of each of a job's managed allocations stays on the GPU when the
/// memory policy caps the job's resident bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs {

/// One managed allocation of a job, as the residency plan sees it.
struct managed_allocation {
  bytes size;
  /// When it was allocated, in any increasing count: a smaller value is an older allocation.
  std::uint64_t order = 0;
};

/// How `plan_residency` shares a limit among the allocations that do not all fit.
enum class residency_split : std::uint8_t {
  /// In order, smallest first (among equal sizes the older): every allocation stays whole until
  /// one does not fit, which keeps what fits; at most one allocation is partly resident.
  in_order = 0,
  /// Max-min fair (water-filling): the allocations smaller than an equal share of what is left
  /// stay whole, smallest first, and the others each keep an equal prefix. For a job whose
  /// large allocations are embedding tables with their hot rows first (ids ordered by
  /// frequency), every table keeps its hot rows on the GPU, where `in_order` keeps some tables
  /// whole and leaves the hot rows of the others on host. For uniform access the two keep the
  /// same bytes and move the same traffic over the host link.
  even = 1,
};

[[nodiscard]] constexpr std::string_view to_string(residency_split s) noexcept {
  return s == residency_split::even ? "even" : "in-order";
}

/// "in-order" or "even" (as tgs-node's `--residency-split` takes it); nullopt otherwise.
[[nodiscard]] constexpr std::optional<residency_split> parse_residency_split(std::string_view s) noexcept {
  if (s == "in-order") return residency_split::in_order;
  if (s == "even") return residency_split::even;
  return std::nullopt;
}

/// The bytes of each allocation (same index as `allocations`) that stay on the GPU, a prefix of
/// the allocation, so that together they stay within `limit`: a memory policy's
/// `opportunistic_resident_limit` says how much of a job may stay resident, this says which part.
///
/// The smallest allocations stay first, whole; among equal sizes the older. With
/// `residency_split::in_order` the first one that does not fit whole keeps as many whole
/// `granule`s as fit (partial residency: the driver moves managed memory page by page), and every
/// larger one goes to host; with `residency_split::even` every allocation that does not fit whole
/// keeps the same number of whole granules (the older ones a granule more where the granules do
/// not divide evenly, and one less than a granule from whole is made whole if the rest allows).
/// Why smallest first: what a training step touches in full (activations, gradients, dense
/// weights, workspaces) is many allocations, each small next to what a step touches sparsely
/// (embedding tables, caches), so a byte of a small allocation kept on the GPU saves the most
/// host-link traffic. A job whose small allocations went to host instead (as when
/// the newest allocations are evicted first, or placed on host because the job was already at
/// its limit) runs every kernel over the host link. A new allocation displaces only its own size
/// from the tails of larger ones, never an older one of its own size, and a higher limit never
/// evicts anything (the plan is monotone in `limit`).
///
/// Whole allocations and whole granules only: `limit` minus the planned total is less than one
/// `granule` when the allocations exceed the limit. A `granule` of zero means one byte.
///
/// ```cpp
/// using namespace tgs::literals;
/// const tgs::managed_allocation allocs[] = {{8_GiB, 1}, {64_MiB, 2}, {8_GiB, 3}};
/// std::vector<tgs::bytes> plan = tgs::plan_residency(allocs, 10_GiB, 2_MiB);
/// // plan == {8_GiB, 64_MiB, 1984_MiB}: the small one and the older table whole, the newer
/// // table in part (the 1984 MiB that fit, in 2 MiB granules).
/// plan = tgs::plan_residency(allocs, 10_GiB, 2_MiB, tgs::residency_split::even);
/// // plan == {5088_MiB, 64_MiB, 5088_MiB}: the small one whole, each table the same prefix.
/// ```
[[nodiscard]] inline std::vector<bytes> plan_residency(std::span<const managed_allocation> allocations, bytes limit,
                                                       bytes granule,
                                                       residency_split split = residency_split::in_order) {
  std::vector<std::size_t> order(allocations.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const managed_allocation& x = allocations[a];
    const managed_allocation& y = allocations[b];
    if (x.size != y.size) return x.size < y.size;
    if (x.order != y.order) return x.order < y.order;
    return a < b;
  });
  const std::uint64_t unit = std::max<std::uint64_t>(granule.count(), 1);
  std::vector<bytes> resident(allocations.size());
  std::uint64_t left = limit.count();
  if (split == residency_split::in_order) {
    for (const std::size_t i : order) {
      const std::uint64_t size = allocations[i].size.count();
      const std::uint64_t keep = size <= left ? size : left / unit * unit;
      resident[i] = bytes{keep};
      left -= keep;
    }
    return resident;
  }
  // Water-filling: an allocation that fits in an equal share of what is left stays whole (and
  // the share of the others only grows); from the first one that does not, every remaining one
  // is larger than the share and keeps the share's whole granules.
  std::size_t k = 0;
  for (; k < order.size(); ++k) {
    const std::uint64_t size = allocations[order[k]].size.count();
    if (size > left / (order.size() - k)) break;
    resident[order[k]] = bytes{size};
    left -= size;
  }
  if (k == order.size()) return resident;
  const std::uint64_t share = left / (order.size() - k) / unit * unit;
  for (std::size_t j = k; j < order.size(); ++j) {
    resident[order[j]] = bytes{share};
    left -= share;
  }
  // What the rounding left: a granule more each, smallest and oldest first, or the whole rest of
  // an allocation that is less than a granule from whole, while it lasts.
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t j = k; j < order.size(); ++j) {
      const std::uint64_t size = allocations[order[j]].size.count();
      const std::uint64_t kept = resident[order[j]].count();
      const std::uint64_t add = std::min(unit, size - kept);
      if (add == 0 || add > left) continue;
      resident[order[j]] = bytes{kept + add};
      left -= add;
      grew = true;
    }
  }
  return resident;
}

}  // namespace tgs
