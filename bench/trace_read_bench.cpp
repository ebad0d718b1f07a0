// SPDX-License-Identifier: Apache-2.0
/// @file
/// Rows per second of every trace reader on generated input, and on the real Philly files when
/// TGS_TRACES (or ../shared/traces beside the sources) has them.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tgs/traces/generator.hpp"
#include "tgs/traces/readers.hpp"

namespace {

using tgs::traces::trace;
using tgs::traces::trace_format;

/// The generated input: as many jobs as the real Pollux file has.
constexpr std::size_t generated_jobs = 82'247;

std::string civil(std::chrono::sys_time<tgs::duration> t) {
  const auto s = std::chrono::floor<std::chrono::seconds>(t);
  const auto day = std::chrono::floor<std::chrono::days>(s);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<std::chrono::seconds> hms{s - day};
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                     hms.hours().count(), hms.minutes().count(), hms.seconds().count());
}

const trace& generated() {
  static const trace t = tgs::traces::generate_philly_like(
      {.seed = 1, .job_count = generated_jobs, .jobs_per_day = {}, .max_gpus = {}, .origin = {}});
  return t;
}

std::string philly_csv_text(const trace& t) {
  std::string out = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  for (const auto& j : t.jobs) {
    const auto run = std::chrono::duration_cast<std::chrono::seconds>(*j.run_time).count();
    out += fmt::format("{},{}.0,{},{}.0,{}\n", civil(*t.origin + (j.submit - tgs::epoch)), run,
                       j.gpus, run * j.gpus, j.vc);
  }
  return out;
}

/// The pass-attempts shape (`raw = false`) or the raw cluster_job_log shape, one attempt a job.
std::string philly_json_text(const trace& t, bool raw) {
  std::string out = "[\n";
  for (std::size_t i = 0; i < t.jobs.size(); ++i) {
    const auto& j = t.jobs[i];
    const auto submit = *t.origin + (j.submit - tgs::epoch);
    const auto start = submit + std::chrono::seconds{30};
    const auto end = start + *j.run_time;
    const std::string attempt =
        fmt::format(R"({{"start_time": "{}", "end_time": "{}"{}}})", civil(start), civil(end),
                    raw ? fmt::format(R"(, "detail": [{{"ip": "m{}", "gpus": [{}]}}])", i % 97,
                                      fmt::format("\"gpu{}\"", j.gpus) +
                                          std::string(j.gpus > 1 ? (j.gpus - 1) * 7 : 0, ' '))
                        : std::string{});
    if (raw) {
      out += fmt::format(
          R"(  {{"status": "Pass", "vc": "{}", "jobid": "application_{}", "attempts": [{}], "submitted_time": "{}", "user": "u"}})",
          j.vc, i, attempt, civil(submit));
    } else {
      out += fmt::format(
          R"(  {{"id": "application_{}", "num_gpus": {}, "runtime": {}, "attempts": [{}], "submitted_time": "{}"}})",
          i, j.gpus, tgs::to_seconds(*j.run_time) / 60.0, attempt, civil(submit));
    }
    out += i + 1 < t.jobs.size() ? ",\n" : "\n";
  }
  out += "]\n";
  return out;
}

std::string tgs_csv_text(const trace& t) {
  std::ostringstream out;
  tgs::traces::write_tgs_csv(out, t);
  return out.str();
}

void read_text(benchmark::State& state, const std::string& text, trace_format format) {
  std::size_t rows = 0;
  for (auto _ : state) {
    const trace t = tgs::traces::parse_trace(text, format, "bench");
    rows = t.stats.rows_read;
    benchmark::DoNotOptimize(t.jobs.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(rows));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(text.size()));
  state.counters["rows"] = static_cast<double>(rows);
}

void BM_PhillyCsvGenerated(benchmark::State& state) {
  static const std::string text = philly_csv_text(generated());
  read_text(state, text, trace_format::philly_csv);
}
BENCHMARK(BM_PhillyCsvGenerated)->Unit(benchmark::kMillisecond);

void BM_PhillyJsonPassAttemptsGenerated(benchmark::State& state) {
  static const std::string text = philly_json_text(generated(), false);
  read_text(state, text, trace_format::philly_json);
}
BENCHMARK(BM_PhillyJsonPassAttemptsGenerated)->Unit(benchmark::kMillisecond);

void BM_PhillyJsonClusterJobLogGenerated(benchmark::State& state) {
  static const std::string text = philly_json_text(generated(), true);
  read_text(state, text, trace_format::philly_json);
}
BENCHMARK(BM_PhillyJsonClusterJobLogGenerated)->Unit(benchmark::kMillisecond);

void BM_TgsCsvGenerated(benchmark::State& state) {
  static const std::string text = tgs_csv_text(generated());
  read_text(state, text, trace_format::tgs_csv);
}
BENCHMARK(BM_TgsCsvGenerated)->Unit(benchmark::kMillisecond);

void BM_GeneratePhillyLike(benchmark::State& state) {
  for (auto _ : state) {
    const trace t = tgs::traces::generate_philly_like(
        {.seed = 3, .job_count = generated_jobs, .jobs_per_day = {}, .max_gpus = {}, .origin = {}});
    benchmark::DoNotOptimize(t.jobs.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(generated_jobs));
}
BENCHMARK(BM_GeneratePhillyLike)->Unit(benchmark::kMillisecond);

std::filesystem::path real_traces_dir() {
  if (const char* dir = std::getenv("TGS_TRACES"); dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path{TGS_SOURCE_DIR} / ".." / "shared" / "traces";
}

/// Registers a benchmark of the real file `name` when it exists.
void register_real(const char* bench_name, const char* file, trace_format format) {
  const std::filesystem::path path = real_traces_dir() / file;
  if (!std::filesystem::exists(path)) return;
  benchmark::RegisterBenchmark(bench_name, [path, format](benchmark::State& state) {
    std::ifstream in{path, std::ios::binary};
    std::stringstream buffer;
    buffer << in.rdbuf();
    read_text(state, buffer.str(), format);
  })->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_real("BM_PhillyCsvRealFile", "philly_jobs_pollux.csv", trace_format::philly_csv);
  register_real("BM_PhillyJsonRealFile", "philly_multigpu_pass_attempts.json",
                trace_format::philly_json);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
