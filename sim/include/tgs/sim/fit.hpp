// SPDX-License-Identifier: Apache-2.0
/// @file
/// Fits the contention model's per-model and per-GPU parameters (Eigen least squares) to
/// measured pair throughputs, and looks fitted parameters up.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tgs/sim/catalog.hpp"
#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// Fitted parameters for every model and GPU type of a catalog.
class contention_table {
 public:
  /// Parameters of `model` on `gpu`; all-zero (no interference) for a model without data.
  [[nodiscard]] const model_contention& model(std::string_view model, std::string_view gpu) const;
  [[nodiscard]] const gpu_contention& gpu(std::string_view gpu) const;

  model_contention& model_mut(std::string_view model, std::string_view gpu);
  gpu_contention& gpu_mut(std::string_view gpu);

  struct model_entry {
    std::string model;
    std::string gpu;
    model_contention params;
  };
  struct gpu_entry {
    std::string gpu;
    gpu_contention params;
  };
  [[nodiscard]] const std::vector<model_entry>& models() const noexcept { return models_; }
  [[nodiscard]] const std::vector<gpu_entry>& gpus() const noexcept { return gpus_; }

 private:
  std::vector<model_entry> models_;
  std::vector<gpu_entry> gpus_;
};

/// Settings of the fit that come from the policies measured, not from the data.
struct fit_settings {
  fit_settings();

  /// TGS keeps the production job within this band of its maximum rate (tgs_rate_control's
  /// dead band); a TGS cell says how much opportunistic work the production job tolerates in it.
  double tgs_dead_band = 0.03;
  /// SM fractions the measurements ran with (production, opportunistic): the `mig` and `mps`
  /// policies' defaults (fit.cpp reads them from the policies' configs).
  double mig_production_fraction;
  double mig_opportunistic_fraction;
  double mps_production_fraction;
  double mps_opportunistic_fraction;
  /// A measured 0.00 is taken as this (the measurement's resolution).
  double floor = 0.005;
  /// Ridge weight that makes parameters without data zero instead of arbitrary.
  double ridge = 1e-6;
  /// Occupancy exponent of time slicing. Stage one takes it as given; `calibrate` chooses it by
  /// simulating every time-slicing cell (it shapes TGS's equilibrium, a dynamic property).
  double time_slicing_occupancy_exponent = 1.0;
};



/// Fits sensitivities, thrash and slice parameters per model and the aggressor exponent per GPU
/// type and compute mode to `c.measurements` (stage one: the steady-state equations).
/// The interposer overhead is fitted separately (it needs TGS's dynamics; see pairs.hpp).
contention_table fit_contention(const catalog& c, const fit_settings& settings = {});

}  // namespace tgs::sim
