// SPDX-License-Identifier: Apache-2.0
/// @file
/// The global fit: each GPU type's mechanism parameters (and the profile fields still marked
/// "fitted") from all the pairs measured on it, with no parameter belonging to one pair; its
/// cache, checked against the tables it was fitted from; and leave-one-pair-out validation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/sim/catalog.hpp"

namespace tgs::sim {

/// One fitted number: a GPU type's mechanism parameter (`model` empty) or a profile field of a
/// model on it.
struct fit_parameter {
  std::string gpu;
  std::string model;  ///< empty: a parameter of the GPU type
  std::string name;   ///< "switch_loss", "busy_fraction", ...
  double value = 0;
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
};

/// Whether a measured cell enters the fit: a policy that does not adapt (its steady state is
/// the mechanism's, not a controller's equilibrium), with at least one throughput.
[[nodiscard]] bool fittable(const measured_pair& cell);

/// Fits every GPU type of `c` that has fittable cells: its `switch_loss`, `mps_switch_loss`,
/// `mps_capacity` and thrash per compute mode where cells exercise them, and the profile fields
/// marked `provenance::fitted` of the models in those cells. Each cell is simulated with the real
/// policy objects (`run_pair`); the squared error of the throughputs is minimized by a bounded
/// coordinate search, deterministic. Throws `input_error` for a cell the simulator cannot run.
fit_result fit_catalog(const catalog& c, const fit_options& options = {});

/// Writes the fitted values into the catalog's GPU types and profiles.
void apply_fit(catalog& c, const fit_result& fit);

/// The fit as CSV (`sim/data/fit.csv`): a comment with the input hash, then gpu,model,parameter,value.
std::string render_fit_csv(const fit_result& fit);

/// Parses `render_fit_csv`'s output. Throws `input_error` naming `origin` and the line.
fit_result parse_fit_csv(std::string_view text, std::string_view origin);

}  // namespace tgs::sim
