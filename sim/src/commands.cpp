// SPDX-License-Identifier: Apache-2.0
// The pairs, mixed and replay commands: option checks with the messages users see, and the runs.
#include "tgs/sim/commands.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tgs/core/settings_flags.hpp"
#include "tgs/traces/readers.hpp"

namespace tgs::sim {
namespace {

/// Refuses a cluster GPU type the model has no table for, naming the ones it has.
void check_cluster_gpu(const calibrated_model& model, const cluster_spec& spec) {
  if (model.data.find_gpu(spec.gpu) != nullptr) return;
  std::vector<std::string> known;
  for (const auto& g : model.data.gpus) known.push_back(g.name);
  throw input_error(fmt::format("--cluster: unknown GPU type \"{}\" (known: {})", spec.gpu,
                                fmt::join(known, ", ")));
}

/// A given setting as `tgs::unused_policy_flag` sees a flag: always given.
struct given_option {
  [[nodiscard]] static std::size_t count() noexcept { return 1; }
};

std::optional<std::string> first_unused(const std::vector<given_setting>& given,
                                        const std::vector<std::string>& running) {
  given_option option;
  std::vector<policy_flag<given_option>> flags;
  for (const auto& g : given) flags.push_back({g.policy, g.name, &option});
  return unused_policy_flag(flags, running);
}

}  // namespace

const std::vector<std::string>& default_pair_policies() {
  static const std::vector<std::string> names{"tgs", "co-execution", "mps", "mig"};
  return names;
}

const std::vector<std::string>& default_cluster_policies() {
  // The paper's baselines and TGS, then tgs-node's two defaults: idle-harvest without MPS,
  // priority-share with it.
  static const std::vector<std::string> names{"exclusive", "co-execution", "mps",          "mig",
                                              "antman",    "tgs",          "idle-harvest", "priority-share"};
  return names;
}

std::string baseline_policy() {
  for (std::string_view n : rate_controller_names()) {
    if (!any_rate_controller::traits_of_policy(n)->co_locates) return std::string(n);
  }
  throw std::logic_error("no registered policy keeps the classes apart");
}

void check_range(std::string_view option, double value, option_range range) {
  // Written as the command line's range check writes it, so both front ends say the same.
  if (value >= range.low && value <= range.high) return;
  throw input_error(fmt::format("{}: Value {} not in range {} to {}", option, value,
                                std::to_string(range.low), std::to_string(range.high)));
}

void check_count(std::string_view option, std::int64_t value, option_range range) {
  const auto low = static_cast<std::int64_t>(range.low);
  const auto high = static_cast<std::int64_t>(range.high);
  if (value >= low && value <= high) return;
  throw input_error(fmt::format("{}: Value {} not in range {} to {}", option, value, low, high));
}

void check_member(std::string_view option, std::string_view value,
                  const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), value) != names.end()) return;
  throw input_error(fmt::format("{}: {} not in {{{}}}", option, value, fmt::join(names, ",")));
}

std::vector<std::string> registered_rate_policies() {
  return {rate_controller_names().begin(), rate_controller_names().end()};
}

std::vector<std::string> registered_memory_policies() {
  return {memory_policy_names().begin(), memory_policy_names().end()};
}

void run_settings::check_used(const std::vector<std::string>& rate_policies,
                              const std::vector<std::string>& memory_policies) const {
  if (auto why = first_unused(rate_given, rate_policies)) throw input_error(*why);
  if (auto why = first_unused(memory_given, memory_policies)) throw input_error(*why);
}

std::vector<std::string> memory_policies_of(const std::vector<std::string>& rate_policies,
                                            const std::string& given) {
  if (!given.empty()) return {given};
  std::vector<std::string> out;
  for (const auto& p : rate_policies) {
    out.emplace_back(policy_traits(p).default_memory_policy);
  }
  return out;
}

// --- fit and predict -------------------------------------------------------------------------

calibrated_model write_fit(const calibrated_model& model, const std::string& path) {
  calibrated_model out = model;
  out.fit = fit_catalog(model.unfitted);
  out.fit.inputs_hash = model.fit.inputs_hash;
  out.fit_from_cache = false;
  std::ofstream file(path);
  file << render_fit_csv(out.fit);
  if (!file) throw input_error(fmt::format("--write: cannot write \"{}\"", path));
  out.data = model.unfitted;
  apply_fit(out.data, out.fit);
  return out;
}

