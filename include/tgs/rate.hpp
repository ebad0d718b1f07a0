// SPDX-License-Identifier: Apache-2.0
/// @file
/// Umbrella header of the rate-control family: the seam, every controller and the type-erased
/// wrapper with its registry.
#pragma once

#include "tgs/rate/antman.hpp"               // IWYU pragma: export
#include "tgs/rate/any_rate_controller.hpp"  // IWYU pragma: export
#include "tgs/rate/co_execution.hpp"         // IWYU pragma: export
#include "tgs/rate/concepts.hpp"             // IWYU pragma: export
#include "tgs/rate/exclusive.hpp"            // IWYU pragma: export
#include "tgs/rate/idle_harvest.hpp"         // IWYU pragma: export
#include "tgs/rate/mig.hpp"                  // IWYU pragma: export
#include "tgs/rate/mps.hpp"                  // IWYU pragma: export
#include "tgs/rate/priority_share.hpp"       // IWYU pragma: export
#include "tgs/rate/tgs_rate_control.hpp"     // IWYU pragma: export
#include "tgs/rate/time_slice_lock.hpp"      // IWYU pragma: export
#include "tgs/rate/token_bucket.hpp"         // IWYU pragma: export
