// SPDX-License-Identifier: Apache-2.0
// The global fit: a bounded coordinate search over each GPU type's mechanism parameters and the
// profile fields still marked fitted, minimizing the squared error of every measured cell of a
// non-adaptive policy, each simulated with the real policy objects.
#include "tgs/sim/fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/pairs.hpp"

namespace tgs::sim {
namespace {

/// What a fitted number is, and where it lives in a catalog.
enum class target_kind : std::uint8_t {
  switch_loss,
  overrun_switch,
  mps_switch_loss,
  mps_capacity,
  thrash_time_slicing,
  thrash_mps,
  thrash_mig,
  busy_fraction,
  blocks_per_iteration,
  hot_set,
  slice_sensitivity,
};

constexpr std::string_view name_of(target_kind k) noexcept {
  switch (k) {
    case target_kind::switch_loss: return "switch_loss";
    case target_kind::overrun_switch: return "overrun_switch_s";
    case target_kind::mps_switch_loss: return "mps_switch_loss";
    case target_kind::mps_capacity: return "mps_capacity";
    case target_kind::thrash_time_slicing: return "thrash_time_slicing";
    case target_kind::thrash_mps: return "thrash_mps";
    case target_kind::thrash_mig: return "thrash_mig";
    case target_kind::busy_fraction: return "busy_fraction";
    case target_kind::blocks_per_iteration: return "blocks_per_iteration";
    case target_kind::hot_set: return "hot_gib";
    case target_kind::slice_sensitivity: return "slice_sensitivity";
  }
  return "";
}

std::optional<target_kind> kind_named(std::string_view name) noexcept {
  for (int k = 0; k <= static_cast<int>(target_kind::slice_sensitivity); ++k) {
    if (name_of(static_cast<target_kind>(k)) == name) return static_cast<target_kind>(k);
  }
  return std::nullopt;
}

/// Reads or writes one fitted number of a catalog.
double& gpu_field(gpu_profile& g, target_kind k) {
  switch (k) {
    case target_kind::switch_loss: return g.contention.switch_loss;
    case target_kind::overrun_switch: return g.contention.overrun_switch_s;
    case target_kind::mps_switch_loss: return g.contention.mps_switch_loss;
    case target_kind::mps_capacity: return g.contention.mps_capacity;
    case target_kind::thrash_time_slicing: return g.contention.thrash[0];
    case target_kind::thrash_mps: return g.contention.thrash[1];
    default: return g.contention.thrash[2];
  }
}

double get(const catalog& c, const fit_parameter& p, target_kind k) {
  if (p.model.empty()) {
    gpu_profile g = *c.find_gpu(p.gpu);
    return gpu_field(g, k);
  }
  const model_profile& m = *c.find_model(p.model, p.gpu);
  switch (k) {
    case target_kind::busy_fraction: return m.busy_fraction;
    case target_kind::blocks_per_iteration: return m.blocks_per_iteration;
    case target_kind::hot_set: return m.hot_set.gib();
    default: return m.slice_sensitivity;
  }
}

void set(catalog& c, const fit_parameter& p, target_kind k, double v) {
  if (p.model.empty()) {
    for (auto& g : c.gpus) {
      if (g.name == p.gpu) gpu_field(g, k) = v;
    }
    return;
  }
  for (auto& m : c.models) {
    if (m.model != p.model || m.gpu != p.gpu) continue;
    switch (k) {
      case target_kind::busy_fraction: m.busy_fraction = v; break;
      case target_kind::blocks_per_iteration: m.blocks_per_iteration = v; break;
      case target_kind::hot_set: m.hot_set = from_gib(v); break;
      default: m.slice_sensitivity = v; break;
    }
  }
}

/// A parameter being searched: its bounds, its coordinate in [0, 1], the cells it moves.
struct search_param {
  fit_parameter id;
  target_kind kind;
  double lo;
  double hi;
  bool log_scale;
  bool profile;  // a profile field: a weak prior holds it near its table value where cells are silent
  double start_u = 0;
  double u = 0;
  std::vector<std::size_t> cells{};

