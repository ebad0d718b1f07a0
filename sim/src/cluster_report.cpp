// SPDX-License-Identifier: Apache-2.0
// Table, JSON and CSV renderings of cluster runs, and the files `--out DIR` writes.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "tgs/sim/pairs.hpp"
#include "tgs/sim/report.hpp"

#include "json_output.hpp"

namespace tgs::sim {
namespace {

/// The run JCTs are normalized to: a policy that never lets the classes share a GPU.
const cluster_run* find_exclusive(const std::vector<cluster_run>& runs) {
  for (const auto& r : runs) {
    if (!policy_traits(r.result.policy).co_locates) return &r;
  }
  return nullptr;
}

}  // namespace

std::vector<cluster_summary> summarize_runs(const std::vector<cluster_run>& runs) {
  const cluster_run* base = find_exclusive(runs);
  const class_summary bp = base ? summarize(base->result, job_class::production) : class_summary{};
  const class_summary bo = base ? summarize(base->result, job_class::opportunistic) : class_summary{};
  std::vector<cluster_summary> out;
  for (const auto& r : runs) {
    cluster_summary x;
    x.policy = r.result.policy;
    x.production = summarize(r.result, job_class::production);
    x.opportunistic = summarize(r.result, job_class::opportunistic);
    if (base && bp.mean_jct_s > 0) x.production_norm = x.production.mean_jct_s / bp.mean_jct_s;
    if (base && bo.mean_jct_s > 0) x.opportunistic_norm = x.opportunistic.mean_jct_s / bo.mean_jct_s;
    x.events = r.result.events;
    x.pairings = r.result.pairings;
    x.preemptions = r.result.preemptions;
    x.wall_seconds = r.wall_seconds;
    x.extrapolated = r.result.extrapolated;
    out.push_back(x);
  }
  return out;
}

namespace {

std::string num(double v) { return fmt::format("{:.4f}", v); }


}  // namespace

std::string render_cluster(const std::vector<cluster_run>& runs, output_format format,
                           std::string_view workload, std::uint64_t seed) {
  const auto rows = summarize_runs(runs);
  std::string out;
  if (format == output_format::json) {
    std::vector<json> records;
    for (const cluster_summary& r : rows) {
      records.push_back({{"policy", r.policy},
                         {"workload", workload},
                         {"seed", seed},
                         {"production_jct", json_number(r.production_norm)},
                         {"opportunistic_jct", json_number(r.opportunistic_norm)},
                         {"production_mean_jct_s", json_number(r.production.mean_jct_s)},
                         {"opportunistic_mean_jct_s", json_number(r.opportunistic.mean_jct_s)},
                         {"production_p50_jct_s", json_number(r.production.p50_jct_s)},
                         {"production_p90_jct_s", json_number(r.production.p90_jct_s)},
                         {"production_p99_jct_s", json_number(r.production.p99_jct_s)},
                         {"opportunistic_p50_jct_s", json_number(r.opportunistic.p50_jct_s)},
                         {"opportunistic_p90_jct_s", json_number(r.opportunistic.p90_jct_s)},
                         {"opportunistic_p99_jct_s", json_number(r.opportunistic.p99_jct_s)},
                         {"production_mean_queueing_s", json_number(r.production.mean_queueing_s)},
                         {"opportunistic_mean_queueing_s", json_number(r.opportunistic.mean_queueing_s)},
                         {"production_jobs", r.production.jobs},
                         {"opportunistic_jobs", r.opportunistic.jobs},
                         {"events", r.events},
                         {"pairings", r.pairings},
                         {"preemptions", r.preemptions},
                         {"wall_s", json_number(r.wall_seconds)},
                         {"extrapolated", r.extrapolated.empty() ? json(nullptr) : json(r.extrapolated)}});
    }
    return json_records(records);
  }
  if (format == output_format::csv) {
    out += "policy,workload,seed,production_jct,opportunistic_jct,production_mean_jct_s,"
           "opportunistic_mean_jct_s,production_p90_jct_s,opportunistic_p90_jct_s,"
           "production_mean_queueing_s,opportunistic_mean_queueing_s,production_jobs,"
           "opportunistic_jobs,events,pairings,preemptions,wall_s,extrapolated\n";
    for (const auto& r : rows) {
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.policy,
                         csv_field(workload),
                         seed, r.production_norm ? num(*r.production_norm) : "",
                         r.opportunistic_norm ? num(*r.opportunistic_norm) : "",
                         num(r.production.mean_jct_s), num(r.opportunistic.mean_jct_s),
                         num(r.production.p90_jct_s), num(r.opportunistic.p90_jct_s),
                         num(r.production.mean_queueing_s), num(r.opportunistic.mean_queueing_s),
                         r.production.jobs, r.opportunistic.jobs, r.events, r.pairings,
                         r.preemptions, num(r.wall_seconds), csv_field(r.extrapolated));
    }
    return out;
  }
  out += fmt::format("{} (seed {})\n", workload, seed);
  out += fmt::format("{:<16} {:>22} {:>22} {:>18} {:>18} {:>10} {:>9}\n", "policy",
                     "production JCT (norm)", "opportunistic (norm)", "prod. mean JCT", "opp. mean JCT",
                     "events", "wall");
  std::vector<std::string> notes;
  for (const auto& r : rows) {
    if (!r.extrapolated.empty()) notes.push_back(r.extrapolated);
    out += fmt::format("{:<16} {:>22} {:>22} {:>16.0f} s {:>16.0f} s {:>10} {:>7.3f} s\n",
                       r.extrapolated.empty() ? r.policy : r.policy + " *",
                       r.production_norm ? fmt::format("{:.2f}", *r.production_norm) : "-",
                       r.opportunistic_norm ? fmt::format("{:.2f}", *r.opportunistic_norm) : "-",
                       r.production.mean_jct_s, r.opportunistic.mean_jct_s, r.events, r.wall_seconds);
  }
  out += "\nJCT normalized to exclusive (lower is better for the class).\n";
  if (!notes.empty()) {
    out += "* an extrapolation: its pair rates rest on a parameter never measured on this GPU type\n";
    for (const std::string& n : notes) out += "  " + n + "\n";
  }
  return out;
}

