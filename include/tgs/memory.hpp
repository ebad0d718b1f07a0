// SPDX-License-Identifier: Apache-2.0
/// @file
/// Every memory policy, the `MemoryPolicy` concept, the run-time registry and the residency plan,
/// in one include.
#pragma once

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/memory/concepts.hpp"
#include "tgs/memory/hard_limit.hpp"
#include "tgs/memory/no_oversubscription.hpp"
#include "tgs/memory/plain_unified_memory.hpp"
#include "tgs/memory/residency.hpp"
#include "tgs/memory/transparent_unified_memory.hpp"
