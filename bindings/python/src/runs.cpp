// SPDX-License-Identifier: Apache-2.0
// tgs-sim's pairs, mixed and replay from Python, through the same library calls as the command
// line, with results as plain dicts and numpy columns.
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "python_trace.hpp"
#include "settings.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/sim/report.hpp"

namespace tgs::python {
namespace {

/// A calibrated model (the catalog and the fitted contention parameters), shared by runs.
struct python_model {
  std::shared_ptr<const sim::calibrated_model> value;
};

const python_model& default_model() {
  // Calibrated on first use (about a second), then shared by every run that names no model. The
  // GIL stays held: a thread waiting for this initialisation must not hold it while another
  // needs it to finish.
  static const python_model model{std::make_shared<const sim::calibrated_model>(sim::calibrate())};
  return model;
}

const sim::calibrated_model& model_of(py::handle model) {
  if (model.is_none()) return *default_model().value;
  if (!py::isinstance<python_model>(model)) {
    fail(fmt::format("model: expected a tgs.Model, got {}", repr_of(model)));
  }
  return *model.cast<const python_model&>().value;
}

/// A JSON document tgs-sim prints, as Python values.
py::object json_of(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

/// A list of names from a list of str or one comma-separated str (as the flag takes them).
std::vector<std::string> names_of(py::handle value, std::string_view what) {
  std::vector<std::string> out;
  if (value.is_none()) return out;
  if (PyUnicode_Check(value.ptr())) {
    const std::string text = value.cast<std::string>();
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      out.push_back(text.substr(start, comma - start));
      start = comma + 1;
    }
    return out;
  }
  if (!py::isinstance<py::sequence>(value)) {
    fail(fmt::format("{}: expected a list of names, got {}", what, repr_of(value)));
  }
  for (const auto item : py::reinterpret_borrow<py::sequence>(value)) {
    out.push_back(to_text(item, what));
  }
  return out;
}

/// A seed, refused as the command line refuses it when it is not a non-negative integer.
std::uint64_t seed_of(py::handle value, std::string_view option) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr()) ||
      PyObject_RichCompareBool(value.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    fail(fmt::format("{}: expected a non-negative integer (digits only), got \"{}\"", option,
                     py::str(value).cast<std::string>()));
  }
  return to_count(value, option);
}

/// tgs-node's choices for a pair as tgs-sim's JSON "node_choice", at full precision.
py::dict choices_record(const sim::pair_choices& p) {
  const choice_facts& f = p.facts;
  py::dict facts;
  facts["production_gpu_wait"] = or_none(f.production_gpu_wait);
  facts["opportunistic_longest_span_ms"] =
      or_none(f.longest_kernel ? std::optional<double>(to_seconds(*f.longest_kernel) * 1e3) : std::nullopt);
  facts["production_gib"] = f.production_bytes.gib();
  facts["opportunistic_gib"] =
      or_none(f.opportunistic_peak_bytes ? std::optional<double>(f.opportunistic_peak_bytes->gib()) : std::nullopt);
  facts["capacity_gib"] = or_none(f.capacity ? std::optional<double>(f.capacity->gib()) : std::nullopt);
  py::list unmeasured;
  for (const std::string_view fact : p.unmeasured) unmeasured.append(py::str(std::string(fact)));
  py::dict d;
  d["facts"] = facts;
  d["unmeasured"] = unmeasured;
  for (const sim::node_choice& c : p.choices) {
    py::dict choice;
    choice["mechanism"] = std::string(to_string(c.verdict.mechanism));
    choice["reason"] = std::string(to_string(c.verdict.reason));
    choice["production"] = c.production;
    choice["opportunistic"] = c.opportunistic;
    choice["production_se"] = or_none(c.production_se);
    choice["opportunistic_se"] = or_none(c.opportunistic_se);
    choice["extrapolated"] = c.extrapolated.empty() ? py::object(py::none()) : py::object(py::str(c.extrapolated));
    d[py::str(std::string(to_string(c.preference)))] = choice;
  }
  return d;
}

