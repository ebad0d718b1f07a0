// SPDX-License-Identifier: Apache-2.0
// tgs-sim: the command-line front end of the simulator.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tgs/core/config_error.hpp"
#include "tgs/core/settings_flags.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sharing/mechanism_choice.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/traces/readers.hpp"
#include "tgs/version.hpp"

namespace {

using namespace tgs::sim;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

/// `--format` with its choices checked before any work.
void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "Output")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
}

/// A range check from the library's bounds, so the command line and the library agree.
CLI::Range range_of(option_range r) { return CLI::Range(r.low, r.high); }

/// Every policy's settings as flags (`--tgs.dead-band`, `--memory.tgs.reserve-mib`, ...), one
/// table per policy shared with tgs-node; the run refuses a flag of a policy it does not use.
struct settings_flags {
  std::vector<tgs::policy_flag<CLI::Option>> rate;
  std::vector<tgs::policy_flag<CLI::Option>> memory;

  void add_to(CLI::App& app, run_settings& settings) {
    rate = tgs::add_registry_flags<tgs::any_rate_controller, CLI::Option>(app, settings.rate, "");
    memory = tgs::add_registry_flags<tgs::any_memory_policy, CLI::Option>(app, settings.memory,
                                                                           "memory.");
  }

  /// Records which flags were given, after parsing.
  void note_given(run_settings& settings) const {
    auto given = [](const std::vector<tgs::policy_flag<CLI::Option>>& flags) {
      std::vector<given_setting> out;
      for (const auto& f : flags) {
        if (f.option->count() > 0) out.push_back({std::string(f.policy), f.flag});
      }
      return out;
    };
    settings.rate_given = given(rate);
    settings.memory_given = given(memory);
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

struct pairs_cli {
  pairs_command cmd;
  std::string format = "table";
  std::string timeline;
  bool node_choices = false;
  settings_flags flags;
  std::vector<tgs::policy_flag<CLI::Option>> choice_flags;

  void add_to(CLI::App& app) {
    app.add_option("--production", cmd.production,
                   "Production model of a custom pair (needs --opportunistic); default: every "
                   "pair measured on --gpu (the paper's four scenarios on a100-40gb), each beside "
                   "its measurement");
    app.add_option("--opportunistic", cmd.opportunistic, "Opportunistic model of a custom pair");
    add_policies_option(app, cmd.policies, default_pair_policies(), "");
    app.add_option("--gpu", cmd.gpu, "GPU type (tgs-sim profiles lists each type's models)")
        ->capture_default_str();
    add_format_option(app, format);
    app.add_option("--timeline", timeline,
                   "Write every job's throughput over time (CSV, one row per segment of "
                   "constant rates, with the controller's phase) to this file");
    app.add_option("--duration", cmd.duration_s, "Simulated seconds per pair")
        ->check(range_of(pairs_command::duration_range))
        ->capture_default_str();
    app.add_option("--warmup", cmd.warmup_s,
                   "Seconds excluded from the averages (TGS converges in ~50 s)")
        ->check(range_of(pairs_command::warmup_range))
        ->capture_default_str();
    app.add_option_function<double>(
           "--memory-budget-gib", [this](const double& gib) { cmd.memory_budget_gib = gib; },
           "Per-GPU memory budget in GiB; default: the GPU's memory")
        ->check(range_of(pairs_command::memory_budget_range));
    app.add_option("--memory-policy", cmd.memory_policy,
                   "Memory policy for every pair; default: each sharing policy's own (tgs for "
                   "tgs, unified-memory for the paper's baselines)")
        ->check(CLI::IsMember(registered_memory_policies()));
    app.add_option_function<double>(
           "--observation-noise", [this](const double& noise) { cmd.observation_noise = noise; },
           "Relative standard deviation of the launch counts a controller observes per step, "
           "for both jobs; default: each job's host jitter from its profile (the jitter "
           "column of tgs-sim profiles); 0: steady rates, as the paper's means")
        ->check(range_of(pairs_command::observation_noise_range));
    app.add_option("--seed", cmd.seed, "Seed of the observation noise (a run is a function of it)")
        ->capture_default_str();
    app.add_option("--production-drift", cmd.production_drift,
                   "Fraction by which the production job's standalone speed falls, linearly over "
                   "the run (0: steady). Real, unlike --observation-noise: the job makes fewer "
                   "iterations and launches fewer blocks, as a host-bound job whose CPU side slows; "
                   "its share is taken against an alone job that drifts alike")
        ->check(range_of(pairs_command::production_drift_range))
        ->capture_default_str();
    flags.add_to(app, cmd.settings);
    // The node's choice of mechanism, from the settings table tgs-node takes its flags from:
    // `--mechanism-choice.long-kernel-ms`, `--mechanism-choice.gpu-bound-wait`.
    tgs::add_setting_flags<tgs::mechanism_choice, CLI::App, CLI::Option>(app, cmd.choice, "", choice_flags);
    app.add_flag("--node-choices", node_choices,
                 "Print only tgs-node's choice of mechanism for each pair (under --opportunistic-mechanism auto "
                 "and mps) and the cell that follows, as a Markdown table (docs/simulator/predictions.md); the "
                 "table, JSON and CSV outputs carry the same beside every cell");
  }

  int run(const data_options& data) {
    const output_format out_format = parse_format(format);
    if (node_choices && out_format != output_format::table) {
      throw input_error("--node-choices prints a Markdown table: leave out --format (JSON and CSV carry the "
                        "choices in every record)");
    }
    flags.note_given(cmd.settings);
    cmd.timeline = !timeline.empty();
    check(cmd);
    const calibrated_model model = calibrate(data.sources);
    const pairs_outcome out = run_pairs(model, cmd);
    if (!timeline.empty()) {
      std::ofstream file(timeline);
      file << render_timeline(out.timeline);
      if (!file) throw input_error(fmt::format("--timeline: cannot write \"{}\"", timeline));
    }
    fmt::print("{}", node_choices ? render_node_choices(out.results) : render_pairs(out.results, out_format));
    return 0;
  }
};

/// Options shared by the cluster subcommands (mixed, replay).
struct cluster_cli {
  std::string format = "table";
  std::string out_dir;
  settings_flags flags;

  void add_to(CLI::App& app, cluster_command& cmd) {
    app.add_option("--cluster", cmd.cluster,
                   "Servers and GPUs: NODESxGPUS[:TYPE], e.g. 64x8:a100-40gb")
        ->capture_default_str();
    add_policies_option(app, cmd.policies, default_cluster_policies(),
                        ". " + baseline_policy() + " always runs: JCTs are normalized to it");
    add_format_option(app, format);
    app.add_option("--out", out_dir,
                   "Also write summary.json, summary.csv, jobs.csv (per-job records), cdf.csv "
                   "(JCT quantiles per class) and utilization.csv (hourly) into this folder");
    app.add_option("--lookahead", cmd.lookahead,
                   "Queued jobs examined past a head that does not fit (bounded backfilling; 0: "
                   "strict FIFO)")
        ->capture_default_str();
    app.add_flag("--preempted-keep-progress", cmd.preempted_keep_progress,
                 "Under exclusive, a preempted opportunistic job resumes where it stopped "
                 "(checkpointed) instead of restarting");
    flags.add_to(app, cmd.settings);
  }

  int run(const calibrated_model& model, const cluster_workload& workload, cluster_command& cmd,
          bool show_progress) const {
    const output_format out_format = parse_format(format);
    const bool tty = show_progress && isatty(STDERR_FILENO) != 0;
    const std::size_t jobs = workload.jobs.size();
    if (tty) {
      cmd.progress = [jobs](const std::string& policy, double done) {
        fmt::print(stderr, "\r{:<14} {:3.0f}% of {} jobs", policy, done * 100, jobs);
      };
    }
    if (show_progress) {
      cmd.finished = [jobs, tty](const cluster_run& r) {
        fmt::print(stderr, "{}tgs-sim: {} jobs under {} in {:.2f} s ({} events)\n",
                   tty ? "\r" : "", jobs, r.result.policy, r.wall_seconds, r.result.events);
      };
    }
    const auto runs = run_cluster_command(model, workload, cmd);
    if (!out_dir.empty()) write_cluster_outputs(out_dir, runs, workload.label, workload.seed);
    fmt::print("{}", render_cluster(runs, out_format, workload.label, workload.seed));
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

struct mixed_cli {
  mixed_command cmd;
  cluster_cli cluster;

  void add_to(CLI::App& app) {
    app.add_option("--seed", cmd.stream.seed, "Seed of the job stream")
        ->check(seed_digits)
        ->capture_default_str();
    app.add_option("--production-jobs", cmd.stream.production_jobs, "Production jobs")
        ->check(CLI::Range(static_cast<int>(mixed_command::jobs_range.low),
                           static_cast<int>(mixed_command::jobs_range.high)))
        ->capture_default_str();
    app.add_option("--opportunistic-jobs", cmd.stream.opportunistic_jobs, "Opportunistic jobs")
        ->check(CLI::Range(static_cast<int>(mixed_command::jobs_range.low),
                           static_cast<int>(mixed_command::jobs_range.high)))
        ->capture_default_str();
    app.add_option("--interarrival-minutes", cmd.stream.mean_interarrival_minutes,
                   "Mean time between submissions (Poisson arrivals)")
        ->check(range_of(mixed_command::interarrival_range))
        ->capture_default_str();
    cluster.add_to(app, cmd.cluster);
  }

  int run(const data_options& data) {
    cluster.flags.note_given(cmd.cluster.settings);
    check(cmd);
    const calibrated_model model = calibrate(data.sources);
    const cluster_workload workload = mixed_workload(model, cmd);
    return cluster.run(model, workload, cmd.cluster, false);
  }
};

struct replay_cli {
  replay_command cmd;
  bool no_progress = false;
  cluster_cli cluster;

  void add_to(CLI::App& app) {
    app.add_option("--trace", cmd.trace_path, "The trace file")->required()->check(CLI::ExistingFile);
    // Names, aliases and descriptions come from the library's registry of formats, so the
    // help, the check and the readers cannot disagree.
    std::string help = "The trace's format; default: from the file name (.json: philly-json, "
                       "else philly-csv).";
    for (const auto& f : tgs::traces::trace_formats()) {
      help += fmt::format(" {}: {}", f.name, f.description);
      for (const auto alias : f.aliases) help += fmt::format(" (also {})", alias);
      help += ".";
    }
    app.add_option("--trace-format", cmd.trace_format, help)
        ->check(CLI::IsMember(trace_format_names()));
    app.add_option("--production-share", cmd.production_share,
                   "Share of jobs labelled production when the trace has no classes (Philly)")
        ->check(range_of(replay_command::production_share_range))
        ->capture_default_str();
    app.add_option("--label-seed", cmd.label_seed,
                   "Seed of the class and model labels drawn for unlabelled jobs")
        ->check(seed_digits)
        ->capture_default_str();
    app.add_option("--label-models", cmd.label_models,
                   "Models drawn (uniformly, seeded) for jobs the trace gives none (Philly)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_flag("--skip-malformed", cmd.skip_malformed,
                 "Skip malformed rows (counted and reported) instead of stopping at the first");
    app.add_flag("--no-progress", no_progress, "No progress lines on stderr");
    cluster.add_to(app, cmd.cluster);
  }

  int run(const data_options& data) {
    cluster.flags.note_given(cmd.cluster.settings);
    check(cmd);
    tgs::traces::trace trace = read_replay_trace(cmd);
    if (trace.stats.rows_skipped > 0 || trace.stats.rows_dropped > 0) {
      fmt::print(stderr, "tgs-sim: {}: {} rows read, {} kept, {} dropped by the format's rules, "
                         "{} skipped as malformed\n",
                 cmd.trace_path, trace.stats.rows_read, trace.stats.rows_kept,
                 trace.stats.rows_dropped, trace.stats.rows_skipped);
      for (const auto& reason : trace.stats.skip_reasons) fmt::print(stderr, "  skipped: {}\n", reason);
    }
    check_fits(trace, cmd);
    const calibrated_model model = calibrate(data.sources);
    // Moved: the trace is as large as the file's jobs, and nothing reads it after this.
    const cluster_workload workload = replay_workload(model, std::move(trace), cmd);
    return cluster.run(model, workload, cmd.cluster, !no_progress);
  }
};

/// The arguments with `fallback` put first where they name no subcommand of `app`, so the
/// default subcommand takes its own flags: `tgs-sim --seed 2` runs `tgs-sim mixed --seed 2`.
/// A bare --help or --version stays the top level's, which lists the subcommands.
std::vector<std::string> with_default_subcommand(int argc, char** argv, const CLI::App& app,
                                                 const std::string& fallback) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help" || a == "--version") return args;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (a == sub->get_name()) return args;
    }
  }
  args.insert(args.begin() + 1, fallback);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tgs-sim: simulate transparent GPU sharing (TGS, NSDI'23) and the policies it is compared "
      "with.\n\nWith no subcommand it runs `mixed`: the paper's mixed job stream (50 production "
      "and 50 opportunistic jobs, at most 2 GPUs each, on one server with two A100-40GB) under "
      "exclusive, co-execution, MPS, MIG, AntMan, TGS and idle-harvest, and prints each class's "
      "average job completion time normalized to exclusive. Its flags need no subcommand: "
      "`tgs-sim --seed 2` is `tgs-sim mixed --seed 2`."};
  app.require_subcommand(0, 1);
  // The top-level table options (--models, --gpus, --measurements) may also follow a subcommand;
  // set before the subcommands are added, which inherit it.
  app.fallthrough();
  app.set_version_flag("--version", "tgs-sim " TGS_VERSION);
  data_options data;
  data.add_to(app);

  mixed_cli mixed;
  CLI::App* mixed_app = app.add_subcommand(
      "mixed", "The paper's mixed production/opportunistic job stream on a small cluster (the "
               "default)");
  mixed.add_to(*mixed_app);

  replay_cli replay;
  CLI::App* replay_app = app.add_subcommand(
      "replay", "Replay a real trace (Philly) on a cluster under each sharing policy");
  replay.add_to(*replay_app);

  pairs_cli pairs;
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

  predict_command predict;
  bool predict_markdown = false;
  CLI::App* predict_app = app.add_subcommand(
      "predict", "Every measured pair beside the simulator's prediction of it (docs/simulator/predictions.md)");
  predict_app->add_option("--gpu", predict.gpu, "Only this GPU type; default: every type");
  predict_app->add_flag("--leave-one-out", predict.leave_one_out,
                        "Also show each pair predicted by a fit that left its cells out (one refit per pair), "
                        "and how often those predictions' 95% intervals held the measured value");
  predict_app->add_flag("--markdown", predict_markdown, "A Markdown table");

  std::string profiles_format = "table";
  CLI::App* profiles_app = app.add_subcommand("profiles", "List the model profiles");
  add_format_option(*profiles_app, profiles_format);

  try {
    const std::vector<std::string> args = with_default_subcommand(argc, argv, app, "mixed");
    std::vector<const char*> arg_ptrs;
    for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (fit_app->parsed()) {
      const output_format format = parse_format(fit_format);
      const calibrated_model model = calibrate(data.sources);
      fmt::print("{}", render_fit(fit_write.empty() ? model : write_fit(model, fit_write), format));
      return 0;
    }
    if (predict_app->parsed()) {
      const predict_outcome out = run_predict(calibrate(data.sources), predict);
      fmt::print("{}", render_predictions(out.in_sample, predict.leave_one_out ? &out.left_out : nullptr,
                                          predict_markdown));
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
