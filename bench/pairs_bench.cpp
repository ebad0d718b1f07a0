// SPDX-License-Identifier: Apache-2.0
// Macro benchmarks of the GPU-pair simulator: the whole default `tgs-sim pairs` run (fit and
// simulate the paper's 16 cells), and the simulation alone.
#include <benchmark/benchmark.h>

#include "tgs/sim/pairs.hpp"

namespace {

using namespace tgs::sim;

/// What `tgs-sim` does with no arguments: load the embedded tables, fit, run every cell.
void BM_DefaultPairsRun(benchmark::State& state) {
  std::size_t pairs = 0;
  for (auto _ : state) {
    const calibrated_model model = calibrate();
    for (const auto& r : paper_pair_requests(model.data, "a100-40gb", {})) {
      benchmark::DoNotOptimize(run_pair_request(model.data, model.params, r, {}));
      ++pairs;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(pairs));
}
BENCHMARK(BM_DefaultPairsRun)->Unit(benchmark::kMillisecond);

/// The 16 simulations alone (600 simulated seconds each), with the fit done once.
void BM_PaperPairsSimulationOnly(benchmark::State& state) {
  const calibrated_model model = calibrate();
  const auto requests = paper_pair_requests(model.data, "a100-40gb", {});
  std::size_t pairs = 0;
  for (auto _ : state) {
    for (const auto& r : requests) {
      benchmark::DoNotOptimize(run_pair_request(model.data, model.params, r, {}));
      ++pairs;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(pairs));
}
BENCHMARK(BM_PaperPairsSimulationOnly)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
