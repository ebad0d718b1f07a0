// SPDX-License-Identifier: Apache-2.0
// tgs-sim: the command-line front end of the simulator.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tgs/core/config_error.hpp"
#include "tgs/core/settings_flags.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/cluster.hpp"
#include "tgs/sim/pairs.hpp"
#include "tgs/sim/report.hpp"
#include "tgs/sim/workloads.hpp"
#include "tgs/traces/readers.hpp"
#include "tgs/version.hpp"

namespace {

using namespace tgs::sim;

/// The policies each subcommand compares unless `--policies` says otherwise: the paper's pair
/// experiments (NSDI'23 Figure 5) and its cluster experiments (Figure 6).
const std::vector<std::string> pair_policies{"tgs", "co-execution", "mps", "mig"};
const std::vector<std::string> cluster_policies{"exclusive", "co-execution", "mps",        "mig",
                                                "antman",    "tgs",          "idle-harvest"};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::vector<std::string> registered_rate_policies() {
  return {tgs::rate_controller_names().begin(), tgs::rate_controller_names().end()};
}

std::vector<std::string> registered_memory_policies() {
  return {tgs::memory_policy_names().begin(), tgs::memory_policy_names().end()};
}

/// The policy every cluster run is normalized to: the first registered one that never lets the
/// classes share a GPU.
std::string baseline_policy() {
  for (std::string_view n : tgs::rate_controller_names()) {
    if (!tgs::any_rate_controller::traits_of_policy(n)->co_locates) return std::string(n);
  }
  throw std::logic_error("no registered policy keeps the classes apart");
}

/// Refuses a `--cluster` GPU type the model has no table for, naming the ones it has.
void check_cluster_gpu(const calibrated_model& model, const cluster_spec& spec) {
  if (model.data.find_gpu(spec.gpu) != nullptr) return;
  std::vector<std::string> known;
  for (const auto& g : model.data.gpus) known.push_back(g.name);
  throw input_error(fmt::format("--cluster: unknown GPU type \"{}\" (known: {})", spec.gpu,
                                fmt::join(known, ", ")));
}

/// `--format` with its choices checked before any work.
void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "Output")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
}

/// Every policy's settings as flags (`--tgs.dead-band`, `--memory.tgs.reserve-mib`, ...), one
/// table per policy shared with tgs-node; refuses a flag of a policy the run does not use.
struct policy_settings {
  tgs::any_rate_controller::configs rate;
  tgs::any_memory_policy::configs memory;
  std::vector<tgs::policy_flag<CLI::Option>> rate_flags;
  std::vector<tgs::policy_flag<CLI::Option>> memory_flags;

  void add_to(CLI::App& app) {
    rate_flags = tgs::add_registry_flags<tgs::any_rate_controller, CLI::Option>(app, rate, "");
    memory_flags =
        tgs::add_registry_flags<tgs::any_memory_policy, CLI::Option>(app, memory, "memory.");
  }

  void check_used(const std::vector<std::string>& rate_policies,
                  const std::vector<std::string>& memory_policies) const {
    if (auto why = tgs::unused_policy_flag(rate_flags, rate_policies)) throw input_error(*why);
    if (auto why = tgs::unused_policy_flag(memory_flags, memory_policies)) throw input_error(*why);
  }

  /// The memory policies a run of `rate_policies` uses: the given one, or each policy's own.
  static std::vector<std::string> memory_policies_of(const std::vector<std::string>& rate_policies,
                                                     const std::string& given) {
    if (!given.empty()) return {given};
    std::vector<std::string> out;
    for (const auto& p : rate_policies) {
      out.emplace_back(tgs::any_rate_controller::traits_of_policy(p)->default_memory_policy);
    }
    return out;
  }
};

