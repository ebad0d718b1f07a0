// SPDX-License-Identifier: Apache-2.0
/// @file
/// One registration attempt with tgs-node: connect, send `register_job`, receive the segment's
/// descriptor, check the segment and map it. Every step is bounded (`abi::job_socket_timeout_ns`)
/// and every failure closes what it opened and says why, so the caller can fail open.
///
/// What the interposer checks before it maps a segment the node handed over: the descriptor's
/// size (a shorter file would raise SIGBUS on the first access past its end), its seals (a file
/// that can still shrink could raise it later), and the identity line (magic, ABI version,
/// size), read while the mapping is still in place.
#pragma once

#include <chrono>
#include <cstdint>

#include "job_link.hpp"

namespace tgs::cuda::intercept {

enum class register_outcome { registered, absent, mismatch, rejected };

/// The result of one attempt. On `registered`, `link` is a new published-to-be state that owns
/// `socket` and the mapping.
struct registration {
  register_outcome outcome = register_outcome::absent;
  int socket = -1;
  const link_state* link = nullptr;
  std::uint32_t node_version = 0;
  char reason[256] = {};
  /// On `rejected`: what the node does once this job uses a GPU unregistered.
  abi::refused_then then = abi::refused_then::runs;
  /// The job's MPS client settings (registered only; checked: `abi::valid_mps_client`).
  abi::mps_client mps{};
  /// On `absent`: the node's socket exists (a node restarting, busy, or over its caps), so a
  /// first registration waits for it (`abi::first_registration_wait_*`).
  bool node_there = false;
};

/// Connects, registers (reporting `holdings`) and maps the segment. Never throws, never blocks
/// longer than `abi::job_socket_timeout_ns` per step.
[[nodiscard]] registration register_with_node(const abi::job_holdings& holdings) noexcept;

/// How long a job's first registration waits for a node whose socket is there and does not answer
/// yet: its class's bound (`abi::first_registration_wait_*`), or `TGS_REGISTRATION_WAIT_MS`.
[[nodiscard]] std::uint64_t first_registration_wait_ns() noexcept;

/// How long a job waits between attempts while its node's socket does not answer (a restart takes
/// well under a second).
inline constexpr std::chrono::milliseconds absent_retry{200};

/// Waits until `fd` is ready for `events` (poll) or `deadline_ns` (CLOCK_MONOTONIC) passes;
/// false on timeout or error.
[[nodiscard]] bool wait_ready(int fd, short events, std::uint64_t deadline_ns) noexcept;

/// The path of the node's socket (`TGS_NODE_SOCKET`, default `/run/tgs/node.sock`).
[[nodiscard]] const char* socket_path() noexcept;

}  // namespace tgs::cuda::intercept
