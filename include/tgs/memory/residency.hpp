// SPDX-License-Identifier: Apache-2.0
/// @file
/// `plan_residency`: which part of each of a job's managed allocations stays on the GPU when the
/// memory policy caps the job's resident bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs {

/// One managed allocation of a job, as the residency plan sees it.
struct managed_allocation {
  bytes size;
  /// When it was allocated, in any increasing count: a smaller value is an older allocation.
  std::uint64_t order = 0;
};

/// The bytes of each allocation (same index as `allocations`) that stay on the GPU, a prefix of
/// the allocation, so that together they stay within `limit`: a memory policy's
/// `opportunistic_resident_limit` says how much of a job may stay resident, this says which part.
///
/// The smallest allocations stay first, whole; among equal sizes the older; the first one that
/// does not fit whole keeps as many whole `granule`s as fit (partial residency: the driver moves
/// managed memory page by page), and every larger one goes to host. Why smallest first: what a
/// training step touches in full (activations, gradients, dense weights, workspaces) is many
/// allocations, each small next to what a step touches sparsely (embedding tables, caches), so a
/// byte of a small allocation kept on the GPU saves the most host-link traffic. A job whose
/// small allocations went to host instead (as when the newest allocations are evicted first, or
/// placed on host because the job was already at its limit) runs every kernel over the host
/// link. The order is stable: a new allocation displaces only the tail of a larger one (a move
/// of its own size, not of the larger allocation), never an older one of its own size, and a
/// higher limit never evicts anything (the plan is monotone in `limit`).
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
/// ```
[[nodiscard]] inline std::vector<bytes> plan_residency(std::span<const managed_allocation> allocations, bytes limit,
                                                       bytes granule) {
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
  for (const std::size_t i : order) {
    const std::uint64_t size = allocations[i].size.count();
    const std::uint64_t keep = size <= left ? size : left / unit * unit;
    resident[i] = bytes{keep};
    left -= keep;
  }
  return resident;
}

}  // namespace tgs
