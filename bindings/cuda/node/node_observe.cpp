// SPDX-License-Identifier: Apache-2.0
// tgs-node's watch over processes that use a GPU without a registration there: a container that
// dropped the interposer (LD_PRELOAD unset), a job that named another GPU than the one it uses, a
// program that never loaded tgs. The observer (NVML) lists them; the node reports them and, as the
// operator chose, holds them while a production job is on their GPU or ends them. Whom it holds
// is written down beside its socket before it stops them, so a node that dies holding a process
// leaves its successor what to continue.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "held_record.hpp"
#include "own_file.hpp"
#include "safe_dir.hpp"
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
      const auto known = unregistered_.find(key);
      if (known == unregistered_.end() || known->second.process.start_ticks() != *start) {
        // Seen for the first time (or its pid names another process now): pinned by a pidfd with
        // the start time just read, and its user and origin read while the pidfd shows it holds
        // its pid. One that cannot be pinned is looked at again next time.
        pin_result pinned = pinned_process::open(p.pid, *start);
        const uid_t uid = process_uid(p.pid);
        process_origin origin = origin_of(p.pid);
        if (!pinned.process || pinned.process->exited()) {
          if (pinned.error != 0) log(log_level::warn, "cannot pin pid {} on GPU {}: {}", p.pid, gpu, pinned.why);
          continue;
        }
        unregistered_process seen;
        seen.gpu = gpu;
        seen.pid = p.pid;
        seen.uid = uid;
        seen.origin = std::move(origin);
        seen.first_seen = t;
        seen.process = std::move(*pinned.process);
        unregistered_[key] = std::move(seen);
      }
      present.insert(key);
      unregistered_.at(key).used_bytes = p.used_bytes;
    }
  }
  // Gone from its GPU, or registered there since: forgotten, and continued if the node held it.
  for (auto it = unregistered_.begin(); it != unregistered_.end();) {
    if (!observed.contains(it->first.first) || present.contains(it->first)) {
      ++it;
      continue;
    }
    unregistered_process& u = it->second;
    if (u.paused) (void)release(u);
    log(log_level::info, "pid {} no longer uses GPU {} unregistered", u.pid, u.gpu);
    it = unregistered_.erase(it);
  }
  // Attempts of processes that registered since, or that no longer try and are not on a GPU
  // unregistered, are forgotten; one on a GPU keeps its first attempt, which bounds its excuse.
  std::set<pid_t> keep;
  for (const auto& [key, u] : unregistered_) keep.insert(u.pid);
  for (const auto& [fd, c] : connections_) {
    if (c.job_id == 0) keep.insert(c.pid);
  }
  std::erase_if(attempts_, [&](const auto& e) {
    const bool recent = t - e.second.dropped.value_or(e.second.first) < options_.unregistered_grace;
    return !recent && !keep.contains(e.first);
  });
  // Each user's unregistered time per GPU, whichever of their processes holds the GPU: short
  // processes that each stay under the grace add up. A process counts from its second look on (a
  // job is seen at most once on its way to registering); a look with one of the user's
  // processes unexcused counts as unexcused time, else one with a registration in progress as
  // excused time, unless one of the user's registrations got through since the last look.
  const clock::duration since_last =
      last_unregistered_check_ == clock::time_point{}
          ? clock::duration::zero()
          : std::min<clock::duration>(t - last_unregistered_check_, 2 * unregistered_check_period);
  std::map<std::pair<std::uint32_t, uid_t>, std::pair<bool, bool>> looked;  // (unexcused, excused) seen again
  for (auto& [key, u] : unregistered_) {
    u.excused = registering(u.pid, t);
    if (u.first_seen >= t) continue;  // first look
    auto& [unexcused, excused] = looked[{u.gpu, u.uid}];
    (u.excused ? excused : unexcused) = true;
  }
  for (const auto& [user, seen] : looked) {
    const auto progressed = last_registered_at_.find(user.second);
    const bool progress = progressed != last_registered_at_.end() && progressed->second >= last_unregistered_check_;
    if (seen.first) {
      user_time_[user].push_back({t, since_last, clock::duration::zero()});
    } else if (!progress) {
      user_time_[user].push_back({t, clock::duration::zero(), since_last});
    }
  }
  last_unregistered_check_ = t;
  for (auto it = user_time_.begin(); it != user_time_.end();) {
    while (!it->second.empty() && t - it->second.front().at > user_window()) it->second.pop_front();
    it = it->second.empty() ? user_time_.erase(it) : std::next(it);
  }
  for (auto& [key, u] : unregistered_) {
    const auto [unexcused, excused] = user_unregistered_time(u.gpu, u.uid);
    // Past the grace unexcused, or past the patience in all: acted on, a process whose own
    // registration is under way only in the second case.
    const bool over = (unexcused >= options_.unregistered_grace && !u.excused) ||
                      unexcused + excused >= registration_patience * options_.unregistered_grace;
    if (!over) continue;
    const bool production_there = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
      return e.second->cls == job_class::production && e.second->gpu == u.gpu;
    });
    act_on(u, production_there);
  }
  // Continued, gone, or a pid that names another process now: off the record.
  sync_held_record();
}

