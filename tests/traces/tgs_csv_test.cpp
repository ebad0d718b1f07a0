// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests of tgs's job-stream CSV: reading, malformed rows, and the writer's round trip.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tgs/traces/generator.hpp"
#include "tgs/traces/labels.hpp"
#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

using testing::error_of;
using testing::fixture;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(TgsCsv, ReadsEveryColumn) {
  const trace t = read_trace(fixture("job_stream.csv"), trace_format::tgs_csv);
  ASSERT_EQ(t.jobs.size(), 4U);
  ASSERT_TRUE(t.origin.has_value());
  EXPECT_EQ(*t.origin, std::chrono::sys_days{std::chrono::year{2024} / 3 / 1} + 9h);
  EXPECT_EQ(t.jobs[0].name, "train-a");
  EXPECT_EQ(t.jobs[0].priority, tgs::job_class::production);
  EXPECT_EQ(t.jobs[0].model, "resnet50");
  EXPECT_EQ(t.jobs[0].batch_size, 256U);
  EXPECT_EQ(t.jobs[0].run_time, std::chrono::seconds{3600});
  EXPECT_FALSE(t.jobs[0].iterations.has_value());
  EXPECT_EQ(t.jobs[0].vc, "team-a");

  EXPECT_EQ(t.jobs[1].name, "eval");
  EXPECT_EQ(t.jobs[1].submit, tgs::epoch + 3s);
  EXPECT_FALSE(t.jobs[1].priority.has_value());
  EXPECT_EQ(t.jobs[1].model, "gpt2 \"small\"");

  EXPECT_EQ(t.jobs[2].name, "train-b");
  EXPECT_EQ(t.jobs[2].submit, tgs::epoch + 12500ms);
  EXPECT_EQ(t.jobs[2].gpus, 2U);
  EXPECT_EQ(t.jobs[2].iterations, 5000U);
  EXPECT_FALSE(t.jobs[2].run_time.has_value());

  EXPECT_EQ(t.jobs[3].name, "sweep, lr=0.1");
  EXPECT_EQ(t.jobs[3].run_time, 600250ms);
  EXPECT_FALSE(t.jobs[3].model.has_value());
}

TEST(TgsCsv, RejectsRowsWithoutDurationOrIterations) {
  EXPECT_EQ(error_of([] {
              (void)parse_tgs_csv("submit_s,gpus,duration_s,iterations\n0,1,,\n", "d.csv");
            }),
            "d.csv:2: expected a value in \"duration_s\" or \"iterations\", got both empty");
  EXPECT_EQ(error_of([] { (void)parse_tgs_csv("submit_s,gpus,model\n", "d.csv"); }),
            "d.csv:1: header: expected a column \"duration_s\" or \"iterations\" (a job needs "
            "one), got neither");
}

TEST(TgsCsv, RejectsBadCells) {
  const auto msg = [](std::string_view row) {
    return error_of([&] {
      (void)parse_tgs_csv(
          "submit_s,gpus,duration_s,iterations,class,batch_size\n" + std::string{row} + "\n",
          "b.csv");
    });
  };
  EXPECT_EQ(msg("-1,1,10,,,"),
            "b.csv:2: column \"submit_s\": expected non-negative seconds since the trace start (at "
            "most 1e9), got \"-1\"");
  EXPECT_EQ(msg("0,1,10,,boss,"),
            "b.csv:2: column \"class\": expected \"production\", \"opportunistic\" or nothing, got "
            "\"boss\"");
  EXPECT_THAT(msg("0,1,10,0,,"), HasSubstr("column \"iterations\": expected a positive integer"));
  EXPECT_THAT(msg("0,1,ten,,,"), HasSubstr("column \"duration_s\": expected a non-negative"));
  EXPECT_THAT(msg("0,1,10,,,99999999999"), HasSubstr("column \"batch_size\""));
  EXPECT_EQ(error_of([] { (void)parse_tgs_csv("", "e.csv"); }),
            "e.csv:1: expected a header naming the columns (at least \"submit_s,gpus\"), got none");
  EXPECT_THAT(error_of([] {
                (void)parse_tgs_csv("# origin: 2024-03-01\nsubmit_s,gpus,duration_s\n", "o.csv");
              }),
              HasSubstr("o.csv:1: origin comment: expected \"# origin: YYYY-MM-DD HH:MM:SS\""));
}

