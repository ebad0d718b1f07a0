// SPDX-License-Identifier: Apache-2.0
/// @file
/// Helpers for the trace tests: fixture paths, the real-trace folder and error capture.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "tgs/traces/trace.hpp"

namespace tgs::traces::testing {

/// A fixture file of tests/traces/data.
inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path{TGS_TEST_DATA_DIR} / name;
}

/// The folder with the real Philly-derived files: $TGS_TRACES, else ../shared/traces beside the
/// source tree.
inline std::filesystem::path real_traces_dir() {
  if (const char* dir = std::getenv("TGS_TRACES"); dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path{TGS_SOURCE_DIR} / ".." / "shared" / "traces";
}

/// The message of the `trace_error` that `f` throws; fails the test when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const trace_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a trace_error, got none";
  return {};
}

}  // namespace tgs::traces::testing

/// Skips the test unless the real file `name` exists in the real-trace folder, as `var`.
#define TGS_REAL_TRACE_OR_SKIP(var, name)                                               \
  const std::filesystem::path var = ::tgs::traces::testing::real_traces_dir() / (name); \
  if (!std::filesystem::exists(var)) {                                                  \
    GTEST_SKIP() << "real trace " << (name) << " not found in "                         \
                 << ::tgs::traces::testing::real_traces_dir()                           \
                 << " (set TGS_TRACES to the folder holding it)";                       \
  }
