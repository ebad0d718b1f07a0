// SPDX-License-Identifier: Apache-2.0
/// @file
/// What tgs-sim's `pairs`, `mixed` and `replay` do with their options, for every front end (the
/// command line and the Python module): the options with their defaults and ranges, their checks
/// with the messages a user sees, and the runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/cluster.hpp"
#include "tgs/sim/pairs.hpp"
#include "tgs/sim/rate_settings.hpp"
#include "tgs/sim/report.hpp"
#include "tgs/sim/workloads.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::sim {

/// The policies `pairs` compares unless told otherwise: the paper's pair experiments (NSDI'23
/// Figure 5).
[[nodiscard]] const std::vector<std::string>& default_pair_policies();
/// The policies `mixed` and `replay` compare unless told otherwise: the paper's cluster
/// experiments (NSDI'23 Figure 6) and idle-harvest.
[[nodiscard]] const std::vector<std::string>& default_cluster_policies();
/// The policy every cluster run is normalized to: the first registered one that never lets the
/// classes share a GPU. It always runs.
[[nodiscard]] std::string baseline_policy();

/// The bounds of a numeric option, shared by the command line's checks and the library's.
struct option_range {
  double low;
  double high;
};

/// Throws `input_error` unless `low <= value <= high`, worded as the command line words it:
/// `--duration: Value 0.5 not in range 1.000000 to 10000000.000000`.
void check_range(std::string_view option, double value, option_range range);
/// The same for a count: `--production-jobs: Value -1 not in range 0 to 1000000`.
void check_count(std::string_view option, std::int64_t value, option_range range);
/// Throws `input_error` unless `value` is one of `names`:
/// `--policies: foo not in {tgs,exclusive,...}`.
void check_member(std::string_view option, std::string_view value,
                  const std::vector<std::string>& names);

/// The registered rate controllers and memory policies, by name, in registry order.
[[nodiscard]] std::vector<std::string> registered_rate_policies();
[[nodiscard]] std::vector<std::string> registered_memory_policies();

/// A policy setting given by name, so that a run can refuse one of a policy it does not use.
struct given_setting {
  /// The registry name of the policy the setting belongs to.
  std::string policy;
  /// The name as given, for the message: `--tgs.dead-band` (a flag), `tgs.dead-band` (Python).
  std::string name;
};

/// Every policy's settings for a run (defaults until set) and the ones that were given.
struct run_settings {
  any_rate_controller::configs rate = simulated_rate_settings();
  any_memory_policy::configs memory{};
  std::vector<given_setting> rate_given;
  std::vector<given_setting> memory_given;

  /// Throws `input_error` naming the first given setting of a policy the run does not use
  /// (`--tgs.dead-band is a setting of tgs, which this run does not use`): it would be ignored.
  void check_used(const std::vector<std::string>& rate_policies,
                  const std::vector<std::string>& memory_policies) const;
};

/// The memory policies a run of `rate_policies` uses: `given`, or each policy's own.
[[nodiscard]] std::vector<std::string> memory_policies_of(
    const std::vector<std::string>& rate_policies, const std::string& given);

// --- fit and predict -------------------------------------------------------------------------

/// `tgs-sim fit --write PATH`: `model` with its fit done afresh from its tables, whatever the
/// cache held, and that fit written to `path` in the cache's format (`sim/data/fit.csv`). Throws
/// `input_error` naming a file it cannot write.
[[nodiscard]] calibrated_model write_fit(const calibrated_model& model, const std::string& path);

/// `tgs-sim predict`: every measured pair beside the simulator's prediction of it.
struct predict_command {
  /// Only this GPU type; empty: every type.
  std::string gpu;
  /// Also show each pair predicted by a fit that left its cells out (one refit per pair), and how
  /// often the intervals of those held what was measured. They are computed either way: their
  /// residuals calibrate every interval.
  bool leave_one_out = false;
};

/// What `predict` computed: the calibrated model's predictions and those of the fits without each
/// pair, in the same order, all with calibrated intervals (`calibrate_intervals`).
struct predict_outcome {
  std::vector<prediction> in_sample;
  std::vector<prediction> left_out;
};

/// Runs `predict`. Throws `input_error` for a GPU type the model has no table for.
[[nodiscard]] predict_outcome run_predict(const calibrated_model& model,
                                          const predict_command& cmd);

// --- pairs -----------------------------------------------------------------------------------

/// `tgs-sim pairs`: one production and one opportunistic job on one GPU under each policy.
struct pairs_command {
  /// A custom pair (both or neither); empty: every pair measured on `gpu`, each beside its
  /// measurement (the paper's four scenarios on a100-40gb).
  std::string production;
  std::string opportunistic;
  /// Empty: `default_pair_policies()` for a custom pair, every measured cell otherwise
  /// (`measured_pair_requests`).
  std::vector<std::string> policies;
  std::string gpu = "a100-40gb";
  double duration_s = 600;
  double warmup_s = 60;
  /// Empty: the GPU's memory.
  std::optional<double> memory_budget_gib;
  /// Empty: each sharing policy's own.
  std::string memory_policy;
  /// Empty: each job's host jitter from its profile; a value replaces it for both jobs.
  std::optional<double> observation_noise;
  double production_drift = 0;
  std::uint64_t seed = 1;
  run_settings settings;
  /// The thresholds of tgs-node's choice of mechanism (`--mechanism-choice.long-kernel-ms`,
  /// `--mechanism-choice.gpu-bound-wait`, as tgs-node's flags): every pair's choice is predicted
  /// by a `tgs::mechanism_choice` built from them.
  mechanism_choice::config choice{};
  /// Record every segment of constant rates (`--timeline`).
  bool timeline = false;

