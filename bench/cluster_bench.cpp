// SPDX-License-Identifier: Apache-2.0
// Macro benchmarks of the cluster simulator: the default mixed stream, and the whole Philly
// replay (82,247 jobs on 800 GPUs, A100s and H100s) per policy, when the trace is present
// (TGS_TRACES or ../shared/traces beside the source tree). Reports events per second.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "tgs/sim/cluster.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/sim/workloads.hpp"
#include "tgs/traces/readers.hpp"

namespace {

using namespace tgs::sim;

const calibrated_model& model() {
  static const calibrated_model m = calibrate();
  return m;
}

void run_policy(benchmark::State& state, const std::vector<cluster_job>& jobs,
                const cluster_spec& spec, const std::string& policy) {
  std::uint64_t events = 0;
  for (auto _ : state) {
    const cluster_result r = run_cluster(model(), spec, jobs, policy, {});
    events += r.events;
    benchmark::DoNotOptimize(r.jobs.data());
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(jobs.size()));
}

std::filesystem::path traces_dir() {
  if (const char* dir = std::getenv("TGS_TRACES"); dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path{TGS_SOURCE_DIR} / ".." / "shared" / "traces";
}

void register_all() {
  // tgs-sim's defaults (default_cluster_policies).
  const std::vector<std::string>& policies = tgs::sim::default_cluster_policies();
  static const auto mixed =
      to_cluster_jobs(mixed_stream(model().data, "a100-40gb"), model().data, "a100-40gb");
  for (const auto& p : policies) {
    benchmark::RegisterBenchmark(("BM_MixedStream/" + p).c_str(), [p](benchmark::State& s) {
      run_policy(s, mixed, {1, 2, "a100-40gb"}, p);
    })->Unit(benchmark::kMillisecond);
  }
  const auto path = traces_dir() / "philly_jobs_pollux.csv";
  if (!std::filesystem::exists(path)) return;
  static std::vector<cluster_job> philly;
  auto t = tgs::traces::read_trace(path, tgs::traces::trace_format::philly_csv);
  label_trace(t, model().data, "a100-40gb", 1, 0.5, mixed_stream_config{}.models);
  philly = to_cluster_jobs(t, model().data, "a100-40gb");
  for (const auto& p : policies) {
    benchmark::RegisterBenchmark(("BM_PhillyReplay/" + p).c_str(), [p](benchmark::State& s) {
      run_policy(s, philly, parse_cluster_spec("100x8:a100-40gb"), p);
    })->Unit(benchmark::kMillisecond);
  }
  // The same replay on H100s, where the profiles' host jitter reaches the controllers.
  static std::vector<cluster_job> philly_h100;
  auto th = tgs::traces::read_trace(path, tgs::traces::trace_format::philly_csv);
  label_trace(th, model().data, "h100-80gb", 1, 0.5, mixed_stream_config{}.models);
  philly_h100 = to_cluster_jobs(th, model().data, "h100-80gb");
  for (const auto& p : policies) {
    benchmark::RegisterBenchmark(("BM_PhillyReplayH100/" + p).c_str(), [p](benchmark::State& s) {
      run_policy(s, philly_h100, parse_cluster_spec("100x8:h100-80gb"), p);
    })->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
