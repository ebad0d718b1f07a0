// SPDX-License-Identifier: Apache-2.0
/// @file
/// libFuzzer target for the philly-csv reader (build with -DTGS_BUILD_FUZZERS=ON and clang).
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tgs::traces::fuzz::run(data, size, tgs::traces::trace_format::philly_csv);
  return 0;
}
