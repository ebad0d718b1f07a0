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
#include <charconv>
#include <cstring>
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

/// The record's first line; a record that does not start with it is not read.
constexpr std::string_view held_record_header = "tgs-node paused v1\n";
/// A record larger than this is not read (a node holds a few processes; this is thousands).
constexpr std::size_t held_record_max_bytes = 64 * 1024;
/// The largest pid Linux gives (PID_MAX_LIMIT).
constexpr long long max_pid = 4194304;

/// An unsigned decimal number that is the whole of `text` (no sign, no space, at most 20 digits).
template <typename T>
std::optional<T> whole_number(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// The entries of a record: its header, then one `PID START` line per process, each ending in a
/// newline. Empty, with why in `why`, when anything else is there.
std::optional<std::set<std::pair<pid_t, std::uint64_t>>> parse_held_record(std::string_view text, std::string& why) {
  if (text.substr(0, held_record_header.size()) != held_record_header) {
    why = "malformed: it does not start with '" + std::string(held_record_header.substr(0, held_record_header.size() - 1)) + "'";
    return std::nullopt;
  }
  text.remove_prefix(held_record_header.size());
  std::set<std::pair<pid_t, std::uint64_t>> out;
  for (std::size_t line = 2; !text.empty(); ++line) {
    const std::size_t end = text.find('\n');
    const std::size_t space = text.find(' ');
    if (end == std::string_view::npos || space == std::string_view::npos || space > end) {
      why = fmt::format("malformed: line {} is not 'PID START' ending in a newline", line);
      return std::nullopt;
    }
    const std::optional<long long> pid = whole_number<long long>(text.substr(0, space));
    const std::optional<std::uint64_t> start = whole_number<std::uint64_t>(text.substr(space + 1, end - space - 1));
    if (!pid || !start || *pid <= 1 || *pid > max_pid) {
      why = fmt::format("malformed: line {} is not 'PID START' (a pid from 2 to {}, a start time)", line, max_pid);
      return std::nullopt;
    }
    out.emplace(static_cast<pid_t>(*pid), *start);
    text.remove_prefix(end + 1);
  }
  return out;
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
        unregistered_[key] = unregistered_process{.gpu = gpu, .pid = p.pid, .uid = uid,
                                                  .used_bytes = std::nullopt, .origin = std::move(origin),
                                                  .first_seen = t, .process = std::move(*pinned.process)};
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
    const unregistered_process& u = it->second;
    if (u.paused) (void)u.process.signal(SIGCONT);
    log(log_level::info, "pid {} no longer uses GPU {} unregistered", u.pid, u.gpu);
    it = unregistered_.erase(it);
  }
  // A connection the caps dropped stands for a registration in progress for one grace: the job
  // tries again (its interposer every 200 ms while the node does not answer).
  std::erase_if(dropped_attempts_, [&](const auto& e) { return t - e.second >= options_.unregistered_grace; });
  for (auto& [key, u] : unregistered_) {
    if (t - u.first_seen < options_.unregistered_grace) continue;
    // A process with a registration in progress (connected and not yet answered, or dropped by
    // the caps within the grace) is not acted on: a busy or just restarted node is slow, not the
    // job. Only for so long: a process that keeps connecting and never registers is acted on
    // after `registration_patience` graces.
    if (registering(u.pid) && t - u.first_seen < registration_patience * options_.unregistered_grace) continue;
    const bool production_there = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
      return e.second->cls == job_class::production && e.second->gpu == u.gpu;
    });
    act_on(u, production_there);
  }
  // Continued, gone, or a pid that names another process now: off the record.
  sync_held_record();
}

/// Whether `pid` has a registration in progress: a connection of its own the node has not
/// registered or refused yet, or one the caps dropped within the grace.
bool node_server::registering(pid_t pid) const {
  if (dropped_attempts_.contains(pid)) return true;
  return std::any_of(connections_.begin(), connections_.end(),
                     [&](const auto& e) { return e.second.pid == pid && e.second.job_id == 0; });
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
        // On the record before it stops: a node that dies now leaves its successor what to
        // continue. A process the record cannot name is not held.
        held_set held = held_now();
        held.emplace(u.pid, u.process.start_ticks());
        if (!write_held_record(held)) return;
        if (u.process.signal(SIGSTOP) == signal_outcome::sent) {
          u.paused = true;
          log(log_level::warn, "holding pid {} (SIGSTOP): unregistered on GPU {}, where a production job runs", u.pid,
              u.gpu);
        }
      } else if (!production_on_gpu && u.paused && u.process.signal(SIGCONT) == signal_outcome::sent) {
        u.paused = false;
        log(log_level::info, "continuing pid {} (SIGCONT): no production job on GPU {} now", u.pid, u.gpu);
      }
      return;
  }
}

