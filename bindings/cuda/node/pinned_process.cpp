// SPDX-License-Identifier: Apache-2.0
// Processes pinned by pidfds: a connection's peer as the kernel recorded it at connect, or a process
// seen with a start time; signals go through the pidfd.
#include "pinned_process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5's; older C library headers lack it
#endif

namespace tgs::cuda::node {

namespace {

// Raw system calls: the C library's wrappers came with glibc 2.36, and a build on an older one
// must still pin.
int open_pidfd(pid_t pid) noexcept { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)); }
int send_through(int pidfd, int signal) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0U));
}

/// Whether `error` from `pidfd_open` says the node cannot have pidfds here: a kernel older than
/// 5.3, or a seccomp filter that refuses the call.
bool no_pidfds(int error) noexcept { return error == ENOSYS || error == EPERM; }

/// Whether the pidfd's process still holds its pid (running, or a zombie not yet reaped): then a
/// /proc read of that pid made before this call was of this process. Signal 0 checks without
/// sending; EPERM (a node that is not root, a process of another user) says it exists all the same.
bool holds_its_pid(int pidfd) noexcept { return send_through(pidfd, 0) == 0 || errno == EPERM; }

/// The lines of /proc/<pid>/status that start with `key` (`Uid:`, `Groups:`), their numbers.
std::vector<unsigned long> status_numbers(pid_t pid, std::string_view key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::vector<unsigned long> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream numbers(line.substr(key.size()));
    for (unsigned long n = 0; numbers >> n;) out.push_back(n);
    break;
  }
  return out;
}

/// The supplementary groups the peer of `socket` had at its connect (`SO_PEERGROUPS`, Linux
/// 4.13); empty when the kernel cannot say.
std::optional<std::vector<gid_t>> peer_groups(int socket) {
  std::vector<gid_t> groups(32);
  socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0) {
    if (errno != ERANGE) return std::nullopt;
    groups.resize(len / sizeof(gid_t));  // the kernel said how many
    if (::getsockopt(socket, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0) return std::nullopt;
  }
  groups.resize(len / sizeof(gid_t));
  return groups;
}

pin_result refused(int error, std::string why) { return {std::nullopt, error, std::move(why)}; }
pin_result ended(std::string why) { return {std::nullopt, 0, std::move(why)}; }

/// Whether a pidfd is readable: its process has ended (a zombie has).
bool pidfd_readable(int pidfd) noexcept {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

/// Why /proc/<pid>/stat gave no start time: the process has ended (`ended_why`), unless its pidfd
/// shows it still runs, when the read itself failed (`errno`: the node out of descriptors, say).
pin_result unread(int pidfd, pid_t pid, std::string ended_why) {
  const int error = errno != 0 ? errno : EIO;
  if (pidfd < 0 || pidfd_readable(pidfd) || !holds_its_pid(pidfd)) return ended(std::move(ended_why));
  return refused(error, "cannot read /proc/" + std::to_string(pid) + "/stat: " + std::strerror(error));
}

}  // namespace

std::optional<process_stat> read_process_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The name (field 2) is in parentheses and may hold anything: the fields after it count from
  // its last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  process_stat f;
  long parent = 0;
  if (!(fields >> f.state >> parent)) return std::nullopt;
  std::string skip;
  for (int i = 5; i < 22 && (fields >> skip); ++i) {
  }
  if (!(fields >> f.start)) return std::nullopt;
  f.parent = static_cast<pid_t>(parent);
  return f;
}

std::optional<std::uint64_t> process_start(pid_t pid) {
  const std::optional<process_stat> f = read_process_stat(pid);
  if (!f || f->state == 'Z' || f->state == 'X' || f->state == 'x') return std::nullopt;
  return f->start;
}

std::string_view to_string(pinning p) noexcept {
  switch (p) {
    case pinning::peer_pidfd: return "SO_PEERPIDFD";
    case pinning::pidfd_open: return "pidfd_open at accept";
    case pinning::start_time: return "start time only";
  }
  return "?";
}