std::pair<std::chrono::steady_clock::duration, std::chrono::steady_clock::duration>
node_server::user_unregistered_time(std::uint32_t gpu, uid_t uid) const {
  clock::duration unexcused{}, excused{};
  if (const auto times = user_time_.find({gpu, uid}); times != user_time_.end()) {
    for (const user_sample& s : times->second) {
      unexcused += s.unexcused;
      excused += s.excused;
    }
  }
  return {unexcused, excused};
}

void node_server::note_attempt(pid_t pid, bool dropped) {
  const clock::time_point t = clock::now();
  registration_attempt& a = attempts_.try_emplace(pid, registration_attempt{.first = t, .dropped = std::nullopt}).first->second;
  if (dropped) a.dropped = t;
}

bool node_server::registering(pid_t pid, clock::time_point t) const {
  // Dropped by the caps within the grace: it tries again (its interposer every 200 ms while the
  // node does not answer), for at most `registration_patience` graces from its first attempt. A
  // connection the node accepted excuses nothing: a job's interposer sends its registration as
  // soon as it connects and the node answers it at once, so one that says nothing counts as
  // unregistered from its accept.
  const auto a = attempts_.find(pid);
  if (a == attempts_.end() || t - a->second.first >= registration_patience * options_.unregistered_grace) return false;
  return a->second.dropped && t - *a->second.dropped < options_.unregistered_grace;
}

unregistered_action node_server::unregistered_action_for(std::uint32_t gpu, uid_t uid) const {
  const bool exempt = std::find(options_.unregistered_exempt_uids.begin(), options_.unregistered_exempt_uids.end(),
                                uid) != options_.unregistered_exempt_uids.end();
  if (exempt) return unregistered_action::report;
  // Where the node's jobs are clients of its MPS daemon, an unregistered process has gone around
  // the interposer, and with it around the class's priority (node_server.hpp).
  const bool under_mps = mps_share_ && mps_ && mps_->available(gpu);
  if (!under_mps) return options_.on_unregistered;
  return std::max(options_.on_unregistered, options_.on_unregistered_under_mps);
}

/// Reports an unregistered process once, then carries out the operator's `--unregistered-action`
/// (on an MPS GPU, the stronger of it and `--unregistered-action-under-mps`).
void node_server::act_on(unregistered_process& u, bool production_on_gpu) {
  const bool exempt = std::find(options_.unregistered_exempt_uids.begin(), options_.unregistered_exempt_uids.end(),
                                u.uid) != options_.unregistered_exempt_uids.end();
  const unregistered_action action = unregistered_action_for(u.gpu, u.uid);
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
      if (!u.killed && u.process.signal(SIGKILL) == signal_outcome::sent) {
        u.killed = true;
        ++unregistered_killed_;
        log(log_level::warn, "killed pid {} (unregistered on GPU {})", u.pid, u.gpu);
      }
      return;
    case unregistered_action::pause:
      if (production_on_gpu && !u.paused) {
        (void)hold(u);
      } else if (!production_on_gpu && u.paused && release(u)) {
        log(log_level::info, "continuing pid {} (released): no production job on GPU {} now", u.pid, u.gpu);
      }
      return;
  }
}

