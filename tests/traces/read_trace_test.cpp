// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests of what every reader shares: the file checks before reading, a UTF-8 byte-order mark,
/// and values shown in messages with what would not print escaped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

constexpr std::string_view bom = "\xEF\xBB\xBF";

/// A scratch folder of its own for one test, removed at the end.
class scratch_dir {
 public:
  scratch_dir()
      : path_(std::filesystem::temp_directory_path() /
              ("tgs-traces-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(ReadTrace, RefusesAFifoBeforeOpeningIt) {
  // Opening a FIFO for reading would wait for a writer forever: the reader must not open it.
  const scratch_dir dir;
  const auto fifo = dir.path() / "trace.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { (void)read_trace(fifo, trace_format::philly_csv); }),
            fifo.string() + ": cannot read: not a regular file (a FIFO)");
}

TEST(ReadTrace, RefusesADirectoryAndNamesAMissingFile) {
  const scratch_dir dir;
  EXPECT_EQ(error_of([&] { (void)read_trace(dir.path(), trace_format::philly_json); }),
            dir.path().string() + ": cannot read: not a regular file (a directory)");
  EXPECT_EQ(error_of([&] { (void)read_trace(dir.path() / "none.csv", trace_format::tgs_csv); }),
            (dir.path() / "none.csv").string() + ": cannot open: No such file or directory");
}

TEST(ReadTrace, FollowsASymbolicLinkToARegularFile) {
  const scratch_dir dir;
  std::ofstream{dir.path() / "real.csv"} << "submit_s,gpus,duration_s\n0,1,5\n";
  std::filesystem::create_symlink(dir.path() / "real.csv", dir.path() / "link.csv");
  EXPECT_EQ(read_trace(dir.path() / "link.csv", trace_format::tgs_csv).jobs.size(), 1U);
}

TEST(ByteOrderMark, IsAcceptedAtTheStartOfEveryFormat) {
  const trace csv = parse_philly_csv(
      std::string{bom} +
          "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n",
      "bom.csv");
  ASSERT_EQ(csv.jobs.size(), 1U);
  EXPECT_EQ(csv.jobs[0].source_line, 2U);

  const trace stream = parse_tgs_csv(
      std::string{bom} + "# origin: 2024-03-01 09:00:00\nsubmit_s,gpus,duration_s\n0,1,60\n",
      "bom.csv");
  ASSERT_EQ(stream.jobs.size(), 1U);
  EXPECT_TRUE(stream.origin.has_value());

  const trace json = parse_philly_json(
      std::string{bom} +
          R"([{"id":"a","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"}])",
      "bom.json");
  ASSERT_EQ(json.jobs.size(), 1U);
  EXPECT_EQ(json.jobs[0].source_line, 1U);
}

TEST(ByteOrderMark, IsShownEscapedWhereItIsNotAtTheStart) {
  // Only the first one is a byte-order mark; a second is a character of the header cell, and
  // the message shows it instead of printing a name that looks right.
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(std::string{bom} + std::string{bom} +
                                         "timestamp,duration,num_gpus,gpu_time,cluster\n",
                                     "b.csv");
            }),
            "b.csv:1: header: expected column names from "
            "timestamp,duration,num_gpus,gpu_time,cluster, got \"\\uFEFFtimestamp\"");
}

TEST(Messages, EscapeCharactersThatDoNotPrint) {
  // A zero-width space, a no-break space and a right-to-left mark in header cells.
  EXPECT_THAT(
      error_of([] { (void)parse_tgs_csv("submit_s,gpus\xE2\x80\x8B,duration_s\n", "z.csv"); }),
      HasSubstr("got \"gpus\\u200B\""));
  EXPECT_THAT(error_of([] { (void)parse_tgs_csv("submit_s,\xC2\xA0gpus,duration_s\n", "z.csv"); }),
              HasSubstr("got \"\\u00A0gpus\""));
  EXPECT_THAT(
      error_of([] { (void)parse_tgs_csv("submit_s,gpus,duration_s,\xE2\x80\x8Fvc\n", "z.csv"); }),
      HasSubstr("got \"\\u200Fvc\""));
  // Printable text outside ASCII is shown as it is.
  EXPECT_THAT(error_of([] { (void)parse_tgs_csv("submit_s,gpus,dur\xC3\xA9\n", "z.csv"); }),
              HasSubstr("got \"dur\xC3\xA9\""));
}

}  // namespace
}  // namespace tgs::traces
