// SPDX-License-Identifier: Apache-2.0
/// @file
/// The seeded assignment of class, model, batch size and iterations to trace jobs.
#include "tgs/traces/labels.hpp"

#include <fmt/format.h>

#include <cmath>

#include "tgs/core/config_error.hpp"
#include "tgs/traces/random.hpp"

namespace tgs::traces {

void assign_labels(trace& t, const label_options& options) {
  tgs::require(!options.production_fraction ||
                   (*options.production_fraction >= 0.0 && *options.production_fraction <= 1.0),
               "assign_labels: production_fraction must be in [0, 1]");
  double total_weight = 0;
  for (const model_choice& m : options.models) {
    tgs::require(!m.name.empty(), "assign_labels: a model needs a name");
    tgs::require(
        std::isfinite(m.weight) && m.weight > 0,
        fmt::format("assign_labels: model {}: weight must be positive and finite", m.name));
    tgs::require(!m.iteration_time || *m.iteration_time > tgs::duration::zero(),
                 fmt::format("assign_labels: model {}: iteration_time must be positive", m.name));
    total_weight += m.weight;
  }
  seeded_random rng{options.seed};
  for (job_record& j : t.jobs) {
    const double u_class = rng.uniform();
    const double u_model = rng.uniform();
    if (options.production_fraction && (options.overwrite || !j.priority)) {
      j.priority = u_class < *options.production_fraction ? tgs::job_class::production
                                                          : tgs::job_class::opportunistic;
    }
    if (options.models.empty()) continue;
    const model_choice* chosen = nullptr;
    if (options.overwrite || !j.model) {
      // Walk the cumulative weights; the last model takes any rounding remainder.
      double x = u_model * total_weight;
      chosen = &options.models.back();
      for (const model_choice& m : options.models) {
        if (x < m.weight) {
          chosen = &m;
          break;
        }
        x -= m.weight;
      }
      j.model = chosen->name;
    } else {
      for (const model_choice& m : options.models) {
        if (m.name == *j.model) chosen = &m;
      }
      if (chosen == nullptr) continue;  // a model the caller did not describe: keep it as is
    }
    if (chosen->batch_size && (options.overwrite || !j.batch_size))
      j.batch_size = chosen->batch_size;
    if (!chosen->iteration_time) continue;
    const tgs::duration it = *chosen->iteration_time;
    if (j.run_time && (options.overwrite || !j.iterations)) {
      // Rounding up: the job runs at least as long as the trace recorded.
      const auto n = (j.run_time->count() + it.count() - 1) / it.count();
      j.iterations = static_cast<std::uint64_t>(std::max<tgs::duration::rep>(1, n));
    } else if (!j.run_time && j.iterations) {
      const double seconds = static_cast<double>(*j.iterations) * tgs::to_seconds(it);
      tgs::require(seconds <= 1e9, fmt::format("assign_labels: job {}: {} iterations of {} take "
                                               "over 1e9 s",
                                               static_cast<std::uint32_t>(j.id), *j.iterations,
                                               j.model.value_or("")));
      j.run_time = tgs::from_seconds(seconds);
    }
  }
}

}  // namespace tgs::traces