TEST(TgsCsv, WriterRoundTripsAGeneratedLabelledTrace) {
  trace t = generate_philly_like(
      {.seed = 3, .job_count = 500, .jobs_per_day = {}, .max_gpus = {}, .origin = {}});
  assign_labels(t, {.seed = 4,
                    .production_fraction = 0.4,
                    .models = {{"resnet50", 1.0, std::chrono::milliseconds{97}, 128},
                               {"a,\"quoted\" model", 1.0, std::nullopt, std::nullopt}},
                    .overwrite = {}});
  t.jobs[0].name = "first job";
  t.jobs[2].vc = "tag\r";       // a carriage return at the end of the line must survive
  t.jobs.back().submit += 1ns;  // sub-second submissions survive too
  std::ostringstream out;
  write_tgs_csv(out, t);
  const trace back = parse_tgs_csv(out.str(), "round-trip.csv");
  ASSERT_EQ(back.jobs.size(), t.jobs.size());
  EXPECT_EQ(back.origin, t.origin);
  for (std::size_t i = 0; i < t.jobs.size(); ++i) {
    const job_record& a = t.jobs[i];
    const job_record& b = back.jobs[i];
    ASSERT_EQ(a.submit, b.submit) << i;
    EXPECT_EQ(a.run_time, b.run_time) << i;
    EXPECT_EQ(a.gpus, b.gpus) << i;
    EXPECT_EQ(a.priority, b.priority) << i;
    EXPECT_EQ(a.model, b.model) << i;
    EXPECT_EQ(a.batch_size, b.batch_size) << i;
    EXPECT_EQ(a.iterations, b.iterations) << i;
    EXPECT_EQ(a.vc, b.vc) << i;
    EXPECT_EQ(a.name, b.name) << i;
  }
}

TEST(TraceFormat, NamesRoundTrip) {
  for (const trace_format_info& f : trace_formats()) {
    EXPECT_EQ(parse_trace_format(to_string(f.format)), f.format);
    EXPECT_EQ(&format_info(f.format), &f);
  }
  EXPECT_FALSE(parse_trace_format("philly").has_value());
  EXPECT_FALSE(parse_trace_format("").has_value());
}

TEST(TraceFormat, OlderNamesAreAliasesOfTheCanonicalOnes) {
  EXPECT_EQ(to_string(trace_format::philly_json), "philly-json");
  EXPECT_EQ(to_string(trace_format::philly_csv), "philly-csv");
  EXPECT_EQ(to_string(trace_format::tgs_csv), "tgs-csv");
  EXPECT_EQ(parse_trace_format("pollux-csv"), trace_format::philly_csv);
  EXPECT_EQ(parse_trace_format("job-stream"), trace_format::tgs_csv);
}

TEST(TraceFormat, ParseTraceUsesTheRegistrysReader) {
  const std::string_view text = "submit_s,gpus,duration_s\n0,1,60\n";
  const trace t = parse_trace(text, trace_format::tgs_csv, "r.csv");
  ASSERT_EQ(t.jobs.size(), 1U);
  EXPECT_EQ(t.jobs[0].run_time, std::chrono::seconds{60});
  // The same text is not a Philly CSV: the dispatch picked the tgs-csv reader, not another.
  EXPECT_THAT(error_of([&] { (void)parse_trace(text, trace_format::philly_csv, "r.csv"); }),
              HasSubstr("r.csv:1: header"));
}

/// The format list of traces/README.md is the registry's: every name, alias and description.
TEST(TraceFormat, ReadmeListsEveryFormatOfTheRegistry) {
  std::ifstream in{std::filesystem::path{TGS_SOURCE_DIR} / "traces" / "README.md"};
  ASSERT_TRUE(in) << "traces/README.md not found";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  for (const trace_format_info& f : trace_formats()) {
    std::string row = fmt::format("| `{}` | ", f.name);
    for (std::size_t i = 0; i < f.aliases.size(); ++i) {
      row += fmt::format("{}`{}`", i > 0 ? ", " : "", f.aliases[i]);
    }
    row += fmt::format(" | {} |", f.description);
    EXPECT_NE(readme.find(row), std::string::npos)
        << "traces/README.md should have this row in its format table: " << row;
  }
}

}  // namespace
}  // namespace tgs::traces
