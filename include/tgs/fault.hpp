// SPDX-License-Identifier: Apache-2.0
/// @file
/// Every fault policy, the `FaultPolicy` concept and the run-time registry, in one include.
#pragma once

#include "tgs/fault/any_fault_policy.hpp"
#include "tgs/fault/concepts.hpp"
#include "tgs/fault/separate_contexts.hpp"
#include "tgs/fault/shared_fault_domain.hpp"
