// SPDX-License-Identifier: Apache-2.0
/// @file
/// Renders simulator results as a table for people and as JSON or CSV for programs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tgs/sim/fit.hpp"
#include "tgs/sim/pairs.hpp"

namespace tgs::sim {

/// Output formats every tgs-sim subcommand offers.
enum class output_format { table, json, csv };

/// Parses "table", "json" or "csv"; throws `input_error` naming the flag otherwise.
output_format parse_format(std::string_view text);

/// Pair results: one row (or JSON object) per pair and policy. The table adds the measured
/// cell and whether the result is within `tolerance` of it.
std::string render_pairs(const std::vector<pair_result>& results, output_format format,
                         double tolerance = 0.10);

/// tgs-node's choice of mechanism for each pair of `results` (`pair_result::node`) as a Markdown
/// table, one row per pair and memory budget: per preference the mechanism, the fact that decided
/// it and the cell that follows, and the facts never measured (docs/simulator/predictions.md).
std::string render_node_choices(const std::vector<pair_result>& results);

/// A timeline as CSV: one row per segment of constant rates; its last column is the controller's
/// phase (empty for a policy that reports none).
std::string render_timeline(const std::vector<timeline_row>& rows);

/// The global fit: each GPU type's mechanism parameters and the profile fields it inferred
/// (`csv`: the cache file's format, `sim/data/fit.csv`).
std::string render_fit(const calibrated_model& model, output_format format);

/// The model profiles (one row per model and GPU type), each field with its provenance.
std::string render_profiles(const catalog& c, output_format format);

/// Measured cells beside their predictions (and, when given, the predictions of fits that left
/// each cell's pair out, in the same order), as a table for people or Markdown (the prediction
/// table of docs/simulator/predictions.md), with how many are within ±0.10.
std::string render_predictions(const std::vector<prediction>& predictions,
                               const std::vector<prediction>* left_out, bool markdown);

}  // namespace tgs::sim

#include "tgs/sim/cluster.hpp"

namespace tgs::sim {

/// One policy's cluster run with the timing the driver measured.
struct cluster_run {
  cluster_result result;
  double wall_seconds = 0;
};

/// One policy's cluster run summarized: what every output row of `render_cluster` says.
struct cluster_summary {
  std::string policy;
  class_summary production;
  class_summary opportunistic;
  /// Each class's mean JCT over the baseline run's (a policy that keeps the classes apart);
  /// empty without a baseline run or with an empty class.
  std::optional<double> production_norm;
  std::optional<double> opportunistic_norm;
  std::uint64_t events = 0;
  std::uint64_t pairings = 0;
  std::uint64_t preemptions = 0;
  double wall_seconds = 0;
  /// The run's `cluster_result::extrapolated`.
  std::string extrapolated;
};

/// The runs summarized, in order, normalized to the first baseline run among them.
std::vector<cluster_summary> summarize_runs(const std::vector<cluster_run>& runs);

/// Cluster results, one row (or JSON object) per policy: per-class mean JCT normalized to the
/// exclusive run (`baseline`, which must be among `runs` for normalization; otherwise the
/// normalized fields are null), raw averages and percentiles in seconds, queueing, events.
/// `seed` and `workload` are recorded in every row.
std::string render_cluster(const std::vector<cluster_run>& runs, output_format format,
                           std::string_view workload, std::uint64_t seed);

/// Writes jobs.csv, summary.json, cdf.csv and utilization.csv for the runs into `dir`
/// (created if missing). Throws `input_error` naming the file it cannot write.
void write_cluster_outputs(const std::string& dir, const std::vector<cluster_run>& runs,
                           std::string_view workload, std::uint64_t seed);

}  // namespace tgs::sim
