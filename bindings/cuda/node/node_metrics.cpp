// SPDX-License-Identifier: Apache-2.0
// tgs-node's metrics snapshot: per GPU the controller's phase and state report, its budget and the
// production rate; per job its rates, throttled time and memory; the processes on a GPU that
// never registered. Built by the node's loop from the same numbers as the status.
#include <cmath>
#include <set>

#include "server_parts.hpp"
#include "tgs/version.hpp"

namespace tgs::cuda::node {

namespace {

using labels = std::vector<std::pair<std::string, std::string>>;

/// A label name from a state report key: Prometheus allows `[a-zA-Z_][a-zA-Z0-9_]*`.
std::string label_name(std::string_view key) {
  std::string out;
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || (out.front() >= '0' && out.front() <= '9')) out.insert(out.begin(), '_');
  return out;
}

/// The snapshot under construction: one family per name, in the order first added.
class builder {
 public:
  metric_family& family(std::string name, std::string help, metric_type type) {
    for (metric_family& f : families_) {
      if (f.name == name) return f;
    }
    families_.push_back(metric_family{std::move(name), std::move(help), type, {}});
    return families_.back();
  }
  void gauge(const char* name, const char* help, labels l, double value) {
    add(family(name, help, metric_type::gauge), std::move(l), value);
  }
  void counter(const char* name, const char* help, labels l, double value) {
    add(family(name, help, metric_type::counter), std::move(l), value);
  }
  metric_snapshot done() && { return std::move(families_); }

 private:
  static void add(metric_family& f, labels l, double value) {
    // A value that is not a number (no sample yet) is left out rather than exposed as NaN.
    if (std::isfinite(value)) f.samples.push_back({std::move(l), value});
  }
  metric_snapshot families_;
};

double as_double(std::uint64_t v) { return static_cast<double>(v); }

}  // namespace