  [[nodiscard]] double value_at(double at) const noexcept {
    return log_scale ? std::exp(std::log(lo) + at * (std::log(hi) - std::log(lo))) : lo + at * (hi - lo);
  }
  [[nodiscard]] double coordinate_of(double v) const noexcept {
    const double x = log_scale ? (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo))
                               : (v - lo) / (hi - lo);
    return std::clamp(x, 0.0, 1.0);
  }
};

/// A fittable cell, ready to run.
struct fit_cell {
  const measured_pair* cell;
  pair_request request;
  compute_mode mode;
  std::string memory_policy;
};

constexpr double prior_weight = 1e-3;

bool involves(const measured_pair& m, const std::string& model) {
  return m.production_model == model || m.opportunistic_model == model;
}

double setting_or(const measured_pair& m, std::string_view key, double fallback) {
  for (const auto& [k, v] : m.settings) {
    if (k != key) continue;
    double x = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc{} && ptr == v.data() + v.size()) return x;
  }
  return fallback;
}

/// Whether a cell's jobs oversubscribe shared unified memory (or a MIG slice's memory).
bool overflows(const catalog& c, const fit_cell& f) {
  const measured_pair& m = *f.cell;
  const gpu_profile& g = *c.find_gpu(m.gpu);
  const double budget = static_cast<double>(m.memory_budget.value_or(g.memory).count());
  const double p = static_cast<double>(c.find_model(m.production_model, m.gpu)->footprint.count());
  const double o = m.opportunistic_model.empty()
                       ? 0.0
                       : static_cast<double>(c.find_model(m.opportunistic_model, m.gpu)->footprint.count());
  if (f.mode == compute_mode::mig) return p > budget * 4 / 7 || o > budget * 3 / 7;
  return any_memory_policy::paging_of_policy(f.memory_policy) == memory_paging::driver_demand && p + o > budget;
}

}  // namespace

bool fittable(const measured_pair& cell) {
  const auto traits = any_rate_controller::traits_of_policy(cell.policy);
  return traits && !traits->adaptive && traits->co_locates && (cell.production || cell.opportunistic);
}

