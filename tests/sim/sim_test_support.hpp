// SPDX-License-Identifier: Apache-2.0
/// @file
/// Shared fixtures of the simulator tests: the calibrated default model, built once per binary,
/// and the message of a call that throws `input_error`.
#pragma once

#include <string>

#include "tgs/sim/pairs.hpp"

namespace tgs::sim::testing {

/// The embedded catalog with every parameter fitted, as tgs-sim runs with it.
inline const calibrated_model& default_model() {
  static const calibrated_model model = calibrate();
  return model;
}

/// The message `f` throws as `input_error`, or "(no error)" when it throws nothing.
inline std::string error_of(auto&& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tgs::sim::testing
