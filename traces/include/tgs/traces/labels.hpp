// SPDX-License-Identifier: Apache-2.0
/// @file
/// The explicit, seeded step that gives Philly jobs what the trace lacks: a class (production or
/// opportunistic), a model name, a batch size and an iteration count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tgs/core/units.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::traces {

/// One model a job may be given, with its relative weight.
struct model_choice {
  std::string name;
  /// Relative weight (> 0); the weights need not sum to 1.
  double weight = 1.0;
  /// Time of one training iteration of this model, supplied by the caller (for example from a
  /// simulator profile). When set, a job's iterations become ceil(run_time / iteration_time),
  /// and a job that has iterations but no run time gets run_time = iterations × iteration_time.
  std::optional<tgs::duration> iteration_time;
  /// Batch size given to jobs of this model, if any.
  std::optional<std::uint32_t> batch_size;
};

/// Settings of `assign_labels`. Nothing has a default that pretends to be data: Philly
/// publishes no class shares or models, so an unset field leaves the jobs' field unset.
struct label_options {
  std::uint64_t seed = 0;
  /// Share of jobs made production, in [0, 1]; empty leaves the class alone.
  std::optional<double> production_fraction;
  /// Models to draw from by weight; empty leaves model, batch size and iterations alone.
  std::vector<model_choice> models;
  /// Replace fields the trace already has (class, model, batch size, iterations); by default
  /// only missing fields are filled.
  bool overwrite = false;
};

/// Fills class, model, batch size and iterations of every job of `t`, deterministically from
/// `options.seed`: job i (in trace order) uses the (2i)-th and (2i+1)-th uniform draws of
/// `seeded_random{seed}`, the first for its class, the second for its model, whether or not
/// the field is filled. So the same seed and trace always give the same labels, and changing
/// the fraction or the model list moves as few jobs as possible.
/// Throws `tgs::config_error` for a fraction outside [0, 1], an empty model name, a weight that
/// is not positive and finite, or a zero iteration time.
///
/// ```cpp
/// tgs::traces::assign_labels(t, {.seed = 7, .production_fraction = 0.3,
///                                .models = {{"resnet50", 2.0, std::chrono::milliseconds{120},
///                                256},
///                                           {"bert", 1.0, std::chrono::milliseconds{300}, 32}}});
/// ```
void assign_labels(trace& t, const label_options& options);

}  // namespace tgs::traces
