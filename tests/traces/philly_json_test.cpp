// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests of the Philly JSON reader: both shapes, the missing-time rules, and malformed input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string_view>
#include <utility>

#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

using testing::error_of;
using testing::fixture;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(PhillyJsonReader, ReadsClusterJobLog) {
  const trace t = read_trace(fixture("cluster_job_log.json"), trace_format::philly_json);
  ASSERT_EQ(t.jobs.size(), 3U);
  EXPECT_EQ(t.stats.rows_read, 6U);
  EXPECT_EQ(t.stats.rows_kept, 3U);
  EXPECT_EQ(t.stats.rows_dropped, 3U);
  EXPECT_EQ(t.stats.rows_skipped, 0U);
  ASSERT_TRUE(t.origin.has_value());
  EXPECT_EQ(*t.origin, std::chrono::sys_days{std::chrono::year{2017} / 10 / 7} + 58min);

  const job_record& a = t.jobs[0];
  EXPECT_EQ(a.name, "application_1506638472019_00005");
  EXPECT_EQ(a.submit, tgs::epoch);
  EXPECT_EQ(a.run_time, std::chrono::seconds{3600});
  EXPECT_EQ(a.gpus, 2U);
  EXPECT_EQ(a.outcome, job_outcome::passed);
  EXPECT_EQ(a.queueing_delay, tgs::duration::zero());

  const job_record& b = t.jobs[1];
  EXPECT_EQ(b.name, "application_1506638472019_00001");
  EXPECT_EQ(b.submit, tgs::epoch + 120s);
  // The first attempt has no end_time, so only the second one counts: 10 minutes.
  EXPECT_EQ(b.run_time, std::chrono::seconds{600});
  EXPECT_EQ(b.attempts, 2U);
  EXPECT_EQ(b.outcome, job_outcome::killed);
  EXPECT_EQ(b.queueing_delay, std::chrono::seconds{10});

  const job_record& c = t.jobs[2];
  EXPECT_EQ(c.name, "application_1506638472019_14199");
  EXPECT_EQ(c.submit, tgs::epoch + 819s);
  EXPECT_EQ(c.run_time, std::chrono::seconds{74 + 193'182});
  EXPECT_EQ(c.gpus, 8U);
  EXPECT_EQ(c.vc, "ee9e8c");
  EXPECT_EQ(c.queueing_delay, std::chrono::seconds{30});
  EXPECT_EQ(c.source_line, 2U);
  for (std::size_t i = 0; i < t.jobs.size(); ++i) EXPECT_EQ(t.jobs[i].id, tgs::job_id(i));
}

TEST(PhillyJsonReader, DropsJobsThatNeverRanOrHoldNoGpuAndSaysWhy) {
  const trace t = read_trace(fixture("cluster_job_log.json"), trace_format::philly_json);
  ASSERT_EQ(t.stats.drop_reasons.size(), 3U);
  EXPECT_THAT(t.stats.drop_reasons[0],
              HasSubstr("[2]: dropped: no attempt has both start_time and end_time"));
  EXPECT_THAT(t.stats.drop_reasons[1],
              HasSubstr("[3]: dropped: no attempt has both start_time and end_time"));
  EXPECT_THAT(t.stats.drop_reasons[2], HasSubstr("[4]: dropped: no GPU listed"));
}

TEST(PhillyJsonReader, ReadsPassAttemptsSubset) {
  const trace t = read_trace(fixture("pass_attempts.json"), trace_format::philly_json);
  ASSERT_EQ(t.jobs.size(), 3U);
  EXPECT_EQ(t.jobs[0].name, "application_1504131676014_25116");
  EXPECT_EQ(t.jobs[0].attempts, 1U);
  EXPECT_EQ(t.jobs[0].queueing_delay, std::chrono::seconds{14});
  const job_record& j = t.jobs[2];
  EXPECT_EQ(j.name, "application_1506638472019_14199");
  EXPECT_EQ(j.gpus, 8U);
  EXPECT_EQ(j.attempts, 2U);
  EXPECT_EQ(j.run_time, std::chrono::seconds{193'256});
  EXPECT_EQ(j.outcome, job_outcome::passed);
  EXPECT_TRUE(j.vc.empty());
}

TEST(PhillyJsonReader, RejectsRuntimeThatContradictsAttempts) {
  const std::string msg = error_of([] {
    (void)parse_philly_json(R"([{"id":"a","num_gpus":4,"runtime":5.0,
  "attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],
  "submitted_time":"2017-10-07 01:11:39"}])",
                            "rt.json");
  });
  EXPECT_THAT(msg, HasSubstr("rt.json:1: [0].runtime: expected 1 minutes (last end_time - first "
                             "start_time), got 5.0"));
}

TEST(PhillyJsonReader, NamesJsonPathAndLineOfBadAttemptTime) {
  const std::string msg = error_of([] {
    (void)parse_philly_json(R"([
{"id":"a","num_gpus":4,"runtime":1.0,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"},
{"id":"b","num_gpus":4,"runtime":1.0,
 "attempts":[
   {"start_time":"2017-13-07 01:12:09","end_time":"2017-10-07 01:13:09"}],
 "submitted_time":"2017-10-07 01:11:39"}
])",
                            "bad.json");
  });
  EXPECT_EQ(msg,
            "bad.json:5: [1].attempts[0].start_time: expected a time \"YYYY-MM-DD HH:MM:SS\", null "
            "or \"None\", got \"2017-13-07 01:12:09\"");
}