/// `--policies`, each name checked against the registry before any work.
CLI::Option* add_policies_option(CLI::App& app, std::vector<std::string>& policies,
                                 const std::vector<std::string>& defaults, const std::string& note) {
  return app
      .add_option("--policies", policies,
                  "Sharing policies, comma-separated; default: " + join(defaults) + note)
      ->delimiter(',')
      ->check(CLI::IsMember(registered_rate_policies()));
}

/// Options every subcommand shares: where the tables come from.
struct data_options {
  catalog_sources sources;
  void add_to(CLI::App& app) {
    app.add_option("--models", sources.models,
                   "Model profile table (CSV, see sim/data/models.csv); default: embedded")
        ->check(CLI::ExistingFile);
    app.add_option("--gpus", sources.gpus,
                   "GPU table (CSV, see sim/data/gpus.csv); default: embedded")
        ->check(CLI::ExistingFile);
    app.add_option("--measurements", sources.measurements,
                   "Measured pairs to predict and fit the GPU types' mechanism parameters to (CSV, "
                   "see sim/data/measured_pairs.csv); default: embedded (the TGS paper's A100 "
                   "pairs and ours on H100s and H200s)")
        ->check(CLI::ExistingFile);
  }
};

struct pairs_command {
  std::string production;
  std::string opportunistic;
  std::vector<std::string> policies;
  std::string gpu = "a100-40gb";
  std::string format = "table";
  std::string timeline;
  double duration_s = 600;
  double warmup_s = 60;
  double memory_budget_gib = 0;
  std::string memory_policy;
  std::optional<double> observation_noise;
  double production_drift = 0;
  std::uint64_t seed = 1;
  policy_settings settings;

  void add_to(CLI::App& app) {
    app.add_option("--production", production,
                   "Production model of a custom pair (needs --opportunistic); default: every "
                   "pair measured on --gpu (the paper's four scenarios on a100-40gb), each beside "
                   "its measurement");
    app.add_option("--opportunistic", opportunistic, "Opportunistic model of a custom pair");
    add_policies_option(app, policies, pair_policies, "");
    app.add_option("--gpu", gpu, "GPU type (tgs-sim profiles lists each type's models)")
        ->capture_default_str();
    add_format_option(app, format);
    app.add_option("--timeline", timeline,
                   "Write every job's throughput over time (CSV, one row per segment of "
                   "constant rates) to this file");
    app.add_option("--duration", duration_s, "Simulated seconds per pair")
        ->check(CLI::Range(1.0, 1e7))
        ->capture_default_str();
    app.add_option("--warmup", warmup_s,
                   "Seconds excluded from the averages (TGS converges in ~50 s)")
        ->check(CLI::Range(0.0, 1e7))
        ->capture_default_str();
    app.add_option("--memory-budget-gib", memory_budget_gib,
                   "Per-GPU memory budget in GiB; default: the GPU's memory")
        ->check(CLI::Range(0.001, 1e6));
    app.add_option("--memory-policy", memory_policy,
                   "Memory policy for every pair; default: each sharing policy's own (tgs for "
                   "tgs, unified-memory for the paper's baselines)")
        ->check(CLI::IsMember(registered_memory_policies()));
    app.add_option("--observation-noise", observation_noise,
                   "Relative standard deviation of the launch counts a controller observes per step, "
                   "for both jobs; default: each job's host jitter from its profile (the jitter "
                   "column of tgs-sim profiles); 0: steady rates, as the paper's means")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--seed", seed, "Seed of the observation noise (a run is a function of it)")
        ->capture_default_str();
    app.add_option("--production-drift", production_drift,
                   "Fraction by which the production job's standalone speed falls, linearly over "
                   "the run (0: steady). Real, unlike --observation-noise: the job makes fewer "
                   "iterations and launches fewer blocks, as a host-bound job whose CPU side slows; "
                   "its share is taken against an alone job that drifts alike")
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    settings.add_to(app);
  }