predict_outcome run_predict(const calibrated_model& model, const predict_command& cmd) {
  if (!cmd.gpu.empty() && model.data.find_gpu(cmd.gpu) == nullptr) {
    throw input_error(fmt::format("--gpu: unknown gpu \"{}\"", cmd.gpu));
  }
  predict_outcome out;
  out.in_sample = predict_measured(model, cmd.gpu, false);
  // The left-out predictions are made whether or not they are shown: their residuals are what
  // calibrates every interval.
  out.left_out = predict_measured(model, cmd.gpu, true);
  calibrate_intervals(out.in_sample, out.left_out);
  return out;
}

// --- pairs -----------------------------------------------------------------------------------

namespace {

/// The cells the node's choices lead to, each run once, and which of them each result's choices
/// took.
struct choice_cells {
  std::vector<pair_request> requests;
  /// Per result, per choice (`pair_choices::choices`' order): its cell's index in `requests`.
  std::vector<std::vector<std::size_t>> cell_of;
};

/// Fills `pair_result::node` of every result with an opportunistic job: the node's own
/// `tgs::mechanism_choice` on the facts of the pair (`choices_for`), and the cell each choice
/// leads to, run once per pair, memory budget and mechanism.
choice_cells choose_mechanisms(const catalog& c, const pairs_command& cmd, const pair_options& options,
                               std::vector<pair_result>& results) {
  std::optional<mechanism_choice> chooser;
  try {
    chooser.emplace(cmd.choice);
  } catch (const config_error& e) {
    throw input_error(e.what());
  }
  choice_cells out;
  std::vector<pair_result> runs;  // the runs of out.requests
  for (pair_result& r : results) {
    std::vector<std::size_t>& taken = out.cell_of.emplace_back();
    const pair_request& q = r.request;
    const model_profile* production = c.find_model(q.production_model, q.gpu);
    const model_profile* opportunistic = c.find_model(q.opportunistic_model, q.gpu);
    if (q.opportunistic_model.empty() || production == nullptr || opportunistic == nullptr) continue;
    const bytes capacity = memory_budget_of(c, q, options);
    r.node = choices_for(*chooser, *production, *opportunistic, capacity);
    for (node_choice& choice : r.node->choices) {
      const pair_request cell = request_under(q, choice.verdict.mechanism, capacity);
      // The same pair, budget and mechanism under another scenario's name is the same cell.
      const auto it = std::find_if(out.requests.begin(), out.requests.end(), [&](const pair_request& o) {
        return o.gpu == cell.gpu && o.production_model == cell.production_model &&
               o.opportunistic_model == cell.opportunistic_model && o.memory_budget == cell.memory_budget &&
               o.opportunistic_time_sliced == cell.opportunistic_time_sliced;
      });
      const auto i = static_cast<std::size_t>(it - out.requests.begin());
      if (it == out.requests.end()) {
        out.requests.push_back(cell);
        runs.push_back(run_pair_request(c, cell, options));
        runs.back().extrapolated = extrapolation_of(c, cell, options);
      }
      choice.production = runs[i].outcome.production;
      choice.opportunistic = runs[i].outcome.opportunistic;
      choice.extrapolated = runs[i].extrapolated;
      taken.push_back(i);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> pairs_command::chosen_policies() const {
  return policies.empty() ? default_pair_policies() : policies;
}

void check(const pairs_command& cmd) {
  const auto rate = registered_rate_policies();
  for (const auto& p : cmd.policies) check_member("--policies", p, rate);
  if (!cmd.memory_policy.empty()) {
    check_member("--memory-policy", cmd.memory_policy, registered_memory_policies());
  }
  check_range("--duration", cmd.duration_s, pairs_command::duration_range);
  check_range("--warmup", cmd.warmup_s, pairs_command::warmup_range);
  if (cmd.memory_budget_gib) {
    check_range("--memory-budget-gib", *cmd.memory_budget_gib, pairs_command::memory_budget_range);
  }
  if (cmd.observation_noise) {
    check_range("--observation-noise", *cmd.observation_noise,
                pairs_command::observation_noise_range);
  }
  check_range("--production-drift", cmd.production_drift, pairs_command::production_drift_range);
  if (cmd.production.empty() != cmd.opportunistic.empty()) {
    throw input_error("--production and --opportunistic go together");
  }
  if (cmd.warmup_s >= cmd.duration_s) {
    throw input_error(fmt::format("--warmup ({} s) must be shorter than --duration ({} s)",
                                  cmd.warmup_s, cmd.duration_s));
  }
  const auto chosen = cmd.chosen_policies();
  cmd.settings.check_used(chosen, memory_policies_of(chosen, cmd.memory_policy));
}

pairs_outcome run_pairs(const calibrated_model& model, const pairs_command& cmd) {
  check(cmd);
  const auto chosen = cmd.chosen_policies();
  pair_options options;
  options.run_for = from_seconds(cmd.duration_s);
  options.warmup = from_seconds(cmd.warmup_s);
  if (cmd.memory_budget_gib) options.memory_budget = from_gib(*cmd.memory_budget_gib);
  options.memory_policy = cmd.memory_policy;
  options.observation_noise = cmd.observation_noise;
  options.seed = cmd.seed;
  options.production_drift = cmd.production_drift;
  options.rate_settings = cmd.settings.rate;
  options.memory_settings = cmd.settings.memory;

  std::vector<pair_request> requests;
  if (cmd.production.empty()) {
    requests = measured_pair_requests(model.data, cmd.gpu, cmd.policies);
    if (requests.empty()) {
      throw input_error(
          fmt::format("no measured scenarios on gpu \"{}\"; name a pair with "
                      "--production and --opportunistic",
                      cmd.gpu));
    }
  } else {
    for (const auto& p : chosen) {
      requests.push_back({"custom", cmd.gpu, cmd.production, cmd.opportunistic, p});
    }
  }
  pairs_outcome out;
  for (const auto& r : requests) {
    out.results.push_back(
        run_pair_request(model.data, r, options, cmd.timeline ? &out.timeline : nullptr));
    out.results.back().extrapolated = extrapolation_of(model.data, r, options);
  }
  const choice_cells choices = choose_mechanisms(model.data, cmd, options, out.results);
  const std::vector<pair_request>& cells = choices.requests;
  // Each prediction's standard error from the fitted parameters' covariance, per GPU type (the
  // intervals `predict` prints): the same runs again on catalogs with one parameter moved. The
  // cells of the node's choices are among them; they are not on the timeline.
  std::vector<const pair_request*> runs;
  for (const auto& r : requests) runs.push_back(&r);
  for (const auto& r : cells) runs.push_back(&r);
  std::vector<std::pair<double, double>> se_of(runs.size());
  std::vector<std::string> gpus;
  for (const pair_request* r : runs) {
    if (std::find(gpus.begin(), gpus.end(), r->gpu) == gpus.end()) gpus.push_back(r->gpu);
  }
  for (const auto& gpu : gpus) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (runs[i]->gpu == gpu) members.push_back(i);
    }
    const std::vector<double> se = propagate_fit_error(model.data, model.fit, gpu, [&](const catalog& moved) {
      std::vector<double> values;
      for (const std::size_t i : members) {
        const pair_result r = run_pair_request(moved, *runs[i], options);
        values.push_back(r.outcome.production);
        values.push_back(r.outcome.opportunistic);
      }
      return values;
    });
    for (std::size_t k = 0; k < members.size(); ++k) se_of[members[k]] = {se[2 * k], se[2 * k + 1]};
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    out.results[i].production_se = se_of[i].first;
    out.results[i].opportunistic_se = se_of[i].second;
  }
  for (std::size_t i = 0; i < out.results.size(); ++i) {
    if (!out.results[i].node) continue;
    std::vector<node_choice>& taken = out.results[i].node->choices;
    for (std::size_t k = 0; k < taken.size(); ++k) {
      const std::size_t cell = requests.size() + choices.cell_of[i][k];
      taken[k].production_se = se_of[cell].first;
      taken[k].opportunistic_se = se_of[cell].second;
    }
  }
  return out;
}

// --- mixed and replay ------------------------------------------------------------------------

std::vector<std::string> cluster_command::chosen_policies() const {
  std::vector<std::string> chosen = policies.empty() ? default_cluster_policies() : policies;
  const std::string baseline = baseline_policy();
  if (std::find(chosen.begin(), chosen.end(), baseline) == chosen.end()) {
    chosen.insert(chosen.begin(), baseline);
  }
  return chosen;
}

void check(const cluster_command& cmd) {
  const auto rate = registered_rate_policies();
  for (const auto& p : cmd.policies) check_member("--policies", p, rate);
  (void)parse_cluster_spec(cmd.cluster);
}

std::vector<cluster_run> run_cluster_command(const calibrated_model& model,
                                             const cluster_workload& workload,
                                             const cluster_command& cmd) {
  check(cmd);
  const auto chosen = cmd.chosen_policies();
  cmd.settings.check_used(chosen, memory_policies_of(chosen, ""));
  std::vector<cluster_run> runs;
  for (const auto& policy : chosen) {
    cluster_options options;
    options.lookahead = cmd.lookahead;
    options.preempted_keep_progress = cmd.preempted_keep_progress;
    options.rate_settings = cmd.settings.rate;
    options.memory_settings = cmd.settings.memory;
    if (cmd.progress) options.progress = [&](double done) { cmd.progress(policy, done); };
    const auto start = std::chrono::steady_clock::now();
    cluster_result r = run_cluster(model, workload.spec, workload.jobs, policy, options);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    runs.push_back({std::move(r), wall});
    if (cmd.finished) cmd.finished(runs.back());
  }
  return runs;
}

void check(const mixed_command& cmd) {
  check_count("--production-jobs", cmd.stream.production_jobs, mixed_command::jobs_range);
  check_count("--opportunistic-jobs", cmd.stream.opportunistic_jobs, mixed_command::jobs_range);
  check_range("--interarrival-minutes", cmd.stream.mean_interarrival_minutes,
              mixed_command::interarrival_range);
  check(cmd.cluster);
}

cluster_workload mixed_workload(const calibrated_model& model, const mixed_command& cmd) {
  check(cmd);
  cluster_workload out;
  out.spec = parse_cluster_spec(cmd.cluster.cluster);
  check_cluster_gpu(model, out.spec);
  const auto trace = mixed_stream(model.data, out.spec.gpu, cmd.stream);
  out.jobs = to_cluster_jobs(trace, model.data, out.spec.gpu);
  out.label =
      fmt::format("mixed stream: {} production + {} opportunistic jobs on {}",
                  cmd.stream.production_jobs, cmd.stream.opportunistic_jobs, cmd.cluster.cluster);
  out.seed = cmd.stream.seed;
  return out;
}

std::vector<std::string> trace_format_names() {
  std::vector<std::string> names;
  for (const auto& f : traces::trace_formats()) {
    names.emplace_back(f.name);
    for (const auto alias : f.aliases) names.emplace_back(alias);
  }
  return names;
}

std::string trace_format_for(const std::string& path, const std::string& given) {
  if (!given.empty()) return given;
  return path.ends_with(".json") ? "philly-json" : "philly-csv";
}

void check(const replay_command& cmd) {
  if (!cmd.trace_path.empty()) {
    // As the command line's check of an existing file words it.
    std::error_code ec;
    if (!std::filesystem::exists(cmd.trace_path, ec)) {
      throw input_error("--trace: File does not exist: " + cmd.trace_path);
    }
    if (std::filesystem::is_directory(cmd.trace_path, ec)) {
      throw input_error("--trace: File is actually a directory: " + cmd.trace_path);
    }
  }
  if (!cmd.trace_format.empty()) {
    check_member("--trace-format", cmd.trace_format, trace_format_names());
  }
  check_range("--production-share", cmd.production_share, replay_command::production_share_range);
  check(cmd.cluster);
}

traces::trace read_replay_trace(const replay_command& cmd) {
  check(cmd);
  const auto format =
      traces::parse_trace_format(trace_format_for(cmd.trace_path, cmd.trace_format));
  traces::read_options read;
  if (cmd.skip_malformed) read.malformed = traces::on_malformed::skip;
  try {
    return traces::read_trace(cmd.trace_path, format.value(), read);
  } catch (const traces::trace_error& e) {
    throw input_error(e.what());
  }
}

void check_fits(const traces::trace& trace, const replay_command& cmd) {
  const cluster_spec spec = parse_cluster_spec(cmd.cluster.cluster);
  for (const auto& j : trace.jobs) {
    if (j.gpus > static_cast<std::uint32_t>(spec.gpus())) {
      throw input_error(fmt::format("{}:{}: job {}{} needs {} GPUs but --cluster {} has {}",
                                    trace.source, j.source_line, static_cast<std::uint32_t>(j.id),
                                    j.name.empty() ? "" : fmt::format(" ({})", j.name), j.gpus,
                                    cmd.cluster.cluster, spec.gpus()));
    }
  }
}

cluster_workload replay_workload(const calibrated_model& model, traces::trace trace,
                                 const replay_command& cmd) {
  check_range("--production-share", cmd.production_share, replay_command::production_share_range);
  check(cmd.cluster);
  check_fits(trace, cmd);
  cluster_workload out;
  out.spec = parse_cluster_spec(cmd.cluster.cluster);
  check_cluster_gpu(model, out.spec);
  label_trace(trace, model.data, out.spec.gpu, cmd.label_seed, cmd.production_share,
              cmd.label_models);
  out.jobs = to_cluster_jobs(trace, model.data, out.spec.gpu);
  out.label =
      fmt::format("replay of {} ({} jobs, {:.0f}% production, label seed {}) on {}", trace.source,
                  out.jobs.size(), cmd.production_share * 100, cmd.label_seed, cmd.cluster.cluster);
  out.seed = cmd.label_seed;
  return out;
}

}  // namespace tgs::sim