TEST(PhillyJsonReader, RejectsEndBeforeStart) {
  const std::string msg = error_of([] {
    (void)parse_philly_json(R"([{"id":"a","num_gpus":4,"runtime":1.0,
"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:10:09"}],
"submitted_time":"2017-10-07 01:11:39"}])",
                            "order.json");
  });
  EXPECT_THAT(msg, HasSubstr("order.json:2: [0].attempts[0].end_time: expected an end_time not "
                             "before start_time"));
}

TEST(PhillyJsonReader, RejectsWrongTypes) {
  EXPECT_THAT(
      error_of([] {
        (void)parse_philly_json(
            R"([{"id":"a","num_gpus":"4","runtime":1.0,"attempts":[],"submitted_time":"2017-10-07 01:11:39"}])",
            "t.json");
      }),
      HasSubstr("t.json:1: [0].num_gpus: expected a positive integer number of GPUs (at "
                "most 1000000), got \"4\""));
  EXPECT_THAT(
      error_of([] {
        (void)parse_philly_json(
            R"([{"id":"a","num_gpus":2.5,"runtime":1.0,"attempts":[],"submitted_time":"2017-10-07 01:11:39"}])",
            "t.json");
      }),
      HasSubstr("[0].num_gpus: expected a positive integer number of GPUs"));
  EXPECT_THAT(
      error_of([] {
        (void)parse_philly_json(
            R"([{"id":"a","num_gpus":2,"runtime":1.0,"attempts":{},"submitted_time":"2017-10-07 01:11:39"}])",
            "t.json");
      }),
      HasSubstr("[0].attempts: expected an array, got an object"));
  EXPECT_THAT(
      error_of([] {
        (void)parse_philly_json(
            R"([{"jobid":"a","status":"Running","vc":"x","attempts":[],"submitted_time":"2017-10-07 01:11:39"}])",
            "t.json");
      }),
      HasSubstr("[0].status: expected \"Pass\", \"Killed\" or \"Failed\", got \"Running\""));
  EXPECT_THAT(error_of([] { (void)parse_philly_json(R"({"jobs":[]})", "t.json"); }),
              HasSubstr("t.json:1: expected a top-level array of jobs, got an object"));
}

TEST(PhillyJsonReader, RejectsMissingMemberAndOtherShapeInOneFile) {
  EXPECT_THAT(
      error_of([] {
        (void)parse_philly_json(
            R"([{"jobid":"a","status":"Pass","attempts":[],"submitted_time":"2017-10-07 01:11:39"}])",
            "t.json");
      }),
      HasSubstr("t.json:1: [0]: expected a member \"vc\", got none"));
  EXPECT_THAT(error_of([] {
                (void)parse_philly_json(R"([
 {"jobid":"a","status":"Pass","vc":"v","attempts":[],"submitted_time":"2017-10-07 01:11:39"},
 {"id":"b","num_gpus":1,"runtime":0,"attempts":[],"submitted_time":"2017-10-07 01:11:39"}])",
                                        "t.json");
              }),
              HasSubstr("t.json:3: [1]: expected a member \"jobid\", got none"));
}

TEST(PhillyJsonReader, ReportsTruncatedJsonWithPathAndLine) {
  const std::string msg = error_of([] {
    (void)parse_philly_json("[\n{\"id\":\"a\",\n\"attempts\":[{\"start_time\":\"2017-10",
                            "cut.json");
  });
  EXPECT_EQ(msg,
            "cut.json:3: [0].attempts[0].start_time: JSON syntax error at column 34: while parsing "
            "value - invalid string: missing closing quote; last read: '\"2017-10'");
}

