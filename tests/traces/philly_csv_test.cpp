// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests of the Pollux per-job Philly CSV reader: sorting (and `normalise`'s in-place stable sort),
/// duplicates, and malformed rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

using testing::error_of;
using testing::fixture;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::string_view header = "timestamp,duration,num_gpus,gpu_time,cluster\n";

std::string with_header(std::string_view rows) {
  return std::string{header} + std::string{rows};
}

TEST(PhillyCsvReader, SortsUnsortedRowsStablyAndKeepsDuplicates) {
  const trace t = read_trace(fixture("pollux.csv"), trace_format::philly_csv);
  ASSERT_EQ(t.jobs.size(), 6U);
  EXPECT_EQ(t.stats.rows_read, 6U);
  EXPECT_EQ(t.stats.duplicates, 1U);
  ASSERT_TRUE(t.origin.has_value());
  EXPECT_EQ(*t.origin, std::chrono::sys_days{std::chrono::year{2017} / 10 / 7} + 1h + 11min + 39s);
  // Sorted by submission; the three rows of 06:13:03 stay in file order (lines 3, 5, 6).
  const std::size_t lines[] = {4, 7, 3, 5, 6, 2};
  const std::int64_t submit_s[] = {0, 168'500, 190'884, 190'884, 190'884, 193'816};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(t.jobs[i].source_line, lines[i]) << "job " << i;
    EXPECT_EQ(t.jobs[i].submit, tgs::epoch + std::chrono::seconds{submit_s[i]}) << "job " << i;
  }
  EXPECT_EQ(t.jobs[0].run_time, std::chrono::seconds{193'256});
  EXPECT_EQ(t.jobs[0].gpus, 8U);
  EXPECT_EQ(t.jobs[0].vc, "ee9e8c");
  EXPECT_EQ(t.jobs[4].run_time, std::chrono::milliseconds{120'500});
  EXPECT_FALSE(t.jobs[0].priority.has_value());
  EXPECT_FALSE(t.jobs[0].model.has_value());
}

TEST(Normalise, IsAStableSortOfAnyOrderWithManyTies) {
  // Rows in a shuffled order with 50 distinct submission times: every permutation cycle length
  // occurs, and each tie must keep input order (the record's line says which it was).
  std::mt19937_64 rng(7);
  trace t;
  for (std::size_t i = 0; i < 5000; ++i) {
    job_record r;
    r.submit = tgs::epoch + std::chrono::seconds{static_cast<std::int64_t>(rng() % 50) + 3};
    r.source_line = i;
    r.name = std::to_string(i);
    t.jobs.push_back(std::move(r));
  }
  std::vector<job_record> expected = t.jobs;
  std::stable_sort(expected.begin(), expected.end(),
                   [](const job_record& a, const job_record& b) { return a.submit < b.submit; });
  normalise(t);
  ASSERT_EQ(t.jobs.size(), expected.size());
  const tgs::duration first = expected.front().submit - tgs::epoch;
  for (std::size_t i = 0; i < t.jobs.size(); ++i) {
    EXPECT_EQ(t.jobs[i].source_line, expected[i].source_line) << "job " << i;
    EXPECT_EQ(t.jobs[i].name, expected[i].name) << "job " << i;
    EXPECT_EQ(t.jobs[i].submit, expected[i].submit - first) << "job " << i;
    EXPECT_EQ(t.jobs[i].id, tgs::job_id{static_cast<std::uint32_t>(i)});
  }
}

TEST(PhillyCsvReader, DropsDuplicatesWhenAsked) {
  const trace t =
      read_trace(fixture("pollux.csv"), trace_format::philly_csv,
                 {.malformed = {}, .duplicates = duplicate_rule::drop, .max_reasons = 5});
  EXPECT_EQ(t.jobs.size(), 5U);
  EXPECT_EQ(t.stats.duplicates, 1U);
  EXPECT_EQ(t.stats.rows_dropped, 1U);
  ASSERT_EQ(t.stats.drop_reasons.size(), 1U);
  EXPECT_THAT(t.stats.drop_reasons[0], HasSubstr("pollux.csv:5: dropped: duplicate of line 3"));
}

TEST(PhillyCsvReader, AcceptsColumnsInAnyOrder) {
  const trace t = parse_philly_csv(
      "cluster,num_gpus,gpu_time,duration,timestamp\n"
      "abc,2,20,10,2017-10-09 07:01:55\n",
      "o.csv");
  ASSERT_EQ(t.jobs.size(), 1U);
  EXPECT_EQ(t.jobs[0].gpus, 2U);
  EXPECT_EQ(t.jobs[0].run_time, std::chrono::seconds{10});
}

TEST(PhillyCsvReader, RejectsNegativeDuration) {
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(with_header("2017-10-09 07:01:55,-5,1,-5,a\n"), "n.csv");
            }),
            "n.csv:2: column \"duration\": expected a non-negative number of seconds, got \"-5\"");
}

TEST(PhillyCsvReader, RejectsBadTimestamp) {
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(
                  with_header("2017-10-09 07:01:55,1,1,1,a\n2017-02-29 07:01:55,1,1,1,a\n"),
                  "t.csv");
            }),
            "t.csv:3: column \"timestamp\": expected a time \"YYYY-MM-DD HH:MM:SS\", got "
            "\"2017-02-29 07:01:55\"");
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09T07:01:55,1,1,1,a\n"), "t.csv");
              }),
              HasSubstr("t.csv:2: column \"timestamp\""));
}

