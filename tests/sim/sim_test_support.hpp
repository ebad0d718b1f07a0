// SPDX-License-Identifier: Apache-2.0
/// @file
/// Shared fixtures of the simulator tests: the calibrated default model, built once per binary.
#pragma once

#include "tgs/sim/pairs.hpp"

namespace tgs::sim::testing {

/// The embedded catalog with every parameter fitted, as tgs-sim runs with it.
inline const calibrated_model& default_model() {
  static const calibrated_model model = calibrate();
  return model;
}

}  // namespace tgs::sim::testing
