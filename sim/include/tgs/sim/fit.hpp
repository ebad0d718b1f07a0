// SPDX-License-Identifier: Apache-2.0
/// @file
/// The global fit: each GPU type's mechanism parameters (and the profile fields still marked
/// "fitted") from all the pairs measured on it, with no parameter belonging to one pair; each
/// parameter's standard error and the covariance that puts an interval on a prediction; its
/// cache, checked against the tables it was fitted from; and leave-one-pair-out validation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/sim/catalog.hpp"

namespace tgs::sim {

/// What the fit could say about one parameter.
enum class estimate_status : std::uint8_t {
  /// Inside its bounds and pinned down by the cells: it has a standard error.
  estimated,
  /// Held at one of its bounds by the cells (the least squares would take it past the bound): no
  /// standard error, and it counts as fixed when a prediction's interval is computed.
  at_bound,
  /// The cells move it less than their own scatter across its whole range (alone or together
  /// with other parameters): no standard error, and fixed for the intervals.
  not_identified,
};

/// "estimated", "at bound", "not identified".
[[nodiscard]] std::string_view to_string(estimate_status s) noexcept;

/// One fitted number: a GPU type's mechanism parameter (`model` empty) or a profile field of a
/// model on it.
struct fit_parameter {
  std::string gpu;
  std::string model;  ///< empty: a parameter of the GPU type
  std::string name;   ///< "switch_loss", "busy_fraction", ...
  double value = 0;
  estimate_status status = estimate_status::estimated;
  /// In the value's unit; set exactly when `status` is `estimated`.
  std::optional<double> standard_error{};
  /// Its correlation with each estimated parameter of its GPU type, in `fit_result::parameters`
  /// order (1 with itself); empty unless `status` is `estimated`.
  std::vector<double> correlations{};
};

/// What a fit found.
struct fit_result {
  std::vector<fit_parameter> parameters;
  /// `catalog_inputs::hash` of the tables it was fitted from.
  std::uint64_t inputs_hash = 0;
  /// Throughputs it was fitted to, and their root-mean-square error after the fit.
  std::size_t cells = 0;
  double rms_error = 0;
};

/// Settings of a fit.
struct fit_options {
  /// Leave out the measured cells of these pairs (`measured_pair::pair_key`).
  std::vector<std::string> exclude;
  /// Fit only this GPU type (the others' parameters are left out of the result); empty: every one.
  std::string gpu;
};

/// Whether a measured cell enters the fit: a policy that does not adapt (its steady state is
/// the mechanism's, not a controller's equilibrium), with at least one throughput.
[[nodiscard]] bool fittable(const measured_pair& cell);

/// Fits every GPU type of `c` that has fittable cells: its `switch_loss`, `mps_switch_loss`,
/// `mps_capacity`, `mps_priority_loss` and thrash per compute mode where cells exercise them
/// (the priority loss where a cell ran the opportunistic MPS client below normal), and the profile fields
/// marked `provenance::fitted` of the models in those cells. Each cell is simulated with the real
/// policy objects (`run_pair`); the squared error of the throughputs is minimized by bounded
/// Levenberg–Marquardt, one problem per GPU type, deterministic. Each parameter comes with its
/// status and, when estimated, its standard error from s²·(JᵀJ)⁻¹ at the optimum. Throws
/// `input_error` for a cell the simulator cannot run.
fit_result fit_catalog(const catalog& c, const fit_options& options = {});

/// Writes the fitted values into the catalog's GPU types and profiles.
void apply_fit(catalog& c, const fit_result& fit);

/// The standard errors of numbers computed from a fitted catalog, from the covariance of the
/// fit's estimated parameters of `gpu` (the delta method): each parameter is moved by its standard
/// error either way (within its bounds), `outputs` computes the numbers from `fitted` so changed,
/// and the central differences, weighted by the covariance, give each number's variance. A moved
/// parameter that is not estimated counts as exact. `fitted` is a catalog with `fit` applied
/// (`outputs` sees a copy of it). For example, with `outputs` the predictions of a GPU type's
/// cells:
///
/// ```cpp
/// const auto se = propagate_fit_error(model.data, model.fit, "h100-80gb",
///                                     [&](const catalog& c) { return predict_cells(c); });
/// ```
[[nodiscard]] std::vector<double> propagate_fit_error(
    const catalog& fitted, const fit_result& fit, const std::string& gpu,
    const std::function<std::vector<double>(const catalog&)>& outputs);

/// The fit as CSV (`sim/data/fit.csv`): comments, the header
/// gpu,model,parameter,value,standard_error,correlations, the input hash, then one row per
/// parameter (standard_error a number, "at bound" or "not identified"; correlations
/// space-separated, with the GPU type's estimated parameters in order).
std::string render_fit_csv(const fit_result& fit);

/// Parses `render_fit_csv`'s output. Throws `input_error` naming `origin` and the line.
fit_result parse_fit_csv(std::string_view text, std::string_view origin);

}  // namespace tgs::sim
