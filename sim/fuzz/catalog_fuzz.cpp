// SPDX-License-Identifier: Apache-2.0
/// @file
/// libFuzzer target for the simulator's table readers (build with -DTGS_BUILD_FUZZERS=ON and
/// clang): the first byte picks the table (GPU types, model profiles, measured pairs, the facts
/// tgs-node measured of jobs), the rest is its text. A reader may reject the text with `input_error`, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tgs/sim/catalog.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 4) {
      case 0: (void)tgs::sim::parse_gpus(text, "fuzz.csv"); break;
      case 1: (void)tgs::sim::parse_models(text, "fuzz.csv"); break;
      case 2: (void)tgs::sim::parse_measurements(text, "fuzz.csv"); break;
      default: (void)tgs::sim::parse_job_facts(text, "fuzz.csv"); break;
    }
  } catch (const tgs::sim::input_error&) {
  }
  return 0;
}
