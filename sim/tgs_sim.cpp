// SPDX-License-Identifier: Apache-2.0
// tgs-sim: the command-line front end of the simulator.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tgs/core/config_error.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/pairs.hpp"
#include "tgs/sim/report.hpp"

namespace {

using namespace tgs::sim;

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
                   "Measured pair throughputs to fit to (CSV, see sim/data/paper_pairs.csv); "
                   "default: embedded (the TGS paper's A100 pairs)")
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

  void add_to(CLI::App& app) {
    app.add_option("--production", production,
                   "Production model of a custom pair (needs --opportunistic); default: the "
                   "paper's four scenarios");
    app.add_option("--opportunistic", opportunistic, "Opportunistic model of a custom pair");
    app.add_option("--policies", policies,
                   "Sharing policies, comma-separated (" + tgs::rate_controller_list() +
                       "); default: tgs,co-execution,mps,mig")
        ->delimiter(',');
    app.add_option("--gpu", gpu, "GPU type")->capture_default_str();
    app.add_option("--format", format, "Output: table, json or csv")->capture_default_str();
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
                   "Memory policy for every pair (tgs, hard-limit, no-oversubscription, "
                   "unified-memory); default: tgs for the tgs policy, unified-memory otherwise");
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
    for (const auto& p : policies) {
      if (!tgs::make_rate_controller(p)) {
        throw input_error(fmt::format("--policies: unknown policy \"{}\" (known: {})", p,
                                      tgs::rate_controller_list()));
      }
    }
    pair_options options;
    options.run_for = tgs::from_seconds(duration_s);
    options.warmup = tgs::from_seconds(warmup_s);
    if (memory_budget_gib > 0) options.memory_budget = tgs::from_gib(memory_budget_gib);
    options.memory_policy = memory_policy;

    // The fit always uses the paper's protocol (600 s, 60 s warm-up, card memory), whatever
    // this run simulates.
    const calibrated_model model = calibrate(data.sources);
    std::vector<pair_request> requests;
    if (production.empty()) {
      const std::vector<std::string> chosen =
          policies.empty() ? std::vector<std::string>{"tgs", "co-execution", "mps", "mig"} : policies;
      requests = paper_pair_requests(model.data, gpu, chosen);
      if (requests.empty()) {
        throw input_error(fmt::format("no measured scenarios on gpu \"{}\"; name a pair with "
                                      "--production and --opportunistic",
                                      gpu));
      }
    } else {
      const std::vector<std::string> chosen =
          policies.empty() ? std::vector<std::string>{"tgs", "co-execution", "mps", "mig"} : policies;
      for (const auto& p : chosen) requests.push_back({"custom", gpu, production, opportunistic, p});
    }
    std::vector<timeline_row> rows;
    std::vector<pair_result> results;
    for (const auto& r : requests) {
      results.push_back(run_pair_request(model.data, model.params, r, options,
                                         timeline.empty() ? nullptr : &rows));
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tgs-sim: simulate transparent GPU sharing (TGS, NSDI'23) and the policies it is compared "
      "with.\n\nWith no subcommand it runs `pairs`: the paper's four co-location scenarios on an "
      "A100-40GB under tgs, co-execution, MPS and MIG, and prints each job's throughput "
      "normalized to running alone beside the paper's measurement."};
  app.require_subcommand(0, 1);
  data_options data;
  data.add_to(app);

  pairs_command pairs;
  CLI::App* pairs_app = app.add_subcommand(
      "pairs",
      "One production and one opportunistic job on one GPU under each sharing policy, with the "
      "real policy objects stepped over virtual time");
  pairs.add_to(*pairs_app);

  std::string fit_format = "table";
  CLI::App* fit_app = app.add_subcommand(
      "fit", "Fit the contention model to the measured pairs and print its parameters");
  fit_app->add_option("--format", fit_format, "Output: table, json or csv")->capture_default_str();

  std::string profiles_format = "table";
  CLI::App* profiles_app = app.add_subcommand("profiles", "List the model profiles");
  profiles_app->add_option("--format", profiles_format, "Output: table, json or csv")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (fit_app->parsed()) {
      const output_format format = parse_format(fit_format);
      const calibrated_model model = calibrate(data.sources);
      fmt::print("{}", render_fit(model.data, model.params, format));
      return 0;
    }
    if (profiles_app->parsed()) {
      const output_format format = parse_format(profiles_format);
      fmt::print("{}", render_profiles(load_catalog(data.sources), format));
      return 0;
    }
    return pairs.run(data);
  } catch (const input_error& e) {
    fmt::print(stderr, "tgs-sim: {}\n", e.what());
    return 2;
  } catch (const tgs::config_error& e) {
    fmt::print(stderr, "tgs-sim: {}\n", e.what());
    return 2;
  }
}
