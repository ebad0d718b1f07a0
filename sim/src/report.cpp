// SPDX-License-Identifier: Apache-2.0
// Table, JSON and CSV renderings of simulator results.
#include "tgs/sim/report.hpp"

#include "json_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

namespace tgs::sim {
namespace {

std::string number(double v) { return fmt::format("{:.4f}", v); }

bool within(const pair_result& r, double tolerance) {
  if (!r.target) return false;
  auto close = [&](const std::optional<double>& measured, double simulated) {
    return !measured || std::abs(simulated - *measured) <= tolerance + 1e-12;
  };
  return close(r.target->production, r.outcome.production) &&
         close(r.target->opportunistic, r.outcome.opportunistic);
}

std::string maybe(const std::optional<double>& v) { return v ? number(*v) : std::string(); }

/// "time-sliced (long-kernels)": the mechanism and the fact that decided it.
std::string choice_text(const node_choice& c) {
  return fmt::format("{} ({})", to_string(c.verdict.mechanism), to_string(c.verdict.reason));
}

/// The node's choices of a pair as its JSON record's "node_choice": the facts it read, those never
/// measured, and per preference the mechanism, the reason and the cell.
json choices_json(const pair_choices& p) {
  const choice_facts& f = p.facts;
  json unmeasured = json::array();
  for (const std::string_view fact : p.unmeasured) unmeasured.push_back(std::string(fact));
  json out{{"facts",
            {{"production_gpu_wait", f.production_gpu_wait ? json(json_number(*f.production_gpu_wait)) : json(nullptr)},
             {"opportunistic_longest_span_ms",
              f.longest_kernel ? json(json_number(to_seconds(*f.longest_kernel) * 1e3)) : json(nullptr)},
             {"production_gib", json_number(f.production_bytes.gib())},
             {"opportunistic_gib", f.opportunistic_peak_bytes ? json(json_number(f.opportunistic_peak_bytes->gib()))
                                                              : json(nullptr)},
             {"capacity_gib", f.capacity ? json(json_number(f.capacity->gib())) : json(nullptr)}}},
           {"unmeasured", std::move(unmeasured)}};
  for (const node_choice& c : p.choices) {
    out[std::string(to_string(c.preference))] = {
        {"mechanism", std::string(to_string(c.verdict.mechanism))},
        {"reason", std::string(to_string(c.verdict.reason))},
        {"production", json_number(c.production)},
        {"opportunistic", json_number(c.opportunistic)},
        {"production_se", json_number(c.production_se)},
        {"opportunistic_se", json_number(c.opportunistic_se)},
        {"extrapolated", c.extrapolated.empty() ? json(nullptr) : json(c.extrapolated)}};
  }
  return out;
}

/// The CSV columns of the node's choices: per preference its mechanism, reason and cell, then the
/// facts never measured.
std::string choices_csv_header() {
  std::string out;
  for (const mechanism_preference p : node_preferences) {
    out += fmt::format("node_{0}_mechanism,node_{0}_reason,node_{0}_production,node_{0}_opportunistic,", to_string(p));
  }
  return out + "node_unmeasured";
}

std::string choices_csv(const std::optional<pair_choices>& p) {
  std::string out;
  for (const mechanism_preference pref : node_preferences) {
    const node_choice* c = p ? p->under(pref) : nullptr;
    out += c == nullptr ? std::string(",,,,")
                        : fmt::format("{},{},{},{},", to_string(c->verdict.mechanism), to_string(c->verdict.reason),
                                      number(c->production), number(c->opportunistic));
  }
  std::string unmeasured;
  if (p) {
    for (const std::string_view fact : p->unmeasured) unmeasured += (unmeasured.empty() ? "" : " ") + std::string(fact);
  }
  return out + unmeasured;
}

/// The model a fact never measured is missing for: the production job's wait, the opportunistic
/// job's kernels.
const std::string& model_lacking(const pair_request& r, std::string_view fact) {
  return fact == production_gpu_wait_fact ? r.production_model : r.opportunistic_model;
}

/// The notes under a table of the node's choices: per GPU type and fact, the models it was never
/// measured for, in the order they appear.
std::string unmeasured_notes(const std::vector<pair_result>& results) {
  struct lacking {
    std::string gpu;
    std::string_view fact;
    std::vector<std::string> models;
  };
  std::vector<lacking> notes;
  for (const pair_result& r : results) {
    if (!r.node) continue;
    for (const std::string_view fact : r.node->unmeasured) {
      auto it = std::find_if(notes.begin(), notes.end(),
                             [&](const lacking& l) { return l.gpu == r.request.gpu && l.fact == fact; });
      if (it == notes.end()) it = notes.insert(notes.end(), {r.request.gpu, fact, {}});
      const std::string& model = model_lacking(r.request, fact);
      if (std::find(it->models.begin(), it->models.end(), model) == it->models.end()) it->models.push_back(model);
    }
  }
  if (notes.empty()) return {};
  std::string out = "facts never measured, passed empty as tgs-node would (its choice then takes the safe side):\n";
  for (const lacking& l : notes) {
    std::string models;
    for (const std::string& m : l.models) models += (models.empty() ? "" : ", ") + m;
    out += fmt::format("  {}: {} of {}\n", l.gpu, l.fact, models);
  }
  return out;
}

/// The distinct choices (one per memory budget) among `results`, in the order they appear.
std::vector<const pair_choices*> distinct_choices(std::span<const pair_result> results) {
  std::vector<const pair_choices*> out;
  for (const pair_result& r : results) {
    if (!r.node) continue;
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const pair_choices* c) { return c->facts.capacity == r.node->facts.capacity; });
    if (!seen) out.push_back(&*r.node);
  }
  return out;
}

