// SPDX-License-Identifier: Apache-2.0
// Table, JSON and CSV renderings of simulator results.
#include "tgs/sim/report.hpp"

#include "json_output.hpp"

#include <fmt/format.h>

#include <cmath>

namespace tgs::sim {
namespace {

std::string number(double v) { return fmt::format("{:.4f}", v); }

bool within(const pair_result& r, double tolerance) {
  return r.target && std::abs(r.outcome.production - r.target->production) <= tolerance + 1e-12 &&
         std::abs(r.outcome.opportunistic - r.target->opportunistic) <= tolerance + 1e-12;
}

}  // namespace

output_format parse_format(std::string_view text) {
  if (text == "table") return output_format::table;
  if (text == "json") return output_format::json;
  if (text == "csv") return output_format::csv;
  throw input_error(fmt::format("--format: expected table, json or csv, got \"{}\"", text));
}

std::string render_pairs(const std::vector<pair_result>& results, output_format format,
                         double tolerance) {
  std::string out;
  switch (format) {
    case output_format::json: {
      std::vector<json> records;
      for (const auto& r : results) {
        const auto target_p = r.target ? std::optional<double>(r.target->production) : std::nullopt;
        const auto target_o = r.target ? std::optional<double>(r.target->opportunistic) : std::nullopt;
        records.push_back({{"scenario", r.request.scenario},
                           {"gpu", r.request.gpu},
                           {"production_model", r.request.production_model},
                           {"opportunistic_model", r.request.opportunistic_model},
                           {"policy", r.request.policy},
                           {"memory_policy", r.memory_policy},
                           {"production", json_number(r.outcome.production)},
                           {"opportunistic", json_number(r.outcome.opportunistic)},
                           {"opportunistic_refused", r.outcome.opportunistic_refused},
                           {"paper_production", json_number(target_p)},
                           {"paper_opportunistic", json_number(target_o)},
                           {"evicted_gib", json_number(r.outcome.evicted.gib())},
                           {"restored_gib", json_number(r.outcome.restored.gib())}});
      }
      return json_records(records);
    }
    case output_format::csv: {
      out += "scenario,gpu,production_model,opportunistic_model,policy,memory_policy,production,"
             "opportunistic,opportunistic_refused,paper_production,paper_opportunistic,"
             "evicted_gib,restored_gib\n";
      for (const auto& r : results) {
        out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.request.scenario,
                           r.request.gpu, r.request.production_model,
                           r.request.opportunistic_model, r.request.policy, r.memory_policy,
                           number(r.outcome.production), number(r.outcome.opportunistic),
                           r.outcome.opportunistic_refused ? 1 : 0,
                           r.target ? number(r.target->production) : "",
                           r.target ? number(r.target->opportunistic) : "",
                           number(r.outcome.evicted.gib()), number(r.outcome.restored.gib()));
      }
      return out;
    }
    case output_format::table: {
      out += fmt::format("{:<31} {:<14} {:>21} {:>13} {}\n", "scenario (production/opp.)",
                         "policy", "production / opp.", "paper", "");
      std::string last;
      for (const auto& r : results) {
        const std::string label = r.request.scenario == last
                                      ? ""
                                      : fmt::format("{} ({}/{})", r.request.scenario,
                                                    r.request.production_model,
                                                    r.request.opportunistic_model);
        last = r.request.scenario;
        const std::string paper =
            r.target ? fmt::format("{:.2f} / {:.2f}", r.target->production, r.target->opportunistic)
                     : "";
        const std::string verdict = !r.target ? "" : within(r, tolerance) ? "ok" : "off";
        if (!label.empty() && label.size() > 31) out += label + "\n";
        out += fmt::format("{:<31} {:<14} {:>9.3f} / {:<9.3f} {:>13} {}{}\n",
                           label.size() > 31 ? "" : label, r.request.policy,
                           r.outcome.production, r.outcome.opportunistic, paper, verdict,
                           r.outcome.opportunistic_refused ? " (opportunistic refused)" : "");
      }
      std::size_t with_target = 0;
      std::size_t ok = 0;
      for (const auto& r : results) {
        with_target += r.target ? 1U : 0U;
        ok += within(r, tolerance) ? 1U : 0U;
      }
      if (with_target > 0) {
        out += fmt::format("\n{} of {} measured cells within ±{:.2f} of the paper "
                           "(throughput normalized to the job alone)\n",
                           ok, with_target, tolerance);
      }
      return out;
    }
  }
  return out;
}

std::string render_timeline(const std::vector<timeline_row>& rows) {
  std::string out =
      "scenario,policy,start_s,end_s,production,opportunistic,opportunistic_budget_blocks,phase\n";
  for (const auto& r : rows) {
    out += fmt::format("{},{},{:.3f},{:.3f},{:.5f},{:.5f},{},{}\n", r.scenario, r.policy,
                       r.start_s, r.end_s, r.production, r.opportunistic,
                       r.opportunistic_budget ? fmt::format("{}", *r.opportunistic_budget) : "",
                       r.phase);
  }
  return out;
}