/// A pair result as tgs-sim's JSON record, at full precision.
py::dict pair_record(const sim::pair_result& r) {
  py::dict d;
  d["scenario"] = r.request.scenario;
  d["gpu"] = r.request.gpu;
  d["production_model"] = r.request.production_model;
  d["opportunistic_model"] = r.request.opportunistic_model;
  d["policy"] = r.request.policy;
  d["memory_policy"] = r.memory_policy;
  d["production"] = r.outcome.production;
  d["opportunistic"] = r.outcome.opportunistic;
  d["opportunistic_refused"] = r.outcome.opportunistic_refused;
  d["measured_production"] = or_none(r.target ? r.target->production : std::nullopt);
  d["measured_opportunistic"] = or_none(r.target ? r.target->opportunistic : std::nullopt);
  d["measured_source"] = r.target ? py::object(py::str(r.target->source)) : py::object(py::none());
  d["production_se"] = or_none(r.production_se);  // from the fit's covariance, as tgs-sim's JSON
  d["opportunistic_se"] = or_none(r.opportunistic_se);
  d["evicted_gib"] = r.outcome.evicted.gib();
  d["restored_gib"] = r.outcome.restored.gib();
  d["extrapolated"] = r.extrapolated.empty() ? py::object(py::none()) : py::object(py::str(r.extrapolated));
  d["node_choice"] = r.node ? py::object(choices_record(*r.node)) : py::object(py::none());
  return d;
}

/// A measured cell beside its prediction (and the prediction of a fit without its pair).
py::dict prediction_record(const sim::prediction& p, const sim::prediction* left_out) {
  const auto& c = p.cell;
  py::dict d;
  d["gpu"] = c.gpu;
  d["scenario"] = c.scenario;
  d["production_model"] = c.production_model;
  d["opportunistic_model"] = c.opportunistic_model;
  d["policy"] = c.policy;
  d["memory_policy"] = c.memory_policy;
  d["memory_budget_gib"] =
      or_none(c.memory_budget ? std::optional<double>(c.memory_budget->gib()) : std::nullopt);
  d["production_idle"] = c.production_idle;
  py::dict settings;
  for (const auto& [k, v] : c.settings) settings[py::str(k)] = v;
  d["settings"] = settings;
  d["measured_production"] = or_none(c.production);
  d["measured_opportunistic"] = or_none(c.opportunistic);
  d["measured_source"] = c.source;
  // Each prediction's standard error from the fit's covariance, its calibrated standard deviation
  // (with the model's error) and the calibrated 95% interval [low, high].
  auto interval = [](const std::optional<double>& v, const std::optional<double>& sd) {
    if (!v || !sd) return py::object(py::none());
    const auto [low, high] = sim::interval_of(*v, *sd);
    return py::object(py::make_tuple(low, high));
  };
  auto add = [&](const std::string& prefix, const sim::prediction& q) {
    d[py::str(prefix + "production")] = or_none(q.production);
    d[py::str(prefix + "opportunistic")] = or_none(q.opportunistic);
    d[py::str(prefix + "production_se")] = or_none(q.production_se);
    d[py::str(prefix + "opportunistic_se")] = or_none(q.opportunistic_se);
    d[py::str(prefix + "production_sd")] = or_none(q.production_sd);
    d[py::str(prefix + "opportunistic_sd")] = or_none(q.opportunistic_sd);
    d[py::str(prefix + "production_interval")] = interval(q.production, q.production_sd);
    d[py::str(prefix + "opportunistic_interval")] = interval(q.opportunistic, q.opportunistic_sd);
  };
  add("", p);
  if (left_out != nullptr) add("left_out_", *left_out);
  return d;
}

