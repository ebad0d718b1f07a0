// SPDX-License-Identifier: Apache-2.0
/// @file
/// Runs every file of the fuzzers' seed corpus through its reader, so a g++-only CI still
/// checks that the corpus parses or fails cleanly with a `trace_error`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

void run_corpus(const std::string& folder, trace_format format) {
  const std::filesystem::path dir =
      std::filesystem::path{TGS_SOURCE_DIR} / "traces" / "fuzz" / "corpus" / folder;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::size_t files = 0;
  std::size_t parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator{dir}) {
    std::ifstream in{entry.path(), std::ios::binary};
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    ++files;
    for (const on_malformed mode : {on_malformed::fail, on_malformed::skip}) {
      try {
        const trace t = parse_trace(text, format, entry.path().filename().string(),
                                    {.malformed = mode, .duplicates = {}, .max_reasons = 5});
        for (std::size_t i = 0; i < t.jobs.size(); ++i) {
          EXPECT_EQ(t.jobs[i].id, tgs::job_id(i));
          EXPECT_GE(t.jobs[i].gpus, 1U);
          EXPECT_TRUE(t.jobs[i].run_time || t.jobs[i].iterations);
          if (i > 0) {
            EXPECT_LE(t.jobs[i - 1].submit, t.jobs[i].submit);
          }
        }
        parsed += mode == on_malformed::fail ? 1U : 0U;
      } catch (const trace_error& e) {
        EXPECT_FALSE(std::string{e.what()}.empty());
      }
    }
  }
  EXPECT_GE(files, 3U) << "the corpus of " << folder << " should have a few seeds";
  EXPECT_GE(parsed, 1U) << "at least one seed of " << folder << " should be a valid trace";
}

TEST(FuzzCorpus, PhillyJsonSeedsParseOrFailCleanly) {
  run_corpus("philly_json", trace_format::philly_json);
}
TEST(FuzzCorpus, PhillyCsvSeedsParseOrFailCleanly) {
  run_corpus("philly_csv", trace_format::philly_csv);
}
TEST(FuzzCorpus, TgsCsvSeedsParseOrFailCleanly) {
  run_corpus("tgs_csv", trace_format::tgs_csv);
}

}  // namespace
}  // namespace tgs::traces