TEST(PhillyCsvReader, RejectsMissingColumnInHeaderAndRow) {
  EXPECT_EQ(
      error_of([] { (void)parse_philly_csv("timestamp,duration,num_gpus,cluster\n", "h.csv"); }),
      "h.csv:1: header: expected a column \"gpu_time\" (required: "
      "timestamp,duration,num_gpus,gpu_time,cluster), got "
      "\"timestamp,duration,num_gpus,cluster\"");
  EXPECT_EQ(
      error_of([] { (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1,1,1\n"), "r.csv"); }),
      "r.csv:2: expected 5 fields as in the header, got 4");
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv("timestamp,duration,num_gpus,gpu_time,cluster,user\n",
                                       "u.csv");
              }),
              HasSubstr("u.csv:1: header: expected column names from "
                        "timestamp,duration,num_gpus,gpu_time,cluster, got \"user\""));
}

TEST(PhillyCsvReader, RejectsWrongTypesAndInconsistentGpuTime) {
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1,one,1,a\n"), "w.csv");
              }),
              HasSubstr("w.csv:2: column \"num_gpus\": expected a positive integer"));
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1,0,0,a\n"), "w.csv");
              }),
              HasSubstr("w.csv:2: column \"num_gpus\": expected a positive integer"));
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09 07:01:55,nan,1,1,a\n"), "w.csv");
              }),
              HasSubstr("w.csv:2: column \"duration\": expected a number of seconds"));
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(with_header("2017-10-09 07:01:55,10,4,41,a\n"), "g.csv");
            }),
            "g.csv:2: column \"gpu_time\": expected duration x num_gpus = 40, got \"41\"");
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1e99,1,1e99,a\n"), "w.csv");
              }),
              HasSubstr("w.csv:2: column \"duration\": expected a number of seconds in [0, 1e9]"));
}

TEST(PhillyCsvReader, RejectsEmptyFileAndGarbage) {
  EXPECT_EQ(error_of([] { (void)parse_philly_csv("", "e.csv"); }),
            "e.csv:1: expected the header \"timestamp,duration,num_gpus,gpu_time,cluster\", got "
            "an empty file");
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1,1,1,a\xc0\xaf\n"),
                                       "g.csv");
              }),
              HasSubstr("g.csv:2: expected UTF-8 text, got the byte 0xC0"));
  EXPECT_THAT(error_of([] { (void)parse_philly_csv(std::string("a\0b", 3), "z.csv"); }),
              HasSubstr("z.csv:1: expected UTF-8 text, got a NUL byte"));
}