/// A pair timeline as columns, as `--timeline` writes them.
py::dict timeline_columns(const std::vector<sim::timeline_row>& rows) {
  std::vector<std::string> scenario, policy, phase;
  std::vector<double> start, end, production, opportunistic, budget;
  for (const auto& r : rows) {
    scenario.push_back(r.scenario);
    policy.push_back(r.policy);
    start.push_back(r.start_s);
    end.push_back(r.end_s);
    production.push_back(r.production);
    opportunistic.push_back(r.opportunistic);
    budget.push_back(r.opportunistic_budget ? static_cast<double>(*r.opportunistic_budget)
                                            : std::nan(""));
    phase.push_back(r.phase);
  }
  py::dict d;
  d["scenario"] = text_column(scenario);
  d["policy"] = text_column(policy);
  d["start_s"] = float_column(start);
  d["end_s"] = float_column(end);
  d["production"] = float_column(production);
  d["opportunistic"] = float_column(opportunistic);
  d["opportunistic_budget_blocks"] = float_column(budget);
  d["phase"] = text_column(phase);
  return d;
}

/// A cluster summary as tgs-sim's JSON record, at full precision.
py::dict summary_record(const sim::cluster_summary& r, const sim::cluster_workload& w) {
  py::dict d;
  d["policy"] = r.policy;
  d["workload"] = w.label;
  d["seed"] = w.seed;
  d["production_jct"] = or_none(r.production_norm);
  d["opportunistic_jct"] = or_none(r.opportunistic_norm);
  d["production_mean_jct_s"] = r.production.mean_jct_s;
  d["opportunistic_mean_jct_s"] = r.opportunistic.mean_jct_s;
  d["production_p50_jct_s"] = r.production.p50_jct_s;
  d["production_p90_jct_s"] = r.production.p90_jct_s;
  d["production_p99_jct_s"] = r.production.p99_jct_s;
  d["opportunistic_p50_jct_s"] = r.opportunistic.p50_jct_s;
  d["opportunistic_p90_jct_s"] = r.opportunistic.p90_jct_s;
  d["opportunistic_p99_jct_s"] = r.opportunistic.p99_jct_s;
  d["production_mean_queueing_s"] = r.production.mean_queueing_s;
  d["opportunistic_mean_queueing_s"] = r.opportunistic.mean_queueing_s;
  d["production_jobs"] = r.production.jobs;
  d["opportunistic_jobs"] = r.opportunistic.jobs;
  d["events"] = r.events;
  d["pairings"] = r.pairings;
  d["preemptions"] = r.preemptions;
  d["wall_s"] = r.wall_seconds;
  d["extrapolated"] = r.extrapolated.empty() ? py::object(py::none()) : py::object(py::str(r.extrapolated));
  return d;
}

