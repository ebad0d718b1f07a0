// SPDX-License-Identifier: Apache-2.0
// GPU-pair scenarios by name: builds the specs, picks the policies from their registries, runs.
#include "tgs/sim/pairs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"

namespace tgs::sim {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const model_profile& model_or_throw(const catalog& c, const std::string& model,
                                    const std::string& gpu) {
  if (const auto* m = c.find_model(model, gpu)) return *m;
  throw input_error(fmt::format("unknown model \"{}\" on gpu \"{}\" (known: {})", model, gpu,
                                join(c.model_names(gpu))));
}

/// The run's controller, which also tells the timeline the phase it reports after each step:
/// a pair run hands its observer segments, not the controller.
class phase_reporting_controller {
 public:
  using config = any_rate_controller::config;
  static constexpr std::string_view name = "phase-reporting";

  explicit phase_reporting_controller(const config& cfg) : inner_(cfg) {}
  phase_reporting_controller(any_rate_controller inner, std::string_view* phase)
      : inner_(std::move(inner)), phase_(phase) {}

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    const rate_decision d = inner_.step(obs);
    if (phase_ != nullptr) {
      const state_report report = inner_.describe();
      const state_field* f = report.find("phase");
      const auto* word = f != nullptr ? std::get_if<std::string_view>(&f->value) : nullptr;
      *phase_ = word != nullptr ? *word : std::string_view{};
    }
    return d;
  }
  [[nodiscard]] const config& settings() const noexcept { return inner_.settings(); }
  [[nodiscard]] state_report describe() const noexcept { return inner_.describe(); }

 private:
  any_rate_controller inner_;
  std::string_view* phase_ = nullptr;
};
static_assert(RateController<phase_reporting_controller>);

struct timeline_recorder {
  std::vector<timeline_row>* rows;
  const pair_request* request;
  /// The phase the controller reported at its latest step (a string literal of its own).
  const std::string_view* phase;
  void on_segment(const pair_segment& s) {
    rows->push_back({request->scenario, request->policy, to_seconds(s.start - epoch),
                     to_seconds(s.end - epoch), s.rates.production, s.rates.opportunistic,
                     s.opportunistic_budget, std::string(*phase)});
  }
};

}  // namespace

rate_policy_traits policy_traits(std::string_view policy) {
  if (const auto t = any_rate_controller::traits_of_policy(policy)) return *t;
  throw input_error(fmt::format("unknown policy \"{}\" (known: {})", policy, rate_controller_list()));
}

std::vector<pair_request> paper_pair_requests(const catalog& c, const std::string& gpu,
                                              const std::vector<std::string>& policies) {
  std::vector<pair_request> out;
  for (const auto& m : c.measurements) {
    if (m.gpu != gpu) continue;
    if (!policies.empty() && std::find(policies.begin(), policies.end(), m.policy) == policies.end()) {
      continue;
    }
    out.push_back({m.scenario, m.gpu, m.production_model, m.opportunistic_model, m.policy});
  }
  // Requested policies without a measured cell still run, once per scenario.
  std::vector<std::string> scenarios;
  for (const auto& m : c.measurements) {
    if (m.gpu == gpu && std::find(scenarios.begin(), scenarios.end(), m.scenario) == scenarios.end()) {
      scenarios.push_back(m.scenario);
    }
  }
  for (const auto& policy : policies) {
    for (const auto& scenario : scenarios) {
      const bool have = std::any_of(out.begin(), out.end(), [&](const auto& r) {
        return r.scenario == scenario && r.policy == policy;
      });
      if (have) continue;
      const auto cell = std::find_if(c.measurements.begin(), c.measurements.end(),
                                     [&](const auto& m) { return m.scenario == scenario && m.gpu == gpu; });
      out.push_back({scenario, gpu, cell->production_model, cell->opportunistic_model, policy});
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    auto rank = [&](const std::string& s) {
      return std::find(scenarios.begin(), scenarios.end(), s) - scenarios.begin();
    };
    return rank(a.scenario) < rank(b.scenario);
  });
  return out;
}