std::string render_fit(const catalog& c, const contention_table& t, output_format format) {
  std::string out;
  const auto modes = {compute_mode::time_slicing, compute_mode::mps, compute_mode::mig};
  if (format == output_format::json) {
    json gpus = json::array();
    for (const auto& g : t.gpus()) {
      json gpu = {{"gpu", g.gpu}};
      for (auto m : modes) {
        const auto k = static_cast<std::size_t>(m);
        gpu[std::string(to_string(m))] = {
            {"aggressor_exponent", json_number(g.params.aggressor_exponent[k])},
            {"occupancy_exponent", json_number(g.params.occupancy_exponent[k])}};
      }
      gpus.push_back(std::move(gpu));
    }
    json models = json::array();
    for (const auto& e : t.models()) {
      json model = {{"model", e.model},
                    {"gpu", e.gpu},
                    {"interposer_overhead", json_number(e.params.interposer_overhead)}};
      for (auto m : modes) {
        const auto k = static_cast<std::size_t>(m);
        model[std::string(to_string(m))] = {
            {"sensitivity", json_number(e.params.sensitivity[k])},
            {"thrash", json_number(e.params.thrash[k])},
            {"slice_sensitivity", json_number(e.params.slice_sensitivity[k])}};
      }
      models.push_back(std::move(model));
    }
    return json_text(json{{"gpus", std::move(gpus)}, {"models", std::move(models)}}) + "\n";
  }
  const char sep = format == output_format::csv ? ',' : ' ';
  auto row = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      out += format == output_format::csv ? cells[i] : fmt::format("{:>12}", cells[i]);
      out += i + 1 < cells.size() ? std::string(1, sep) : "\n";
    }
  };
  row({"model", "gpu", "ts_sens", "mps_sens", "mig_sens", "ts_thrash", "mps_thrash",
       "mig_thrash", "mps_slice", "mig_slice", "overhead"});
  for (const auto& e : t.models()) {
    if (c.find_model(e.model, e.gpu) == nullptr) continue;
    const auto& p = e.params;
    row({e.model, e.gpu, number(p.sensitivity[0]), number(p.sensitivity[1]),
         number(p.sensitivity[2]), number(p.thrash[0]), number(p.thrash[1]), number(p.thrash[2]),
         number(p.slice_sensitivity[1]), number(p.slice_sensitivity[2]),
         number(p.interposer_overhead)});
  }
  if (format == output_format::table) {
    out += "\n";
    for (const auto& g : t.gpus()) {
      out += fmt::format("{}: aggressor exponent ts/mps/mig {:.2f}/{:.2f}/{:.2f}, occupancy "
                         "exponent ts/mps/mig {:.2f}/{:.2f}/{:.2f}\n",
                         g.gpu, g.params.aggressor_exponent[0], g.params.aggressor_exponent[1],
                         g.params.aggressor_exponent[2], g.params.occupancy_exponent[0],
                         g.params.occupancy_exponent[1], g.params.occupancy_exponent[2]);
    }
  }
  return out;
}

std::string render_profiles(const catalog& c, output_format format) {
  std::string out;
  if (format == output_format::json) {
    std::vector<json> records;
    for (const auto& m : c.models) {
      records.push_back({{"model", m.model},
                         {"gpu", m.gpu},
                         {"batch_size", m.batch_size},
                         {"iteration_ms", json_number(to_seconds(m.iteration_time) * 1e3)},
                         {"busy_fraction", json_number(m.busy_fraction)},
                         {"blocks_per_iteration", json_number(m.blocks_per_iteration)},
                         {"footprint_gib", json_number(m.footprint.gib())},
                         {"hot_gib", json_number(m.hot_set.gib())},
                         {"source", m.source}});
    }
    return json_records(records);
  }
  if (format == output_format::csv) {
    out += "model,gpu,batch_size,iteration_ms,busy_fraction,blocks_per_iteration,footprint_gib,hot_gib\n";
    for (const auto& m : c.models) {
      out += fmt::format("{},{},{},{},{},{},{},{}\n", m.model, m.gpu, m.batch_size,
                         number(to_seconds(m.iteration_time) * 1e3), number(m.busy_fraction),
                         number(m.blocks_per_iteration), number(m.footprint.gib()),
                         number(m.hot_set.gib()));
    }
    return out;
  }
  out += fmt::format("{:<14} {:<11} {:>6} {:>9} {:>6} {:>12} {:>9} {:>7}  {}\n", "model", "gpu",
                     "batch", "iter ms", "busy", "blocks/iter", "mem GiB", "hot GiB", "source");
  for (const auto& m : c.models) {
    out += fmt::format("{:<14} {:<11} {:>6} {:>9.1f} {:>6.2f} {:>12.0f} {:>9.1f} {:>7.1f}  {}\n",
                       m.model, m.gpu, m.batch_size, to_seconds(m.iteration_time) * 1e3,
                       m.busy_fraction, m.blocks_per_iteration, m.footprint.gib(),
                       m.hot_set.gib(), m.source);
  }
  return out;
}

}  // namespace tgs::sim