/// The job's longest kernel span in milliseconds, where measured.
std::optional<double> span_ms(const model_profile& m) {
  return m.opportunistic_longest_span ? std::optional<double>(to_seconds(*m.opportunistic_longest_span) * 1e3)
                                      : std::nullopt;
}

/// Adds `note` to `notes` unless it is empty or there already.
void add_note(std::vector<std::string>& notes, const std::string& note) {
  if (!note.empty() && std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

/// "0.945±0.02": a prediction with the half-width of its 95% interval, when the run computed one.
std::string predicted(double v, const std::optional<double>& se) {
  return se ? fmt::format("{:.3f}±{:.2f}", v, interval_z * *se) : fmt::format("{:.3f}", v);
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
        records.push_back({{"scenario", r.request.scenario},
                           {"gpu", r.request.gpu},
                           {"production_model", r.request.production_model},
                           {"opportunistic_model", r.request.opportunistic_model},
                           {"policy", r.request.policy},
                           {"memory_policy", r.memory_policy},
                           {"production", json_number(r.outcome.production)},
                           {"opportunistic", json_number(r.outcome.opportunistic)},
                           {"opportunistic_refused", r.outcome.opportunistic_refused},
                           {"measured_production",
                            r.target ? json_number(r.target->production) : json(nullptr)},
                           {"measured_opportunistic",
                            r.target ? json_number(r.target->opportunistic) : json(nullptr)},
                           {"measured_source", r.target ? json(r.target->source) : json(nullptr)},
                           {"production_se", json_number(r.production_se)},
                           {"opportunistic_se", json_number(r.opportunistic_se)},
                           {"evicted_gib", json_number(r.outcome.evicted.gib())},
                           {"restored_gib", json_number(r.outcome.restored.gib())},
                           {"extrapolated", r.extrapolated.empty() ? json(nullptr) : json(r.extrapolated)},
                           {"node_choice", r.node ? choices_json(*r.node) : json(nullptr)}});
      }
      return json_records(records);
    }
    case output_format::csv: {
      // The node's choices before `extrapolated`, which stays the last column.
      out += "scenario,gpu,production_model,opportunistic_model,policy,memory_policy,production,"
             "opportunistic,opportunistic_refused,measured_production,measured_opportunistic,"
             "evicted_gib,restored_gib,production_se,opportunistic_se," +
             choices_csv_header() + ",extrapolated\n";
      for (const auto& r : results) {
        out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.request.scenario,
                           r.request.gpu, r.request.production_model,
                           r.request.opportunistic_model, r.request.policy, r.memory_policy,
                           number(r.outcome.production), number(r.outcome.opportunistic),
                           r.outcome.opportunistic_refused ? 1 : 0,
                           r.target ? maybe(r.target->production) : "",
                           r.target ? maybe(r.target->opportunistic) : "",
                           number(r.outcome.evicted.gib()), number(r.outcome.restored.gib()),
                           maybe(r.production_se), maybe(r.opportunistic_se), choices_csv(r.node),
                           csv_field(r.extrapolated));
      }
      return out;
    }
    case output_format::table: {
      out += fmt::format("{:<31} {:<16} {:>25} {:>13} {}\n", "scenario (production/opp.)",
                         "policy", "production / opp. ± 95%", "measured", "");
      const auto pair_of = [](const pair_result& r) {
        return fmt::format("{} ({}/{})", r.request.scenario, r.request.production_model,
                           r.request.opportunistic_model.empty() ? "-" : r.request.opportunistic_model);
      };
      std::string last;
      std::size_t group_start = 0;
      for (std::size_t i = 0; i < results.size(); ++i) {
        const pair_result& r = results[i];
        const std::string pair = pair_of(r);
        const std::string label = pair == last ? "" : pair;
        if (!label.empty()) group_start = i;
        last = pair;
        auto shown = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("-"); };
        const std::string measured =
            r.target ? fmt::format("{} / {}", shown(r.target->production), shown(r.target->opportunistic)) : "";
        const std::string verdict = !r.target ? "" : within(r, tolerance) ? "ok" : "off";
        std::string what = r.request.policy;
        if (!r.extrapolated.empty()) what += " *";
        if (r.request.production_idle) what += " (production idle)";
        if (!label.empty() && label.size() > 31) out += label + "\n";
        out += fmt::format("{:<31} {:<16} {:>11} / {:<11} {:>13} {}{}{}\n",
                           label.size() > 31 ? "" : label, what, predicted(r.outcome.production, r.production_se),
                           predicted(r.outcome.opportunistic, r.opportunistic_se), measured, verdict,
                           r.outcome.opportunistic_refused ? " (opportunistic refused)" : "",
                           r.request.settings.empty() ? "" : "  " + [&] {
                             std::string s;
                             for (const auto& [k, v] : r.request.settings) s += (s.empty() ? "" : " ") + k + "=" + v;
                             return s;
                           }());
        // After the pair's last result: what tgs-node would choose for it, per memory budget.
        if (i + 1 < results.size() && pair_of(results[i + 1]) == pair) continue;
        const std::vector<const pair_choices*> budgets =
            distinct_choices(std::span<const pair_result>(results).subspan(group_start, i + 1 - group_start));
        for (const pair_choices* p : budgets) {
          // The budget is named only where it tells the pair's choices apart.
          const std::string budget = budgets.size() > 1 && p->facts.capacity
                                         ? fmt::format(" at a {:.1f} GiB budget", p->facts.capacity->gib())
                                         : std::string();
          for (const node_choice& c : p->choices) {
            out += fmt::format("{:<31} {:<16} {:>11} / {:<11} {}{}\n", "",
                               fmt::format("node: {}{}", to_string(c.preference), c.extrapolated.empty() ? "" : " *"),
                               predicted(c.production, c.production_se), predicted(c.opportunistic, c.opportunistic_se),
                               choice_text(c), budget);
          }
        }
      }
      std::size_t with_target = 0;
      std::size_t ok = 0;
      for (const auto& r : results) {
        with_target += r.target ? 1U : 0U;
        ok += within(r, tolerance) ? 1U : 0U;
      }
      out += "\n±x: the half-width of the prediction's 95% interval from the fitted parameters' covariance\n";
      std::vector<std::string> notes;
      for (const auto& r : results) {
        add_note(notes, r.extrapolated);
        if (r.node) {
          for (const node_choice& c : r.node->choices) add_note(notes, c.extrapolated);
        }
      }
      if (!notes.empty()) {
        out += "* an extrapolation: it rests on a parameter never measured on this GPU type\n";
        for (const std::string& n : notes) out += "  " + n + "\n";
      }
      if (std::any_of(results.begin(), results.end(), [](const pair_result& r) { return r.node.has_value(); })) {
        out += fmt::format("node: auto, node: mps: the mechanism tgs-node picks for the pair's opportunistic job "
                           "under --opportunistic-mechanism auto (its default) and mps, by its own mechanism choice "
                           "(docs/policies/mechanism-choice.md), and the cell under it: {}'s cap on an MPS client, "
                           "or on a time-sliced context of its own\n",
                           node_choice_policy);
        out += unmeasured_notes(results);
      }
      if (with_target > 0) {
        out += fmt::format("{} of {} measured cells within ±{:.2f} of the measurement "
                           "(throughput normalized to the job alone)\n",
                           ok, with_target, tolerance);
      }
      return out;
    }
  }
  return out;
}

