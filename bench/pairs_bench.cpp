// SPDX-License-Identifier: Apache-2.0
// Macro benchmarks of the GPU-pair simulator: the whole default `tgs-sim pairs` run (load the
// tables and the cached fit, simulate the paper's 16 cells), the simulation alone, and the global
// fit itself (what a changed table costs).
#include <benchmark/benchmark.h>

#include "tgs/sim/pairs.hpp"

namespace {

using namespace tgs::sim;

/// What `tgs-sim pairs` does with no arguments: load the embedded tables and fit, run every cell.
void BM_DefaultPairsRun(benchmark::State& state) {
  std::size_t pairs = 0;
  for (auto _ : state) {
    const calibrated_model model = calibrate();
    for (const auto& r : measured_pair_requests(model.data, "a100-40gb", {})) {
      benchmark::DoNotOptimize(run_pair_request(model.data, r, {}));
      ++pairs;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(pairs));
}
BENCHMARK(BM_DefaultPairsRun)->Unit(benchmark::kMillisecond);

/// The 16 simulations alone (600 simulated seconds each).
void BM_PaperPairsSimulationOnly(benchmark::State& state) {
  const calibrated_model model = calibrate();
  const auto requests = measured_pair_requests(model.data, "a100-40gb", {});
  std::size_t pairs = 0;
  for (auto _ : state) {
    for (const auto& r : requests) {
      benchmark::DoNotOptimize(run_pair_request(model.data, r, {}));
      ++pairs;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(pairs));
}
BENCHMARK(BM_PaperPairsSimulationOnly)->Unit(benchmark::kMicrosecond);

/// The global fit over every measured pair: what tgs-sim does once when a table differs from the
/// ones its cache was fitted from.
void BM_GlobalFit(benchmark::State& state) {
  const calibrated_model model = calibrate();
  for (auto _ : state) benchmark::DoNotOptimize(fit_catalog(model.unfitted));
}
BENCHMARK(BM_GlobalFit)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