/// Per-job records, JCT quantiles and utilisation as columns, as `--out` writes jobs.csv,
/// cdf.csv and utilization.csv.
py::dict cluster_results(const std::vector<sim::cluster_run>& runs,
                         const sim::cluster_workload& w) {
  py::list summary;
  for (const auto& s : sim::summarize_runs(runs)) summary.append(summary_record(s, w));

  std::vector<std::string> job_policy, job_class_, job_model;
  std::vector<std::int64_t> job_id_, job_gpus;
  std::vector<double> submit, start, end, jct, queueing, work;
  std::vector<std::string> cdf_policy, cdf_class;
  std::vector<double> cdf_quantile, cdf_jct;
  std::vector<std::string> util_policy;
  std::vector<double> util_start, util_allocated, util_busy;
  py::list policies;
  for (const auto& run : runs) {
    const auto& r = run.result;
    policies.append(r.policy);
    for (const auto& j : r.jobs) {
      job_policy.push_back(r.policy);
      job_id_.push_back(static_cast<std::int64_t>(j.id));
      job_class_.emplace_back(to_string(j.cls));
      job_model.push_back(j.model);
      job_gpus.push_back(j.gpus);
      submit.push_back(j.submit_s);
      start.push_back(j.start_s);
      end.push_back(j.end_s);
      jct.push_back(j.jct());
      queueing.push_back(j.queueing());
      work.push_back(j.work_seconds);
    }
    for (const auto cls : {job_class::production, job_class::opportunistic}) {
      const auto points = sim::jct_cdf(r, cls);
      for (std::size_t i = 0; i < points.size(); ++i) {
        cdf_policy.push_back(r.policy);
        cdf_class.emplace_back(to_string(cls));
        cdf_quantile.push_back(static_cast<double>(i + 1) / static_cast<double>(points.size()));
        cdf_jct.push_back(points[i]);
      }
    }
    for (const auto& u : r.utilization) {
      util_policy.push_back(r.policy);
      util_start.push_back(u.start_s);
      util_allocated.push_back(u.allocated);
      util_busy.push_back(u.busy);
    }
  }
  py::dict jobs;
  jobs["policy"] = text_column(job_policy);
  jobs["job"] = int_column(job_id_);
  jobs["class"] = text_column(job_class_);
  jobs["model"] = text_column(job_model);
  jobs["gpus"] = int_column(job_gpus);
  jobs["submit_s"] = float_column(submit);
  jobs["start_s"] = float_column(start);
  jobs["end_s"] = float_column(end);
  jobs["jct_s"] = float_column(jct);
  jobs["queueing_s"] = float_column(queueing);
  jobs["work_s"] = float_column(work);
  py::dict cdf;
  cdf["policy"] = text_column(cdf_policy);
  cdf["class"] = text_column(cdf_class);
  cdf["quantile"] = float_column(cdf_quantile);
  cdf["jct_s"] = float_column(cdf_jct);
  py::dict util;
  util["policy"] = text_column(util_policy);
  util["start_s"] = float_column(util_start);
  util["allocated"] = float_column(util_allocated);
  util["busy"] = float_column(util_busy);

  py::dict out;
  out["workload"] = w.label;
  out["seed"] = w.seed;
  out["cluster"] = fmt::format("{}x{}:{}", w.spec.nodes, w.spec.gpus_per_node, w.spec.gpu);
  out["policies"] = policies;
  out["summary"] = summary;
  out["jobs"] = jobs;
  out["cdf"] = cdf;
  out["utilization"] = util;
  return out;
}

/// The cluster options every cluster run takes from Python.
void fill_cluster(sim::cluster_command& cmd, const std::string& cluster, py::handle policies,
                  py::handle lookahead, bool preempted_keep_progress, py::handle settings) {
  cmd.cluster = cluster;
  cmd.policies = names_of(policies, "--policies");
  cmd.lookahead = to_count(lookahead, "--lookahead");
  cmd.preempted_keep_progress = preempted_keep_progress;
  cmd.settings = run_settings_of(settings);
}

/// Runs `workload` with the GIL released; `progress` (or None) hears of each policy's progress,
/// and Ctrl-C stops the run.
py::dict run_cluster_from_python(const sim::calibrated_model& model, const sim::cluster_workload& w,
                                 sim::cluster_command& cmd, const py::object& progress,
                                 const std::optional<std::string>& out_dir) {
  if (!progress.is_none() && !PyCallable_Check(progress.ptr())) {
    fail("progress: expected a callable (policy, fraction done) or None");
  }
  cmd.progress = [&progress](const std::string& policy, double done) {
    py::gil_scoped_acquire locked;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!progress.is_none()) progress(policy, done);
  };
  std::vector<sim::cluster_run> runs;
  {
    py::gil_scoped_release unlocked;
    runs = sim::run_cluster_command(model, w, cmd);
    if (out_dir) sim::write_cluster_outputs(*out_dir, runs, w.label, w.seed);
  }
  return cluster_results(runs, w);
}

}  // namespace