  static constexpr option_range duration_range{1.0, 1e7};
  static constexpr option_range warmup_range{0.0, 1e7};
  static constexpr option_range memory_budget_range{0.001, 1e6};
  static constexpr option_range observation_noise_range{0.0, 1.0};
  static constexpr option_range production_drift_range{0.0, 0.99};

  /// The policies this run compares.
  [[nodiscard]] std::vector<std::string> chosen_policies() const;
};

/// What `pairs` computed.
struct pairs_outcome {
  std::vector<pair_result> results;
  /// Every pair's segments, in run order (when `pairs_command::timeline`).
  std::vector<timeline_row> timeline;
};

/// Checks what needs no model: names, ranges, the pair, warm-up against duration, settings of
/// policies the run does not use. Throws `input_error`.
void check(const pairs_command& cmd);

/// Runs `pairs` (after `check`): every pair under each policy and, for every pair with an
/// opportunistic job, tgs-node's choice of its mechanism under each of `node_preferences` with the
/// cell that follows (`pair_result::node`; one choice per pair and memory budget, shared by its
/// results). Throws `input_error` for an unknown model or GPU, or a policy or choice setting its
/// constructor refuses.
[[nodiscard]] pairs_outcome run_pairs(const calibrated_model& model, const pairs_command& cmd);

// --- mixed and replay ------------------------------------------------------------------------

/// The options `mixed` and `replay` share: the cluster and the policies run on it.
struct cluster_command {
  explicit cluster_command(std::string default_cluster) : cluster(std::move(default_cluster)) {}

  /// `NODESxGPUS[:TYPE]`.
  std::string cluster;
  /// Empty: `default_cluster_policies()`; `baseline_policy()` is added when missing.
  std::vector<std::string> policies;
  std::size_t lookahead = 64;
  bool preempted_keep_progress = false;
  run_settings settings;
  /// Called with each policy and the fraction of its events done (at most every 1%).
  std::function<void(const std::string& policy, double done)> progress;
  /// Called after each policy's run.
  std::function<void(const cluster_run& run)> finished;

  /// The policies this run compares, the baseline first when it was not chosen.
  [[nodiscard]] std::vector<std::string> chosen_policies() const;
};

/// A job stream ready for the cluster, and what the outputs say about it.
struct cluster_workload {
  std::vector<cluster_job> jobs;
  /// One line naming the workload, recorded in every output row.
  std::string label;
  std::uint64_t seed = 1;
  cluster_spec spec;
};

/// Checks the cluster options that need no model. Throws `input_error`.
void check(const cluster_command& cmd);

/// Runs `workload` under each chosen policy. Throws `input_error`.
[[nodiscard]] std::vector<cluster_run> run_cluster_command(const calibrated_model& model,
                                                           const cluster_workload& workload,
                                                           const cluster_command& cmd);

/// `tgs-sim mixed`: the paper's mixed job stream.
struct mixed_command {
  mixed_stream_config stream;
  cluster_command cluster{"1x2:a100-40gb"};

  static constexpr option_range jobs_range{0, 1e6};
  static constexpr option_range interarrival_range{1e-6, 1e6};
};

/// Checks what needs no model. Throws `input_error`.
void check(const mixed_command& cmd);

/// The mixed stream on the command's cluster. Throws `input_error` (an unknown GPU type).
[[nodiscard]] cluster_workload mixed_workload(const calibrated_model& model,
                                              const mixed_command& cmd);

/// `tgs-sim replay`: a trace on a cluster.
struct replay_command {
  /// The trace file (`read_replay_trace`); a trace built otherwise names its `source` instead.
  std::string trace_path;
  /// A registered format name or alias; empty: from the file name (.json: philly-json, else
  /// philly-csv).
  std::string trace_format;
  double production_share = 0.5;
  std::uint64_t label_seed = 1;
  bool skip_malformed = false;
  std::vector<std::string> label_models = mixed_stream_config{}.models;
  // 800 GPUs: the completed Philly jobs kept busy 374 GPUs on average (589 in October); the
  // full cluster also ran the killed and failed jobs (68% of GPU time), so 100 servers of 8
  // give these jobs the ~50% average load Microsoft reports for its clusters.
  cluster_command cluster{"100x8:a100-40gb"};

  static constexpr option_range production_share_range{0.0, 1.0};
};

/// Every registered trace format name and alias, in registry order.
[[nodiscard]] std::vector<std::string> trace_format_names();

/// The format to read `path` in: `given` when not empty, else from the file name (.json:
/// philly-json, else philly-csv).
[[nodiscard]] std::string trace_format_for(const std::string& path, const std::string& given);

/// Checks what needs no model or trace. Throws `input_error`.
void check(const replay_command& cmd);

/// Reads `cmd.trace_path` in its format; a malformed trace throws `input_error` naming the file
/// and line.
[[nodiscard]] traces::trace read_replay_trace(const replay_command& cmd);

/// Throws `input_error` naming the file and line of the first job that needs more GPUs than the
/// cluster has: it could never start.
void check_fits(const traces::trace& trace, const replay_command& cmd);

/// The trace labelled (classes and models drawn where it has none) and made into cluster jobs.
/// Throws `input_error`.
[[nodiscard]] cluster_workload replay_workload(const calibrated_model& model, traces::trace trace,
                                               const replay_command& cmd);

}  // namespace tgs::sim
