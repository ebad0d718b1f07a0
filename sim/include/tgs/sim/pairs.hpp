// SPDX-License-Identifier: Apache-2.0
/// @file
/// GPU-pair scenarios by name: the measured pairs (the paper's A100 pairs, ours on H100/H200)
/// and any pair of profiled models, under any sharing policy, with the policy objects chosen at
/// run time; and the calibrated model every tgs-sim subcommand runs with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/catalog.hpp"
#include "tgs/sim/fit.hpp"
#include "tgs/sim/gpu_pair.hpp"
#include "tgs/sim/node_choice.hpp"
#include "tgs/sim/rate_settings.hpp"

namespace tgs::sim {

/// One pair to simulate under one sharing policy.
struct pair_request {
  std::string scenario;  ///< a label ("high-contention", or "custom")
  std::string gpu;
  std::string production_model;
  std::string opportunistic_model;  ///< empty: the production job alone
  std::string policy;  ///< a rate-controller registry name (`tgs::rate_controller_names()`)
  /// What a measured cell ran with, over `pair_options`' defaults: its memory policy (empty:
  /// the options' or the policy's own), budget, an idle production job, policy settings.
  std::string memory_policy{};
  std::optional<bytes> memory_budget{};
  bool production_idle = false;
  std::vector<std::pair<std::string, std::string>> settings{};
  /// Each job's alone rate (it/s) on the host that ran the cell; empty: its profile's. The job is
  /// simulated at that host speed (`model_profile::at_alone_rate`).
  std::optional<double> production_alone_rate{};
  std::optional<double> opportunistic_alone_rate{};
  /// The measured cell this request reproduces, if any.
  std::optional<measured_pair> target{};
  /// The opportunistic job in a CUDA context of its own, time-sliced against the production job's
  /// under the policy's launch cap, whatever share the policy asks for: tgs-node's `time-sliced`
  /// mechanism (`tgs::opportunistic_mechanism`).
  bool opportunistic_time_sliced = false;
};

/// The request that reproduces a measured cell.
pair_request request_of(const measured_pair& m);

/// Settings shared by all pairs of a run.
struct pair_options {
  duration run_for = std::chrono::seconds{600};
  duration warmup = std::chrono::seconds{60};
  /// Memory budget; empty: the GPU's memory.
  std::optional<bytes> memory_budget{};
  /// Memory policy registry name; empty: the sharing policy's own (its `default_memory_policy`).
  std::string memory_policy;
  /// `pair_spec::observation_noise`: empty (the default) takes each job's host jitter from its
  /// profile; a value replaces it for both jobs (0: the steady means of the paper's cells).
  std::optional<double> observation_noise{};
  /// `pair_spec::seed` of that noise.
  std::uint64_t seed = 1;
  /// `pair_spec::production_drift`: the fraction by which the production job's standalone speed
  /// falls over the run (0: steady).
  double production_drift = 0;
  /// Every rate controller's settings (defaults until a command line sets them); each pair's
  /// controller is built from its policy's entry.
  any_rate_controller::configs rate_settings = simulated_rate_settings();
  /// Every memory policy's settings, likewise.
  any_memory_policy::configs memory_settings{};
};

/// Options for a policy that does not adapt: its decisions never change, so a short run past the
/// memory policy's first movements (evictions at an arrival) gives its steady rates.
pair_options steady_state_options();

/// Sets one policy setting by its flag name without dashes ("tgs.dead-band",
/// "memory.tgs.reserve-mib"), the value in the flag's unit (ms, MiB). Throws `input_error` for an
/// unknown setting or a value that is not a number.
void apply_setting(any_rate_controller::configs& rate, any_memory_policy::configs& memory,
                   std::string_view key, std::string_view value);

/// The result of one pair, with the measured cell when the catalog has one.
struct pair_result {
  pair_request request;
  std::string memory_policy;
  pair_outcome outcome;
  std::optional<measured_pair> target{};
  /// Each throughput's standard error from the fitted parameters' covariance (the delta method,
  /// `propagate_fit_error`), when the run computed it (`tgs-sim pairs` does).
  std::optional<double> production_se{};
  std::optional<double> opportunistic_se{};
  /// Why the prediction rests on a parameter never measured on its GPU type
  /// (`extrapolation_of`); empty when it does not, or when the caller did not ask (`run_pairs` does).
  std::string extrapolated{};
  /// What tgs-node would choose for the pair's opportunistic job, and the cells that follow
  /// (`run_pairs` fills it for every pair with an opportunistic job).
  std::optional<pair_choices> node{};
};

/// The memory budget `r` runs under: its own, else the options', else its GPU's memory. Throws
/// `input_error` for an unknown GPU.
[[nodiscard]] bytes memory_budget_of(const catalog& c, const pair_request& r, const pair_options& options);

/// The request that predicts pair `r`'s cell under the node's mechanism `m` with memory budget
/// `capacity`: the node's policy (`node_choice_policy`) with its own settings, the jobs at their
/// profiles' host speed (a prediction of a run to come, not of a call that was), as an MPS client,
/// time-sliced (`pair_request::opportunistic_time_sliced`), or held (the production job alone).
[[nodiscard]] pair_request request_under(const pair_request& r, opportunistic_mechanism m, bytes capacity);

/// Why a prediction of `controller`'s policy on GPU type `gpu` rests on a parameter never measured
/// there, or empty when it rests on measured ones:
/// - an opportunistic MPS client at below-normal priority (priority-share, or MPS with
///   `opportunistic-below-normal`) where the GPU type's MPS priority loss was never measured (the
///   model takes the MPS loss for it);
/// - idle-harvest, whose gap-filling parameters (`context_switch_us`, `gap_exposure`) are
///   estimates on every GPU type;
/// - any other policy that shares the GPU where no pair was measured under its mechanism.
[[nodiscard]] std::string extrapolation_of(const catalog& c, std::string_view gpu, const any_rate_controller& controller);

/// The same for a pair request, with the controller it runs (the options' settings, then its
/// own). Kept out of `run_pair_request`, which the fit and the delta method run thousands of
/// times: callers that report a result (`run_pairs`) ask once per result.
[[nodiscard]] std::string extrapolation_of(const catalog& c, const pair_request& r, const pair_options& options);

/// A timeline sample (one segment of constant rates).
struct timeline_row {
  std::string scenario;
  std::string policy;
  double start_s = 0;
  double end_s = 0;
  double production = 0;
  double opportunistic = 0;
  std::optional<std::uint64_t> opportunistic_budget{};
  /// The controller's phase over the segment (its `describe()`'s "phase"; empty if it has none),
  /// as tgs-node reports it for a real GPU, so that the two can be compared.
  std::string phase;
};

/// The traits of the rate controller registered as `policy`. Throws `input_error` listing the
/// known names for an unknown one.
rate_policy_traits policy_traits(std::string_view policy);

/// The measured cells of `c` on `gpu`, in file order, as requests: with `policies` empty every
/// cell; otherwise the cells of those policies, and each of those policies once more for every
/// measured pair that has no cell of it.
std::vector<pair_request> measured_pair_requests(const catalog& c, const std::string& gpu,
                                                 const std::vector<std::string>& policies);

/// Simulates one pair. Throws `input_error` for an unknown model, GPU, policy or setting (the
/// message lists the known names). Appends the run's segments to `timeline` when given.
pair_result run_pair_request(const catalog& c, const pair_request& r, const pair_options& options,
                             std::vector<timeline_row>* timeline = nullptr);

/// The catalog every tgs-sim subcommand runs with: the tables, with the global fit applied. The
/// fit is cached in `sim/data/fit.csv` with the hash of the tables it came from: the embedded
/// tables load it as they are; tables that differ (`--models`, `--gpus`, `--measurements`) are
/// fitted afresh.
struct calibrated_model {
  catalog data;       ///< the tables with the fit applied
  catalog unfitted;   ///< the tables as read (the fit's starting point)
  fit_result fit;
  bool fit_from_cache = false;  ///< the cached fit matched the tables
};
calibrated_model calibrate(const catalog_sources& sources = {});

/// The z of a two-sided 95% interval under a normal distribution: a prediction's interval is its
/// value ± this many standard errors.
inline constexpr double interval_z = 1.959964;

/// A measured cell beside the simulator's prediction of it.
struct prediction {
  measured_pair cell;
  std::optional<double> production{};
  std::optional<double> opportunistic{};
  /// Each prediction's standard error from the uncertainty of the fitted parameters (the fit's
  /// covariance, `propagate_fit_error`); set with the prediction.
  std::optional<double> production_se{};
  std::optional<double> opportunistic_se{};
  /// The prediction came from a fit that left this cell's pair out.
  bool left_out = false;
  /// The standard deviation of a measurement around the prediction: the parameters' standard
  /// error and, beside it, the model's own error and the measurement's noise, estimated from
  /// the residuals of pairs left out of the fit (`calibrate_intervals`). Empty until calibrated.
  std::optional<double> production_sd{};
  std::optional<double> opportunistic_sd{};
};

/// A calibration group (GPU type and policy) needs this many left-out throughputs for its own
/// estimate of the model's error; with fewer the GPU type's is taken, then every GPU type's.
inline constexpr std::size_t min_calibration_throughputs = 8;

/// Sets the standard deviations of both lists (aligned: the same cells in the same order, as
/// `predict_measured` returns them without and with `leave_one_out`). The model's error of a
/// group is the root of mean(residual²) − mean(parameter se²) over its left-out throughputs (not
/// below 0): what the left-out residuals spread beyond what the parameters explain, which holds
/// the measurement's noise too. A left-out prediction takes it from the other pairs' residuals
/// only, so its interval's coverage is a test, not a fit; an in-sample one from all of them.
void calibrate_intervals(std::vector<prediction>& in_sample, std::vector<prediction>& left_out);

/// How the calibrated 95% intervals of left-out predictions did on one GPU type.
struct interval_coverage {
  std::string gpu;
  std::size_t throughputs = 0;
  std::size_t inside = 0;  ///< measured throughputs inside their interval
  double median_half_width = 0;
};

/// Per GPU type, in the order they first appear: coverage and median half-width of the
/// calibrated intervals of `left_out`.
[[nodiscard]] std::vector<interval_coverage> coverage_of(const std::vector<prediction>& left_out);

/// The 95% interval of a prediction with standard error `se`: value ± `interval_z`·se, not below 0
/// (a throughput).
[[nodiscard]] inline std::pair<double, double> interval_of(double value, double se) noexcept {
  const double half = interval_z * se;
  return {value - half < 0 ? 0.0 : value - half, value + half};
}

/// Predicts every measured cell of `model` (on `gpu`, or every GPU type when empty): each with
/// the calibrated model, or with `leave_one_out` from a fit without the cell's pair (one refit
/// of the pair's GPU type per pair), and each with its standard error from that fit's covariance.
/// Adaptive policies (TGS, idle-harvest) are simulated for 600 s as the paper's cells are
/// measured; the others reach their steady state at once.
std::vector<prediction> predict_measured(const calibrated_model& model, const std::string& gpu,
                                         bool leave_one_out);

}  // namespace tgs::sim
