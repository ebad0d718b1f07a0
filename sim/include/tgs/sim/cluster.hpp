// SPDX-License-Identifier: Apache-2.0
/// @file
/// The cluster simulator: a deterministic discrete-event run of a job stream on a cluster of
/// GPU servers under one sharing policy, giving each job's queueing delay and completion time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tgs/sim/pairs.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::sim {

/// The machines: `nodes` servers of `gpus_per_node` GPUs of one type.
struct cluster_spec {
  int nodes = 1;
  int gpus_per_node = 2;
  std::string gpu = "a100-40gb";

  [[nodiscard]] int gpus() const noexcept { return nodes * gpus_per_node; }
};

/// Parses "NODESxGPUS[:TYPE]", e.g. "64x8:a100-40gb" or "1x2". Throws `input_error` naming the
/// flag and the expected form.
cluster_spec parse_cluster_spec(std::string_view text);

/// A job the cluster runs: what the engine needs of a trace record once labelled.
struct cluster_job {
  job_id id{};
  instant submit = epoch;
  job_class cls = job_class::production;
  const model_profile* model = nullptr;
  std::uint32_t gpus = 1;
  /// Work in standalone seconds: how long the job takes alone on its GPUs.
  double work_seconds = 0;
};

/// What happened to one job.
struct job_outcome_record {
  job_id id{};
  job_class cls = job_class::production;
  std::string model;
  std::uint32_t gpus = 1;
  double submit_s = 0;
  double start_s = 0;
  double end_s = 0;
  double work_seconds = 0;
  [[nodiscard]] double jct() const noexcept { return end_s - submit_s; }
  [[nodiscard]] double queueing() const noexcept { return start_s - submit_s; }
};

/// GPU utilisation over one time bucket.
struct utilization_sample {
  double start_s = 0;
  /// Share of GPUs holding at least one job.
  double allocated = 0;
  /// Share of SM time busy with kernels (Σ busy fraction × relative throughput, per GPU).
  double busy = 0;
};

/// Scheduling choices that are not the sharing policy's.
struct cluster_options {
  /// Queued jobs examined past a head that does not fit (bounded backfilling; 0 = strict FIFO).
  std::size_t lookahead = 64;
  /// Where an opportunistic job goes first: beside a production job (keeping idle GPUs free for
  /// production jobs) or, by default, on an idle GPU (where it runs at full speed until a
  /// production job joins it; TGS then throttles it).
  bool opportunistic_beside_production = false;
  /// Under exclusive, a production job preempts the opportunistic job on a GPU it needs. By
  /// default the preempted job restarts from scratch (killed, as best-effort jobs are); set this
  /// to model checkpointed jobs that resume where they stopped.
  bool preempted_keep_progress = false;
  /// Width of the utilisation buckets.
  duration utilization_bucket = std::chrono::hours{1};
  /// Check the engine's invariants at every event (tests): time never goes back, capacity is
  /// never exceeded, at most one production and one opportunistic job per GPU, every job ends
  /// exactly once. A violation throws `std::logic_error`.
  bool check_invariants = false;
  /// Called with the fraction of events done, at most every 1%.
  std::function<void(double)> progress;
  /// Every rate controller's settings; a run's controller is built from its policy's entry.
  any_rate_controller::configs rate_settings = simulated_rate_settings();
  /// Every memory policy's settings; a co-location runs its policy's default memory policy.
  any_memory_policy::configs memory_settings{};
};

/// A run's results.
struct cluster_result {
  std::string policy;
  std::vector<job_outcome_record> jobs;  ///< in job-id order
  std::vector<utilization_sample> utilization;
  std::uint64_t events = 0;
  std::uint64_t pairings = 0;  ///< (production, opportunistic) co-locations started
  std::uint64_t preemptions = 0;  ///< opportunistic jobs suspended for a production job (exclusive)
  /// Why its pair rates rest on a parameter never measured on the cluster's GPU type
  /// (`extrapolation_of`); empty when they do not.
  std::string extrapolated{};
};

/// Runs `jobs` (sorted by submission) on `cluster` under `policy` (a rate-controller registry
/// name; its memory policy is the policy's `default_memory_policy`). Throws `input_error` for a job
/// that needs more GPUs than the cluster has, or an unknown policy or GPU type.
cluster_result run_cluster(const calibrated_model& model, const cluster_spec& cluster,
                           const std::vector<cluster_job>& jobs, const std::string& policy,
                           const cluster_options& options = {});

/// Per-class statistics of a run.
struct class_summary {
  std::size_t jobs = 0;
  double mean_jct_s = 0;
  double p50_jct_s = 0;
  double p90_jct_s = 0;
  double p99_jct_s = 0;
  double mean_queueing_s = 0;
  double p50_queueing_s = 0;
  double p90_queueing_s = 0;
};
class_summary summarize(const cluster_result& r, job_class cls);

/// The JCT distribution of one class: `points` quantiles (1/points, 2/points, ..., 1).
std::vector<double> jct_cdf(const cluster_result& r, job_class cls, std::size_t points = 100);

/// Turns a labelled trace into cluster jobs: every record needs a class and a model known on
/// `gpu`; work is `iterations × iteration time` when the record has iterations, else its run
/// time. Throws `input_error` naming the record's source line otherwise.
std::vector<cluster_job> to_cluster_jobs(const traces::trace& t, const catalog& c,
                                         const std::string& gpu);

}  // namespace tgs::sim