void define_runs(py::module_& m) {
  py::class_<python_model>(m, "Model", R"(The simulator's tables and its global fit: what every run
simulates with. Model() is the embedded default (the TGS paper's A100 pairs and ours on H100s and
H200s, with the fit cached in sim/data/fit.csv), which runs use when they are given no model;
Model(models=..., gpus=..., measurements=...) reads the user's CSV tables (tgs-sim's --models,
--gpus, --measurements) and fits to them afresh (tables that differ from the cache's).)")
      .def(py::init([](const std::optional<std::string>& models,
                       const std::optional<std::string>& gpus,
                       const std::optional<std::string>& measurements) {
             if (!models && !gpus && !measurements) return default_model();
             sim::catalog_sources sources{gpus.value_or(""), models.value_or(""),
                                          measurements.value_or("")};
             py::gil_scoped_release unlocked;
             return python_model{
                 std::make_shared<const sim::calibrated_model>(sim::calibrate(sources))};
           }),
           py::kw_only(), py::arg("models") = py::none(), py::arg("gpus") = py::none(),
           py::arg("measurements") = py::none())
      .def_property_readonly(
          "gpus",
          [](const python_model& mm) {
            std::vector<std::string> out;
            for (const auto& g : mm.value->data.gpus) out.push_back(g.name);
            return out;
          },
          "The GPU types, in table order.")
      .def(
          "models",
          [](const python_model& mm, const std::string& gpu) {
            return mm.value->data.model_names(gpu);
          },
          py::arg("gpu") = "a100-40gb", "The model names profiled on `gpu`, in table order.")
      .def(
          "profiles",
          [](const python_model& mm) {
            return json_of(sim::render_profiles(mm.value->data, sim::output_format::json));
          },
          "The model profiles with the fit applied, as `tgs-sim profiles --format json`.")
      .def(
          "fit",
          [](const python_model& mm, const std::optional<std::string>& write) {
            if (!write) return json_of(sim::render_fit(*mm.value, sim::output_format::json));
            std::string text;
            {
              py::gil_scoped_release unlocked;
              text = sim::render_fit(sim::write_fit(*mm.value, *write), sim::output_format::json);
            }
            return json_of(text);
          },
          py::kw_only(), py::arg("write") = py::none(),
          R"(The global fit, as `tgs-sim fit --format json`. `write=PATH` is --write: fits afresh,
writes the cache (sim/data/fit.csv's format) to PATH and returns the fresh fit; the
model itself keeps its fit.)")
      .def(
          "predict",
          [](const python_model& mm, const std::optional<std::string>& gpu, bool leave_one_out,
             const std::optional<std::string>& format) {
            sim::predict_command cmd{gpu.value_or(""), leave_one_out};
            if (format && *format != "table" && *format != "markdown") {
              fail(fmt::format("format: expected None, \"table\" or \"markdown\", got \"{}\"",
                               *format));
            }
            sim::predict_outcome out;
            {
              py::gil_scoped_release unlocked;
              out = sim::run_predict(*mm.value, cmd);
            }
            if (format) {
              return py::object(py::str(sim::render_predictions(
                  out.in_sample, leave_one_out ? &out.left_out : nullptr, *format == "markdown")));
            }
            py::list records;
            for (std::size_t i = 0; i < out.in_sample.size(); ++i) {
              records.append(
                  prediction_record(out.in_sample[i], leave_one_out ? &out.left_out[i] : nullptr));
            }
            return py::object(records);
          },
          py::kw_only(), py::arg("gpu") = py::none(), py::arg("leave_one_out") = false,
          py::arg("format") = py::none(),
          R"(tgs-sim predict: every measured pair beside the simulator's prediction of it.

`gpu` is --gpu (default: every type); `leave_one_out=True` also predicts each pair with a fit that
left its cells out (one refit per pair). Returns one dict per measured cell (gpu, scenario,
models, policy, memory_policy, memory_budget_gib, production_idle, settings, measured_production,
measured_opportunistic, measured_source, production, opportunistic, their standard errors
production_se, opportunistic_se from the fit's covariance, their calibrated standard deviations
production_sd, opportunistic_sd (the model's error beside the parameters', from left-out
residuals) and calibrated 95% intervals production_interval, opportunistic_interval as
(low, high), and with leave_one_out the same of the fit without the pair,
prefixed left_out_; None where the cell has no such throughput), or with
format="table" or "markdown" (--markdown) the text tgs-sim prints.)");

  m.def(
      "pairs",
      [](const std::optional<std::string>& production,
         const std::optional<std::string>& opportunistic, py::handle policies,
         const std::string& gpu, double duration, double warmup,
         const std::optional<double>& memory_budget_gib,
         const std::optional<std::string>& memory_policy,
         const std::optional<double>& observation_noise, double production_drift, py::handle seed,
         py::handle settings, bool timeline, py::handle model) {
        sim::pairs_command cmd;
        cmd.production = production.value_or("");
        cmd.opportunistic = opportunistic.value_or("");
        cmd.policies = names_of(policies, "--policies");
        cmd.gpu = gpu;
        cmd.duration_s = duration;
        cmd.warmup_s = warmup;
        cmd.memory_budget_gib = memory_budget_gib;
        cmd.memory_policy = memory_policy.value_or("");
        cmd.observation_noise = observation_noise;
        cmd.production_drift = production_drift;
        cmd.seed = seed_of(seed, "--seed");
        cmd.settings = run_settings_of(settings);
        cmd.timeline = timeline;
        sim::check(cmd);
        const sim::calibrated_model& calibrated = model_of(model);
        sim::pairs_outcome out;
        {
          py::gil_scoped_release unlocked;
          out = sim::run_pairs(calibrated, cmd);
        }
        py::list results;
        for (const auto& r : out.results) results.append(pair_record(r));
        py::dict d;
        d["results"] = results;
        d["timeline"] =
            timeline ? py::object(timeline_columns(out.timeline)) : py::object(py::none());
        return d;
      },
      py::kw_only(), py::arg("production") = py::none(), py::arg("opportunistic") = py::none(),
      py::arg("policies") = py::none(), py::arg("gpu") = "a100-40gb", py::arg("duration") = 600.0,
      py::arg("warmup") = 60.0, py::arg("memory_budget_gib") = py::none(),
      py::arg("memory_policy") = py::none(), py::arg("observation_noise") = py::none(),
      py::arg("production_drift") = 0.0, py::arg("seed") = 1, py::arg("settings") = py::none(),
      py::arg("timeline") = false, py::arg("model") = py::none(),
      R"(tgs-sim pairs: one production and one opportunistic job on one GPU under each policy.

Keywords are tgs-sim's flags (--memory-budget-gib is memory_budget_gib, --duration is duration in
seconds); `settings` is a dict of policy settings named as the flags without dashes
({"tgs.dead-band": 0.05, "memory.hard-limit.production-fraction": 0.6}); `timeline=True` records
every segment of constant rates (tgs-sim's --timeline). Returns {"results": one dict per pair and
policy with the keys of `tgs-sim pairs --format json` (unrounded; production_se and
opportunistic_se: each prediction's standard error from the fit's covariance; node_choice: what
tgs-node would choose for the pair's opportunistic job, {"facts", "unmeasured", "auto", "mps"},
each preference's {"mechanism", "reason", "production", "opportunistic", ...}, or None without
an opportunistic job), "timeline": numpy columns or None}. Bad input raises tgs.InputError with tgs-sim's message.)");

  m.def(
      "mixed",
      [](py::handle seed, int production_jobs, int opportunistic_jobs, double interarrival_minutes,
         const std::string& cluster, py::handle policies, py::handle lookahead,
         bool preempted_keep_progress, py::handle settings, const std::optional<std::string>& out,
         const py::object& progress, py::handle model) {
        sim::mixed_command cmd;
        cmd.stream.seed = seed_of(seed, "--seed");
        cmd.stream.production_jobs = production_jobs;
        cmd.stream.opportunistic_jobs = opportunistic_jobs;
        cmd.stream.mean_interarrival_minutes = interarrival_minutes;
        fill_cluster(cmd.cluster, cluster, policies, lookahead, preempted_keep_progress, settings);
        sim::check(cmd);
        const sim::calibrated_model& calibrated = model_of(model);
        sim::cluster_workload w;
        {
          py::gil_scoped_release unlocked;
          w = sim::mixed_workload(calibrated, cmd);
        }
        return run_cluster_from_python(calibrated, w, cmd.cluster, progress, out);
      },
      py::kw_only(), py::arg("seed") = 1, py::arg("production_jobs") = 50,
      py::arg("opportunistic_jobs") = 50, py::arg("interarrival_minutes") = 15.0,
      py::arg("cluster") = "1x2:a100-40gb", py::arg("policies") = py::none(),
      py::arg("lookahead") = 64, py::arg("preempted_keep_progress") = false,
      py::arg("settings") = py::none(), py::arg("out") = py::none(),
      py::arg("progress") = py::none(), py::arg("model") = py::none(),
      R"(tgs-sim mixed: the paper's mixed job stream on a small cluster under each policy.

Keywords are tgs-sim's flags; `out` writes the files of --out; `progress(policy, fraction)` is
called as each policy's run advances. Returns {"workload", "seed", "cluster", "policies",
"summary": one dict per policy with the keys of `tgs-sim mixed --format json` (unrounded),
"jobs", "cdf", "utilization": numpy columns as jobs.csv, cdf.csv and utilization.csv}.)");

  m.def(
      "replay",
      [](py::handle trace, const std::optional<std::string>& trace_format, double production_share,
         py::handle label_seed, py::handle label_models, bool skip_malformed,
         const std::string& cluster, py::handle policies, py::handle lookahead,
         bool preempted_keep_progress, py::handle settings, const std::optional<std::string>& out,
         const py::object& progress, py::handle model) {
        sim::replay_command cmd;
        const bool read = !py::isinstance<python_trace>(trace);
        if (read) {
          cmd.trace_path = py::module_::import("os").attr("fspath")(trace).cast<std::string>();
        } else if (trace_format || skip_malformed) {
          fail("trace_format and skip_malformed apply to a trace file; this trace is already read");
        }
        cmd.trace_format = trace_format.value_or("");
        cmd.production_share = production_share;
        cmd.label_seed = seed_of(label_seed, "--label-seed");
        if (!label_models.is_none()) cmd.label_models = names_of(label_models, "--label-models");
        cmd.skip_malformed = skip_malformed;
        fill_cluster(cmd.cluster, cluster, policies, lookahead, preempted_keep_progress, settings);
        sim::check(cmd);
        const sim::calibrated_model& calibrated = model_of(model);
        sim::cluster_workload w;
        traces::trace_stats stats;
        {
          py::gil_scoped_release unlocked;
          traces::trace t =
              read ? sim::read_replay_trace(cmd) : *trace.cast<const python_trace&>().value;
          stats = t.stats;
          sim::check_fits(t, cmd);
          w = sim::replay_workload(calibrated, std::move(t), cmd);
        }
        py::dict d = run_cluster_from_python(calibrated, w, cmd.cluster, progress, out);
        d["trace_stats"] =
            py::dict("rows_read"_a = stats.rows_read, "rows_kept"_a = stats.rows_kept,
                     "rows_dropped"_a = stats.rows_dropped, "rows_skipped"_a = stats.rows_skipped,
                     "skip_reasons"_a = stats.skip_reasons);
        return d;
      },
      py::arg("trace"), py::kw_only(), py::arg("trace_format") = py::none(),
      py::arg("production_share") = 0.5, py::arg("label_seed") = 1,
      py::arg("label_models") = py::none(), py::arg("skip_malformed") = false,
      py::arg("cluster") = "100x8:a100-40gb", py::arg("policies") = py::none(),
      py::arg("lookahead") = 64, py::arg("preempted_keep_progress") = false,
      py::arg("settings") = py::none(), py::arg("out") = py::none(),
      py::arg("progress") = py::none(), py::arg("model") = py::none(),
      R"(tgs-sim replay: a trace on a cluster under each policy.

`trace` is a file (read as tgs-sim reads --trace, with trace_format and skip_malformed) or a
tgs.Trace. Other keywords are tgs-sim's flags. Returns what tgs.mixed returns, plus
"trace_stats".)");
}

}  // namespace tgs::python