std::string render_node_choices(const std::vector<pair_result>& results) {
  std::string out = "| gpu | production / opportunistic | memory budget |";
  std::string rule = "|---|---|---|";
  for (const mechanism_preference p : node_preferences) {
    out += fmt::format(" {0}: mechanism (reason) | {0}: predicted ± 95% |", to_string(p));
    rule += "---|---|";
  }
  out += " facts never measured |\n" + rule + "---|\n";
  // One row per pair and memory budget: the scenarios that measured the same pair share it.
  std::vector<const pair_result*> rows;
  for (const pair_result& r : results) {
    if (!r.node) continue;
    const bool seen = std::any_of(rows.begin(), rows.end(), [&](const pair_result* o) {
      return o->request.gpu == r.request.gpu && o->request.production_model == r.request.production_model &&
             o->request.opportunistic_model == r.request.opportunistic_model &&
             o->node->facts.capacity == r.node->facts.capacity;
    });
    if (!seen) rows.push_back(&r);
  }
  std::vector<std::string> notes;
  for (const pair_result* r : rows) {
    const pair_choices& p = *r->node;
    out += fmt::format("| {} | {} / {} | {} |", r->request.gpu, r->request.production_model,
                       r->request.opportunistic_model,
                       p.facts.capacity ? fmt::format("{:.1f} GiB", p.facts.capacity->gib()) : std::string("–"));
    for (const mechanism_preference pref : node_preferences) {
      const node_choice* c = p.under(pref);
      if (c == nullptr) {
        out += " – | – |";
        continue;
      }
      const auto shown = [](double v, const std::optional<double>& se) {
        return se ? fmt::format("{:.2f} ± {:.2f}", v, interval_z * *se) : fmt::format("{:.2f}", v);
      };
      out += fmt::format(" {} | {} / {}{} |", choice_text(*c), shown(c->production, c->production_se),
                         shown(c->opportunistic, c->opportunistic_se), c->extrapolated.empty() ? "" : " \\*");
      add_note(notes, c->extrapolated);
    }
    std::string unmeasured;
    for (const std::string_view fact : p.unmeasured) {
      unmeasured += fmt::format("{}{} of {}", unmeasured.empty() ? "" : "; ", fact, model_lacking(r->request, fact));
    }
    out += fmt::format(" {} |\n", unmeasured.empty() ? "–" : unmeasured);
  }
  out += "\n± x: the half-width of the prediction's 95% interval from the fitted parameters' covariance\n";
  if (!notes.empty()) {
    out += "\n\\* an extrapolation: it rests on a parameter never measured on this GPU type:\n";
    for (const std::string& n : notes) out += "- " + n + "\n";
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

std::string render_fit(const calibrated_model& model, output_format format) {
  const fit_result& fit = model.fit;
  if (format == output_format::json) {
    json params = json::array();
    for (const auto& p : fit.parameters) {
      params.push_back({{"gpu", p.gpu},
                        {"model", p.model},
                        {"parameter", p.name},
                        {"value", p.value},
                        {"status", std::string(to_string(p.status))},
                        {"standard_error", json_number(p.standard_error)},
                        {"correlations", p.correlations}});
    }
    return json_text(json{{"inputs_hash", fmt::format("{:016x}", fit.inputs_hash)},
                          {"from_cache", model.fit_from_cache},
                          {"cells", fit.cells},
                          {"rms_error", json_number(fit.rms_error)},
                          {"parameters", std::move(params)}}) +
           "\n";
  }
  if (format == output_format::csv) return render_fit_csv(fit);
  std::string out = fmt::format(
      "global fit over {} measured throughputs of policies that do not adapt: rms error {:.3f} ({})\n\n",
      fit.cells, fit.rms_error, model.fit_from_cache ? "cached in sim/data/fit.csv" : "fitted now");
  out += fmt::format("{:<11} {:>12} {:>11} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "gpu",
                     "switch_loss", "overrun_us", "mps_switch", "mps_capacity", "mps_prio", "thrash_ts",
                     "thrash_mps", "thrash_mig", "interposer", "switch_us", "exposure");
  for (const auto& g : model.data.gpus) {
    const auto& c = g.contention;
    // An unmeasured priority loss (NaN) is the MPS loss: shown as "-".
    const std::string prio = std::isnan(c.mps_priority_loss) ? "-" : fmt::format("{:.4f}", c.mps_priority_loss);
    out += fmt::format("{:<11} {:>12.4f} {:>11.1f} {:>12.4f} {:>12.4f} {:>10} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.4f} {:>10.1f} {:>10.2f}\n",
                       g.name, c.switch_loss, c.overrun_switch_s * 1e6, c.mps_switch_loss, c.mps_capacity, prio,
                       c.thrash[0], c.thrash[1], c.thrash[2], c.interposer_overhead,
                       c.context_switch_s * 1e6, c.gap_exposure);
  }
  out += "\nthe fitted parameters, each ± its standard error (s²·(JᵀJ)⁻¹ at the optimum); a model names a\n"
         "profile field inferred from the measured pairs (provenance f in models.csv):\n";
  for (const auto& p : fit.parameters) {
    const std::string error =
        p.standard_error ? fmt::format("± {:.2g}", *p.standard_error) : std::string(to_string(p.status));
    out += fmt::format("  {:<11} {:<16} {:<22} {:>10.4g} {}\n", p.gpu, p.model.empty() ? "-" : p.model, p.name,
                       p.value, error);
  }
  return out;
}

std::string render_profiles(const catalog& c, output_format format) {
  auto letters = [](const model_profile& m) {
    std::string s;
    for (const provenance p : m.origin) s += provenance_letter(p);
    return s;
  };
  std::string out;
  if (format == output_format::json) {
    std::vector<json> records;
    for (const auto& m : c.models) {
      json provenance_of = json::object();
      for (std::size_t f = 0; f < profile_field_count; ++f) {
        provenance_of[std::string(to_string(static_cast<profile_field>(f)))] = std::string(to_string(m.origin[f]));
      }
      records.push_back({{"model", m.model},
                         {"gpu", m.gpu},
                         {"batch_size", m.batch_size},
                         {"iteration_ms", json_number(to_seconds(m.iteration_time) * 1e3)},
                         {"busy_fraction", json_number(m.busy_fraction)},
                         {"kernels_per_iteration", json_number(m.kernels_per_iteration)},
                         {"blocks_per_iteration", json_number(m.blocks_per_iteration)},
                         {"gaps_per_iteration", json_number(m.gaps_per_iteration)},
                         {"jitter", json_number(m.jitter)},
                         {"slice_sensitivity", json_number(m.slice_sensitivity)},
                         {"footprint_gib", json_number(m.footprint.gib())},
                         {"hot_gib", json_number(m.hot_set.gib())},
                         {"production_gpu_wait", json_number(m.production_gpu_wait)},
                         {"production_gpu_wait_source",
                          m.production_gpu_wait ? json(m.production_gpu_wait_source) : json(nullptr)},
                         {"opportunistic_longest_span_ms", json_number(span_ms(m))},
                         {"opportunistic_longest_span_source",
                          m.opportunistic_longest_span ? json(m.opportunistic_longest_span_source) : json(nullptr)},
                         {"provenance", std::move(provenance_of)},
                         {"source", m.source}});
    }
    return json_records(records);
  }
  if (format == output_format::csv) {
    out += "model,gpu,batch_size,iteration_ms,busy_fraction,kernels_per_iteration,blocks_per_iteration,"
           "gaps_per_iteration,jitter,slice_sensitivity,footprint_gib,hot_gib,provenance,production_gpu_wait,"
           "opportunistic_longest_span_ms\n";
    for (const auto& m : c.models) {
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", m.model, m.gpu, m.batch_size,
                         number(to_seconds(m.iteration_time) * 1e3), number(m.busy_fraction),
                         number(m.kernels_per_iteration), number(m.blocks_per_iteration),
                         number(m.gaps_per_iteration), number(m.jitter), number(m.slice_sensitivity),
                         number(m.footprint.gib()), number(m.hot_set.gib()), letters(m),
                         maybe(m.production_gpu_wait), maybe(span_ms(m)));
    }
    return out;
  }
  // Each value is followed by its provenance letter: m measured, p paper, e estimate, f fitted.
  out += fmt::format("{:<15} {:<11} {:>5} {:>10} {:>7} {:>8} {:>11} {:>8} {:>7} {:>7} {:>9} {:>8} {:>6} {:>8}\n",
                     "model", "gpu", "batch", "iter ms", "busy", "kernels", "blocks/iter", "gaps", "jitter", "slice",
                     "mem GiB", "hot GiB", "wait", "span ms");
  for (const auto& m : c.models) {
    auto v = [&](profile_field f, double x, int precision) {
      return fmt::format("{:.{}f}{}", x, precision, provenance_letter(m.origin_of(f)));
    };
    const auto fact = [](const std::optional<double>& x, int precision) {
      return x ? fmt::format("{:.{}f}", *x, precision) : std::string("-");
    };
    out += fmt::format("{:<15} {:<11} {:>5} {:>10} {:>7} {:>8} {:>11} {:>8} {:>7} {:>7} {:>9} {:>8} {:>6} {:>8}\n", m.model,
                       m.gpu, m.batch_size, v(profile_field::iteration_time, to_seconds(m.iteration_time) * 1e3, 1),
                       v(profile_field::busy_fraction, m.busy_fraction, 2),
                       v(profile_field::kernels_per_iteration, m.kernels_per_iteration, 0),
                       v(profile_field::blocks_per_iteration, m.blocks_per_iteration, 0),
                       v(profile_field::gaps_per_iteration, m.gaps_per_iteration, 0),
                       v(profile_field::jitter, m.jitter, 3), v(profile_field::slice_sensitivity, m.slice_sensitivity, 2),
                       v(profile_field::footprint, m.footprint.gib(), 2), v(profile_field::hot_set, m.hot_set.gib(), 2),
                       fact(m.production_gpu_wait, 3), fact(span_ms(m), 1));
  }
  out += "\nm measured on that GPU, p the TGS paper, e estimate (docs/simulator/profiles.md), f fitted "
         "from the measured pairs (tgs-sim fit)\n"
         "wait, span ms: what tgs-node measured of the job for its choice of mechanism, its host's wait for "
         "its GPU as a production job alone and its longest kernel span as an opportunistic job "
         "(sim/data/job_facts.csv, each with its source); - never measured\n";
  return out;
}

std::string render_predictions(const std::vector<prediction>& predictions,
                               const std::vector<prediction>* left_out, bool markdown) {
  std::string out;
  auto shown = [](const std::optional<double>& v) { return v ? fmt::format("{:.2f}", *v) : std::string("–"); };
  // A prediction with the half-width of its 95% interval: calibrated where it was, else the
  // parameters' alone.
  auto with_interval = [&](const std::optional<double>& v, const std::optional<double>& se,
                           const std::optional<double>& sd) {
    if (!v) return std::string("–");
    const std::optional<double> spread = sd ? sd : se;
    return spread ? fmt::format("{:.2f}{}{:.2f}", *v, markdown ? " ± " : "±", interval_z * *spread) : shown(v);
  };
  auto predicted_of = [&](const prediction& p) {
    return with_interval(p.production, p.production_se, p.production_sd) + " / " +
           with_interval(p.opportunistic, p.opportunistic_se, p.opportunistic_sd);
  };
  const bool calibrated = !predictions.empty() && (predictions.front().production_sd || predictions.front().opportunistic_sd);
  auto error = [](const std::optional<double>& measured, const std::optional<double>& predicted) {
    return measured && predicted ? std::optional<double>(*predicted - *measured) : std::nullopt;
  };
  auto signed_error = [](const std::optional<double>& e) { return e ? fmt::format("{:+.2f}", *e) : std::string("–"); };
  auto ok = [](const std::optional<double>& a, const std::optional<double>& b) {
    return (!a || std::abs(*a) <= 0.10 + 1e-12) && (!b || std::abs(*b) <= 0.10 + 1e-12);
  };
  struct tally {
    std::size_t within = 0;
    double sum = 0;
    std::size_t throughputs = 0;
    void add(const std::optional<double>& ep, const std::optional<double>& eo, bool inside) {
      within += inside ? 1U : 0U;
      for (const auto& e : {ep, eo}) {
        if (e) {
          sum += *e * *e;
          ++throughputs;
        }
      }
    }
    [[nodiscard]] double rms() const { return throughputs > 0 ? std::sqrt(sum / static_cast<double>(throughputs)) : 0.0; }
  };
  tally all;
  tally out_of_sample;
  if (markdown) {
    out += left_out ? "| gpu | production / opportunistic | policy | settings | measured | predicted ± 95% | error | "
                      "pair left out: predicted ± 95% | error |\n|---|---|---|---|---|---|---|---|---|\n"
                    : "| gpu | production / opportunistic | policy | settings | measured | predicted ± 95% | error |\n"
                      "|---|---|---|---|---|---|---|\n";
  }
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const prediction& p = predictions[i];
    const auto& c = p.cell;
    const auto ep = error(c.production, p.production);
    const auto eo = error(c.opportunistic, p.opportunistic);
    all.add(ep, eo, ok(ep, eo));
    std::string settings = c.memory_policy.empty() ? "" : "memory " + c.memory_policy;
    if (c.memory_budget) settings += fmt::format(" {:.1f} GiB", c.memory_budget->gib());
    if (c.production_idle) settings += (settings.empty() ? "" : "; ") + std::string("production idle");
    for (const auto& [k, v] : c.settings) {
      if (k.starts_with("memory.")) continue;
      settings += (settings.empty() ? "" : "; ") + k + "=" + v;
    }
    const std::string pair = fmt::format("{} / {}", c.production_model,
                                         c.opportunistic_model.empty() ? "–" : c.opportunistic_model);
    std::string loo;
    if (left_out != nullptr && i < left_out->size()) {
      const prediction& q = (*left_out)[i];
      const auto lp = error(c.production, q.production);
      const auto lo = error(c.opportunistic, q.opportunistic);
      out_of_sample.add(lp, lo, ok(lp, lo));
      loo = markdown ? fmt::format(" {} | {} / {}{} |", predicted_of(q), signed_error(lp), signed_error(lo),
                                   ok(lp, lo) ? "" : " **off**")
                     : fmt::format("  left out {:<23} {}", predicted_of(q), ok(lp, lo) ? "" : "off");
    }
    if (markdown) {
      out += fmt::format("| {} | {} | {} | {} | {} / {} | {} | {} / {}{} |{}\n", c.gpu, pair, c.policy, settings,
                         shown(c.production), shown(c.opportunistic), predicted_of(p), signed_error(ep),
                         signed_error(eo), ok(ep, eo) ? "" : " **off**", loo);
    } else {
      out += fmt::format("{:<11} {:<30} {:<13} {:>11} {:>23} {:>13}{}{}  {}\n", c.gpu, pair, c.policy,
                         shown(c.production) + " / " + shown(c.opportunistic), predicted_of(p),
                         signed_error(ep) + " / " + signed_error(eo), ok(ep, eo) ? "   " : " off", loo, settings);
    }
  }
  out += calibrated
             ? fmt::format("\npredicted ± x: the 95% interval of a measurement of the cell: the fitted parameters' "
                           "covariance (the delta method) and the model's error beside it, from the residuals of "
                           "pairs left out of the fit (same GPU type and policy where {} or more, else the GPU "
                           "type's; a left-out prediction's from the other pairs only)\n",
                           min_calibration_throughputs)
             : fmt::format("\npredicted ± x: the 95% interval of the prediction from the fitted parameters' "
                           "covariance (the delta method)\n");
  out += fmt::format("{} of {} cells within ±0.10 on each throughput; rms error {:.3f} over {} throughputs "
                     "(one fit over all pairs)\n",
                     all.within, predictions.size(), all.rms(), all.throughputs);
  if (left_out != nullptr) {
    out += fmt::format("{} of {} cells within ±0.10 on each throughput; rms error {:.3f} over {} throughputs "
                       "(each pair predicted by a fit without it)\n",
                       out_of_sample.within, predictions.size(), out_of_sample.rms(), out_of_sample.throughputs);
    if (calibrated) {
      out += markdown ? "\n| GPU | left-out throughputs | inside their 95% interval | coverage | median half-width |\n"
                        "|---|---|---|---|---|\n"
                      : "\ncoverage of the left-out predictions' 95% intervals:\n";
      for (const interval_coverage& c : coverage_of(*left_out)) {
        const double share = c.throughputs > 0 ? static_cast<double>(c.inside) / static_cast<double>(c.throughputs) : 0;
        out += markdown ? fmt::format("| {} | {} | {} | {:.0f}% | {:.2f} |\n", c.gpu, c.throughputs, c.inside,
                                      100 * share, c.median_half_width)
                        : fmt::format("{:<11} {} of {} throughputs inside ({:.0f}%), median half-width {:.2f}\n",
                                      c.gpu, c.inside, c.throughputs, 100 * share, c.median_half_width);
      }
    }
  }
  return out;
}

}  // namespace tgs::sim