/// Continues every process the node holds: a stopping node leaves nothing stopped behind it, and
/// no record.
void node_server::continue_paused() {
  for (auto& [key, u] : unregistered_) {
    if (u.paused && u.process.signal(SIGCONT) == signal_outcome::sent) {
      log(log_level::info, "continuing pid {} (SIGCONT)", u.pid);
    }
    u.paused = false;
  }
  sync_held_record();
}

node_server::held_set node_server::held_now() const {
  held_set out;
  for (const auto& [key, u] : unregistered_) {
    if (u.paused) out.emplace(u.pid, u.process.start_ticks());
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
    std::string text(held_record_header);
    for (const auto& [pid, start] : held) text += fmt::format("{} {}\n", pid, start);
    // A file of the node's own, made here (never one found at the name), then renamed over the
    // record: a reader sees the old record or the new one, never a part.
    std::string temporary;
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
      temporary = fmt::format("{}.{}.{}", path, ::getpid(), attempt);
      fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) return trouble("cannot create " + temporary + ": " + std::strerror(errno));
    bool written = ::fchmod(fd, 0600) == 0;
    for (std::size_t done = 0; written && done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      written = n > 0;
      if (written) done += static_cast<std::size_t>(n);
    }
    written = written && ::fsync(fd) == 0;
    const int error = errno;
    ::close(fd);
    if (!written) {
      ::unlink(temporary.c_str());
      return trouble("cannot write " + temporary + ": " + std::strerror(error));
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      const std::string why = std::string("rename: ") + std::strerror(errno);
      ::unlink(temporary.c_str());
      return trouble(why);
    }
  }
  if (!held_record_trouble_.empty()) log(log_level::info, "the record of held processes {} is written again", path);
  held_record_trouble_.clear();
  recorded_held_ = held;
  return true;
}

void node_server::continue_recorded() {
  const std::string path = held_record_path();
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return;
  const auto ignored = [&](const std::string& why) {
    log(log_level::warn, "the record of held processes {} is {}: ignored, nothing it lists is continued", path, why);
  };
  if (fd < 0) {
    ignored(errno == ELOOP ? std::string("a symbolic link") : std::string("unreadable (") + std::strerror(errno) + ")");
    return;
  }
  struct stat st{};
  std::string text;
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = std::string("unreadable (") + std::strerror(errno) + ")";
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = fmt::format("owned by uid {}, not by the node's user ({})", st.st_uid, ::geteuid());
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = fmt::format("writable by others (mode {:04o})", st.st_mode & 07777);
  } else if (static_cast<std::uint64_t>(st.st_size) > held_record_max_bytes) {
    why = fmt::format("larger than {} bytes", held_record_max_bytes);
  } else {
    text.resize(held_record_max_bytes + 1);
    std::size_t got = 0;
    for (;;) {
      const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) why = std::string("unreadable (") + std::strerror(errno) + ")";
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
      if (got == text.size()) break;
    }
    text.resize(got);
    if (why.empty() && got > held_record_max_bytes) why = fmt::format("larger than {} bytes", held_record_max_bytes);
  }
  ::close(fd);
  std::optional<held_set> listed;
  if (why.empty()) listed = parse_held_record(text, why);
  if (!listed) {
    ignored(why);
    return;
  }
  for (const auto& [pid, start] : *listed) {
    if (pid == ::getpid()) continue;
    // Pinned with the start time the record gives: a pid that names another process now is left alone.
    const pin_result held = pinned_process::open(pid, start);
    if (held.process && held.process->signal(SIGCONT) == signal_outcome::sent) {
      log(log_level::info, "continuing pid {} (SIGCONT): the node before this one held it", pid);
    } else {
      log(log_level::debug, "pid {} the node before this one held is gone (or its pid names another process)", pid);
    }
  }
  recorded_held_ = *listed;  // so that the write below removes it
  (void)write_held_record({});
}

}  // namespace tgs::cuda::node
