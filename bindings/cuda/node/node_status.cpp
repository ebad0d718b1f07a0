// SPDX-License-Identifier: Apache-2.0
// tgs-node's status answer: one JSON object per line (nlohmann::json, never by concatenation, so a
// job's name is always a string value), or the same values as text for people; streamed through
// the connection's queue, so no line is dropped when the client reads slower than the node writes.
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "server_parts.hpp"

namespace tgs::cuda::node {

namespace {

using json = nlohmann::ordered_json;

/// `x` rounded to `digits` decimals: the precision a line shows.
double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::isfinite(x) ? std::round(x * scale) / scale : 0.0;
}
json per_second(double x) { return std::isfinite(x) ? json(std::llround(x)) : json(nullptr); }

/// The controller's own account of its state (`describe()`): its phase, and whatever it decides
/// from (R and the last sample for tgs; the speeds and the gate for idle-harvest), so an operator
/// can see why it throttles. Every policy reports itself; the status names none.
json describe_controller(const any_rate_controller& controller) {
  json d = json::object();
  // Named: a range-for over `describe().fields()` would read the report after it is destroyed.
  const state_report report = controller.describe();
  for (const state_field& f : report.fields()) {
    const std::string key(f.key);
    if (const auto* word = std::get_if<std::string_view>(&f.value)) {
      d[key] = std::string(*word);
    } else if (const auto* count = std::get_if<std::int64_t>(&f.value)) {
      d[key] = *count;
    } else {
      const double v = std::get<double>(f.value);
      d[key] = std::isfinite(v) ? json(rounded(v, 6)) : json(nullptr);
    }
  }
  return d;
}

/// The state report as text: "phase slow_start, max_rate_blocks_per_s 1.2e+06, ...".
std::string controller_text(const json& d) {
  std::string out;
  for (const auto& [key, value] : d.items()) {
    if (!out.empty()) out += ", ";
    out += key + " " + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

std::string text_of(const json& v) { return v.is_null() ? std::string("-") : v.dump(); }

}  // namespace

node_server::job_numbers node_server::numbers_of(const job& j, const std::vector<job_report>& reports,
                                                 const memory_loop* m) const {
  job_numbers n;
  const auto r = std::find_if(reports.begin(), reports.end(), [&](const job_report& x) { return x.id == j.id; });
  if (r != reports.end()) {
    n.report = *r;
  } else {
    n.report.id = j.id;
    n.report.cls = j.cls;
  }
  const abi::job_segment& seg = *j.segment;
  n.held = m != nullptr ? m->counted(j.id).value_or(abi::job_holdings{})
                        : abi::job_holdings{seg.device_bytes.load(), seg.managed_bytes.load(),
                                            seg.managed_resident_bytes.load()};
  n.managed_resident = std::min(n.held.managed_bytes, n.held.managed_resident_bytes);
  return n;
}

/// The node's MPS: its mode, whether MPS is available on every GPU (and why not), each GPU's
/// daemon.
json node_server::mps_status() const {
  json gpus = json::array();
  if (mps_) {
    for (const mps_daemons::gpu_view& g : mps_->view()) {
      gpus.push_back(json{{"gpu", g.gpu}, {"state", g.state}, {"available", g.available}, {"pipe_dir", g.pipe_dir},
                          {"log_dir", g.log_dir}, {"daemon_pid", g.daemon}, {"restarts", g.restarts},
                          {"why", g.why.empty() ? json(nullptr) : json(g.why)}});
    }
  }
  const bool available = mps_ && mps_->available_everywhere();
  return json{{"mode", std::string(to_string(mps_ ? mps_->mode() : options_.mps.mode))},
              {"available", available},
              {"why", available ? std::string() : mps_ ? mps_->why_unavailable() : std::string("not started")},
              {"client_settings", mps_share_.has_value()},
              {"gpus", std::move(gpus)}};
}

void node_server::send_status(connection& c, bool json_lines) {
  std::vector<json> lines;
  const double uptime = std::chrono::duration<double>(clock::now() - start_).count();
  const any_rate_controller sample{options_.controller};
  const any_fault_policy fault_sample{options_.fault_policy};
  lines.push_back(json{{"node", json{{"abi", abi::version},
                                     {"policy", std::string(sample.policy_name())},
                                     {"fault_policy", std::string(fault_sample.policy_name())},
                                     {"socket", options_.socket_path},
                                     {"uptime_s", rounded(uptime, 3)},
                                     {"jobs", jobs_.size()},
                                     {"class_sockets", options_.class_socket_dir.empty()
                                                           ? json(nullptr)
                                                           : json(options_.class_socket_dir)},
                                     {"unregistered", unregistered_.size()},
                                     {"holds_with", std::string(to_string(hold_cgroups_ ? hold_method::cgroup_freeze
                                                                                        : hold_method::sigstop))},
                                     {"policy_fallback", policy_fallback_.empty() ? json(nullptr) : json(policy_fallback_)},
                                     {"opportunistic_mechanism", std::string(to_string(options_.opportunistic_mechanism))},
                                     {"mps", mps_status()}}}});
  std::set<std::uint32_t> gpus;
  for (const auto& [gpu, l] : gpus_) gpus.insert(gpu);
  for (const auto& [id, j] : jobs_) gpus.insert(j->gpu);
  for (const auto& [gpu, f] : faults_) gpus.insert(gpu);
  for (const std::uint32_t gpu : gpus) {
    const auto loop_at = gpus_.find(gpu);
    const loop* l = loop_at == gpus_.end() ? nullptr : loop_at->second.get();
    const memory_loop* m = gpu_memory(gpu);
    const auto faults_at = faults_.find(gpu);
    const gpu_faults* f = faults_at == faults_.end() ? nullptr : &faults_at->second;
    // What the GPU's fault policy has handled: jobs that ended there, and co-runners it ended.
    const auto add_faults = [&](json& line) {
      line["fault_policy"] = std::string(f != nullptr ? f->policy.policy_name() : fault_sample.policy_name());
      line["faults_handled"] = f != nullptr ? f->handled : 0;
      line["co_runners_ended"] = f != nullptr ? f->co_runners_ended : 0;
    };
    if (l == nullptr && f != nullptr) {
      // Only jobs that never entered a control loop ended here: the GPU has a fault count alone.
      json line{{"gpu", gpu}};
      add_faults(line);
      lines.push_back(std::move(line));
    }
    if (l != nullptr) {
      const rate_decision& d = l->decision();
      const json controller = describe_controller(l->controller());
      const bool capped = m != nullptr && m->opportunistic_resident_limit() != bytes::max();
      json line{{"gpu", gpu},
                {"phase", controller.contains("phase") ? controller["phase"] : json("-")}};
      line["budget_blocks"] = d.opportunistic_budget ? json(*d.opportunistic_budget) : json(nullptr);
      line["budget_window_ms"] = rounded(std::chrono::duration<double, std::milli>(d.budget_window).count(), 1);
      line["memory_policy"] = m != nullptr ? std::string(m->policy().policy_name()) : std::string("off");
      line["memory_budget_bytes"] = m != nullptr ? m->budget().count() : 0;
      line["opportunistic_resident_limit"] = capped ? json(m->opportunistic_resident_limit().count()) : json(nullptr);
      line["residency_split"] = m != nullptr ? json(std::string(to_string(m->split()))) : json(nullptr);
      line["controller"] = controller;
      // What the mechanism choice reads of the production job, and the correction's signal.
      const std::optional<double> wait = l->production_gpu_wait();
      line["production_gpu_wait"] = wait ? json(rounded(*wait, 3)) : json(nullptr);
      line["production_unprotected"] = d.production_unprotected;
      add_faults(line);
      lines.push_back(std::move(line));
    }
    std::vector<job_report> reports = l != nullptr ? l->report() : std::vector<job_report>{};
    for (const auto& [id, jp] : jobs_) {
      const job& j = *jp;
      if (j.gpu != gpu) continue;
      const job_numbers numbers = numbers_of(j, reports, m);
      const job_report& report = numbers.report;
      const abi::job_segment& seg = *j.segment;
      const abi::job_holdings& held = numbers.held;
      const std::uint64_t managed_resident = numbers.managed_resident;
      const std::uint64_t job_limit = seg.resident_limit.load();
      const bool limited = job_limit != abi::no_resident_limit && seg.memory_policy_active.load() != 0;
      const bool throttled = j.cls == job_class::opportunistic && report.budget_blocks.has_value();
      json line;
      line["job"] = id;
      line["gpu"] = gpu;
      line["pid"] = j.pid;
      line["uid"] = j.uid;
      line["class"] = std::string(to_string(j.cls));
      line["name"] = j.name;
      line["class_from"] = j.class_from;
      line["cgroup"] = j.origin.cgroup;
      line["container"] = j.origin.container;
      line["pod_uid"] = j.origin.pod_uid;
      line["pod"] = j.origin.pod;
      line["namespace"] = j.origin.pod_namespace;
      line["up_s"] = rounded(std::chrono::duration<double>(clock::now() - j.since).count(), 1);
      line["in_control_loop"] = j.in_control;
      // How it shares the GPU and why (an opportunistic job), and what the node holds it for.
      line["mps_client"] = j.mps_client;
      line["mechanism"] = j.mechanism ? json(std::string(to_string(j.mechanism->mechanism))) : json(nullptr);
      line["mechanism_reason"] = j.mechanism ? json(std::string(to_string(j.mechanism->reason))) : json(nullptr);
      line["held"] = l != nullptr && l->held(id);
      line["corrected"] = j.corrected;
      line["late"] = j.late;
      line["kernels_timed"] = seg.kernels_timed.load();
      line["longest_kernel_ms"] = seg.kernels_timed.load() > 0
                                      ? json(rounded(static_cast<double>(seg.longest_kernel_ns.load()) / 1e6, 3))
                                      : json(nullptr);
      line["blocks_per_s"] = per_second(report.blocks_per_s);
      line["launches_per_s"] = per_second(report.launches_per_s);
      line["budget_blocks"] = throttled ? json(*report.budget_blocks) : json(nullptr);
      line["memory_mib"] = rounded(static_cast<double>(held.device_bytes + held.managed_bytes) / (1 << 20), 1);
      line["throttled_s"] = rounded(static_cast<double>(seg.throttled_ns.load()) / 1e9, 3);
      line["device_bytes"] = held.device_bytes;
      line["managed_bytes"] = held.managed_bytes;
      line["alloc_calls"] = seg.alloc_calls.load();
      line["free_calls"] = seg.free_calls.load();
      line["map_calls"] = seg.map_calls.load();
      line["managed_resident_bytes"] = managed_resident;
      line["resident_bytes"] = numbers.resident();
      line["resident_limit"] = limited ? json(job_limit) : json(nullptr);
      line["eviction_stalled"] = m != nullptr && m->stalled(id);
      line["evictions"] = seg.evictions.load();
      line["restores"] = seg.restores.load();
      line["evicted_bytes_total"] = seg.evicted_bytes_total.load();
      line["restored_bytes_total"] = seg.restored_bytes_total.load();
      line["evict_s_total"] = rounded(static_cast<double>(seg.evict_ns_total.load()) / 1e9, 3);
      line["restore_s_total"] = rounded(static_cast<double>(seg.restore_ns_total.load()) / 1e9, 3);
      line["denied_allocs"] = seg.denied_allocs.load();
      line["converted_allocs"] = seg.converted_allocs.load();
      line["host_placed_bytes"] = seg.host_placed_bytes.load();
      line["sync_calls"] = seg.sync_calls.load();
      line["sync_wait_fraction"] = rounded(report.sync_wait_fraction, 3);
      line["gpu_busy_fraction"] = report.gpu_busy_fraction ? json(rounded(*report.gpu_busy_fraction, 3)) : json(nullptr);
      line["gap_fill"] = seg.gap_fill.load() != 0;
      line["gap_launches"] = seg.gap_launches.load();
      line["max_inflight_launches"] = seg.max_inflight_launches.load();
      line["window_waits"] = seg.window_waits.load();
      line["window_wait_s"] = rounded(static_cast<double>(seg.window_wait_ns.load()) / 1e9, 3);
      line["window_timeouts"] = seg.window_timeouts.load();
      line["launch_call_us"] = report.launch_call_us ? json(rounded(*report.launch_call_us, 2)) : json(nullptr);
      lines.push_back(std::move(line));
    }
  }

  // Processes on a GPU that never registered there (check_unregistered). One object under one
  // key, as the node line: readers that take every line with a "gpu" or "job" key for a GPU's or
  // a job's do not mistake it.
  for (const auto& [key, u] : unregistered_) {
    json p;
    p["pid"] = u.pid;
    p["gpu"] = u.gpu;
    p["uid"] = u.uid;
    p["used_bytes"] = u.used_bytes ? json(*u.used_bytes) : json(nullptr);
    p["cgroup"] = u.origin.cgroup;
    p["container"] = u.origin.container;
    p["pod_uid"] = u.origin.pod_uid;
    p["pod"] = u.origin.pod;
    p["namespace"] = u.origin.pod_namespace;
    p["seen_s"] = rounded(std::chrono::duration<double>(clock::now() - u.first_seen).count(), 1);
    p["state"] = u.state();
    // Its user's unregistered time on the GPU, which the node acts on (node_observe.cpp).
    const auto [unexcused, excused] = user_unregistered_time(u.gpu, u.uid);
    p["user_unregistered_s"] = rounded(std::chrono::duration<double>(unexcused).count(), 1);
    p["user_registering_s"] = rounded(std::chrono::duration<double>(excused).count(), 1);
    p["registering"] = u.excused;
    // What the node finds, not what it meant to do: a hold someone lifted shows here.
    p["hold"] = u.paused ? json(to_string(u.method)) : json(nullptr);
    p["observed"] = u.paused ? json(to_string(u.observed)) : json(nullptr);
    p["held_again"] = u.held_again;
    lines.push_back(json{{"unregistered", std::move(p)}});
  }

  for (const json& line : lines) {
    std::string text;
    if (json_lines) {
      // A name that is not UTF-8 is shown with replacement characters rather than failing the line.
      text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (line.contains("node")) {
      const json& n = line["node"];
      text = fmt::format("tgs-node: ABI {}, policy {}{}, socket {}{}, up {:.1f} s, {} job(s), {} unregistered process(es)",
                         n["abi"].get<unsigned>(), n["policy"].get<std::string>(),
                         n["policy_fallback"].is_null() ? std::string()
                                                        : " (fallback: " + n["policy_fallback"].get<std::string>() + ")",
                         n["socket"].get<std::string>(),
                         n["class_sockets"].is_null() ? std::string()
                                                      : ", class sockets in " + n["class_sockets"].get<std::string>(),
                         n["uptime_s"].get<double>(), n["jobs"].get<std::size_t>(), n["unregistered"].get<std::size_t>());
      const json& mps = n["mps"];
      text += fmt::format("\nMPS: {}, {}", mps["mode"].get<std::string>(),
                          mps["available"].get<bool>() ? std::string("available")
                                                       : "not available (" + mps["why"].get<std::string>() + ")");
      for (const json& g : mps["gpus"]) {
        if (mps["mode"] == "off") break;
        text += fmt::format("\n  GPU {}: {}{}{}", g["gpu"].get<unsigned>(), g["state"].get<std::string>(),
                            g["pipe_dir"].get<std::string>().empty() ? std::string() : ", pipe folder " + g["pipe_dir"].get<std::string>(),
                            g["restarts"].get<std::uint64_t>() == 0 ? std::string()
                                                                    : fmt::format(", restarted {} time(s)", g["restarts"].get<std::uint64_t>()));
      }
    } else if (line.contains("unregistered")) {
      const json& p = line["unregistered"];
      const std::string container = p["container"].get<std::string>();
      text = fmt::format("  unregistered pid {} uid {} on GPU {} ({}): {}, seen {:.1f} s, {}", p["pid"].get<int>(),
                         p["uid"].get<unsigned>(), p["gpu"].get<unsigned>(),
                         container.empty() ? "cgroup " + p["cgroup"].get<std::string>()
                                           : "container " + short_container_id(container),
                         p["used_bytes"].is_null()
                             ? std::string("memory unknown")
                             : fmt::format("{:.1f} MiB", static_cast<double>(p["used_bytes"].get<std::uint64_t>()) / (1 << 20)),
                         p["seen_s"].get<double>(), p["state"].get<std::string>());
    } else if (line.contains("job")) {
      const unsigned window = line["max_inflight_launches"].get<unsigned>();
      const std::string container = line["container"].get<std::string>();
      text = fmt::format("  job {} pid {} {} ({}{}){} '{}': {} blocks/s, {} launches/s, budget {}, {:.1f} MiB ({:.1f} MiB managed, "
                         "{:.1f} MiB of it on the GPU), throttled {:.2f} s{}{}",
                         line["job"].get<unsigned>(), line["pid"].get<int>(), line["class"].get<std::string>(),
                         line["class_from"].get<std::string>(),
                         (line["mechanism"].is_null()
                              ? std::string(line["mps_client"].get<bool>() ? " MPS client" : "")
                              : fmt::format(" {} ({}){}", line["mechanism"].get<std::string>(),
                                            line["mechanism_reason"].get<std::string>(),
                                            line["held"].get<bool>() ? ", held" : "")) +
                             (line["late"].get<bool>() ? ", late (CUDA started outside MPS)" : ""),
                         container.empty() ? std::string() : ", container " + short_container_id(container),
                         printable(line["name"].get<std::string>()), text_of(line["blocks_per_s"]),
                         text_of(line["launches_per_s"]),
                         line["budget_blocks"].is_null() ? std::string("unthrottled") : line["budget_blocks"].dump(),
                         line["memory_mib"].get<double>(), static_cast<double>(line["managed_bytes"].get<std::uint64_t>()) / (1 << 20),
                         static_cast<double>(line["managed_resident_bytes"].get<std::uint64_t>()) / (1 << 20),
                         line["throttled_s"].get<double>(),
                         window == 0 ? std::string()
                                     : fmt::format(", launch window {} (waited {:.2f} s)", window, line["window_wait_s"].get<double>()),
                         line["in_control_loop"].get<bool>() ? "" : ", waiting for a context on its GPU");
    } else if (line.contains("faults_handled") && !line.contains("controller")) {
      text = fmt::format("GPU {}: fault policy {}, {} fault(s) handled, {} co-runner(s) ended", line["gpu"].get<unsigned>(),
                         line["fault_policy"].get<std::string>(), line["faults_handled"].get<std::uint64_t>(),
                         line["co_runners_ended"].get<std::uint64_t>());
    } else {
      const bool capped = !line["opportunistic_resident_limit"].is_null();
      const std::string state = controller_text(line["controller"]);
      text = fmt::format(
          "GPU {}: {}, opportunistic budget {} blocks per {:.0f} ms; memory policy {}{}; fault policy {} ({} fault(s) "
          "handled, {} co-runner(s) ended)",
          line["gpu"].get<unsigned>(),
          state.empty() ? "policy " + std::string(sample.policy_name()) : state,
          line["budget_blocks"].is_null() ? std::string("unthrottled") : line["budget_blocks"].dump(),
          line["budget_window_ms"].get<double>(), line["memory_policy"].get<std::string>(),
          line["residency_split"].is_null()
              ? std::string()
              : fmt::format(", budget {} MiB, opportunistic resident limit {} (split {})",
                            line["memory_budget_bytes"].get<std::uint64_t>() >> 20,
                            capped ? fmt::format("{} MiB", line["opportunistic_resident_limit"].get<std::uint64_t>() >> 20)
                                   : std::string("none"),
                            line["residency_split"].get<std::string>()),
          line["fault_policy"].get<std::string>(), line["faults_handled"].get<std::uint64_t>(),
          line["co_runners_ended"].get<std::uint64_t>());
    }
    abi::status_line_header h;
    const std::size_t body = std::min(text.size(), abi::max_message_bytes - sizeof(h));
    h.header.size = static_cast<std::uint32_t>(sizeof(h) + body);
    std::string message(reinterpret_cast<const char*>(&h), sizeof(h));
    message.append(text, 0, body);
    queue(c, std::move(message));
  }
  const abi::message_header end{abi::message_magic, abi::version, abi::message_type::status_end,
                                sizeof(abi::message_header)};
  queue(c, std::string(reinterpret_cast<const char*>(&end), sizeof(end)));
  c.close_when_sent = true;
  flush(c);
}

}  // namespace tgs::cuda::node
