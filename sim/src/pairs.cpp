// SPDX-License-Identifier: Apache-2.0
// GPU-pair scenarios by name: builds the specs, picks the policies from their registries, runs;
// the calibrated model and the predictions of the measured cells.
#include "tgs/sim/pairs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "embedded_data.hpp"
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

const gpu_profile& gpu_or_throw(const catalog& c, const std::string& gpu) {
  if (const gpu_profile* g = c.find_gpu(gpu)) return *g;
  std::vector<std::string> names;
  for (const auto& g : c.gpus) names.push_back(g.name);
  throw input_error(fmt::format("unknown gpu \"{}\" (known: {})", gpu, join(names)));
}

/// The run's controller as a driver carries its decisions out: it tells the timeline the phase it
/// reports after each step (a pair run hands its observer segments, not the controller), and with
/// the opportunistic job in a context of its own (tgs-node's time-sliced mechanism) the jobs share
/// by time slicing whatever share the policy asks for, under the policy's cap.
class driver_controller {
 public:
  using config = any_rate_controller::config;
  static constexpr std::string_view name = "driver";

  explicit driver_controller(const config& cfg) : inner_(cfg) {}
  driver_controller(any_rate_controller inner, std::string_view* phase, bool own_context)
      : inner_(std::move(inner)), phase_(phase), own_context_(own_context) {}

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    rate_decision d = inner_.step(obs);
    if (own_context_) d.share = time_sliced{};
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
  bool own_context_ = false;
};
static_assert(RateController<driver_controller>);

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

double parse_number(std::string_view key, std::string_view value) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc{} || ptr != value.data() + value.size() || !std::isfinite(v)) {
    throw input_error(fmt::format("setting {}: expected a number, got \"{}\"", key, value));
  }
  return v;
}

/// Sets `key` ("<policy>.<flag>") in one registry's configs; false when no policy has it.
template <typename Registry>
bool set_in(typename Registry::configs& configs, std::string_view key, std::string_view value) {
  bool found = false;
  Registry::for_each_policy([&]<typename P>() {
    if (found) return;
    const std::string_view name = P::name;
    if (key.size() <= name.size() + 1 || key.substr(0, name.size()) != name || key[name.size()] != '.') {
      return;
    }
    const std::string_view flag = key.substr(name.size() + 1);
    for (const auto& s : P::setting_table) {
      if (s.flag != flag) continue;
      found = true;
      auto& cfg = configs.template of<P>();
      std::visit(
          [&](auto member) {
            using T = std::remove_cvref_t<decltype(cfg.*member)>;
            const double v = parse_number(key, value);
            if constexpr (std::is_same_v<T, bool>) {
              cfg.*member = v != 0;
            } else if constexpr (std::is_same_v<T, duration>) {
              cfg.*member = from_seconds(v / 1e3);
            } else if constexpr (std::is_same_v<T, bytes> || std::is_same_v<T, std::optional<bytes>>) {
              if (v < 0) throw input_error(fmt::format("setting {}: must not be negative", key));
              cfg.*member = bytes{static_cast<std::uint64_t>(v * 1024.0 * 1024.0)};
            } else {
              if (std::is_unsigned_v<T> && v < 0) {
                throw input_error(fmt::format("setting {}: must not be negative", key));
              }
              cfg.*member = static_cast<T>(v);
            }
          },
          s.member);
      return;
    }
  });
  return found;
}

}  // namespace

pair_options steady_state_options() {
  pair_options o;
  o.run_for = std::chrono::seconds{30};
  o.warmup = std::chrono::seconds{20};
  return o;
}

void apply_setting(any_rate_controller::configs& rate, any_memory_policy::configs& memory,
                   std::string_view key, std::string_view value) {
  constexpr std::string_view memory_prefix = "memory.";
  const bool is_memory = key.substr(0, memory_prefix.size()) == memory_prefix;
  const bool found = is_memory
                         ? set_in<any_memory_policy>(memory, key.substr(memory_prefix.size()), value)
                         : set_in<any_rate_controller>(rate, key, value);
  if (!found) {
    throw input_error(fmt::format("unknown setting \"{}\" (a policy's flag without dashes, e.g. "
                                  "tgs.dead-band or memory.tgs.reserve-mib)",
                                  key));
  }
}

