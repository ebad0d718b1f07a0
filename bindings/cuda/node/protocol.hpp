// SPDX-License-Identifier: Apache-2.0
/// @file
/// What tgs-node makes of the bytes a client sends: one `SOCK_SEQPACKET` message, checked for the
/// magic, the ABI version, a known type and at least that type's size, and copied into its struct.
/// Pure (no socket, no state), so the fuzzer (`bindings/cuda/fuzz`) drives exactly the code the
/// node runs. Whether a message is allowed on a connection (registered yet or not) is the
/// server's decision.
#pragma once

#include <cstddef>
#include <cstring>

#include "node_abi.hpp"

namespace tgs::cuda::node {

/// What a client's message is.
enum class message_kind : std::uint8_t {
  malformed,       ///< shorter than a header, or a known type shorter than its struct, or unknown
  other_abi,       ///< another magic or version: answered with a rejection in this node's version
  register_job,
  memory_request,
  status,
};

/// A parsed message: its kind, the version it claimed, and the struct of its kind.
struct parsed_message {
  message_kind kind = message_kind::malformed;
  std::uint32_t abi_version = 0;
  abi::register_request registration{};
  abi::memory_request memory{};
  abi::status_request status{};
};

/// Parses the `size` bytes of one message at `data`.
[[nodiscard]] inline parsed_message parse_message(const void* data, std::size_t size) noexcept {
  parsed_message out;
  abi::message_header header;
  if (data == nullptr || size < sizeof(header)) return out;
  std::memcpy(&header, data, sizeof(header));
  out.abi_version = header.abi_version;
  if (header.magic != abi::message_magic || header.abi_version != abi::version) {
    out.kind = message_kind::other_abi;
    return out;
  }
  switch (header.type) {
    case abi::message_type::register_job:
      if (size < sizeof(out.registration)) return out;
      std::memcpy(&out.registration, data, sizeof(out.registration));
      out.kind = message_kind::register_job;
      return out;
    case abi::message_type::memory_request:
      if (size < sizeof(out.memory)) return out;
      std::memcpy(&out.memory, data, sizeof(out.memory));
      out.kind = message_kind::memory_request;
      return out;
    case abi::message_type::status:
      if (size < sizeof(out.status)) return out;
      std::memcpy(&out.status, data, sizeof(out.status));
      out.kind = message_kind::status;
      return out;
    default: return out;
  }
}

}  // namespace tgs::cuda::node
