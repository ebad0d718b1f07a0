// SPDX-License-Identifier: Apache-2.0
/// @file
/// libFuzzer target for tgs-node's protocol: client messages and segment contents (build with
/// -DTGS_BUILD_FUZZERS=ON and clang).
#include "node_protocol_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tgs::cuda::fuzz::run(data, size);
  return 0;
}