TEST(PhillyJsonReader, RejectsEmptyAndGarbageInput) {
  EXPECT_EQ(error_of([] { (void)parse_philly_json("", "e.json"); }),
            "e.json:1: JSON syntax error at column 1: while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
  // Each input with a part of its message: the line and column of the problem, the path.
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"[1, 2] x", "e.json:1: JSON syntax error at column 8: "},
      {"[1, 2] x", "expected end of input"},
      {"[\n\"\xff\xfe\"]", "e.json:2: expected UTF-8 text, got the byte 0xFF"},
      {"[NaN]",
       "e.json:1: [0]: JSON syntax error at column 2: while parsing value - invalid literal"},
      {"[\n 1,\n 1e999]", "e.json:3: [1]: JSON error at column 7: number overflow parsing '1e999'"},
      {"[1,]", "e.json:1: [1]: JSON syntax error at column 4: "},
      {"[1] // no comments", "e.json:1: JSON syntax error at column 5: "},
      {"[{\"a\":1,\"a\":2}]", "expected unique member names in the object, got \"a\" twice"},
  };
  for (const auto& [text, message] : cases) {
    EXPECT_THAT(error_of([&] { (void)parse_philly_json(text, "e.json"); }), HasSubstr(message))
        << text;
  }
  EXPECT_THAT(error_of([] {
                (void)parse_philly_json(std::string(100, '[') + std::string(100, ']'), "deep.json");
              }),
              HasSubstr("JSON syntax: expected nesting at most 64 deep"));
}

TEST(PhillyJsonReader, DecodesEscapesInStrings) {
  const trace t = parse_philly_json(
      R"([{"id":"a\u00e9\ud83d\ude00\n","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"}])",
      "esc.json");
  ASSERT_EQ(t.jobs.size(), 1U);
  EXPECT_EQ(t.jobs[0].name, "a\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_THAT(error_of([] { (void)parse_philly_json(R"(["\udc00"])", "s.json"); }),
              HasSubstr("s.json:1: [0]: JSON syntax error at column 8: while parsing value - "
                        "invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"));
}

TEST(PhillyJsonReader, SkipOptionCountsMalformedJobsAndKeepsReasons) {
  const std::string text = R"([
{"id":"a","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"},
{"id":"b","num_gpus":0,"runtime":1,"attempts":[],"submitted_time":"2017-10-07 01:11:39"},
{"id":"c","num_gpus":1,"runtime":1,"attempts":[],"submitted_time":"yesterday"},
{"id":"d","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:40"}
])";
  EXPECT_THAT(error_of([&] { (void)parse_philly_json(text, "s.json"); }),
              HasSubstr("s.json:3: [1].num_gpus"));
  const trace t = parse_philly_json(
      text, "s.json", {.malformed = on_malformed::skip, .duplicates = {}, .max_reasons = 1});
  EXPECT_EQ(t.jobs.size(), 2U);
  EXPECT_EQ(t.stats.rows_read, 4U);
  EXPECT_EQ(t.stats.rows_skipped, 2U);
  ASSERT_EQ(t.stats.skip_reasons.size(), 1U);
  EXPECT_THAT(t.stats.skip_reasons[0], HasSubstr("s.json:3: [1].num_gpus"));
}

TEST(PhillyJsonReader, CountsAndOptionallyDropsRepeatedJobIds) {
  const std::string text = R"([
{"id":"a","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"},
{"id":"a","num_gpus":1,"runtime":1,"attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],"submitted_time":"2017-10-07 01:11:39"}
])";
  const trace kept = parse_philly_json(text, "d.json");
  EXPECT_EQ(kept.jobs.size(), 2U);
  EXPECT_EQ(kept.stats.duplicates, 1U);
  const trace dropped = parse_philly_json(
      text, "d.json", {.malformed = {}, .duplicates = duplicate_rule::drop, .max_reasons = 5});
  EXPECT_EQ(dropped.jobs.size(), 1U);
  EXPECT_EQ(dropped.stats.duplicates, 1U);
  ASSERT_EQ(dropped.stats.drop_reasons.size(), 1U);
  EXPECT_THAT(dropped.stats.drop_reasons[0], HasSubstr("d.json:3: [1]: dropped: duplicate of the "
                                                       "job \"a\" at line 2"));
}

TEST(PhillyJsonReader, NamesTheFileItCannotOpen) {
  EXPECT_THAT(
      error_of([] { (void)read_trace(fixture("no-such-file.json"), trace_format::philly_json); }),
      HasSubstr("no-such-file.json: cannot open"));
}

}  // namespace
}  // namespace tgs::traces
