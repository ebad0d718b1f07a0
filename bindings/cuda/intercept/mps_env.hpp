// SPDX-License-Identifier: Apache-2.0
/// @file
/// The job's MPS client environment, from its registration reply (`abi::mps_client`): the node's
/// policy decides whether the job is an MPS client, of which control daemon, at which priority
/// and SM share, and the interposer writes `CUDA_MPS_PIPE_DIRECTORY`, `CUDA_MPS_CLIENT_PRIORITY`
/// and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` before the driver's cuInit reads them. The job's own
/// values of those variables count for nothing once the node says it is a client.
#pragma once

#include "node_abi.hpp"
#include "resolve.hpp"

namespace tgs::cuda::intercept {

/// Applies a registration's MPS client settings to the process environment, unless the driver's
/// cuInit was already called in this process (its context's settings are fixed then: a
/// re-registration after a node restart is logged, never applied). Not a client: the environment
/// is left as it is. True when this process is (or, at its cuInit, becomes) an MPS client.
bool apply_mps_client(const abi::mps_client& settings) noexcept;

/// What a registration reports of this process's CUDA (`abi::register_flag_*`): whether the
/// driver's cuInit was called already, and whether it became an MPS client then.
[[nodiscard]] std::uint8_t cuda_register_flags() noexcept;

/// The gate of cuInit: registers with the node (so its MPS settings are in the environment)
/// and marks the driver as initialised, after which the environment is never changed again.
pass_token gate_init() noexcept;

/// The account step of cuInit: nothing to count.
inline void account_init(CUresult) noexcept {}

}  // namespace tgs::cuda::intercept