/// A request's policy settings: the options', then the request's own, as tgs-node builds its
/// controller.
struct request_settings {
  any_rate_controller::configs rate;
  any_memory_policy::configs memory;
};

request_settings settings_of(const pair_request& r, const pair_options& options) {
  request_settings out{options.rate_settings, options.memory_settings};
  for (const auto& [key, value] : r.settings) apply_setting(out.rate, out.memory, key, value);
  return out;
}

rate_policy_traits policy_traits(std::string_view policy) {
  if (const auto t = any_rate_controller::traits_of_policy(policy)) return *t;
  throw input_error(fmt::format("unknown policy \"{}\" (known: {})", policy, rate_controller_list()));
}

pair_request request_of(const measured_pair& m) {
  pair_request r{m.scenario, m.gpu, m.production_model, m.opportunistic_model, m.policy};
  r.memory_policy = m.memory_policy;
  r.memory_budget = m.memory_budget;
  r.production_idle = m.production_idle;
  r.settings = m.settings;
  r.production_alone_rate = m.production_alone_rate;
  r.opportunistic_alone_rate = m.opportunistic_alone_rate;
  r.target = m;
  return r;
}

std::vector<pair_request> measured_pair_requests(const catalog& c, const std::string& gpu,
                                                 const std::vector<std::string>& policies) {
  std::vector<pair_request> out;
  auto wanted = [&](const std::string& p) {
    return policies.empty() || std::find(policies.begin(), policies.end(), p) != policies.end();
  };
  // Pairs in file order, each with its first cell (the scenario label and the jobs it names).
  std::vector<const measured_pair*> pairs;
  for (const auto& m : c.measurements) {
    if (m.gpu != gpu) continue;
    if (wanted(m.policy)) out.push_back(request_of(m));
    const bool seen = std::any_of(pairs.begin(), pairs.end(), [&](const measured_pair* p) {
      return p->scenario == m.scenario && p->pair_key() == m.pair_key();
    });
    if (!seen) pairs.push_back(&m);
  }
  for (const auto& policy : policies) {
    for (const measured_pair* p : pairs) {
      const bool have = std::any_of(out.begin(), out.end(), [&](const pair_request& r) {
        return r.scenario == p->scenario && r.policy == policy && r.target &&
               r.target->pair_key() == p->pair_key();
      });
      if (!have && !p->opportunistic_model.empty()) {
        out.push_back({p->scenario, gpu, p->production_model, p->opportunistic_model, policy});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](const pair_request& a, const pair_request& b) {
    auto rank = [&](const pair_request& r) {
      return std::find_if(pairs.begin(), pairs.end(), [&](const measured_pair* p) {
               return p->scenario == r.scenario && p->production_model == r.production_model &&
                      p->opportunistic_model == r.opportunistic_model;
             }) - pairs.begin();
    };
    return rank(a) < rank(b);
  });
  return out;
}

bytes memory_budget_of(const catalog& c, const pair_request& r, const pair_options& options) {
  return r.memory_budget.value_or(options.memory_budget.value_or(gpu_or_throw(c, r.gpu).memory));
}

pair_request request_under(const pair_request& r, opportunistic_mechanism m, bytes capacity) {
  pair_request out{r.scenario, r.gpu, r.production_model, r.opportunistic_model, std::string(node_choice_policy)};
  out.memory_budget = capacity;
  out.opportunistic_time_sliced = m == opportunistic_mechanism::time_sliced;
  if (m == opportunistic_mechanism::held) out.opportunistic_model.clear();
  return out;
}

pair_result run_pair_request(const catalog& c, const pair_request& r, const pair_options& options,
                             std::vector<timeline_row>* timeline) {
  const gpu_profile* gpu = &gpu_or_throw(c, r.gpu);
  // Each job at the host speed of the call that measured the cell, where it is recorded; the
  // catalog's profile as it is otherwise (no copy: the fit runs requests in its inner loop).
  std::optional<model_profile> prod_at_host;
  std::optional<model_profile> opp_at_host;
  const auto at_host = [](const model_profile& m, const std::optional<double>& rate,
                          std::optional<model_profile>& slot) -> const model_profile* {
    if (!rate) return &m;
    return &slot.emplace(m.at_alone_rate(*rate));
  };
  const model_profile* prod =
      at_host(model_or_throw(c, r.production_model, r.gpu), r.production_alone_rate, prod_at_host);
  const model_profile* opp =
      r.opportunistic_model.empty()
          ? nullptr
          : at_host(model_or_throw(c, r.opportunistic_model, r.gpu), r.opportunistic_alone_rate, opp_at_host);
  // The policy's settings as the command line gave them, then the cell's own, as tgs-node
  // builds its controller: validation errors are bad input.
  const rate_policy_traits traits = policy_traits(r.policy);
  const request_settings settings = settings_of(r, options);
  const any_memory_policy::configs& memory_settings = settings.memory;
  std::optional<any_rate_controller> controller;
  try {
    controller.emplace(*settings.rate.find(r.policy));
  } catch (const config_error& e) {
    throw input_error(e.what());
  }
  const std::string memory_name = !r.memory_policy.empty()         ? r.memory_policy
                                  : !options.memory_policy.empty() ? options.memory_policy
                                                                   : std::string(traits.default_memory_policy);
  const std::optional<any_memory_policy::config> memory_cfg = memory_settings.find(memory_name);
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
  spec.production = {prod, epoch, std::nullopt, {}};
  if (r.production_idle) spec.production.idle = {{epoch, never}};
  spec.opportunistic = {opp, epoch, std::nullopt, {}};
  spec.gpu = *gpu;
  spec.memory_budget = memory_budget_of(c, r, options);
  spec.interposed = traits.enforced_by == enforcement::interposer;
  spec.run_for = options.run_for;
  spec.warmup = options.warmup;
  spec.observation_noise = options.observation_noise;
  spec.seed = options.seed;
  spec.production_drift = options.production_drift;

  pair_result result{r, memory_name, {}, r.target};
  if (timeline != nullptr) {
    std::string_view phase;
    result.outcome = run_pair(spec, driver_controller{std::move(*controller), &phase, r.opportunistic_time_sliced},
                              std::move(*memory), timeline_recorder{timeline, &r, &phase});
  } else if (r.opportunistic_time_sliced) {
    result.outcome =
        run_pair(spec, driver_controller{std::move(*controller), nullptr, true}, std::move(*memory));
  } else {
    result.outcome = run_pair(spec, std::move(*controller), std::move(*memory));
  }
  return result;
}

namespace {

/// `extrapolation_of` for a policy named `policy` (`label` in the message) sharing by `mechanism`,
/// with the opportunistic MPS client at below-normal priority or not.
std::string extrapolation_for(const catalog& c, std::string_view gpu, std::string_view policy, std::string_view label,
                              sharing_mechanism mechanism, bool below_normal) {
  const rate_policy_traits traits = policy_traits(policy);
  const gpu_profile* g = c.find_gpu(gpu);
  if (g == nullptr || !traits.co_locates) return {};
  if (mechanism == sharing_mechanism::mps && below_normal && std::isnan(g->contention.mps_priority_loss)) {
    return fmt::format("{} on {}: MPS priority (mps_priority_loss) was never measured there; the model takes the "
                       "MPS loss for it",
                       label, gpu);
  }
  if (policy == "idle-harvest") {
    return fmt::format("{} on {}: its gap-filling parameters (context_switch_us, gap_exposure) are estimates, "
                       "measured on no GPU type",
                       label, gpu);
  }
  const bool measured = std::any_of(c.measurements.begin(), c.measurements.end(), [&](const measured_pair& m) {
    const std::optional<rate_policy_traits> t = any_rate_controller::traits_of_policy(m.policy);
    return m.gpu == gpu && !m.opportunistic_model.empty() && t && t->co_locates && t->mechanism == mechanism;
  });
  if (!measured) {
    return fmt::format("{} on {}: no pair was measured there under {}", label, gpu, to_string(mechanism));
  }
  return {};
}

}  // namespace

std::string extrapolation_of(const catalog& c, const pair_request& r, const pair_options& options) {
  try {
    const any_rate_controller controller{*settings_of(r, options).rate.find(r.policy)};
    if (!r.opportunistic_time_sliced) return extrapolation_of(c, r.gpu, controller);
    // A context of its own: time slicing under the policy's cap, no MPS priority.
    return extrapolation_for(c, r.gpu, r.policy, r.policy + " (time-sliced)", sharing_mechanism::time_slicing, false);
  } catch (const config_error& e) {
    throw input_error(e.what());
  }
}

std::string extrapolation_of(const catalog& c, std::string_view gpu, const any_rate_controller& controller) {
  const std::string_view policy = controller.policy_name();
  const state_report state = controller.describe();
  const state_field* below = state.find("opportunistic_below_normal");
  const bool below_normal =
      policy == "priority-share" || (below != nullptr && below->value == state_field{"", std::int64_t{1}}.value);
  return extrapolation_for(c, gpu, policy, policy, policy_traits(policy).mechanism, below_normal);
}

calibrated_model calibrate(const catalog_sources& sources) {
  calibrated_model m;
  catalog_inputs inputs;
  m.unfitted = load_catalog(sources, &inputs);
  const bool embedded = sources.gpus.empty() && sources.models.empty() && sources.measurements.empty();
  if (embedded) {
    fit_result cached = parse_fit_csv(embedded::fit_csv, "fit.csv");
    if (cached.inputs_hash == inputs.hash()) {
      m.fit = std::move(cached);
      m.fit_from_cache = true;
    }
  }
  if (!m.fit_from_cache) {
    m.fit = fit_catalog(m.unfitted);
    m.fit.inputs_hash = inputs.hash();
  }
  m.data = m.unfitted;
  apply_fit(m.data, m.fit);
  return m;
}

std::vector<prediction> predict_measured(const calibrated_model& model, const std::string& gpu,
                                         bool leave_one_out) {
  pair_options adaptive;  // 600 s, averages over 60-600 s: how the cells were measured
  const pair_options steady = steady_state_options();
  // Both throughputs of each cell (the measured ones are kept).
  auto predict = [&](const catalog& c, const std::vector<const measured_pair*>& cells) {
    std::vector<double> out;
    for (const measured_pair* cell : cells) {
      const bool adapts = policy_traits(cell->policy).adaptive;
      const pair_result r = run_pair_request(c, request_of(*cell), adapts ? adaptive : steady);
      out.push_back(r.outcome.production);
      out.push_back(r.outcome.opportunistic);
    }
    return out;
  };
  // The cells to predict, grouped by the fit that predicts them: the calibrated model's per GPU
  // type, or per left-out pair a fit of its GPU type without it.
  std::vector<const measured_pair*> wanted;
  std::vector<std::string> groups;
  for (const auto& cell : model.data.measurements) {
    if (!gpu.empty() && cell.gpu != gpu) continue;
    wanted.push_back(&cell);
    const std::string key = leave_one_out ? cell.pair_key() : cell.gpu;
    if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
  }
  std::vector<prediction> out(wanted.size());
  for (const auto& key : groups) {
    std::vector<std::size_t> members;
    std::vector<const measured_pair*> cells;
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      if ((leave_one_out ? wanted[i]->pair_key() : wanted[i]->gpu) != key) continue;
      members.push_back(i);
      cells.push_back(wanted[i]);
    }
    const std::string& cell_gpu = cells.front()->gpu;
    std::optional<catalog> refitted;
    std::optional<fit_result> fit;
    if (leave_one_out) {
      fit = fit_catalog(model.unfitted, {.exclude = {key}, .gpu = cell_gpu});
      refitted = model.unfitted;
      apply_fit(*refitted, *fit);
    }
    const catalog& c = refitted ? *refitted : model.data;
    const std::vector<double> values = predict(c, cells);
    const std::vector<double> se =
        propagate_fit_error(c, fit ? *fit : model.fit, cell_gpu, [&](const catalog& moved) { return predict(moved, cells); });
    for (std::size_t k = 0; k < cells.size(); ++k) {
      prediction& p = out[members[k]];
      p.cell = *cells[k];
      p.left_out = leave_one_out;
      if (cells[k]->production) {
        p.production = values[2 * k];
        p.production_se = se[2 * k];
      }
      if (cells[k]->opportunistic) {
        p.opportunistic = values[2 * k + 1];
        p.opportunistic_se = se[2 * k + 1];
      }
    }
  }
  return out;
}