fit_result fit_catalog(const catalog& c, const fit_options& options) {
  catalog work = c;
  const pair_options steady = steady_state_options();
  std::vector<fit_cell> cells;
  for (const auto& m : work.measurements) {
    if (!fittable(m)) continue;
    if (std::find(options.exclude.begin(), options.exclude.end(), m.pair_key()) != options.exclude.end()) {
      continue;
    }
    const rate_policy_traits traits = policy_traits(m.policy);
    cells.push_back({&m, request_of(m), traits.mechanism,
                     m.memory_policy.empty() ? std::string(traits.default_memory_policy) : m.memory_policy});
  }

  // The parameters the cells identify, per GPU type.
  std::vector<search_param> params;
  auto add = [&](const std::string& gpu, const std::string& model, target_kind kind, double lo,
                 double hi, bool log_scale, auto&& affects) {
    search_param p{{gpu, model, std::string(name_of(kind)), 0}, kind, lo, hi, log_scale, !model.empty()};
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (cells[i].cell->gpu == gpu && affects(cells[i])) p.cells.push_back(i);
    }
    if (p.cells.empty()) return;
    p.start_u = p.u = p.coordinate_of(get(work, p.id, kind));
    params.push_back(std::move(p));
  };
  for (const auto& g : work.gpus) {
    auto both_run = [](const fit_cell& f) {
      return !f.cell->production_idle && !f.cell->opportunistic_model.empty();
    };
    add(g.name, "", target_kind::switch_loss, 0.0, 3.0, false, [&](const fit_cell& f) {
      return f.mode == compute_mode::time_slicing && both_run(f);
    });
    // The gap overrun reads the jobs' kernels and idle gaps: fitted from the cells whose two
    // profiles measure them (none on a GPU type whose rows are estimates: it stays off there).
    auto gaps_measured = [&](const std::string& model) {
      const model_profile* m = work.find_model(model, g.name);
      return m != nullptr && m->origin_of(profile_field::gaps_per_iteration) == provenance::measured &&
             m->origin_of(profile_field::kernels_per_iteration) == provenance::measured;
    };
    add(g.name, "", target_kind::overrun_switch, 0.0, 100e-6, false, [&](const fit_cell& f) {
      return f.mode == compute_mode::time_slicing && both_run(f) &&
             gaps_measured(f.cell->production_model) && gaps_measured(f.cell->opportunistic_model);
    });
    add(g.name, "", target_kind::mps_switch_loss, 0.0, 3.0, false,
        [&](const fit_cell& f) { return f.mode == compute_mode::mps && both_run(f); });
    add(g.name, "", target_kind::mps_capacity, 1.0, 2.0, false,
        [&](const fit_cell& f) { return f.mode == compute_mode::mps && both_run(f); });
    const std::array thrash{target_kind::thrash_time_slicing, target_kind::thrash_mps, target_kind::thrash_mig};
    for (std::size_t k = 0; k < compute_mode_count; ++k) {
      add(g.name, "", thrash[k], 0.0, 50.0, false, [&](const fit_cell& f) {
        return static_cast<std::size_t>(f.mode) == k && overflows(work, f);
      });
    }
    for (const auto& m : work.models) {
      if (m.gpu != g.name) continue;
      auto fitted = [&](profile_field f) { return m.origin_of(f) == provenance::fitted; };
      auto with = [&](const fit_cell& f) { return involves(*f.cell, m.model); };
      if (fitted(profile_field::busy_fraction)) {
        add(g.name, m.model, target_kind::busy_fraction, 0.02, 1.0, false, with);
      }
      if (fitted(profile_field::blocks_per_iteration)) {
        add(g.name, m.model, target_kind::blocks_per_iteration, 1e3, 1e9, true, [&](const fit_cell& f) {
          const auto t = any_rate_controller::traits_of_policy(f.cell->policy);
          return f.cell->opportunistic_model == m.model && t && t->fixed_block_budget;
        });
      }
      if (fitted(profile_field::hot_set)) {
        add(g.name, m.model, target_kind::hot_set, 0.0, std::max(m.footprint.gib(), 1e-3), false,
            [&](const fit_cell& f) {
              return f.cell->opportunistic_model == m.model &&
                     any_memory_policy::paging_of_policy(f.memory_policy) == memory_paging::policy_eviction;
            });
      }
      if (fitted(profile_field::slice_sensitivity)) {
        add(g.name, m.model, target_kind::slice_sensitivity, 0.0, 1.0, false, [&](const fit_cell& f) {
          const bool opp = f.cell->opportunistic_model == m.model;
          return with(f) && (f.mode == compute_mode::mig ||
                             (f.mode == compute_mode::mps && opp &&
                              setting_or(*f.cell, "mps.opportunistic-threads", 1.0) < 1.0));
        });
      }
    }
  }

  // Squared error of each cell under the current parameters.
  std::vector<double> error(cells.size(), 0.0);
  std::size_t throughputs = 0;
  auto evaluate = [&](std::size_t i) {
    const fit_cell& f = cells[i];
    const pair_result r = run_pair_request(work, f.request, steady);
    double e = 0;
    if (f.cell->production) e += std::pow(r.outcome.production - *f.cell->production, 2);
    if (f.cell->opportunistic) e += std::pow(r.outcome.opportunistic - *f.cell->opportunistic, 2);
    error[i] = e;
  };
  for (std::size_t i = 0; i < cells.size(); ++i) {
    evaluate(i);
    throughputs += (cells[i].cell->production ? 1U : 0U) + (cells[i].cell->opportunistic ? 1U : 0U);
  }
  auto penalty = [](const search_param& p) {
    return p.profile ? prior_weight * (p.u - p.start_u) * (p.u - p.start_u) : 0.0;
  };
  // The part of the loss a parameter moves: its cells' errors and its own prior.
  auto local = [&](const search_param& p) {
    double sum = penalty(p);
    for (std::size_t i : p.cells) sum += error[i];
    return sum;
  };
  // Bounded coordinate search: each parameter in turn tries a step either way and keeps it if
  // the loss falls; a sweep without progress halves the step.
  double step = 0.125;
  for (int sweep = 0; sweep < 400 && step > 1e-4; ++sweep) {
    bool moved = false;
    for (auto& p : params) {
      const double before = local(p);
      const double from = p.u;
      std::vector<double> saved(p.cells.size());
      for (std::size_t j = 0; j < p.cells.size(); ++j) saved[j] = error[p.cells[j]];
      bool kept = false;
      for (const double to : {std::min(1.0, from + step), std::max(0.0, from - step)}) {
        if (to == from) continue;
        p.u = to;
        set(work, p.id, p.kind, p.value_at(to));
        for (std::size_t i : p.cells) evaluate(i);
        if (local(p) < before - 1e-12) {
          kept = true;
          break;
        }
        p.u = from;
        set(work, p.id, p.kind, p.value_at(from));
        for (std::size_t j = 0; j < p.cells.size(); ++j) error[p.cells[j]] = saved[j];
      }
      moved = moved || kept;
    }
    if (!moved) step /= 2;
  }

  fit_result out;
  for (auto& p : params) {
    p.id.value = p.value_at(p.u);
    out.parameters.push_back(p.id);
  }
  double sum = 0;
  for (double e : error) sum += e;
  out.cells = throughputs;
  out.rms_error = throughputs > 0 ? std::sqrt(sum / static_cast<double>(throughputs)) : 0.0;
  return out;
}

