// SPDX-License-Identifier: Apache-2.0
/// @file
/// The exception every policy constructor throws for an out-of-range `config` field.
#pragma once

#include <stdexcept>
#include <string>

namespace tgs {

/// Thrown by a policy's constructor when its `config` is invalid. The message names the policy
/// and the field, so a driver can show it to the user unchanged (for example
/// `tgs_rate_control: dead_band must be in (0, 1), got 1.5`).
class config_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Throws `config_error` with `what` unless `ok`. Constructors only: `step` never throws.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw config_error(what);
}

}  // namespace tgs
