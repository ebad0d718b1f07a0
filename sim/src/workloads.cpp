// SPDX-License-Identifier: Apache-2.0
// The simulator's own job streams: the paper's mixed stream and trace labelling.
#include "tgs/sim/workloads.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "tgs/core/config_error.hpp"
#include "tgs/traces/labels.hpp"
#include "tgs/traces/random.hpp"

namespace tgs::sim {

traces::trace mixed_stream(const catalog& c, const std::string& gpu,
                           const mixed_stream_config& config) {
  require(config.production_jobs >= 0 && config.opportunistic_jobs >= 0,
          "mixed stream: job counts must be at least 0");
  require(!config.models.empty(), "mixed stream: models must not be empty");
  require(config.two_gpu_share >= 0 && config.two_gpu_share <= 1,
          "mixed stream: two_gpu_share must be in [0, 1]");
  require(config.min_minutes > 0 && config.max_minutes >= config.min_minutes,
          "mixed stream: durations must satisfy 0 < min_minutes <= max_minutes");
  require(config.mean_interarrival_minutes > 0,
          "mixed stream: mean_interarrival_minutes must be positive");
  std::vector<const model_profile*> models;
  for (const auto& name : config.models) {
    const model_profile* m = c.find_model(name, gpu);
    if (m == nullptr) {
      throw input_error(fmt::format("mixed stream: no profile for model \"{}\" on gpu \"{}\"",
                                    name, gpu));
    }
    models.push_back(m);
  }
  traces::seeded_random rng(config.seed);
  // Classes in a random order, so both classes arrive throughout the stream.
  std::vector<job_class> classes;
  classes.insert(classes.end(), static_cast<std::size_t>(config.production_jobs),
                 job_class::production);
  classes.insert(classes.end(), static_cast<std::size_t>(config.opportunistic_jobs),
                 job_class::opportunistic);
  for (std::size_t i = classes.size(); i > 1; --i) {
    std::swap(classes[i - 1], classes[rng.below(i)]);
  }
  traces::trace t;
  t.source = "mixed stream";
  double clock_s = 0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (i > 0) clock_s += -std::log(1.0 - rng.uniform()) * config.mean_interarrival_minutes * 60;
    traces::job_record r;
    r.submit = epoch + from_seconds(clock_s);
    r.priority = classes[i];
    const model_profile* m = models[rng.below(models.size())];
    r.model = m->model;
    r.batch_size = static_cast<std::uint32_t>(m->batch_size);
    r.gpus = rng.uniform() < config.two_gpu_share ? 2U : 1U;
    const double minutes =
        config.min_minutes * std::exp(rng.uniform() * std::log(config.max_minutes / config.min_minutes));
    const double iterations = std::max(1.0, std::round(minutes * 60 / to_seconds(m->iteration_time)));
    r.iterations = static_cast<std::uint64_t>(iterations);
    r.run_time = from_seconds(iterations * to_seconds(m->iteration_time));
    r.name = fmt::format("job-{:03}", i);
    t.jobs.push_back(std::move(r));
  }
  traces::normalise(t);
  return t;
}

void label_trace(traces::trace& t, const catalog& c, const std::string& gpu, std::uint64_t seed,
                 double production_share, const std::vector<std::string>& models) {
  traces::label_options options;
  options.seed = seed;
  options.production_fraction = production_share;
  for (const auto& name : models) {
    if (c.find_model(name, gpu) == nullptr) {
      throw input_error(fmt::format("--label-models: no profile for model \"{}\" on gpu \"{}\" "
                                    "(known: {})",
                                    name, gpu, fmt::join(c.model_names(gpu), ", ")));
    }
    options.models.push_back({name, 1.0, {}, {}});
  }
  if (options.models.empty()) throw input_error("--label-models: no models to label the trace with");
  traces::assign_labels(t, options);
}

}  // namespace tgs::sim