bool node_server::hold(unregistered_process& u) {
  // Frozen in a cgroup of the node's where it can make them (its owner cannot thaw it); else
  // stopped, and stopped again whenever it is found running (check_holds).
  u.method = hold_cgroups_ ? hold_method::cgroup_freeze : hold_method::sigstop;
  u.origin_cgroup.clear();
  if (u.method == hold_method::cgroup_freeze) {
    const std::optional<std::string> origin = cgroup_of(u.pid);
    if (!origin || u.process.exited()) return false;
    u.origin_cgroup = *origin;
  }
  // On the record before it is held: a node that dies now leaves its successor what to release.
  // A process the record cannot name is not held.
  held_set held = held_now();
  held.emplace(u.pid, u.process.start_ticks(), u.origin_cgroup);
  if (!write_held_record(held)) return false;
  if (u.method == hold_method::cgroup_freeze) {
    const hold_cgroups::held h = hold_cgroups_->hold(u.pid, u.origin_cgroup);
    if (h.why.empty() && !u.process.exited()) {
      u.paused = true;
      u.observed = hold_cgroups_->observe(u.pid);
      log(log_level::warn, "holding pid {} (frozen in {}): unregistered on GPU {}, where a production job runs", u.pid,
          hold_cgroups_->leaf_for(u.pid, u.origin_cgroup), u.gpu);
      sync_held_record();
      return true;
    }
    // One this process's cgroup does not allow (a threaded cgroup, one outside the node's
    // namespace): held by SIGSTOP instead.
    log(log_level::warn, "cannot freeze pid {} in a cgroup of the node's ({}): holding it by SIGSTOP", u.pid,
        h.why.empty() ? std::string("it ended") : h.why);
    (void)hold_cgroups_->release(u.pid, u.origin_cgroup);
    u.method = hold_method::sigstop;
    u.origin_cgroup.clear();
  }
  if (u.process.signal(SIGSTOP) != signal_outcome::sent) {
    sync_held_record();
    return false;
  }
  u.paused = true;
  u.observed = hold_observed::stopped;
  log(log_level::warn, "holding pid {} (SIGSTOP): unregistered on GPU {}, where a production job runs", u.pid, u.gpu);
  sync_held_record();
  return true;
}

bool node_server::release(unregistered_process& u) {
  bool released = true;
  if (u.method == hold_method::cgroup_freeze && hold_cgroups_) {
    if (const std::string why = hold_cgroups_->release(u.pid, u.origin_cgroup); !why.empty()) {
      log(log_level::warn, "pid {} is thawed but stays in the node's cgroup ({})", u.pid, why);
    }
    released = !u.process.exited();
  } else {
    released = u.process.signal(SIGCONT) == signal_outcome::sent;
  }
  u.paused = false;
  u.observed = hold_observed::running;
  return released;
}

void node_server::check_holds() {
  for (auto& [key, u] : unregistered_) {
    if (!u.paused) continue;
    if (u.method == hold_method::cgroup_freeze && hold_cgroups_) {
      u.observed = u.process.exited() ? hold_observed::gone : hold_cgroups_->observe(u.pid);
      // Out of the node's cgroup (only root can move it): into it again.
      if (u.observed == hold_observed::running || u.observed == hold_observed::stopped) {
        ++u.held_again;
        if (u.held_again == 1) log(log_level::warn, "pid {} left the node's frozen cgroup; holding it again", u.pid);
        (void)hold_cgroups_->hold(u.pid, u.origin_cgroup);
        u.observed = hold_cgroups_->observe(u.pid);
      }
    } else {
      const std::optional<process_stat> stat = read_process_stat(u.pid);
      const bool gone = !stat || stat->state == 'Z' || stat->state == 'X' || u.process.exited();
      u.observed = gone ? hold_observed::gone : stat->state == 'T' ? hold_observed::stopped : hold_observed::running;
      // Continued by someone else (its owner may send SIGCONT): stopped again.
      if (u.observed == hold_observed::running && u.process.signal(SIGSTOP) == signal_outcome::sent) {
        ++u.held_again;
        if (u.held_again == 1 || u.held_again % 100 == 0) {
          log(log_level::warn, "pid {} was continued by another process ({} time(s)); stopped again (SIGSTOP)", u.pid,
              u.held_again);
        }
      }
    }
  }
}

void node_server::continue_paused() {
  for (auto& [key, u] : unregistered_) {
    if (u.paused && release(u)) log(log_level::info, "continuing pid {} (released)", u.pid);
    u.paused = false;
  }
  sync_held_record();
  if (hold_cgroups_) hold_cgroups_->remove_if_empty();
}