namespace {

/// One left-out throughput: its residual, its parameters' standard error and where it belongs.
struct residual {
  std::string pair;
  std::string gpu;
  std::string policy;
  double error = 0;
  double se = 0;
};

std::vector<residual> residuals_of(const std::vector<prediction>& left_out) {
  std::vector<residual> out;
  for (const prediction& p : left_out) {
    const auto add = [&](const std::optional<double>& measured, const std::optional<double>& predicted,
                         const std::optional<double>& se) {
      if (measured && predicted) {
        out.push_back({p.cell.pair_key(), p.cell.gpu, p.cell.policy, *predicted - *measured, se.value_or(0.0)});
      }
    };
    add(p.cell.production, p.production, p.production_se);
    add(p.cell.opportunistic, p.opportunistic, p.opportunistic_se);
  }
  return out;
}

/// The model's error for `cell`, from the residuals not of pair `exclude` (empty: all of them):
/// its GPU type and policy's, else its GPU type's, else everyone's; 0 with no residual at all.
double model_error(const std::vector<residual>& all, const measured_pair& cell, const std::string& exclude) {
  const auto estimate = [&](auto&& member) -> std::optional<double> {
    double squared = 0;
    double variance = 0;
    std::size_t n = 0;
    for (const residual& r : all) {
      if (r.pair == exclude || !member(r)) continue;
      squared += r.error * r.error;
      variance += r.se * r.se;
      ++n;
    }
    if (n < min_calibration_throughputs) return std::nullopt;
    return std::sqrt(std::max(0.0, (squared - variance) / static_cast<double>(n)));
  };
  if (auto e = estimate([&](const residual& r) { return r.gpu == cell.gpu && r.policy == cell.policy; })) return *e;
  if (auto e = estimate([&](const residual& r) { return r.gpu == cell.gpu; })) return *e;
  if (auto e = estimate([](const residual&) { return true; })) return *e;
  return 0.0;
}

void calibrate_one(prediction& p, const std::vector<residual>& all, const std::string& exclude) {
  const double model = model_error(all, p.cell, exclude);
  const auto total = [&](const std::optional<double>& se) { return std::hypot(se.value_or(0.0), model); };
  if (p.production) p.production_sd = total(p.production_se);
  if (p.opportunistic) p.opportunistic_sd = total(p.opportunistic_se);
}

}  // namespace

