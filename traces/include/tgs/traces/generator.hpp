// SPDX-License-Identifier: Apache-2.0
/// @file
/// A seeded generator of Philly-like job streams, calibrated to the 82,247 completed Philly jobs
/// of the Pollux per-job CSV, and the calibration tables it draws from.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "tgs/traces/random.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::traces {

/// Settings of `generate_philly_like`.
struct philly_generator_config {
  std::uint64_t seed = 0;
  /// Jobs to generate (at least 1).
  std::size_t job_count = 0;
  /// Mean arrival rate; empty keeps Philly's own (the inter-arrival table, ~767 jobs/day).
  /// The gaps are scaled, so burstiness (the shape of the gap distribution) is kept.
  std::optional<double> jobs_per_day;
  /// Largest job the target cluster can place; bigger draws are redrawn, which samples the
  /// Philly GPU-count distribution conditioned on `gpus <= max_gpus`.
  std::optional<std::uint32_t> max_gpus;
  /// Absolute time of the first submission; empty uses Philly's first one, 2017-09-04 10:30:41.
  std::optional<std::chrono::sys_seconds> origin;
};

/// Generates `job_count` jobs: GPU counts, run times given the GPU count, virtual clusters and
/// inter-arrival gaps each drawn from Philly's empirical distributions (traces/README.md lists
/// them with their sources). Whole seconds, like Philly (scaled gaps under `jobs_per_day` keep
/// nanoseconds). Jobs get no class or model: run `assign_labels` for those. The same config gives
/// the same trace on every platform (up to `std::exp`/`std::log` rounding, see the README). Throws
/// `tgs::config_error` on a bad config.
///
/// ```cpp
/// auto t = tgs::traces::generate_philly_like({.seed = 1, .job_count = 5000, .max_gpus = 64});
/// ```
[[nodiscard]] trace generate_philly_like(const philly_generator_config& config);

/// The calibration data of the generator, exposed so tests can check it against the real file.
namespace philly_tables {

/// Jobs per GPU count in the Pollux per-job Philly CSV (82,247 jobs).
struct gpu_count_share {
  std::uint32_t gpus;
  std::uint64_t jobs;
};
[[nodiscard]] std::span<const gpu_count_share> gpu_counts() noexcept;

/// Jobs per virtual cluster in the same file.
struct vc_share {
  std::string_view vc;
  std::uint64_t jobs;
};
[[nodiscard]] std::span<const vc_share> virtual_clusters() noexcept;

/// The smallest GPU count of each run-time group: 1, 2, 4, 8 and 12+ GPUs (the groups 12..128
/// share one table: together they have 289 jobs).
[[nodiscard]] std::span<const std::uint32_t> run_time_group_floors() noexcept;

/// The run-time quantiles (seconds) of the jobs of `gpus`'s group.
[[nodiscard]] std::span<const quantile_anchor> run_time_quantiles(std::uint32_t gpus) noexcept;

/// Quantiles (seconds) of the gap between consecutive submissions (sorted by time).
[[nodiscard]] std::span<const quantile_anchor> inter_arrival_quantiles() noexcept;

}  // namespace philly_tables

}  // namespace tgs::traces