void write_cluster_outputs(const std::string& dir, const std::vector<cluster_run>& runs,
                           std::string_view workload, std::uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw input_error(fmt::format("--out: cannot create \"{}\": {}", dir, ec.message()));
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw input_error(fmt::format("--out: cannot write \"{}\"", path));
  };
  write("summary.json", render_cluster(runs, output_format::json, workload, seed));
  write("summary.csv", render_cluster(runs, output_format::csv, workload, seed));
  std::string jobs = "policy,job,class,model,gpus,submit_s,start_s,end_s,jct_s,queueing_s,work_s\n";
  std::string cdf = "policy,class,quantile,jct_s\n";
  std::string util = "policy,start_s,allocated,busy\n";
  for (const auto& run : runs) {
    const auto& r = run.result;
    for (const auto& j : r.jobs) {
      jobs += fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f}\n", r.policy,
                          static_cast<std::uint32_t>(j.id), to_string(j.cls), j.model, j.gpus,
                          j.submit_s, j.start_s, j.end_s, j.jct(), j.queueing(), j.work_seconds);
    }
    for (const auto cls : {job_class::production, job_class::opportunistic}) {
      const auto points = jct_cdf(r, cls);
      for (std::size_t i = 0; i < points.size(); ++i) {
        cdf += fmt::format("{},{},{:.2f},{:.3f}\n", r.policy, to_string(cls),
                           static_cast<double>(i + 1) / static_cast<double>(points.size()),
                           points[i]);
      }
    }
    for (const auto& u : r.utilization) {
      util += fmt::format("{},{:.0f},{:.4f},{:.4f}\n", r.policy, u.start_s, u.allocated, u.busy);
    }
  }
  write("jobs.csv", jobs);
  write("cdf.csv", cdf);
  write("utilization.csv", util);
}

}  // namespace tgs::sim