void calibrate_intervals(std::vector<prediction>& in_sample, std::vector<prediction>& left_out) {
  const std::vector<residual> all = residuals_of(left_out);
  for (prediction& p : in_sample) calibrate_one(p, all, "");
  for (prediction& p : left_out) calibrate_one(p, all, p.cell.pair_key());
}

std::vector<interval_coverage> coverage_of(const std::vector<prediction>& left_out) {
  std::vector<interval_coverage> out;
  std::vector<std::vector<double>> widths;
  for (const prediction& p : left_out) {
    auto it = std::find_if(out.begin(), out.end(), [&](const interval_coverage& c) { return c.gpu == p.cell.gpu; });
    if (it == out.end()) {
      out.push_back({p.cell.gpu, 0, 0, 0});
      widths.emplace_back();
      it = std::prev(out.end());
    }
    std::vector<double>& w = widths[static_cast<std::size_t>(it - out.begin())];
    const auto count = [&](const std::optional<double>& measured, const std::optional<double>& predicted,
                           const std::optional<double>& sd) {
      if (!measured || !predicted || !sd) return;
      const auto [low, high] = interval_of(*predicted, *sd);
      ++it->throughputs;
      it->inside += *measured >= low && *measured <= high ? 1U : 0U;
      w.push_back(interval_z * *sd);
    };
    count(p.cell.production, p.production, p.production_sd);
    count(p.cell.opportunistic, p.opportunistic, p.opportunistic_sd);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<double>& w = widths[i];
    if (w.empty()) continue;
    std::sort(w.begin(), w.end());
    const std::size_t n = w.size();
    out[i].median_half_width = n % 2 == 1 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
  }
  return out;
}

}  // namespace tgs::sim
