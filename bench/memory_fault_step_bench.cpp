// SPDX-License-Identifier: Apache-2.0
/// @file
/// Cost of one `step` of every memory and fault policy, and of the type-erased wrappers around
/// them: nanoseconds per call and steps per second; and of the residency plan, which the
/// interposer computes on every managed allocation and every eviction pass.
///
/// ```sh
/// build/bin/tgs-bench-memory-fault-step --benchmark_min_time=0.2
/// ```
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tgs/fault.hpp"
#include "tgs/memory.hpp"

namespace {

using namespace tgs::literals;

// A fixed ring of observations, so the benchmark measures `step` and not the generator; its
// size is a power of two so the index wraps with a mask.
constexpr std::size_t ring_size = 1024;

std::array<tgs::memory_observation, ring_size> memory_observations() {
  std::mt19937_64 rng{1};
  std::uniform_int_distribution<std::uint64_t> footprint{0, (60_GiB).count()};
  std::uniform_int_distribution<std::uint64_t> request{0, (8_GiB).count()};
  std::bernoulli_distribution coin{0.5};
  std::array<tgs::memory_observation, ring_size> out{};
  tgs::instant now = tgs::epoch;
  for (auto& obs : out) {
    now += std::chrono::milliseconds{1};
    obs.now = now;
    obs.capacity = 40_GiB;
    if (coin(rng)) obs.production = tgs::job_memory{tgs::bytes{footprint(rng)}, {}};
    if (coin(rng)) obs.opportunistic = tgs::job_memory{tgs::bytes{footprint(rng)}, {}};
    if (coin(rng)) {
      obs.request = tgs::allocation_request{
          coin(rng) ? tgs::job_class::production : tgs::job_class::opportunistic,
          tgs::bytes{request(rng)}};
    }
  }
  return out;
}

std::array<tgs::fault_observation, ring_size> fault_observations() {
  std::mt19937_64 rng{2};
  std::uniform_int_distribution<int> kind{0, 3};
  std::bernoulli_distribution coin{0.5};
  std::array<tgs::fault_observation, ring_size> out{};
  tgs::instant now = tgs::epoch;
  for (auto& obs : out) {
    now += std::chrono::seconds{1};
    obs.now = now;
    obs.failed = coin(rng) ? tgs::job_class::production : tgs::job_class::opportunistic;
    obs.kind = static_cast<tgs::fault_kind>(kind(rng));
    obs.co_runner_present = coin(rng);
  }
  return out;
}

template <typename Policy, typename Observations>
void run(benchmark::State& state, Policy policy, const Observations& observations) {
  std::size_t i = 0;
  for (auto _ : state) {
    auto decision = policy.step(observations[i]);
    benchmark::DoNotOptimize(decision);
    i = (i + 1) & (ring_size - 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

template <typename Policy>
void memory_step(benchmark::State& state) {
  static const auto observations = memory_observations();
  run(state, Policy{typename Policy::config{}}, observations);
}

template <typename Policy>
void fault_step(benchmark::State& state) {
  static const auto observations = fault_observations();
  run(state, Policy{typename Policy::config{}}, observations);
}

// The erased wrappers, holding the policy named by the benchmark's argument (an index into the
// registry), to show what run-time choice costs over the concrete types above.
void any_memory_step(benchmark::State& state) {
  static const auto observations = memory_observations();
  const auto name = tgs::memory_policy_names()[static_cast<std::size_t>(state.range(0))];
  state.SetLabel(std::string(name));
  run(state, tgs::make_memory_policy(name), observations);
}

void any_fault_step(benchmark::State& state) {
  static const auto observations = fault_observations();
  const auto name = tgs::fault_policy_names()[static_cast<std::size_t>(state.range(0))];
  state.SetLabel(std::string(name));
  run(state, tgs::make_fault_policy(name), observations);
}

// The residency plan over N managed allocations shaped like a PyTorch job's caching allocator
// (2 MiB and 20 MiB segments, larger exact-size blocks, a few GiB-sized tables), under a limit
// of half their total.
void plan_residency(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::mt19937_64 rng{3};
  std::vector<tgs::managed_allocation> allocs(n);
  tgs::bytes total;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t kind = rng() % 16;
    const tgs::bytes size = kind < 8    ? 2_MiB
                            : kind < 13 ? 20_MiB
                            : kind < 15 ? tgs::bytes{(rng() % 512 + 1) << 21}
                                        : 2_GiB;
    allocs[i] = {size, i};
    total += size;
  }
  const tgs::bytes limit{total.count() / 2};
  for (auto _ : state) {
    auto plan = tgs::plan_residency(allocs, limit, 2_MiB);
    benchmark::DoNotOptimize(plan.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(plan_residency)->Arg(16)->Arg(128)->Arg(1024);

BENCHMARK_TEMPLATE(memory_step, tgs::transparent_unified_memory);
BENCHMARK_TEMPLATE(memory_step, tgs::hard_limit);
BENCHMARK_TEMPLATE(memory_step, tgs::no_oversubscription);
BENCHMARK_TEMPLATE(memory_step, tgs::plain_unified_memory);
BENCHMARK(any_memory_step)
    ->DenseRange(0, static_cast<std::int64_t>(tgs::memory_policy_names().size()) - 1);

BENCHMARK_TEMPLATE(fault_step, tgs::separate_contexts);
BENCHMARK_TEMPLATE(fault_step, tgs::shared_fault_domain);
BENCHMARK(any_fault_step)
    ->DenseRange(0, static_cast<std::int64_t>(tgs::fault_policy_names().size()) - 1);

}  // namespace

BENCHMARK_MAIN();
