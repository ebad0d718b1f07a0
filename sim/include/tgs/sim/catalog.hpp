// SPDX-License-Identifier: Apache-2.0
/// @file
/// The simulator's data: GPU types, model profiles and measured pair throughputs, read from CSV
/// files (embedded defaults in `sim/data/`, or the user's own).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// Bad input to the simulator: the message names the file (or flag), the line and what was
/// expected, e.g. `models.csv:7: busy_fraction: expected a number in (0, 1], got "1.7"`.
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A pair measured on real hardware under one policy: what the simulator predicts and the global
/// fit learns the GPU's mechanism parameters from (`sim/data/paper_pairs.csv`,
/// `sim/data/measured_pairs.csv`).
struct measured_pair {
  std::string scenario;
  std::string gpu;
  std::string production_model;
  /// Empty: the production job ran alone (an opportunistic throughput is then absent too).
  std::string opportunistic_model;
  std::string policy;
  /// The memory policy it ran under; empty: the policy's own (`default_memory_policy`).
  std::string memory_policy;
  /// The memory budget it ran under; empty: the card's memory.
  std::optional<bytes> memory_budget{};
  /// The production job held its memory and launched nothing (the opportunistic job's ceiling).
  bool production_idle = false;
  /// Policy settings it ran with, as tgs-sim's flags name them without dashes
  /// ("tgs.production-window-ms", "1000").
  std::vector<std::pair<std::string, std::string>> settings;
  /// Throughputs relative to alone; empty where that job's rate was not measured.
  std::optional<double> production{};
  std::optional<double> opportunistic{};
  /// Each job's alone rate (iterations per second) in the call that measured the cell, where
  /// recorded: that day's host speed, which the prediction runs the job at
  /// (`model_profile::at_alone_rate`). Empty: the profile's.
  std::optional<double> production_alone_rate{};
  std::optional<double> opportunistic_alone_rate{};
  int runs = 0;        ///< runs behind the medians (0: not stated)
  std::string source;  ///< where the measurement is recorded
  std::string origin;  ///< "file:line", for messages

  /// The pair's identity: GPU, both models (the leave-one-pair-out unit).
  [[nodiscard]] std::string pair_key() const {
    return gpu + "/" + production_model + "/" + opportunistic_model;
  }
};

/// What tgs-node measured of one job on one GPU type that its choice of mechanism reads and no
/// profile field holds (`sim/data/job_facts.csv`): each value beside where it came from, empty
/// where not measured. Loaded into the job's `model_profile`.
struct job_facts {
  std::string model;
  std::string gpu;
  std::optional<double> production_gpu_wait{};
  std::string production_gpu_wait_source;
  std::optional<duration> opportunistic_longest_span{};
  std::string opportunistic_longest_span_source;
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

/// Parses the GPU table (see `sim/data/gpus.csv`). `origin` names the input in error messages.
/// Throws `input_error`.
std::vector<gpu_profile> parse_gpus(std::string_view text, std::string_view origin);
/// Parses the model table (see `sim/data/models.csv`). Throws `input_error`.
std::vector<model_profile> parse_models(std::string_view text, std::string_view origin);
/// Parses measured pairs (see `sim/data/measured_pairs.csv`). Throws `input_error`.
std::vector<measured_pair> parse_measurements(std::string_view text, std::string_view origin);
/// Parses the facts tgs-node measured of jobs (see `sim/data/job_facts.csv`): a value needs its
/// source and a source its value. Throws `input_error`.
std::vector<job_facts> parse_job_facts(std::string_view text, std::string_view origin);

/// Reads a whole file; throws `input_error` naming it when it cannot be read.
std::string read_file(const std::string& path);

/// Paths of user-supplied tables; an empty one selects the embedded default (for
/// measurements: the paper's A100 pairs and our H100/H200 pairs).
struct catalog_sources {
  std::string gpus;
  std::string models;
  std::string measurements;
};

/// The texts of the tables a catalog was loaded from, as read: what the fit cache is checked
/// against.
struct catalog_inputs {
  std::string gpus;
  std::string models;
  std::string measurements;
  /// A 64-bit FNV-1a hash of the three texts: equal inputs, equal hash.
  [[nodiscard]] std::uint64_t hash() const noexcept;
};

/// Loads the catalog and checks it is consistent (every model's GPU exists, every measurement
/// names known models), with the embedded facts tgs-node measured of jobs
/// (`sim/data/job_facts.csv`) in the profiles they name; a user's model table without such a
/// profile leaves its facts out. Throws `input_error`. `inputs`, when given, receives the texts
/// read.
catalog load_catalog(const catalog_sources& sources = {}, catalog_inputs* inputs = nullptr);

}  // namespace tgs::sim
