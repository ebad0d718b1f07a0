// SPDX-License-Identifier: Apache-2.0
// Runs every seed of the node protocol fuzzer's corpus through the fuzzer's body, so a g++-only CI
// checks the node's parser and loops on them (the libFuzzer target needs clang).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "node_protocol_fuzz.hpp"

TEST(NodeProtocolFuzzCorpus, EverySeedRunsCleanly) {
  const std::filesystem::path dir = std::filesystem::path{TGS_SOURCE_DIR} / "bindings/cuda/fuzz/corpus/node_protocol";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator{dir}) {
    std::ifstream in{entry.path(), std::ios::binary};
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    SCOPED_TRACE(entry.path().filename().string());
    tgs::cuda::fuzz::run(bytes.data(), bytes.size());  // a broken promise aborts
    ++seeds;
  }
  EXPECT_GE(seeds, 5U);
}
