// SPDX-License-Identifier: Apache-2.0
/// @file
/// Cost of one `step` of every rate controller (and of `any_rate_controller`) on a realistic
/// observation stream: ns per step, steps per second.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include <benchmark/benchmark.h>

#include "tgs/rate.hpp"

namespace {

using namespace std::chrono_literals;

/// 4096 production and opportunistic block counts per 5 s window: a plateau of 1e6 blocks with
/// ±6% noise, a 15% slowdown every tenth window and an idle stretch (data loading) of 4 windows
/// in every 256, from a fixed LCG so every run measures the same stream.
struct stream {
  static constexpr std::size_t size = 4096;
  std::array<std::uint64_t, size> production{};
  std::array<std::uint64_t, size> opportunistic{};
  std::array<std::int64_t, size> iteration_us{};
  std::array<std::int64_t, size> busy_us{};  // GPU busy time per 5 s window

  stream() {
    std::uint64_t x = 0x2545f4914f6cdd1dULL;
    for (std::size_t i = 0; i < size; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const double noise = 0.94 + 0.12 * static_cast<double>(x >> 40) / static_cast<double>(1 << 24);
      const double slow = i % 10 == 0 ? 0.85 : 1.0;
      const bool idle = i % 256 >= 252;
      production[i] = idle ? 200 : static_cast<std::uint64_t>(1.0e6 * noise * slow);
      opportunistic[i] = 750'000 + (x & 0xffff);
      iteration_us[i] = static_cast<std::int64_t>(100'000.0 / (noise * slow));
      // GPU-side speed 400,000 blocks per busy second, 15% lower in the slowed windows.
      busy_us[i] = static_cast<std::int64_t>(static_cast<double>(production[i]) / (0.4 * slow));
    }
  }
};

const stream& observations() {
  static const stream s;
  return s;
}

/// Steps `controller` once per benchmark iteration through the stream, both jobs present.
template <typename Controller>
void run(benchmark::State& state, Controller controller) {
  const stream& s = observations();
  tgs::rate_observation obs{tgs::epoch, 5s, tgs::job_activity{}, tgs::job_activity{}};
  (void)controller.step(obs);  // the arrival
  std::size_t i = 0;
  for (auto _ : state) {
    obs.now += obs.window;
    obs.production->blocks_launched = s.production[i];
    obs.production->mean_iteration_time = std::chrono::microseconds{s.iteration_us[i]};
    obs.production->gpu_busy = std::chrono::microseconds{s.busy_us[i]};
    obs.opportunistic->blocks_launched = s.opportunistic[i];
    tgs::rate_decision d = controller.step(obs);
    benchmark::DoNotOptimize(d);
    i = (i + 1) % stream::size;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <typename Controller>
void BM_Step(benchmark::State& state) {
  run(state, Controller{typename Controller::config{}});
}

/// The erased wrapper around each policy, to show the dispatch cost.
void BM_AnyStep(benchmark::State& state, std::string_view policy) {
  auto c = tgs::make_rate_controller(policy);
  if (!c) {
    state.SkipWithError("unknown policy");
    return;
  }
  run(state, *c);
}

BENCHMARK_TEMPLATE(BM_Step, tgs::tgs_rate_control);
BENCHMARK_TEMPLATE(BM_Step, tgs::idle_harvest);
BENCHMARK_TEMPLATE(BM_Step, tgs::priority_share);
BENCHMARK_TEMPLATE(BM_Step, tgs::exclusive);
BENCHMARK_TEMPLATE(BM_Step, tgs::co_execution);
BENCHMARK_TEMPLATE(BM_Step, tgs::mps);
BENCHMARK_TEMPLATE(BM_Step, tgs::mig);
BENCHMARK_TEMPLATE(BM_Step, tgs::antman);
BENCHMARK_TEMPLATE(BM_Step, tgs::token_bucket);
BENCHMARK_TEMPLATE(BM_Step, tgs::time_slice_lock);
BENCHMARK_TEMPLATE(BM_Step, tgs::any_rate_controller);
BENCHMARK_CAPTURE(BM_AnyStep, tgs, "tgs");
BENCHMARK_CAPTURE(BM_AnyStep, idle_harvest, "idle-harvest");
BENCHMARK_CAPTURE(BM_AnyStep, antman, "antman");
BENCHMARK_CAPTURE(BM_AnyStep, time_slice_lock, "time-slice-lock");

}  // namespace

BENCHMARK_MAIN();