void apply_fit(catalog& c, const fit_result& fit) {
  for (const auto& p : fit.parameters) {
    const auto kind = kind_named(p.name);
    if (!kind) continue;
    if (c.find_gpu(p.gpu) == nullptr) continue;
    if (!p.model.empty() && c.find_model(p.model, p.gpu) == nullptr) continue;
    set(c, p, *kind, p.value);
  }
}

std::string render_fit_csv(const fit_result& fit) {
  std::string out =
      "# The global fit of the simulator's mechanism parameters (`tgs-sim fit --write "
      "sim/data/fit.csv`):\n"
      "# each GPU type's parameters and the profile fields marked f in models.csv, fitted to the\n"
      "# measured cells of the policies that do not adapt. tgs-sim uses it while inputs_hash matches\n"
      "# the tables (gpus.csv, models.csv, the measured pairs); otherwise it fits afresh.\n"
      "gpu,model,parameter,value\n";
  out += fmt::format("*,,inputs_hash,{:016x}\n*,,cells,{}\n*,,rms_error,{:.6f}\n", fit.inputs_hash,
                     fit.cells, fit.rms_error);
  for (const auto& p : fit.parameters) {
    out += fmt::format("{},{},{},{:.9g}\n", p.gpu, p.model, p.name, p.value);
  }
  return out;
}

fit_result parse_fit_csv(std::string_view text, std::string_view origin) {
  fit_result out;
  std::size_t line_no = 0;
  bool header = false;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string_view> f;
    for (std::size_t start = 0;;) {
      const std::size_t comma = line.find(',', start);
      f.push_back(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    auto fail = [&](std::string_view what) {
      return input_error(fmt::format("{}:{}: {}, got \"{}\"", origin, line_no, what, line));
    };
    if (!header) {
      if (line != "gpu,model,parameter,value") throw fail("expected the header \"gpu,model,parameter,value\"");
      header = true;
      continue;
    }
    if (f.size() != 4) throw fail("expected 4 comma-separated fields");
    if (f[0] == "*" && f[2] == "inputs_hash") {
      const auto [ptr, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), out.inputs_hash, 16);
      if (ec != std::errc{} || ptr != f[3].data() + f[3].size()) throw fail("expected a hexadecimal hash");
      continue;
    }
    double v = 0;
    const auto [ptr, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), v);
    if (ec != std::errc{} || ptr != f[3].data() + f[3].size() || !std::isfinite(v)) throw fail("expected a number");
    if (f[0] == "*") {
      if (f[2] == "cells") out.cells = static_cast<std::size_t>(v);
      if (f[2] == "rms_error") out.rms_error = v;
      continue;
    }
    if (!kind_named(f[2])) throw fail("unknown parameter");
    out.parameters.push_back({std::string(f[0]), std::string(f[1]), std::string(f[2]), v});
  }
  if (!header) throw input_error(fmt::format("{}: empty table (no header line)", origin));
  return out;
}

}  // namespace tgs::sim
