// SPDX-License-Identifier: Apache-2.0
/// @file
/// `tgs.Trace`: a job stream held for Python, shared and never changed once read.
#pragma once

#include <memory>

#include "tgs/traces/trace.hpp"

namespace tgs::python {

/// A read trace; runs copy it before labelling, so one trace serves many runs.
struct python_trace {
  std::shared_ptr<const traces::trace> value;
};

}  // namespace tgs::python
