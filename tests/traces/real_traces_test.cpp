// SPDX-License-Identifier: Apache-2.0
/// @file
/// Tests on the real Philly-derived files when they are present (TGS_TRACES or
/// ../shared/traces): row counts, spot checks, cross-checks, and the generator's tables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "tgs/traces/generator.hpp"
#include "tgs/traces/readers.hpp"
#include "trace_test_support.hpp"

namespace tgs::traces {
namespace {

using namespace std::chrono_literals;

constexpr const char* pollux_file = "philly_jobs_pollux.csv";
constexpr const char* attempts_file = "philly_multigpu_pass_attempts.json";

double percentile(const std::vector<double>& sorted, double p) {
  const double k = static_cast<double>(sorted.size() - 1) * p;
  const auto f = static_cast<std::size_t>(std::floor(k));
  const std::size_t c = std::min(f + 1, sorted.size() - 1);
  return sorted[f] + (sorted[c] - sorted[f]) * (k - static_cast<double>(f));
}

std::chrono::sys_seconds civil(int y, unsigned mo, unsigned d, int h, int mi, int s) {
  return std::chrono::sys_days{std::chrono::year{y} / std::chrono::month{mo} /
                               std::chrono::day{d}} +
         std::chrono::hours{h} + std::chrono::minutes{mi} + std::chrono::seconds{s};
}

TEST(RealPhillyTraces, PolluxCsvHasAllRows) {
  TGS_REAL_TRACE_OR_SKIP(path, pollux_file);
  const trace t = read_trace(path, trace_format::philly_csv);
  EXPECT_EQ(t.jobs.size(), 82'247U);
  EXPECT_EQ(t.stats.rows_read, 82'247U);
  EXPECT_EQ(t.stats.duplicates, 65U);
  ASSERT_TRUE(t.origin.has_value());
  EXPECT_EQ(*t.origin, civil(2017, 9, 4, 10, 30, 41));
  EXPECT_EQ(*t.origin + (t.jobs.back().submit - tgs::epoch), civil(2017, 12, 22, 8, 2, 11));

  // The README example job: submitted 2017-10-07 01:11:39, 8 GPUs, 193,256 s.
  const auto at = tgs::epoch + (civil(2017, 10, 7, 1, 11, 39) - *t.origin);
  const auto it = std::find_if(t.jobs.begin(), t.jobs.end(), [&](const job_record& j) {
    return j.submit == at && j.gpus == 8 && j.run_time == std::chrono::seconds{193'256};
  });
  ASSERT_NE(it, t.jobs.end());
  EXPECT_EQ(it->vc, "ee9e8c");

  std::map<std::uint32_t, std::uint64_t> gpus;
  std::map<std::string, std::uint64_t> vcs;
  double run = 0;
  for (const job_record& j : t.jobs) {
    ++gpus[j.gpus];
    ++vcs[j.vc];
    run += tgs::to_seconds(*j.run_time);
  }
  EXPECT_NEAR(run / 82'247.0, 13'135.93, 0.01);
  // The generator's count tables are exactly this file's.
  for (const auto& g : philly_tables::gpu_counts()) EXPECT_EQ(gpus[g.gpus], g.jobs) << g.gpus;
  EXPECT_EQ(gpus.size(), philly_tables::gpu_counts().size());
  for (const auto& v : philly_tables::virtual_clusters()) {
    EXPECT_EQ(vcs[std::string{v.vc}], v.jobs) << v.vc;
  }
  EXPECT_EQ(vcs.size(), philly_tables::virtual_clusters().size());
}

TEST(RealPhillyTraces, GeneratorTablesMatchTheRealFile) {
  TGS_REAL_TRACE_OR_SKIP(path, pollux_file);
  const trace t = read_trace(path, trace_format::philly_csv);
  const auto floors = philly_tables::run_time_group_floors();
  for (std::size_t g = 0; g < floors.size(); ++g) {
    const std::uint32_t lo = floors[g];
    const std::uint32_t hi = g + 1 < floors.size() ? floors[g + 1] : ~0U;
    std::vector<double> run;
    for (const job_record& j : t.jobs) {
      if (j.gpus >= lo && j.gpus < hi) run.push_back(tgs::to_seconds(*j.run_time));
    }
    std::sort(run.begin(), run.end());
    for (const quantile_anchor& a : philly_tables::run_time_quantiles(lo)) {
      // The tables hold the quantiles rounded to whole seconds.
      EXPECT_NEAR(a.value, percentile(run, a.p), 0.5 + 1e-9) << lo << " GPUs, p" << a.p;
    }
  }
  std::vector<double> gaps;
  for (std::size_t i = 1; i < t.jobs.size(); ++i) {
    gaps.push_back(tgs::to_seconds(t.jobs[i].submit - t.jobs[i - 1].submit));
  }
  std::sort(gaps.begin(), gaps.end());
  const auto table = philly_tables::inter_arrival_quantiles();
  const auto zeros = static_cast<double>(std::count(gaps.begin(), gaps.end(), 0.0));
  EXPECT_DOUBLE_EQ(table[1].p, zeros / static_cast<double>(gaps.size()));
  for (std::size_t k = 2; k < table.size(); ++k) {
    EXPECT_NEAR(table[k].value, percentile(gaps, table[k].p), 0.5 + 1e-9) << "p" << table[k].p;
  }
}

TEST(RealPhillyTraces, PassAttemptsJsonHasAllJobsAndTheReadmeExample) {
  TGS_REAL_TRACE_OR_SKIP(path, attempts_file);
  const trace t = read_trace(path, trace_format::philly_json);
  EXPECT_EQ(t.jobs.size(), 3'034U);
  EXPECT_EQ(t.stats.rows_dropped + t.stats.rows_skipped + t.stats.duplicates, 0U);
  ASSERT_TRUE(t.origin.has_value());
  EXPECT_EQ(*t.origin, civil(2017, 9, 4, 10, 30, 41));
  EXPECT_EQ(*t.origin + (t.jobs.back().submit - tgs::epoch), civil(2017, 12, 22, 4, 44, 24));

  const auto it = std::find_if(t.jobs.begin(), t.jobs.end(), [](const job_record& j) {
    return j.name == "application_1506638472019_14199";
  });
  ASSERT_NE(it, t.jobs.end());
  EXPECT_EQ(it->attempts, 2U);
  EXPECT_EQ(it->gpus, 8U);
  EXPECT_EQ(it->run_time, std::chrono::seconds{193'256});
  EXPECT_EQ(it->queueing_delay, std::chrono::seconds{30});

  std::map<std::uint32_t, int> gpus;
  std::map<std::uint32_t, int> attempts;
  std::vector<double> delay;
  for (const job_record& j : t.jobs) {
    ++gpus[j.gpus];
    ++attempts[j.attempts];
    ASSERT_TRUE(j.queueing_delay.has_value()) << j.name;
    delay.push_back(tgs::to_seconds(*j.queueing_delay));
  }
  EXPECT_EQ(gpus[4], 1457);
  EXPECT_EQ(gpus[8], 1353);
  EXPECT_EQ(gpus[16], 148);
  EXPECT_EQ(gpus[32], 61);
  EXPECT_EQ(gpus[7], 1);
  EXPECT_EQ(attempts[1], 2218);
  EXPECT_EQ(attempts[2], 442);
  EXPECT_EQ(attempts[3], 180);
  // Queueing delay (first attempt start - submit): p50 57 s, p90 3,243 s, mean 3,710 s.
  std::sort(delay.begin(), delay.end());
  EXPECT_NEAR(percentile(delay, 0.5), 57, 1);
  EXPECT_NEAR(percentile(delay, 0.9), 3243, 0.01 * 3243);
  EXPECT_NEAR(std::accumulate(delay.begin(), delay.end(), 0.0) / 3034.0, 3710, 0.01 * 3710);
}

TEST(RealPhillyTraces, BothFilesAgreeOnTheJobsTheyShare) {
  TGS_REAL_TRACE_OR_SKIP(csv_path, pollux_file);
  TGS_REAL_TRACE_OR_SKIP(json_path, attempts_file);
  const trace csv = read_trace(csv_path, trace_format::philly_csv);
  const trace json = read_trace(json_path, trace_format::philly_json);
  // Both readers sum the attempts, so 3,024 of the 3,034 JSON jobs match a CSV row exactly in
  // absolute submit time, GPUs and run time (SOURCES.md, file 1).
  std::multiset<std::tuple<std::int64_t, std::uint32_t, std::int64_t>> rows;
  for (const job_record& j : csv.jobs) {
    rows.emplace(((*csv.origin + (j.submit - tgs::epoch)).time_since_epoch()) / 1s, j.gpus,
                 *j.run_time / 1s);
  }
  int matched = 0;
  for (const job_record& j : json.jobs) {
    const auto key =
        std::make_tuple(((*json.origin + (j.submit - tgs::epoch)).time_since_epoch()) / 1s, j.gpus,
                        *j.run_time / 1s);
    matched += rows.count(key) > 0 ? 1 : 0;
  }
  EXPECT_EQ(matched, 3024);
}

}  // namespace
}  // namespace tgs::traces