  int run(const data_options& data) const {
    const output_format out_format = parse_format(format);
    if (production.empty() != opportunistic.empty()) {
      throw input_error("--production and --opportunistic go together");
    }
    if (warmup_s >= duration_s) {
      throw input_error(fmt::format("--warmup ({} s) must be shorter than --duration ({} s)",
                                    warmup_s, duration_s));
    }
    const std::vector<std::string> chosen = policies.empty() ? pair_policies : policies;
    settings.check_used(chosen, policy_settings::memory_policies_of(chosen, memory_policy));
    pair_options options;
    options.run_for = tgs::from_seconds(duration_s);
    options.warmup = tgs::from_seconds(warmup_s);
    if (memory_budget_gib > 0) options.memory_budget = tgs::from_gib(memory_budget_gib);
    options.memory_policy = memory_policy;
    options.observation_noise = observation_noise;
    options.seed = seed;
    options.production_drift = production_drift;
    options.rate_settings = settings.rate;
    options.memory_settings = settings.memory;

    const calibrated_model model = calibrate(data.sources);
    std::vector<pair_request> requests;
    if (production.empty()) {
      requests = measured_pair_requests(model.data, gpu, policies);
      if (requests.empty()) {
        throw input_error(fmt::format("no measured scenarios on gpu \"{}\"; name a pair with "
                                      "--production and --opportunistic",
                                      gpu));
      }
    } else {
      for (const auto& p : chosen) requests.push_back({"custom", gpu, production, opportunistic, p});
    }
    std::vector<timeline_row> rows;
    std::vector<pair_result> results;
    for (const auto& r : requests) {
      results.push_back(run_pair_request(model.data, r, options, timeline.empty() ? nullptr : &rows));
    }
    if (!timeline.empty()) {
      std::ofstream out(timeline);
      out << render_timeline(rows);
      if (!out) throw input_error(fmt::format("--timeline: cannot write \"{}\"", timeline));
    }
    fmt::print("{}", render_pairs(results, out_format));
    return 0;
  }
};


/// Options shared by the cluster subcommands (mixed, replay).
struct cluster_command {
  std::string cluster;
  std::vector<std::string> policies;
  std::string format = "table";
  std::string out_dir;
  std::size_t lookahead = 64;
  bool keep_progress = false;
  policy_settings settings;

  void add_to(CLI::App& app, const std::string& default_cluster) {
    cluster = default_cluster;
    app.add_option("--cluster", cluster,
                   "Servers and GPUs: NODESxGPUS[:TYPE], e.g. 64x8:a100-40gb")
        ->capture_default_str();
    add_policies_option(app, policies, cluster_policies,
                        ". " + baseline_policy() + " always runs: JCTs are normalized to it");
    add_format_option(app, format);
    app.add_option("--out", out_dir,
                   "Also write summary.json, summary.csv, jobs.csv (per-job records), cdf.csv "
                   "(JCT quantiles per class) and utilization.csv (hourly) into this folder");
    app.add_option("--lookahead", lookahead,
                   "Queued jobs examined past a head that does not fit (bounded backfilling; 0: "
                   "strict FIFO)")
        ->capture_default_str();
    app.add_flag("--preempted-keep-progress", keep_progress,
                 "Under exclusive, a preempted opportunistic job resumes where it stopped "
                 "(checkpointed) instead of restarting");
    settings.add_to(app);
  }