pair_result run_pair_request(const catalog& c, const contention_table& t, const pair_request& r,
                             const pair_options& options, std::vector<timeline_row>* timeline) {
  const gpu_profile* gpu = c.find_gpu(r.gpu);
  if (gpu == nullptr) {
    std::vector<std::string> names;
    for (const auto& g : c.gpus) names.push_back(g.name);
    throw input_error(fmt::format("unknown gpu \"{}\" (known: {})", r.gpu, join(names)));
  }
  const model_profile& prod = model_or_throw(c, r.production_model, r.gpu);
  const model_profile& opp = model_or_throw(c, r.opportunistic_model, r.gpu);
  // The policy's settings as the command line gave them, as tgs-node builds its controller:
  // validation errors are bad input.
  const rate_policy_traits traits = policy_traits(r.policy);
  std::optional<any_rate_controller> controller;
  try {
    controller.emplace(*options.rate_settings.find(r.policy));
  } catch (const config_error& e) {
    throw input_error(e.what());
  }
  const std::string memory_name = options.memory_policy.empty()
                                      ? std::string(traits.default_memory_policy)
                                      : options.memory_policy;
  const std::optional<any_memory_policy::config> memory_cfg =
      options.memory_settings.find(memory_name);
  if (!memory_cfg) {
    std::vector<std::string> names(memory_policy_names().begin(), memory_policy_names().end());
    throw input_error(fmt::format("unknown memory policy \"{}\" (known: {})", memory_name, join(names)));
  }
  std::optional<any_memory_policy> memory;
  try {
    memory.emplace(*memory_cfg);
  } catch (const config_error& e) {
    throw input_error(e.what());
  }

  pair_spec spec;
  spec.production = {&prod, &t.model(prod.model, r.gpu), epoch, std::nullopt, {}};
  spec.opportunistic = {&opp, &t.model(opp.model, r.gpu), epoch, std::nullopt, {}};
  spec.gpu = *gpu;
  spec.gpu_params = t.gpu(r.gpu);
  spec.memory_budget = options.memory_budget.value_or(gpu->memory);
  spec.interposed = traits.enforced_by == enforcement::interposer;
  spec.run_for = options.run_for;
  spec.warmup = options.warmup;
  spec.observation_noise = options.observation_noise;
  spec.seed = options.seed;
  spec.production_drift = options.production_drift;

  pair_result result{r, memory_name, {}, std::nullopt};
  if (timeline != nullptr) {
    std::string_view phase;
    result.outcome =
        run_pair(spec, phase_reporting_controller{std::move(*controller), &phase},
                 std::move(*memory), timeline_recorder{timeline, &r, &phase});
  } else {
    result.outcome = run_pair(spec, std::move(*controller), std::move(*memory));
  }
  for (const auto& m : c.measurements) {
    if (m.scenario == r.scenario && m.gpu == r.gpu && m.policy == r.policy &&
        m.production_model == r.production_model && m.opportunistic_model == r.opportunistic_model) {
      result.target = m;
    }
  }
  return result;
}

namespace {

/// Squared throughput error of every measured cell that involves `model` on `gpu`.
double cell_error(const catalog& c, const contention_table& t, const std::string& model,
                  const std::string& gpu, const pair_options& options) {
  double sum = 0;
  for (const auto& m : c.measurements) {
    if (m.gpu != gpu || (m.production_model != model && m.opportunistic_model != model)) continue;
    if (policy_traits(m.policy).mechanism != sharing_mechanism::time_slicing) continue;
    const pair_result r = run_pair_request(
        c, t, {m.scenario, m.gpu, m.production_model, m.opportunistic_model, m.policy}, options);
    const double dp = r.outcome.production - m.production;
    const double dopp = r.outcome.opportunistic - m.opportunistic;
    sum += dp * dp + dopp * dopp;
  }
  return sum;
}

/// Golden-section search of one parameter in log space over [lo, hi].
template <typename Objective>
double golden_search(double lo, double hi, Objective&& f) {
  constexpr double ratio = 0.6180339887498949;
  double a = std::log(lo);
  double b = std::log(hi);
  double x1 = b - ratio * (b - a);
  double x2 = a + ratio * (b - a);
  double f1 = f(std::exp(x1));
  double f2 = f(std::exp(x2));
  for (int i = 0; i < 40; ++i) {
    if (f1 <= f2) {
      b = x2;
      x2 = x1;
      f2 = f1;
      x1 = b - ratio * (b - a);
      f1 = f(std::exp(x1));
    } else {
      a = x1;
      x1 = x2;
      f1 = f2;
      x2 = a + ratio * (b - a);
      f2 = f(std::exp(x2));
    }
  }
  return std::exp(0.5 * (a + b));
}

}  // namespace

