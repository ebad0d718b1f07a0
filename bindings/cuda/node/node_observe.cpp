// SPDX-License-Identifier: Apache-2.0
// tgs-node's watch over processes that use a GPU without a registration there: a container that
// dropped the interposer (LD_PRELOAD unset), a job that named another GPU than the one it uses, a
// program that never loaded tgs. The observer (NVML) lists them; the node reports them and, as the
// operator chose, holds them while a production job is on their GPU or ends them.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "server_parts.hpp"

namespace tgs::cuda::node {

namespace {

/// The real user of process `pid` (/proc/<pid>/status), or -1 when it is gone.
uid_t process_uid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    long long uid = -1;
    fields >> uid;
    return static_cast<uid_t>(uid);
  }
  return static_cast<uid_t>(-1);
}

/// Sends `signal` to the process only while `pid` still names the process that was seen.
bool signal_if_same(const std::uint64_t start_ticks, pid_t pid, int signal) {
  const std::optional<std::uint64_t> now = process_start(pid);
  return now && *now == start_ticks && ::kill(pid, signal) == 0;
}

}  // namespace

void node_server::check_unregistered() {
  const clock::time_point t = clock::now();
  std::set<std::uint32_t> observed;
  std::set<std::pair<std::uint32_t, pid_t>> present;
  for (std::uint32_t gpu = 0; gpu < options_.gpus; ++gpu) {
    const std::optional<std::vector<gpu_process>> list = observer_.processes(gpu);
    if (!list) continue;  // NVML cannot say now: what was seen stays as it was
    observed.insert(gpu);
    for (const gpu_process& p : *list) {
      if (p.pid <= 0 || p.pid == ::getpid()) continue;
      const bool registered = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
        return e.second->pid == p.pid && e.second->gpu == gpu;
      });
      if (registered) continue;
      // An MPS server holds the GPU for its clients (the jobs); it never registers.
      if (mps_ && mps_->is_server(p.pid)) continue;
      const std::optional<std::uint64_t> start = process_start(p.pid);
      if (!start) continue;
      const std::pair<std::uint32_t, pid_t> key{gpu, p.pid};
      present.insert(key);
      auto [it, fresh] = unregistered_.try_emplace(key);
      unregistered_process& u = it->second;
      if (fresh || u.start_ticks != *start) {
        u = unregistered_process{.gpu = gpu, .pid = p.pid, .uid = process_uid(p.pid), .start_ticks = *start,
                                 .used_bytes = std::nullopt, .origin = origin_of(p.pid), .first_seen = t};
      }
      u.used_bytes = p.used_bytes;
    }
  }
  // Gone from its GPU, or registered there since: forgotten, and continued if the node held it.
  for (auto it = unregistered_.begin(); it != unregistered_.end();) {
    if (!observed.contains(it->first.first) || present.contains(it->first)) {
      ++it;
      continue;
    }
    const unregistered_process& u = it->second;
    if (u.paused) (void)signal_if_same(u.start_ticks, u.pid, SIGCONT);
    log(log_level::info, "pid {} no longer uses GPU {} unregistered", u.pid, u.gpu);
    it = unregistered_.erase(it);
  }
  for (auto& [key, u] : unregistered_) {
    if (t - u.first_seen < options_.unregistered_grace) continue;
    const bool production_there = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
      return e.second->cls == job_class::production && e.second->gpu == u.gpu;
    });
    act_on(u, production_there);
  }
}

/// Reports an unregistered process once, then carries out the operator's `--unregistered-action`.
void node_server::act_on(unregistered_process& u, bool production_on_gpu) {
  const bool exempt = std::find(options_.unregistered_exempt_uids.begin(), options_.unregistered_exempt_uids.end(),
                                u.uid) != options_.unregistered_exempt_uids.end();
  const unregistered_action action = exempt ? unregistered_action::report : options_.on_unregistered;
  if (!u.reported) {
    u.reported = true;
    log(log_level::warn, "pid {} (uid {}{}) uses GPU {}{} and never registered there; {}", u.pid, u.uid,
        u.origin.container.empty() ? ", cgroup " + u.origin.cgroup
                                   : ", container " + short_container_id(u.origin.container),
        u.gpu, u.used_bytes ? fmt::format(" ({} MiB)", *u.used_bytes >> 20) : std::string(),
        action == unregistered_action::report ? "reported only" + std::string(exempt ? " (an exempt user)" : "")
        : action == unregistered_action::kill ? "ending it"
                                              : "holding it while a production job is on its GPU");
  }
  switch (action) {
    case unregistered_action::report: return;
    case unregistered_action::kill:
      if (!u.killed && signal_if_same(u.start_ticks, u.pid, SIGKILL)) {
        u.killed = true;
        ++unregistered_killed_;
        log(log_level::warn, "killed pid {} (unregistered on GPU {})", u.pid, u.gpu);
      }
      return;
    case unregistered_action::pause:
      if (production_on_gpu && !u.paused && signal_if_same(u.start_ticks, u.pid, SIGSTOP)) {
        u.paused = true;
        log(log_level::warn, "holding pid {} (SIGSTOP): unregistered on GPU {}, where a production job runs", u.pid, u.gpu);
      } else if (!production_on_gpu && u.paused && signal_if_same(u.start_ticks, u.pid, SIGCONT)) {
        u.paused = false;
        log(log_level::info, "continuing pid {} (SIGCONT): no production job on GPU {} now", u.pid, u.gpu);
      }
      return;
  }
}

/// Continues every process the node holds: a stopping node leaves nothing stopped behind it.
void node_server::continue_paused() {
  for (auto& [key, u] : unregistered_) {
    if (u.paused && signal_if_same(u.start_ticks, u.pid, SIGCONT)) {
      log(log_level::info, "continuing pid {} (SIGCONT)", u.pid);
    }
    u.paused = false;
  }
}

}  // namespace tgs::cuda::node