  int run(const calibrated_model& model, const std::vector<cluster_job>& jobs,
          const std::string& workload, std::uint64_t seed, const cluster_spec& spec,
          bool show_progress) const {
    const output_format out_format = parse_format(format);
    std::vector<std::string> chosen = policies.empty() ? cluster_policies : policies;
    const std::string baseline = baseline_policy();
    if (std::find(chosen.begin(), chosen.end(), baseline) == chosen.end()) {
      chosen.insert(chosen.begin(), baseline);
    }
    settings.check_used(chosen, policy_settings::memory_policies_of(chosen, ""));
    const bool tty = show_progress && isatty(STDERR_FILENO) != 0;
    std::vector<cluster_run> runs;
    for (const auto& policy : chosen) {
      cluster_options options;
      options.lookahead = lookahead;
      options.preempted_keep_progress = keep_progress;
      options.rate_settings = settings.rate;
      options.memory_settings = settings.memory;
      if (tty) {
        options.progress = [&policy, &jobs](double done) {
          fmt::print(stderr, "\r{:<14} {:3.0f}% of {} jobs", policy, done * 100, jobs.size());
        };
      }
      const auto start = std::chrono::steady_clock::now();
      cluster_result r = run_cluster(model, spec, jobs, policy, options);
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (show_progress) {
        fmt::print(stderr, "{}tgs-sim: {} jobs under {} in {:.2f} s ({} events)\n",
                   tty ? "\r" : "", jobs.size(), policy, wall, r.events);
      }
      runs.push_back({std::move(r), wall});
    }
    if (!out_dir.empty()) write_cluster_outputs(out_dir, runs, workload, seed);
    fmt::print("{}", render_cluster(runs, out_format, workload, seed));
    return 0;
  }
};

/// A seed: digits only. CLI11 would read "-1" into a std::uint64_t as 2^64-1 without a word.
const CLI::Validator seed_digits{
    [](const std::string& value) {
      if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) return std::string{};
      return fmt::format("expected a non-negative integer (digits only), got \"{}\"", value);
    },
    "UINT"};

struct mixed_command {
  mixed_stream_config stream;
  cluster_command cluster;

  void add_to(CLI::App& app) {
    app.add_option("--seed", stream.seed, "Seed of the job stream")
        ->check(seed_digits)
        ->capture_default_str();
    app.add_option("--production-jobs", stream.production_jobs, "Production jobs")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    app.add_option("--opportunistic-jobs", stream.opportunistic_jobs, "Opportunistic jobs")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    app.add_option("--interarrival-minutes", stream.mean_interarrival_minutes,
                   "Mean time between submissions (Poisson arrivals)")
        ->check(CLI::Range(1e-6, 1e6))
        ->capture_default_str();
    cluster.add_to(app, "1x2:a100-40gb");
  }

  int run(const data_options& data) const {
    const cluster_spec spec = parse_cluster_spec(cluster.cluster);
    const calibrated_model model = calibrate(data.sources);
    check_cluster_gpu(model, spec);
    const auto trace = mixed_stream(model.data, spec.gpu, stream);
    const auto jobs = to_cluster_jobs(trace, model.data, spec.gpu);
    const std::string workload = fmt::format(
        "mixed stream: {} production + {} opportunistic jobs on {}", stream.production_jobs,
        stream.opportunistic_jobs, cluster.cluster);
    return cluster.run(model, jobs, workload, stream.seed, spec, false);
  }
};

struct replay_command {
  std::string trace_path;
  std::string trace_format;
  double production_share = 0.5;
  std::uint64_t label_seed = 1;
  bool skip_malformed = false;
  bool no_progress = false;
  std::vector<std::string> label_models = mixed_stream_config{}.models;
  cluster_command cluster;

