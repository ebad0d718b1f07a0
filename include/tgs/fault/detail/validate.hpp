// SPDX-License-Identifier: Apache-2.0
/// @file
/// Config checks shared by the fault policies.
#pragma once

#include <string>
#include <string_view>

#include "tgs/core/config_error.hpp"
#include "tgs/core/units.hpp"

namespace tgs::detail {

/// Throws `config_error` unless `reclaim_within` is positive: a reclaim deadline of zero or less
/// cannot be met by any driver. `policy` names the policy in the message.
inline void require_positive_reclaim_within(std::string_view policy, duration reclaim_within) {
  require(reclaim_within > duration::zero(), std::string(policy) +
                                                 ": reclaim_within must be positive, got " +
                                                 std::to_string(reclaim_within.count()) + " ns");
}

}  // namespace tgs::detail
