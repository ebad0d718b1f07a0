// SPDX-License-Identifier: Apache-2.0
/// @file
/// How each opportunistic job shares its GPU: the mechanism choice, in one include.
#pragma once

#include "tgs/sharing/mechanism_choice.hpp"