void fit_interposer_overhead(const catalog& c, contention_table& t, const pair_options& options) {
  // TGS paper §7: the interposer costs the production job up to 4.5% of its throughput.
  constexpr double max_overhead = 0.045;
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> gaps;
  for (const auto& m : c.measurements) {
    if (policy_traits(m.policy).enforced_by != enforcement::interposer) continue;
    model_contention& params = t.model_mut(m.production_model, m.gpu);
    const double saved = params.interposer_overhead;
    params.interposer_overhead = 0;
    const pair_result r = run_pair_request(
        c, t, {m.scenario, m.gpu, m.production_model, m.opportunistic_model, m.policy}, options);
    params.interposer_overhead = saved;
    // x = 1/(u + o): the overhead o that turns the simulated x into the measured one.
    const double target = std::max(m.production, 1e-3);
    const double simulated = std::max(r.outcome.production, 1e-3);
    auto& [sum, n] = gaps[{m.production_model, m.gpu}];
    sum += 1.0 / target - 1.0 / simulated;
    ++n;
  }
  std::map<std::string, std::pair<double, int>> per_gpu;
  for (const auto& [key, acc] : gaps) {
    const double overhead = std::clamp(acc.first / acc.second, 0.0, max_overhead);
    t.model_mut(key.first, key.second).interposer_overhead = overhead;
    per_gpu[key.second].first += overhead;
    ++per_gpu[key.second].second;
  }
  // Models without a TGS cell take the mean overhead of those with one on the same GPU.
  for (const auto& m : c.models) {
    const auto it = per_gpu.find(m.gpu);
    if (it == per_gpu.end() || gaps.contains({m.model, m.gpu})) continue;
    t.model_mut(m.model, m.gpu).interposer_overhead = it->second.first / it->second.second;
  }
}

void refine_by_simulation(const catalog& c, contention_table& t, const pair_options& options) {
  // Production models of TGS cells: their time-slicing sensitivity sets where the controller
  // settles, which the steady-state equations of stage one only approximate.
  std::vector<std::pair<std::string, std::string>> tuned;
  for (const auto& m : c.measurements) {
    const std::pair<std::string, std::string> key{m.production_model, m.gpu};
    if (policy_traits(m.policy).adaptive && std::find(tuned.begin(), tuned.end(), key) == tuned.end()) {
      tuned.push_back(key);
    }
  }
  constexpr auto ts = static_cast<std::size_t>(compute_mode::time_slicing);
  for (int sweep = 0; sweep < 3; ++sweep) {
    fit_interposer_overhead(c, t, options);
    for (const auto& [model, gpu] : tuned) {
      double& sensitivity = t.model_mut(model, gpu).sensitivity[ts];
      const double start = std::max(sensitivity, 1e-3);
      sensitivity = golden_search(start / 10, start * 10, [&](double value) {
        sensitivity = value;
        return cell_error(c, t, model, gpu, options);
      });
    }
  }
  fit_interposer_overhead(c, t, options);
}

namespace {
double total_error(const catalog& c, const contention_table& t, const pair_options& options) {
  double sum = 0;
  for (const auto& m : c.measurements) {
    const pair_result r = run_pair_request(
        c, t, {m.scenario, m.gpu, m.production_model, m.opportunistic_model, m.policy}, options);
    sum += std::pow(r.outcome.production - m.production, 2) +
           std::pow(r.outcome.opportunistic - m.opportunistic, 2);
  }
  return sum;
}
}  // namespace

calibrated_model calibrate(const catalog_sources& sources, const pair_options& options) {
  calibrated_model best{load_catalog(sources), {}};
  double best_error = std::numeric_limits<double>::infinity();
  // The occupancy exponent of time slicing shapes where TGS's controller settles; it is chosen
  // on a grid by the whole fit's simulated error (docs/simulator/contention-model.md).
  for (const double exponent : {1.0, 1.25, 1.5, 1.75, 2.0}) {
    fit_settings settings;
    settings.time_slicing_occupancy_exponent = exponent;
    contention_table t = fit_contention(best.data, settings);
    refine_by_simulation(best.data, t, options);
    const double error = total_error(best.data, t, options);
    if (error < best_error) {
      best_error = error;
      best.params = std::move(t);
    }
  }
  return best;
}

}  // namespace tgs::sim
