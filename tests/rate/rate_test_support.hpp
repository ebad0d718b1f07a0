// SPDX-License-Identifier: Apache-2.0
/// @file
/// Shared helpers of the rate-control tests: synthetic observation feeds, a seeded observation
/// sequence, a decision validity check and a scoped allocation counter.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "tgs/rate/concepts.hpp"

namespace tgs::test {

using namespace std::chrono_literals;

/// Counts global `operator new` calls made by this thread while a `count_allocations` scope is
/// open. The replacement operators live in conformance_test.cpp.
inline std::atomic<std::size_t> allocation_count{0};
inline thread_local bool counting_allocations = false;

/// Opens a counting scope; `count()` is the number of allocations made inside it so far.
class count_allocations {
 public:
  count_allocations() noexcept : start_(allocation_count.load()) { counting_allocations = true; }
  ~count_allocations() { counting_allocations = false; }
  count_allocations(const count_allocations&) = delete;
  count_allocations& operator=(const count_allocations&) = delete;
  [[nodiscard]] std::size_t count() const noexcept { return allocation_count.load() - start_; }

 private:
  std::size_t start_;
};

/// An activity with `blocks` thread blocks (and as many launches, which TGS ignores).
inline job_activity blocks(std::uint64_t n) { return job_activity{n, n, std::nullopt}; }

/// An activity with an iteration time (for AntMan).
inline job_activity iterating(duration mean_iteration_time, std::uint64_t n = 100'000) {
  return job_activity{n, n, mean_iteration_time};
}

/// Drives a controller through time: each call advances the clock by the window and steps.
template <typename C>
struct feed {
  C controller;
  instant now = epoch;
  rate_decision last{};

  /// A step at the current instant with both jobs present and an empty window (a job event).
  rate_decision arrive() {
    last = controller.step({now, duration::zero(), blocks(0), blocks(0)});
    return last;
  }
  /// A window of `window` in which the jobs did `production` and `opportunistic`.
  rate_decision step(std::optional<job_activity> production,
                     std::optional<job_activity> opportunistic, duration window = 5s) {
    now += window;
    last = controller.step({now, window, production, opportunistic});
    return last;
  }
  /// A window in which both jobs are present and the production job launched `production`.
  rate_decision window(std::uint64_t production, duration w = 5s, std::uint64_t opportunistic = 0) {
    return step(blocks(production), blocks(opportunistic), w);
  }
};

/// SplitMix64: a fixed, fully specified generator, so sequences match on every machine (the
/// standard distributions are implementation-defined).
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (modulo bias is irrelevant for test inputs).
  std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

 private:
  std::uint64_t state_;
};

/// A realistic, seeded observation sequence: mostly 5 s windows with some short event windows
/// (including zero-length ones) and some long jumps, production rates around a plateau with
/// noise, idle phases, slowdowns, arrivals and departures of either class, and iteration times
/// most of the time.
inline std::vector<rate_observation> observation_sequence(std::uint64_t seed, std::size_t n) {
  splitmix64 rng{seed};
  std::vector<rate_observation> out;
  out.reserve(n);
  instant now = epoch;
  bool production = true;
  bool opportunistic = true;
  bool idle = false;
  for (std::size_t i = 0; i < n; ++i) {
    duration window = 5s;
    switch (rng.below(20)) {
      case 0: window = duration::zero(); break;
      case 1: window = 50ms; break;
      case 2: window = 1s; break;
      case 3: window = 30s; break;
      default: break;
    }
    now += window;
    if (rng.below(40) == 0) production = !production;
    if (rng.below(40) == 0) opportunistic = !opportunistic;
    if (rng.below(25) == 0) idle = !idle;
    rate_observation obs{now, window, std::nullopt, std::nullopt};
    const double seconds = to_seconds(window);
    if (production) {
      // A plateau of 1e6 blocks per 5 s, ±6% noise, sometimes slowed by 15%, sometimes idle.
      const double noise = 0.94 + 0.12 * static_cast<double>(rng.below(1000)) / 1000.0;
      const double slowdown = rng.below(10) == 0 ? 0.85 : 1.0;
      const double per_second = idle ? 50.0 : 200'000.0 * noise * slowdown;
      job_activity a;
      a.blocks_launched = static_cast<std::uint64_t>(per_second * seconds);
      a.launches = a.blocks_launched / 100;
      if (rng.below(10) < 7) {
        a.mean_iteration_time =
            std::chrono::microseconds{100'000 + static_cast<std::int64_t>(rng.below(20'000))};
      }
      if (rng.below(10) < 8) {
        // GPU-side speed 400,000 blocks per busy second, 15% lower when slowed.
        a.gpu_busy = std::min(window, from_seconds(static_cast<double>(a.blocks_launched) /
                                                   (400'000.0 * slowdown)));
      }
      obs.production = a;
    }
    if (opportunistic) {
      job_activity a;
      a.blocks_launched = static_cast<std::uint64_t>(150'000.0 * seconds) +
                          (rng.below(4) == 0 ? 0 : rng.below(1'000));
      a.launches = a.blocks_launched / 100;
      obs.opportunistic = a;
    }
    out.push_back(obs);
  }
  return out;
}

/// Checks what every decision must satisfy, whatever the policy.
inline void expect_valid(const rate_decision& d, const rate_observation& obs) {
  EXPECT_TRUE(d.revisit_at == never || d.revisit_at > obs.now)
      << "revisit_at must be never or later than now";
  EXPECT_GT(d.budget_window, duration::zero());
  if (d.fill_gaps) {
    EXPECT_GE(d.fill_gaps->max_inflight, 1u);
    EXPECT_GE(d.fill_gaps->holdoff, duration::zero());
    EXPECT_TRUE(std::holds_alternative<time_sliced>(d.share)) << "gap filling is time slicing";
  }
  if (const auto* m = std::get_if<mps_partition>(&d.share)) {
    EXPECT_GT(m->production_threads, 0.0);
    EXPECT_LE(m->production_threads, 1.0);
    EXPECT_GT(m->opportunistic_threads, 0.0);
    EXPECT_LE(m->opportunistic_threads, 1.0);
  } else if (const auto* g = std::get_if<mig_partition>(&d.share)) {
    EXPECT_GE(g->production_slices, 1);
    EXPECT_GE(g->opportunistic_slices, 1);
    EXPECT_LE(g->production_slices + g->opportunistic_slices, g->total_slices);
  } else if (const auto* e = std::get_if<exclusive_turn>(&d.share)) {
    // The holder must be on the GPU, and the budget must agree with who holds it.
    if (e->holder == job_class::production) {
      EXPECT_TRUE(obs.production.has_value());
      EXPECT_EQ(d.opportunistic_budget, std::optional<std::uint64_t>{0});
    } else {
      EXPECT_TRUE(obs.opportunistic.has_value());
      EXPECT_FALSE(d.opportunistic_budget.has_value());
    }
  }
}

}  // namespace tgs::test