  void add_to(CLI::App& app) {
    app.add_option("--trace", trace_path, "The trace file")->required()->check(CLI::ExistingFile);
    // Names, aliases and descriptions come from the library's registry of formats, so the
    // help, the check and the readers cannot disagree.
    std::vector<std::string> names;
    std::string help = "The trace's format; default: from the file name (.json: philly-json, "
                       "else philly-csv).";
    for (const auto& f : tgs::traces::trace_formats()) {
      names.emplace_back(f.name);
      help += fmt::format(" {}: {}", f.name, f.description);
      for (const auto alias : f.aliases) {
        names.emplace_back(alias);
        help += fmt::format(" (also {})", alias);
      }
      help += ".";
    }
    app.add_option("--trace-format", trace_format, help)->check(CLI::IsMember(names));
    app.add_option("--production-share", production_share,
                   "Share of jobs labelled production when the trace has no classes (Philly)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--label-seed", label_seed,
                   "Seed of the class and model labels drawn for unlabelled jobs")
        ->check(seed_digits)
        ->capture_default_str();
    app.add_option("--label-models", label_models,
                   "Models drawn (uniformly, seeded) for jobs the trace gives none (Philly)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_flag("--skip-malformed", skip_malformed,
                 "Skip malformed rows (counted and reported) instead of stopping at the first");
    app.add_flag("--no-progress", no_progress, "No progress lines on stderr");
    // 800 GPUs: the completed Philly jobs kept busy 374 GPUs on average (589 in October); the
    // full cluster also ran the killed and failed jobs (68% of GPU time), so 100 servers of 8
    // give these jobs the ~50% average load Microsoft reports for its clusters.
    cluster.add_to(app, "100x8:a100-40gb");
  }

  int run(const data_options& data) const {
    const cluster_spec spec = parse_cluster_spec(cluster.cluster);
    // --trace-format was checked against the registry when parsed; only the default is left.
    const auto format = tgs::traces::parse_trace_format(
        !trace_format.empty()
            ? trace_format
            : (trace_path.ends_with(".json") ? "philly-json" : "philly-csv"));
    tgs::traces::read_options read;
    if (skip_malformed) read.malformed = tgs::traces::on_malformed::skip;
    tgs::traces::trace trace;
    try {
      trace = tgs::traces::read_trace(trace_path, format.value(), read);
    } catch (const tgs::traces::trace_error& e) {
      throw input_error(e.what());
    }
    if (trace.stats.rows_skipped > 0 || trace.stats.rows_dropped > 0) {
      fmt::print(stderr, "tgs-sim: {}: {} rows read, {} kept, {} dropped by the format's rules, "
                         "{} skipped as malformed\n",
                 trace_path, trace.stats.rows_read, trace.stats.rows_kept, trace.stats.rows_dropped,
                 trace.stats.rows_skipped);
      for (const auto& reason : trace.stats.skip_reasons) fmt::print(stderr, "  skipped: {}\n", reason);
    }
    // A job larger than the cluster can never start: say where it is in the file.
    for (const auto& j : trace.jobs) {
      if (j.gpus > static_cast<std::uint32_t>(spec.gpus())) {
        throw input_error(fmt::format("{}:{}: job {}{} needs {} GPUs but --cluster {} has {}",
                                      trace_path, j.source_line, static_cast<std::uint32_t>(j.id),
                                      j.name.empty() ? "" : fmt::format(" ({})", j.name), j.gpus,
                                      cluster.cluster, spec.gpus()));
      }
    }
    const calibrated_model model = calibrate(data.sources);
    check_cluster_gpu(model, spec);
    label_trace(trace, model.data, spec.gpu, label_seed, production_share, label_models);
    const auto jobs = to_cluster_jobs(trace, model.data, spec.gpu);
    const std::string workload =
        fmt::format("replay of {} ({} jobs, {:.0f}% production, label seed {}) on {}", trace_path,
                    jobs.size(), production_share * 100, label_seed, cluster.cluster);
    return cluster.run(model, jobs, workload, label_seed, spec, !no_progress);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tgs-sim: simulate transparent GPU sharing (TGS, NSDI'23) and the policies it is compared "
      "with.\n\nWith no subcommand it runs `mixed`: the paper's mixed job stream (50 production "
      "and 50 opportunistic jobs, at most 2 GPUs each, on one server with two A100-40GB) under "
      "exclusive, co-execution, MPS, MIG, AntMan, TGS and idle-harvest, and prints each class's "
      "average job completion time normalized to exclusive."};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "tgs-sim " TGS_VERSION);
  data_options data;
  data.add_to(app);

