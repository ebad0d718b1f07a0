// SPDX-License-Identifier: Apache-2.0
/// @file
/// The simulator's data: GPU types, model profiles and measured pair throughputs, read from CSV
/// files (embedded defaults in `sim/data/`, or the user's own).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// Bad input to the simulator: the message names the file (or flag), the line and what was
/// expected, e.g. `models.csv:7: busy_fraction: expected a number in (0, 1], got "1.7"`.
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A throughput pair measured on real hardware: the targets the contention model is fitted to.
struct measured_pair {
  std::string scenario;
  std::string gpu;
  std::string production_model;
  std::string opportunistic_model;
  std::string policy;
  double production = 0;
  double opportunistic = 0;
  std::string origin;  ///< "file:line", for messages
};

/// Everything the simulator knows about hardware and jobs.
struct catalog {
  std::vector<gpu_profile> gpus;
  std::vector<model_profile> models;
  std::vector<measured_pair> measurements;

  [[nodiscard]] const gpu_profile* find_gpu(std::string_view name) const noexcept;
  [[nodiscard]] const model_profile* find_model(std::string_view model,
                                                std::string_view gpu) const noexcept;
  /// Model names known on `gpu`, in file order.
  [[nodiscard]] std::vector<std::string> model_names(std::string_view gpu) const;
};

/// Parses the GPU table (`gpu,memory_gib,host_link_gbps,mig_slices`). `origin` names the input in
/// error messages. Throws `input_error`.
std::vector<gpu_profile> parse_gpus(std::string_view text, std::string_view origin);
/// Parses the model table (see `sim/data/models.csv`). Throws `input_error`.
std::vector<model_profile> parse_models(std::string_view text, std::string_view origin);
/// Parses measured pairs (see `sim/data/paper_pairs.csv`). Throws `input_error`.
std::vector<measured_pair> parse_measurements(std::string_view text, std::string_view origin);

/// Reads a whole file; throws `input_error` naming it when it cannot be read.
std::string read_file(const std::string& path);

/// Paths of user-supplied tables; an empty one selects the embedded default.
struct catalog_sources {
  std::string gpus;
  std::string models;
  std::string measurements;
};

/// Loads the catalog and checks it is consistent (every model's GPU exists, every measurement
/// names known models). Throws `input_error`.
catalog load_catalog(const catalog_sources& sources = {});

}  // namespace tgs::sim