TEST(PhillyCsvReader, SkipOptionCountsRowsAndKeepsFirstReasons) {
  const std::string text = with_header(
      "2017-10-09 07:01:55,1,1,1,a\n"
      "bad,1,1,1,a\n"
      "2017-10-09 07:01:55,-1,1,1,a\n"
      "2017-10-09 07:01:55,1,1,1\n"
      "2017-10-09 07:01:56,2,1,2,b\n");
  const trace t = parse_philly_csv(
      text, "s.csv", {.malformed = on_malformed::skip, .duplicates = {}, .max_reasons = 2});
  EXPECT_EQ(t.jobs.size(), 2U);
  EXPECT_EQ(t.stats.rows_read, 5U);
  EXPECT_EQ(t.stats.rows_kept, 2U);
  EXPECT_EQ(t.stats.rows_skipped, 3U);
  ASSERT_EQ(t.stats.skip_reasons.size(), 2U);
  EXPECT_THAT(t.stats.skip_reasons[0], HasSubstr("s.csv:3: column \"timestamp\""));
  EXPECT_THAT(t.stats.skip_reasons[1], HasSubstr("s.csv:4: column \"duration\""));
}

TEST(PhillyCsvReader, HandlesQuotedFieldsAndRejectsBrokenQuotes) {
  const trace t = parse_philly_csv(with_header("\"2017-10-09 07:01:55\",1,1,1,\"a,b\"\n"), "q.csv");
  ASSERT_EQ(t.jobs.size(), 1U);
  EXPECT_EQ(t.jobs[0].vc, "a,b");
  EXPECT_THAT(error_of([] {
                (void)parse_philly_csv(with_header("\"2017-10-09 07:01:55,1,1,1,a\n"), "q.csv");
              }),
              HasSubstr("q.csv:2: field 1: expected a closing '\"' before the end of the line"));
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(with_header("\"2017-10-09 07:01:55\",1,1,1,\"a\"b\n"),
                                     "q.csv");
            }),
            "q.csv:2: field 5: expected ',' after the closing quote, got \"b\"");
  EXPECT_EQ(error_of([] {
              (void)parse_philly_csv(with_header("2017-10-09 07:01:55,1,1,\"1\",a\"b,c\n"),
                                     "q.csv");
            }),
            "q.csv:2: field 5: expected a quote only around a whole field, got \"a\\\"b\"");
}

TEST(PhillyCsvReader, FieldsKeepSpacesCarriageReturnsAndDoubledQuotes) {
  const trace t = parse_philly_csv(with_header("2017-10-09 07:01:55,1,1,1, spaced vc \n"
                                               "2017-10-09 07:01:56,1,1,1,\"\"\"x\"\n"
                                               "2017-10-09 07:01:57,1,1,1,a\rb\r\n"),
                                   "q.csv");
  ASSERT_EQ(t.jobs.size(), 3U);
  EXPECT_EQ(t.jobs[0].vc, " spaced vc ");
  EXPECT_EQ(t.jobs[1].vc, "\"x");
  // Only the carriage return of a CRLF line end goes; one inside the line is data.
  EXPECT_EQ(t.jobs[2].vc, "a\rb");
}

TEST(PhillyCsvReader, SkippingABrokenQuoteGoesOnWithTheNextLine) {
  const trace t = parse_philly_csv(
      with_header("2017-10-09 07:01:55,1,1,1,\"open\n"
                  "2017-10-09 07:01:56,1,1,1,\"a\"x\n"
                  "2017-10-09 07:01:57,1,1,1,\"b,c\"\n"),
      "s.csv", {.malformed = on_malformed::skip, .duplicates = {}, .max_reasons = 5});
  ASSERT_EQ(t.jobs.size(), 1U);
  EXPECT_EQ(t.jobs[0].vc, "b,c");
  EXPECT_EQ(t.stats.rows_skipped, 2U);
}

}  // namespace
}  // namespace tgs::traces
