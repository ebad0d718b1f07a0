// SPDX-License-Identifier: Apache-2.0
/// @file
/// Job streams the simulator builds itself: the paper's mixed production/opportunistic stream
/// (the default workload of `tgs-sim`) and the labelling of real traces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tgs/sim/catalog.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::sim {

/// The mixed job stream of NSDI'23 §7.2 (Figure 6): production and opportunistic jobs of the
/// paper's models, at most 2 GPUs each, arriving together on one server. The paper does not
/// publish the stream itself; this is our seeded reconstruction, its parameters below.
struct mixed_stream_config {
  std::uint64_t seed = 1;
  int production_jobs = 50;
  int opportunistic_jobs = 50;
  /// Models drawn uniformly (each must have a profile on the GPU type).
  std::vector<std::string> models{"resnet50", "shufflenet", "mobilenet", "gcn", "bert-base"};
  /// Share of 2-GPU jobs; the rest use 1 GPU.
  double two_gpu_share = 0.3;
  /// Standalone duration, log-uniform in [min, max] minutes.
  double min_minutes = 10;
  double max_minutes = 60;
  /// Mean time between submissions (Poisson arrivals), minutes.
  double mean_interarrival_minutes = 15;
};

/// Generates the stream: records sorted by submission, each with a class, a model, GPUs,
/// iterations (duration ÷ the model's iteration time on `gpu`) and run time.
traces::trace mixed_stream(const catalog& c, const std::string& gpu,
                           const mixed_stream_config& config = {});

/// Labels a real trace that has no classes or models (Philly): a seeded share of production
/// jobs and models drawn uniformly from `models` (each must be profiled on `gpu`); run times
/// stay the trace's. A record that already has a label keeps it.
void label_trace(traces::trace& t, const catalog& c, const std::string& gpu, std::uint64_t seed,
                 double production_share, const std::vector<std::string>& models);

}  // namespace tgs::sim