pinning kernel_pinning() {
  static const pinning found = [] {
    const int self = open_pidfd(::getpid());
    if (self < 0 && no_pidfds(errno)) return pinning::start_time;
    if (self >= 0) ::close(self);
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return pinning::pidfd_open;
    int fd = -1;
    socklen_t len = sizeof(fd);
    const bool peer = ::getsockopt(pair[0], SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0;
    if (peer && fd >= 0) ::close(fd);
    ::close(pair[0]);
    ::close(pair[1]);
    return peer ? pinning::peer_pidfd : pinning::pidfd_open;
  }();
  return found;
}

pinned_process::pinned_process(pinned_process&& o) noexcept
    : pid_(std::exchange(o.pid_, 0)),
      start_ticks_(o.start_ticks_),
      uid_(o.uid_),
      gid_(o.gid_),
      groups_(std::move(o.groups_)),
      fd_(std::exchange(o.fd_, -1)) {}

pinned_process& pinned_process::operator=(pinned_process&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    pid_ = std::exchange(o.pid_, 0);
    start_ticks_ = o.start_ticks_;
    uid_ = o.uid_;
    gid_ = o.gid_;
    groups_ = std::move(o.groups_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

pinned_process::~pinned_process() {
  if (fd_ >= 0) ::close(fd_);
}

pin_result pinned_process::peer_of(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return refused(errno, std::string("SO_PEERCRED: ") + std::strerror(errno));
  }
  pinned_process p;
  p.uid_ = cred.uid;
  p.gid_ = cred.gid;
  if (cred.pid <= 0) {
    // A peer in a PID namespace the node cannot see into has no pid here: it may ask for the
    // status, and it pins nothing (it has "ended": a registration is refused).
    return {std::move(p), 0, {}};
  }
  // The pidfd of the process that connected, from the kernel's record of the connect: no window.
  // Without SO_PEERPIDFD, pidfd_open of its pid: if the peer ended and its pid was given out
  // again between its connect and this accept, that names the newcomer (a window of the loop's
  // latency, milliseconds; the same user's process is not told apart, another user's is, below).
  socklen_t fd_len = sizeof(p.fd_);
  bool by_pid = false;
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &p.fd_, &fd_len) != 0) {
    p.fd_ = -1;
    const int error = errno;
    if (error == EMFILE || error == ENFILE) return refused(error, std::string("SO_PEERPIDFD: ") + std::strerror(error));
    if (error != ENOPROTOOPT) return ended("the process that connected has ended");
    p.fd_ = open_pidfd(cred.pid);
    by_pid = true;
    if (p.fd_ < 0) {
      const int e = errno;
      if (e == ESRCH) return ended("the process that connected has ended");
      if (!no_pidfds(e)) return refused(e, std::string("pidfd_open: ") + std::strerror(e));
      p.fd_ = -1;  // start time only (kernel_pinning says so at start)
    }
  }
  errno = 0;
  const std::optional<std::uint64_t> start = process_start(cred.pid);
  if (!start) return unread(p.fd_, cred.pid, "the process that connected has ended");
  p.pid_ = cred.pid;
  p.start_ticks_ = *start;
  if (std::optional<std::vector<gid_t>> groups = peer_groups(socket)) {
    p.groups_ = std::move(*groups);
  } else {
    for (const unsigned long g : status_numbers(cred.pid, "Groups:")) p.groups_.push_back(static_cast<gid_t>(g));
  }
  if (by_pid) {
    const std::vector<unsigned long> uids = status_numbers(cred.pid, "Uid:");
    if (uids.size() < 2 || uids[1] != cred.uid) return ended("the pid that connected names another user's process now");
  }
  // Still holding its pid after the reads: they were of this process.
  if (p.fd_ >= 0 && !holds_its_pid(p.fd_)) return ended("the process that connected has ended");
  return {std::move(p), 0, {}};
}

pin_result pinned_process::open(pid_t pid, std::uint64_t start_ticks) {
  if (pid <= 0) return ended("no such pid");
  pinned_process p;
  p.fd_ = open_pidfd(pid);
  if (p.fd_ < 0) {
    const int e = errno;
    if (e == ESRCH) return ended("it has ended");
    if (!no_pidfds(e)) return refused(e, std::string("pidfd_open: ") + std::strerror(e));
    p.fd_ = -1;
  }
  errno = 0;
  const std::optional<std::uint64_t> start = process_start(pid);
  if (!start) return unread(p.fd_, pid, "it has ended");
  if (*start != start_ticks) return ended("its pid names another process now");
  if (p.fd_ >= 0 && !holds_its_pid(p.fd_)) return ended("it has ended");
  p.pid_ = pid;
  p.start_ticks_ = start_ticks;
  return {std::move(p), 0, {}};
}

bool pinned_process::in_group(gid_t gid) const {
  return gid == gid_ || std::find(groups_.begin(), groups_.end(), gid) != groups_.end();
}

bool pinned_process::exited() const {
  if (pid_ <= 0) return true;
  if (fd_ < 0) {
    const std::optional<std::uint64_t> now = process_start(pid_);
    return !now || *now != start_ticks_;
  }
  return pidfd_readable(fd_);
}

signal_outcome pinned_process::signal(int signal) const {
  if (pid_ <= 0) return signal_outcome::gone;
  if (fd_ >= 0) {
    if (send_through(fd_, signal) == 0) return signal_outcome::sent;
    return errno == ESRCH ? signal_outcome::gone : signal_outcome::failed;
  }
  const std::optional<std::uint64_t> now = process_start(pid_);
  if (!now || *now != start_ticks_) return signal_outcome::gone;
  if (::kill(pid_, signal) == 0) return signal_outcome::sent;
  return errno == ESRCH ? signal_outcome::gone : signal_outcome::failed;
}

}  // namespace tgs::cuda::node
