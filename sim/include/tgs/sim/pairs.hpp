// SPDX-License-Identifier: Apache-2.0
/// @file
/// GPU-pair scenarios by name: the paper's co-location experiments (and any pair of profiled
/// models) under any sharing policy, with the policy objects chosen at run time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/catalog.hpp"
#include "tgs/sim/fit.hpp"
#include "tgs/sim/gpu_pair.hpp"

namespace tgs::sim {

/// One pair to simulate under one sharing policy.
struct pair_request {
  std::string scenario;  ///< a label ("high-contention", or "custom")
  std::string gpu;
  std::string production_model;
  std::string opportunistic_model;
  std::string policy;  ///< a rate-controller registry name (`tgs::rate_controller_names()`)
};

/// Settings shared by all pairs of a run.
struct pair_options {
  duration run_for = std::chrono::seconds{600};
  duration warmup = std::chrono::seconds{60};
  /// Memory budget; empty: the GPU's memory.
  std::optional<bytes> memory_budget{};
  /// Memory policy registry name; empty: the sharing policy's own (its `default_memory_policy`).
  std::string memory_policy;
  /// `pair_spec::observation_noise`: relative standard deviation of the launch counts the
  /// controller observes per step (0: the steady means the paper's cells are).
  double observation_noise = 0;
  /// `pair_spec::seed` of that noise.
  std::uint64_t seed = 1;
  /// `pair_spec::production_drift`: the fraction by which the production job's standalone speed
  /// falls over the run (0: steady).
  double production_drift = 0;
  /// Every rate controller's settings (defaults until a command line sets them); each pair's
  /// controller is built from its policy's entry.
  any_rate_controller::configs rate_settings{};
  /// Every memory policy's settings, likewise.
  any_memory_policy::configs memory_settings{};
};

/// The result of one pair, with the measured target when the catalog has one.
struct pair_result {
  pair_request request;
  std::string memory_policy;
  pair_outcome outcome;
  std::optional<measured_pair> target{};
};

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

/// The paper's four co-location scenarios (NSDI'23 Figure 5), one request per measured cell of
/// `c` on `gpu`, in file order, restricted to `policies` when not empty.
std::vector<pair_request> paper_pair_requests(const catalog& c, const std::string& gpu,
                                              const std::vector<std::string>& policies);

/// Simulates one pair. Throws `input_error` for an unknown model, GPU or policy (the message
/// lists the known names). Appends the run's segments to `timeline` when given.
pair_result run_pair_request(const catalog& c, const contention_table& t, const pair_request& r,
                             const pair_options& options,
                             std::vector<timeline_row>* timeline = nullptr);

/// Fits the interposer overhead of each model from the catalog's TGS cells (stage two of the
/// fit): simulates each with zero overhead and attributes the remaining production gap to the
/// interposer, bounded by what the TGS paper reports (at most 4.5%).
void fit_interposer_overhead(const catalog& c, contention_table& t, const pair_options& options);

/// Stage three of the fit: tunes the time-slicing sensitivity of each production model of a TGS
/// cell by simulating the cells it appears in (golden-section search), alternating with the
/// interposer overhead. TGS's equilibrium is a property of the controller's dynamics, which the
/// steady-state equations of stage one only approximate.
void refine_by_simulation(const catalog& c, contention_table& t, const pair_options& options);

/// Loads the catalog and fits every parameter: what `tgs-sim` runs with.
struct calibrated_model {
  catalog data;
  contention_table params;
};
calibrated_model calibrate(const catalog_sources& sources = {}, const pair_options& options = {});

}  // namespace tgs::sim