void node_server::open_holds() {
  if (options_.hold_with == hold_preference::signal) {
    log(log_level::info, "held processes are stopped with SIGSTOP, sent again whenever one is found running "
        "(--hold-with signal)");
    return;
  }
  // One folder of cgroups per socket: two nodes on a host never touch each other's.
  std::string why;
  hold_cgroups_ = hold_cgroups::open(fmt::format("{:016x}", std::hash<std::string>{}(options_.socket_path)), why);
  if (hold_cgroups_) {
    log(log_level::info, "held processes are frozen in cgroups of their own (inside theirs where only root may change "
        "it, else under {})", hold_cgroups_->folder());
    return;
  }
  if (options_.hold_with == hold_preference::cgroup) {
    throw std::runtime_error("--hold-with cgroup: the node cannot freeze processes in cgroups of its own: " + why);
  }
  log(log_level::warn, "held processes are stopped with SIGSTOP, sent again whenever one is found running; their "
      "owners can continue them between two looks (cannot freeze them in cgroups: {})", why);
}

node_server::held_set node_server::held_now() const {
  held_set out;
  for (const auto& [key, u] : unregistered_) {
    if (u.paused) out.emplace(u.pid, u.process.start_ticks(), u.origin_cgroup);
  }
  return out;
}

void node_server::sync_held_record() {
  if (const held_set held = held_now(); held != recorded_held_) (void)write_held_record(held);
}

bool node_server::write_held_record(const held_set& held) {
  const std::string path = held_record_path();
  const auto trouble = [&](const std::string& why) {
    if (why != held_record_trouble_) {
      log(log_level::error, "cannot write the record of held processes {}: {}; no process is held until it can be",
          path, why);
      held_record_trouble_ = why;
    }
    return false;
  };
  if (held.empty()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return trouble(std::string("unlink: ") + std::strerror(errno));
  } else {
    // A reader sees the old record or the new one, never a part (own_file.hpp).
    if (const std::string why = replace_own_file(path, format_held_record(held)); !why.empty()) return trouble(why);
  }
  if (!held_record_trouble_.empty()) log(log_level::info, "the record of held processes {} is written again", path);
  held_record_trouble_.clear();
  recorded_held_ = held;
  return true;
}

void node_server::continue_recorded() {
  // Whatever is still frozen in the node's cgroups once the record's processes went back (a
  // predecessor that died between freezing a process and anything else, or whose record is gone
  // or cannot be trusted) is thawed: the node never leaves a process frozen that it does not hold.
  struct thaw_the_rest {
    const node_server& node;
    ~thaw_the_rest() {
      if (!node.hold_cgroups_) return;
      for (const pid_t pid : node.hold_cgroups_->thaw_all()) {
        node.log(log_level::warn, "pid {} was left in the node's cgroups by the node before this one: thawed there", pid);
      }
    }
  } const thaw_on_return{*this};
  const std::string path = held_record_path();
  std::string why;
  const std::optional<std::string> text = read_own_file(path, held_record_max_bytes, why);
  if (!text && why.empty()) return;  // no record: nothing was held
  const auto ignored = [&](const std::string& what) {
    log(log_level::warn, "the record of held processes {} is {}: ignored, nothing it lists is continued", path, what);
  };
  std::optional<held_set> listed;
  if (text) listed = parse_held_record(*text, why);
  if (!listed) {
    ignored(why);
    return;
  }
  for (const auto& [pid, start, cgroup] : *listed) {
    if (pid == ::getpid()) continue;
    // Pinned with the start time the record gives: a pid that names another process now is left alone.
    const pin_result held = pinned_process::open(pid, start);
    if (!held.process || held.process->exited()) {
      log(log_level::debug, "pid {} the node before this one held is gone (or its pid names another process)", pid);
    } else if (!cgroup.empty()) {
      if (!hold_cgroups_) {
        log(log_level::warn, "pid {} the node before this one froze cannot be released: this node has no cgroups", pid);
      } else if (const std::string left = hold_cgroups_->release(pid, cgroup); left.empty()) {
        log(log_level::info, "continuing pid {} (released to {}): the node before this one held it", pid, cgroup);
      } else {
        log(log_level::warn, "pid {} the node before this one held is thawed but stays in its cgroup ({})", pid, left);
      }
    } else if (held.process->signal(SIGCONT) == signal_outcome::sent) {
      log(log_level::info, "continuing pid {} (SIGCONT): the node before this one held it", pid);
    }
  }
  recorded_held_ = *listed;  // so that the write below removes it
  (void)write_held_record({});
}

}  // namespace tgs::cuda::node