metric_snapshot node_server::metrics_snapshot() const {
  builder b;
  const any_rate_controller sample{options_.controller};
  const any_fault_policy fault_sample{options_.fault_policy};
  b.gauge("tgs_node_info", "tgs-node's version, ABI and policies (always 1)",
          {{"version", TGS_VERSION},
           {"abi", std::to_string(abi::version)},
           {"policy", std::string(sample.policy_name())},
           {"memory_policy",
            options_.memory_policy ? std::string(any_memory_policy{*options_.memory_policy}.policy_name()) : "off"}},
          1);
  // MPS: where it is available, and the policy in force (a default that needed MPS falls back).
  b.gauge("tgs_node_policy_info", "the rate policy in force, and whether it is the fallback of a default that needs MPS "
          "(always 1)",
          {{"policy", std::string(sample.policy_name())},
           {"fallback", policy_fallback_.empty() ? "false" : "true"},
           {"reason", policy_fallback_},
           {"mps", std::string(to_string(mps_ ? mps_->mode() : options_.mps.mode))}},
          1);
  b.family("tgs_node_mps_available", "1 where a job on the GPU can be an MPS client of the node's daemon",
           metric_type::gauge);
  if (mps_) {
    for (const mps_daemons::gpu_view& g : mps_->view()) {
      const std::string gpu = std::to_string(g.gpu);
      b.gauge("tgs_node_mps_available", "1 where a job on the GPU can be an MPS client of the node's daemon",
              {{"gpu", gpu}, {"state", g.state}}, g.available ? 1 : 0);
      b.counter("tgs_node_mps_daemon_restarts_total", "times the GPU's MPS control daemon died and was started again",
                {{"gpu", gpu}}, as_double(g.restarts));
    }
  }
  for (const job_class cls : {job_class::production, job_class::opportunistic}) {
    const auto n = std::count_if(jobs_.begin(), jobs_.end(), [&](const auto& e) { return e.second->cls == cls; });
    b.gauge("tgs_node_jobs", "registered jobs", {{"class", std::string(to_string(cls))}}, static_cast<double>(n));
  }
  b.counter("tgs_node_unregistered_killed_total", "processes killed for using a GPU without registering there", {},
            as_double(unregistered_killed_));
  // Families that may have no samples are still announced, so a dashboard's queries resolve.
  b.family("tgs_unregistered_process", "a process on a GPU that never registered there (always 1)", metric_type::gauge);

  std::set<std::uint32_t> gpus;
  for (const auto& [gpu, l] : gpus_) gpus.insert(gpu);
  for (const auto& [id, j] : jobs_) gpus.insert(j->gpu);
  for (const std::uint32_t gpu : gpus) {
    const std::string g = std::to_string(gpu);
    const auto loop_at = gpus_.find(gpu);
    const loop* l = loop_at == gpus_.end() ? nullptr : loop_at->second.get();
    const memory_loop* m = gpu_memory(gpu);
    const std::vector<job_report> reports = l != nullptr ? l->report() : std::vector<job_report>{};
    if (l != nullptr) {
      const rate_decision& d = l->decision();
      labels info{{"gpu", g}, {"policy", std::string(l->controller().policy_name())}};
      const state_report report = l->controller().describe();  // outlives the loop over its fields
      for (const state_field& f : report.fields()) {
        if (const auto* word = std::get_if<std::string_view>(&f.value)) {
          info.emplace_back(label_name(f.key), std::string(*word));
        } else {
          const double v = std::holds_alternative<double>(f.value) ? std::get<double>(f.value)
                                                                    : static_cast<double>(std::get<std::int64_t>(f.value));
          b.gauge("tgs_gpu_controller_state", "a number of the controller's own state report (tgs-node status)",
                  {{"gpu", g}, {"key", std::string(f.key)}}, v);
        }
      }
      b.gauge("tgs_gpu_controller_info", "the controller's policy and its phase (always 1)", std::move(info), 1);
      b.gauge("tgs_gpu_opportunistic_throttled", "1 while the opportunistic jobs have a budget, 0 when unthrottled",
              {{"gpu", g}}, d.opportunistic_budget ? 1 : 0);
      if (d.opportunistic_budget) {
        b.gauge("tgs_gpu_opportunistic_budget_blocks", "thread blocks the opportunistic jobs may launch per budget window",
                {{"gpu", g}}, as_double(*d.opportunistic_budget));
      }
      b.gauge("tgs_gpu_budget_window_seconds", "the budget window", {{"gpu", g}}, to_seconds(d.budget_window));
      double production = 0;
      for (const job_report& r : reports) {
        if (r.cls == job_class::production) production += r.blocks_per_s;
      }
      b.gauge("tgs_gpu_production_blocks_per_second", "thread blocks the production jobs launched per second",
              {{"gpu", g}}, production);
      if (const std::optional<double> wait = l->production_gpu_wait()) {
        b.gauge("tgs_gpu_production_gpu_wait_ratio",
                "of its time, how long the production job's host waits for its GPU (smoothed; the mechanism choice's "
                "measure of how GPU-bound it is)",
                {{"gpu", g}}, *wait);
      }
      b.gauge("tgs_gpu_production_unprotected", "1 while the controller holds the opportunistic jobs at its floor and "
              "the production job is still below its target", {{"gpu", g}}, d.production_unprotected ? 1 : 0);
    }
    // The fault policy's work, announced on every GPU the node knows (zero until a job ends).
    const auto faults_at = faults_.find(gpu);
    const labels fl{{"gpu", g},
                    {"fault_policy", std::string(faults_at != faults_.end() ? faults_at->second.policy.policy_name()
                                                                             : fault_sample.policy_name())}};
    b.counter("tgs_gpu_faults_handled_total",
              "jobs that ended abruptly on the GPU while registered (a signal, a crash: no orderly exit; the fault "
              "policy stepped)",
              fl, faults_at != faults_.end() ? as_double(faults_at->second.handled) : 0.0);
    b.counter("tgs_gpu_co_runners_ended_total", "jobs the node ended because the fault policy said their co-runner's "
              "fault reached them", fl, faults_at != faults_.end() ? as_double(faults_at->second.co_runners_ended) : 0.0);
    if (m != nullptr) {
      b.gauge("tgs_gpu_memory_budget_bytes", "the memory policy's budget", {{"gpu", g}}, as_double(m->budget().count()));
      if (m->opportunistic_resident_limit() != bytes::max()) {
        b.gauge("tgs_gpu_opportunistic_resident_limit_bytes", "GPU memory the opportunistic jobs may keep resident",
                {{"gpu", g}}, as_double(m->opportunistic_resident_limit().count()));
      }
    }
    for (const auto& [id, jp] : jobs_) {
      const job& j = *jp;
      if (j.gpu != gpu) continue;
      const job_numbers n = numbers_of(j, reports, m);
      const abi::job_segment& seg = *j.segment;
      // The name is the job's to choose: printable() keeps it one line of ASCII. The id is
      // `job_id`: Prometheus gives every series its own `job` label (the scrape job).
      const labels jl{{"gpu", g},
                      {"job_id", std::to_string(id)},
                      {"class", std::string(to_string(j.cls))},
                      {"pid", std::to_string(j.pid)},
                      {"container", short_container_id(j.origin.container)},
                      {"pod", j.origin.pod},
                      {"namespace", j.origin.pod_namespace},
                      {"name", printable(j.name)}};
      b.gauge("tgs_job_launched_blocks_per_second", "thread blocks the job launched per second (last second)", jl,
              n.report.blocks_per_s);
      if (j.mechanism) {
        // How the opportunistic job shares its GPU, and the fact that decided it.
        labels ml = jl;
        ml.emplace_back("mechanism", std::string(to_string(j.mechanism->mechanism)));
        ml.emplace_back("reason", std::string(to_string(j.mechanism->reason)));
        b.gauge("tgs_job_mechanism_info", "how an opportunistic job shares its GPU and why (always 1)", std::move(ml), 1);
        b.gauge("tgs_job_held", "1 while the node holds the opportunistic job beside a production job", jl,
                l != nullptr && l->held(id) ? 1 : 0);
      }
      b.gauge("tgs_job_late", "1 when the job's CUDA started before it registered, outside the MPS server it "
              "should be a client of", jl, j.late ? 1 : 0);
      if (seg.kernels_timed.load(std::memory_order_relaxed) > 0) {
        b.gauge("tgs_job_longest_kernel_seconds", "the longest kernel the job's interposer timed", jl,
                static_cast<double>(seg.longest_kernel_ns.load(std::memory_order_relaxed)) / 1e9);
      }
      b.gauge("tgs_job_launches_per_second", "kernel launches per second (last second)", jl, n.report.launches_per_s);
      if (j.cls == job_class::opportunistic && n.report.budget_blocks) {
        b.gauge("tgs_job_budget_blocks", "the job's thread blocks per budget window", jl, as_double(*n.report.budget_blocks));
      }
      b.counter("tgs_job_throttled_seconds_total", "time the job's launches waited for budget", jl,
                static_cast<double>(seg.throttled_ns.load()) / 1e9);
      b.gauge("tgs_job_memory_resident_bytes", "the job's bytes on the GPU (device and resident managed)", jl,
              as_double(n.resident()));
      b.gauge("tgs_job_memory_evicted_bytes", "the job's managed bytes evicted to host memory", jl, as_double(n.evicted()));
      b.counter("tgs_job_evictions_total", "evictions the job carried out", jl, as_double(seg.evictions.load()));
      b.counter("tgs_job_restores_total", "restores the job carried out", jl, as_double(seg.restores.load()));
      b.counter("tgs_job_evicted_bytes_total", "bytes the job evicted to host", jl, as_double(seg.evicted_bytes_total.load()));
      b.counter("tgs_job_restored_bytes_total", "bytes the job restored to the GPU", jl,
                as_double(seg.restored_bytes_total.load()));
      b.counter("tgs_job_denied_allocations_total", "allocations the memory policy refused", jl,
                as_double(seg.denied_allocs.load()));
      b.gauge("tgs_job_sync_wait_ratio", "share of the last second the job blocked in synchronisation calls", jl,
              n.report.sync_wait_fraction);
      if (n.report.gpu_busy_fraction) {
        b.gauge("tgs_job_gpu_busy_ratio", "share of the last second a sampled production job had unfinished GPU work", jl,
                *n.report.gpu_busy_fraction);
      }
      b.counter("tgs_job_gap_launches_total", "launches that passed in the production job's idle gaps (gap filling)", jl,
                as_double(seg.gap_launches.load()));
    }
  }
  for (const auto& [key, u] : unregistered_) {
    b.gauge("tgs_unregistered_process", "a process on a GPU that never registered there (always 1)",
            {{"gpu", std::to_string(u.gpu)},
             {"pid", std::to_string(u.pid)},
             {"uid", std::to_string(u.uid)},
             {"container", short_container_id(u.origin.container)},
             {"pod", u.origin.pod},
             {"namespace", u.origin.pod_namespace},
             {"state", u.state()}},
            1);
  }
  return std::move(b).done();
}

}  // namespace tgs::cuda::node