  mixed_command mixed;
  CLI::App* mixed_app = app.add_subcommand(
      "mixed", "The paper's mixed production/opportunistic job stream on a small cluster (the "
               "default)");
  mixed.add_to(*mixed_app);

  replay_command replay;
  CLI::App* replay_app = app.add_subcommand(
      "replay", "Replay a real trace (Philly) on a cluster under each sharing policy");
  replay.add_to(*replay_app);

  pairs_command pairs;
  CLI::App* pairs_app = app.add_subcommand(
      "pairs",
      "One production and one opportunistic job on one GPU under each sharing policy, with the "
      "real policy objects stepped over virtual time");
  pairs.add_to(*pairs_app);

  std::string fit_format = "table";
  std::string fit_write;
  CLI::App* fit_app = app.add_subcommand(
      "fit", "The global fit: each GPU type's mechanism parameters (and the profile fields marked "
             "f) from the measured pairs of the policies that do not adapt");
  add_format_option(*fit_app, fit_format);
  fit_app->add_option("--write", fit_write,
                      "Fit afresh and write the cache (sim/data/fit.csv's format) to this file");

  std::string predict_gpu;
  bool predict_loo = false;
  bool predict_markdown = false;
  CLI::App* predict_app = app.add_subcommand(
      "predict", "Every measured pair beside the simulator's prediction of it (docs/simulator/predictions.md)");
  predict_app->add_option("--gpu", predict_gpu, "Only this GPU type; default: every type");
  predict_app->add_flag("--leave-one-out", predict_loo,
                        "Also predict each pair with a fit that left its cells out (one refit per pair)");
  predict_app->add_flag("--markdown", predict_markdown, "A Markdown table");

  std::string profiles_format = "table";
  CLI::App* profiles_app = app.add_subcommand("profiles", "List the model profiles");
  add_format_option(*profiles_app, profiles_format);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (fit_app->parsed()) {
      const output_format format = parse_format(fit_format);
      calibrated_model model = calibrate(data.sources);
      if (!fit_write.empty()) {
        const std::uint64_t hash = model.fit.inputs_hash;
        model.fit = fit_catalog(model.unfitted);
        model.fit.inputs_hash = hash;
        model.fit_from_cache = false;
        std::ofstream out(fit_write);
        out << render_fit_csv(model.fit);
        if (!out) throw input_error(fmt::format("--write: cannot write \"{}\"", fit_write));
        model.data = model.unfitted;
        apply_fit(model.data, model.fit);
      }
      fmt::print("{}", render_fit(model, format));
      return 0;
    }
    if (predict_app->parsed()) {
      const calibrated_model model = calibrate(data.sources);
      if (!predict_gpu.empty() && model.data.find_gpu(predict_gpu) == nullptr) {
        throw input_error(fmt::format("--gpu: unknown gpu \"{}\"", predict_gpu));
      }
      const auto in_sample = predict_measured(model, predict_gpu, false);
      const auto left_out = predict_loo ? predict_measured(model, predict_gpu, true) : std::vector<prediction>{};
      fmt::print("{}", render_predictions(in_sample, predict_loo ? &left_out : nullptr, predict_markdown));
      return 0;
    }
    if (profiles_app->parsed()) {
      const output_format format = parse_format(profiles_format);
      // With the fit applied: a field marked f shows the value the fit inferred.
      fmt::print("{}", render_profiles(calibrate(data.sources).data, format));
      return 0;
    }
    if (pairs_app->parsed()) return pairs.run(data);
    if (replay_app->parsed()) return replay.run(data);
    return mixed.run(data);
  } catch (const input_error& e) {
    fmt::print(stderr, "tgs-sim: {}\n", e.what());
    return 2;
  } catch (const tgs::config_error& e) {
    fmt::print(stderr, "tgs-sim: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tgs-sim: internal error: {}\n", e.what());
    return 3;
  }
}
