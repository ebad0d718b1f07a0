// SPDX-License-Identifier: Apache-2.0
// tgs-node's server loop and its connections: accepted under caps per user and in total, read
// without blocking, answered through per-connection queues, closed when idle too long.
#include "node_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "cdi_spec.hpp"
#include "protocol.hpp"
#include "safe_dir.hpp"
#include "server_parts.hpp"

namespace tgs::cuda::node {

const char* level_name(log_level l) noexcept {
  switch (l) {
    case log_level::error: return "error";
    case log_level::warn: return "warn";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "?";
}

bool send_message(int fd, const void* data, std::size_t size) noexcept {
  return ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(size);
}

std::string printable(std::string_view raw) {
  std::string out;
  for (const char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(ch);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

std::string_view to_string(unregistered_action a) noexcept {
  switch (a) {
    case unregistered_action::report: return "report";
    case unregistered_action::pause: return "pause";
    case unregistered_action::kill: return "kill";
  }
  return "?";
}

std::string_view to_string(hold_preference p) noexcept {
  switch (p) {
    case hold_preference::automatic: return "auto";
    case hold_preference::cgroup: return "cgroup";
    case hold_preference::signal: return "signal";
  }
  return "?";
}

std::optional<hold_preference> parse_hold_preference(std::string_view s) noexcept {
  for (const hold_preference p : {hold_preference::automatic, hold_preference::cgroup, hold_preference::signal}) {
    if (s == to_string(p)) return p;
  }
  return std::nullopt;
}

std::optional<unregistered_action> parse_unregistered_action(std::string_view s) noexcept {
  for (const unregistered_action a : {unregistered_action::report, unregistered_action::pause, unregistered_action::kill}) {
    if (s == to_string(a)) return a;
  }
  return std::nullopt;
}

std::optional<job_class> parse_job_class(std::string_view s) noexcept {
  if (s == "production") return job_class::production;
  if (s == "opportunistic") return job_class::opportunistic;
  return std::nullopt;
}

node_server::node_server(node_options options)
    : options_(std::move(options)), start_(clock::now()), chooser_(options_.choice), next_liveness_(start_) {
  // Validate the controller configuration now, so a bad flag fails at start, not at the first job.
  (void)any_rate_controller{options_.controller};
  (void)any_fault_policy{options_.fault_policy};
  if (options_.memory_policy) {
    (void)any_memory_policy{*options_.memory_policy};
    if (options_.memory_budget == bytes{}) {
      throw std::runtime_error("a memory policy needs a memory budget (--memory-budget-mib)");
    }
  }
  if (!options_.cdi_spec_path.empty() && options_.class_socket_dir.empty()) {
    throw std::runtime_error("--cdi-spec needs --class-sockets: the spec's devices mount the class sockets");
  }
  if (!options_.metrics_address.empty()) {
    if (const auto [address, why] = parse_listen_address(options_.metrics_address); !address) {
      throw std::runtime_error("--metrics-address " + why);
    }
  }
}

node_server::~node_server() {
  continue_paused();
  for (auto& [fd, c] : connections_) ::close(fd);
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

instant node_server::now() const noexcept { return epoch + (clock::now() - start_); }

/// The GPUs to serve: NVML's, narrowed by `--gpus`. Decided before any socket is touched, so a
/// wrong count fails without disturbing a running node.
void node_server::resolve_gpus() {
  const nvml_gpu_count seen = count_gpus();
  if (options_.gpus == 0) {
    if (!seen.count) {
      throw std::runtime_error("cannot tell how many GPUs this node has (" + seen.why +
                               "): name them with --gpus N (GPUs 0 to N-1)");
    }
    if (*seen.count == 0) throw std::runtime_error("NVML sees no GPU on this node");
    options_.gpus = *seen.count;
    log(log_level::info, "GPUs: {} (as NVML sees them)", options_.gpus);
    return;
  }
  if (seen.count && options_.gpus > *seen.count) {
    throw std::runtime_error(fmt::format("--gpus {}: NVML sees {} GPU(s) on this node (GPUs 0 to {}); name at most {}",
                                         options_.gpus, *seen.count, *seen.count - 1, *seen.count));
  }
  log(log_level::info, "GPUs: 0 to {} (--gpus {}; {})", options_.gpus - 1, options_.gpus,
      seen.count ? fmt::format("NVML sees {}", *seen.count) : "not checked: " + seen.why);
}

void node_server::bind() {
  // Every job holds a connection: take what the hard limit allows (services start at a soft 1024).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (options_.max_connections == 0) {
    // Two descriptors a connection (its socket and its peer's pidfd), with room below the limit
    // for the listener, the memfds of registrations, the pidfds of unregistered processes, /proc
    // reads and logs.
    const rlim_t limit = ::getrlimit(RLIMIT_NOFILE, &files) == 0 ? files.rlim_cur : 1024;
    options_.max_connections = (static_cast<std::size_t>(std::clamp<rlim_t>(limit, 128, 65536)) - 64) / 2;
  }
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  resolve_gpus();
  // The socket's mode and group are set as it is made, never through a name (listener.cpp).
  listener_ = socket_listener(options_.socket_path, options_.socket_mode, 128, socket_listener::default_takeover_wait,
                              {.allow_shared = options_.allow_shared_folders, .group = options_.socket_group});
  // The lock is this node's: what a predecessor that died holding processes left is continued.
  open_holds();
  continue_recorded();
  load_profiles();
  bind_class_sockets();
  if (options_.observe_gpus) observer_ = gpu_observer::nvml();
  start_mps();  // may change the policy in force (the default's fallback), or refuse a named one
  // A features file that cannot be written is the operator's typo: said at start, not in a log
  // line nobody reads.
  sync_node_features();
  if (!options_.node_features_path.empty() && written_features_.empty()) {
    throw std::runtime_error("--node-features-file " + options_.node_features_path + ": " + features_trouble_);
  }
  if (!options_.metrics_address.empty()) {
    metrics_ = std::make_unique<metrics_endpoint>(options_.metrics_address);
    log(log_level::info, "metrics on {}", metrics_->url());
  }
  // The reserve comes off the budget: said beside it, so a budget that leaves the jobs less than
  // meant is seen at start.
  std::string budget = std::to_string(options_.memory_budget.count() >> 20) + " MiB per GPU";
  if (const auto* tum = options_.memory_policy ? std::get_if<transparent_unified_memory::config>(&*options_.memory_policy)
                                               : nullptr) {
    budget += fmt::format(", of which the reserve (--memory.tgs.reserve-mib) keeps {} MiB free and the jobs share {} MiB",
                          tum->reserve.count() >> 20,
                          options_.memory_budget > tum->reserve ? (options_.memory_budget - tum->reserve).count() >> 20 : 0);
  }
  log(log_level::info,
      "listening on {} (mode {:04o}, ABI {}, policy {}, fault policy {}, memory policy {}, budget {}, residency split {}, "
      "opportunistic launch window {}, GPU observer: {}, at most {} connections, MPS: {})",
      options_.socket_path, options_.socket_mode, abi::version, any_rate_controller{options_.controller}.policy_name(),
      any_fault_policy{options_.fault_policy}.policy_name(),
      options_.memory_policy ? any_memory_policy{*options_.memory_policy}.policy_name() : "off",
      budget, to_string(options_.residency),
      options_.max_inflight_launches == 0 ? std::string("off") : std::to_string(options_.max_inflight_launches),
      observer_.description(), options_.max_connections,
      mps_->mode() == mps_mode::off ? std::string("off")
                                    : fmt::format("{}, {}", to_string(mps_->mode()),
                                                  mps_->available_everywhere() ? "available"
                                                                               : "not available: " + mps_->why_unavailable()));
  // How the processes the node signals are pinned (docs/trust-model.md, "Signals").
  switch (kernel_pinning()) {
    case pinning::peer_pidfd: break;
    case pinning::pidfd_open:
      log(log_level::info,
          "process identity: no SO_PEERPIDFD (Linux 6.5): a peer is pinned by pidfd_open at accept, which names "
          "another process of the same user if the peer ended and its pid was reused before the accept");
      break;
    case pinning::start_time:
      log(log_level::warn,
          "process identity: pidfds are not available (Linux 5.3, or a seccomp filter): signals go by pid after a "
          "start-time check, and a pid reused between the check and the signal would be hit");
      break;
  }
  if (options_.observe_gpus && !observer_.available()) {
    log(log_level::warn,
        "without NVML the node cannot check what jobs report against the GPU, nor see processes that never "
        "registered (docs/trust-model.md)");
  }
  write_cdi_spec();
  // Every socket listens and the CDI spec names them: units ordered after tgs-node may start.
  service_.ready(fmt::format("serving GPUs 0 to {} on {}", options_.gpus - 1, options_.socket_path));
  if (const auto ping = service_.ping_interval()) {
    log(log_level::info, "systemd watchdog: a ping every {} ms", std::chrono::duration_cast<std::chrono::milliseconds>(*ping).count());
  }
}

/// One socket per GPU and class in `--class-sockets`: the class is the socket's, not the job's.
void node_server::bind_class_sockets() {
  if (options_.class_socket_dir.empty()) return;
  // A folder the node makes is closed to everyone but its owner: containers reach their socket
  // through its bind mount, which needs no search permission on the folder, and local users then
  // cannot reach the production sockets (docs/trust-model.md). A folder the operator made keeps
  // its mode, but is refused (below) where it lets every local user be production. With
  // --class-sockets-group either folder becomes 0710 of that group: its members reach the sockets
  // on the host, and others still do not. Both folders
  // are opened without following a symlink and refused if another user owns them or, unless
  // --allow-shared-folders, may write to them (safe_dir.hpp).
  const auto [parent, name] = containers::split_path(options_.class_socket_dir);
  // Its parent (/run/tgs) is made if missing; owned by root or the node, writable by others or not
  // (the class socket folder below is what is checked for that, and is used through its descriptor).
  (void)containers::make_checked_folder(parent, 0755, true);
  bool made = false;
  const containers::unique_fd folder =
      containers::make_checked_folder(options_.class_socket_dir, 0700, options_.allow_shared_folders, &made);
  if (made) log(log_level::info, "made the class socket folder {} (mode 0700)", options_.class_socket_dir);
  if (options_.class_socket_group) {
    // The group's members may search the folder (0710), so they reach the sockets; others may not.
    containers::give_folder_to_group(folder.get(), options_.class_socket_dir, *options_.class_socket_group, 0710);
    log(log_level::info, "class socket folder {}: group {}, mode 0710 (--class-sockets-group)", options_.class_socket_dir,
        *options_.class_socket_group);
  }
  // Connecting needs write permission on the socket; reaching it, search permission on the folder.
  struct stat dir{};
  if (::fstat(folder.get(), &dir) != 0) {
    throw std::runtime_error("cannot stat " + options_.class_socket_dir + ": " + std::strerror(errno));
  }
  const bool others_enter = (dir.st_mode & S_IXOTH) != 0;
  if (others_enter && (options_.production_socket_mode & S_IWOTH) != 0) {
    const std::string what = fmt::format(
        "every local user can register as production: {} lets others in (mode {:04o}) and the production sockets "
        "would be mode {:04o}. Containers reach their socket through its mount, which needs neither: close the folder "
        "(chmod 0700) or narrow --production-socket-mode (docs/trust-model.md)",
        options_.class_socket_dir, dir.st_mode & 07777, options_.production_socket_mode);
    if (!options_.allow_open_production_socket) {
      throw std::runtime_error("refusing to start: " + what + "; --allow-open-production-socket if that is meant");
    }
    log(log_level::warn, "{} (--allow-open-production-socket)", what);
  }
  const containers::host_paths paths{.interposer = options_.interposer_path, .socket_dir = options_.class_socket_dir};
  for (std::uint32_t gpu = 0; gpu < options_.gpus; ++gpu) {
    for (const job_class cls : {job_class::production, job_class::opportunistic}) {
      const std::string path = containers::node_socket_path(paths, gpu, cls);
      const unsigned mode =
          cls == job_class::production ? options_.production_socket_mode : options_.opportunistic_socket_mode;
      class_listeners_.push_back(class_listener{
          socket_listener(path, mode, 128, socket_listener::default_takeover_wait,
                          {.allow_shared = options_.allow_shared_folders, .group = options_.socket_group}),
          grant{cls, gpu}});
    }
  }
  log(log_level::info, "class sockets: {}/gpu<0..{}>-production.sock (mode {:04o}) and -opportunistic.sock (mode {:04o})",
      options_.class_socket_dir, options_.gpus - 1, options_.production_socket_mode, options_.opportunistic_socket_mode);
}

/// The CDI spec of the class sockets, written atomically (`containers::write_cdi_spec`).
void node_server::write_cdi_spec() const {
  if (options_.cdi_spec_path.empty()) return;
  struct stat st{};
  if (::stat(options_.interposer_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw std::runtime_error("--cdi-spec: the interposer " + options_.interposer_path +
                             " is not a file (the spec mounts it into containers; --interposer names it)");
  }
  containers::cdi_spec_options spec;
  for (std::uint32_t gpu = 0; gpu < options_.gpus; ++gpu) spec.gpus.push_back(gpu);
  spec.paths = {.interposer = options_.interposer_path, .socket_dir = options_.class_socket_dir};
  // Where jobs become MPS clients, their containers reach the GPU's daemon (mps_daemons.hpp).
  if (mps_ && mps_share_) spec.paths.mps_pipe_dir = mps_->pipe_dir_pattern();
  containers::write_cdi_spec(options_.cdi_spec_path, spec, options_.allow_shared_folders);
  log(log_level::info, "wrote the CDI spec {} (devices {}=<0..{}>-production, -opportunistic)", options_.cdi_spec_path,
      containers::cdi_kind, options_.gpus - 1);
}

void node_server::run(const std::atomic<bool>& stop_flag) {
  std::vector<pollfd> fds;
  while (!stop_flag.load(std::memory_order_relaxed)) {
    const instant t = now();
    instant next = t + std::chrono::milliseconds{100};  // heartbeat and liveness cadence
    const std::uint64_t heartbeat = abi::monotonic_ns();
    for (auto& [gpu, l] : gpus_) next = std::min(next, l->run(t, heartbeat));
    correct_mechanisms();
    sync_profiles(false);
    // Jobs not (yet) in a control loop still need the heartbeat: their waits watch it.
    for (auto& [id, j] : jobs_) {
      if (!j->in_control) j->segment->heartbeat_ns.store(heartbeat, std::memory_order_release);
    }
    // Frees, evictions and restores change the footprints between requests: re-observe.
    for (auto& [gpu, m] : memory_gpus_) m->run(t);
    if (mps_) mps_->tick();  // a dead MPS daemon is started again
    sync_node_features();
    // The watchdog hears from this loop itself: a loop that stops turning is restarted.
    service_.tick(clock::now());
    if (const auto ping = service_.next_ping()) {
      next = std::min(next, t + std::chrono::duration_cast<duration>(*ping - clock::now()));
    }
    send_pending_replies();
    // A held-back allocation is answered as soon as the evictions it waits for are done.
    if (!pending_.empty()) next = std::min(next, t + std::chrono::milliseconds{2});
    // A process the node holds is looked at every `hold_check_period`.
    if (!recorded_held_.empty()) next = std::min(next, t + std::chrono::duration_cast<duration>(hold_check_period));
    if (clock::now() >= next_liveness_) {
      check_liveness();
      next_liveness_ = clock::now() + options_.liveness_period;
    }
    if (observer_.available() && clock::now() >= next_unregistered_check_) {
      check_unregistered();
      next_unregistered_check_ = clock::now() + unregistered_check_period;
    }
    if (clock::now() >= next_hold_check_) {
      check_holds();
      next_hold_check_ = clock::now() + hold_check_period;
    }
    if (metrics_ && clock::now() >= next_metrics_) {
      // The scrapers read this copy from their own threads: the loop never waits for them.
      metrics_->publish(metrics_snapshot());
      next_metrics_ = clock::now() + metrics_period;
    }
    sweep_connections();

    fds.clear();
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const class_listener& l : class_listeners_) fds.push_back({l.socket.fd(), POLLIN, 0});
    for (const auto& [fd, c] : connections_) {
      fds.push_back({fd, static_cast<short>(POLLIN | (c.outbox.empty() ? 0 : POLLOUT)), 0});
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::max(next - now(), duration::zero()));
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    if (ready == 0) continue;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == listener_.fd()) {
        accept_connections(p.fd, std::nullopt);
        continue;
      }
      if (const auto l = std::find_if(class_listeners_.begin(), class_listeners_.end(),
                                      [&](const class_listener& x) { return x.socket.fd() == p.fd; });
          l != class_listeners_.end()) {
        accept_connections(p.fd, l->granted);
        continue;
      }
      auto it = connections_.find(p.fd);
      if (it == connections_.end()) continue;
      if ((p.revents & POLLOUT) != 0) {
        flush(it->second);
        it = connections_.find(p.fd);
        if (it == connections_.end()) continue;
      }
      if ((p.revents & POLLIN) != 0) {
        on_readable(it->second);
      } else if ((p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) {
        close_connection(p.fd);  // the peer is gone and sent nothing more
      }
    }
  }
  // Stop in the order a successor needs: no new clients first (a node started now sees the lock
  // held by a node that no longer listens, and waits for it), then the MPS daemons and the
  // metrics port, which the successor takes over; the locks go last, in the destructor.
  service_.stopping();
  listener_.stop_listening();
  for (class_listener& l : class_listeners_) l.socket.stop_listening();
  continue_paused();
  log(log_level::info, "stopping; {} job(s) keep running unthrottled until a node is back", jobs_.size());
  remove_node_features();  // what it says is not offered without the node
  sync_profiles(true);      // what the jobs measured, for the next node
  if (mps_) mps_->stop();
  metrics_.reset();
}

void node_server::accept_connections(int listener_fd, std::optional<grant> granted) {
  for (;;) {
    int fd = ::accept4(listener_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && reserve_fd_ >= 0) {
      // Out of descriptors: take the spare one to accept the connection and drop it, so the
      // listener does not stay readable (and the loop spinning) with nobody able to take it.
      ::close(reserve_fd_);
      fd = ::accept4(listener_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) ::close(fd);
      reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      ++refused_since_said_;
      continue;
    }
    if (fd < 0) break;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || !admit(cred)) {
      ::close(fd);
      ++refused_since_said_;
      // It will try again: a registration in progress (pruned as unregistered processes are checked).
      if (cred.pid > 0 && observer_.available()) note_attempt(cred.pid, true);
      continue;
    }
    // The peer's identity is fixed now, not when it registers: its pidfd and start time. A peer
    // that has ended already has nothing to ask; one the node cannot pin (out of descriptors) is
    // dropped, said below, and tries again.
    pin_result peer = pinned_process::peer_of(fd);
    if (!peer.process) {
      ::close(fd);
      if (peer.error != 0) {
        ++unpinned_since_said_;
        unpinned_why_ = peer.why;
        if (cred.pid > 0 && observer_.available()) note_attempt(cred.pid, true);
      } else {
        log(log_level::debug, "dropped a connection of pid {} uid {}: {}", cred.pid, cred.uid, peer.why);
      }
      continue;
    }
    connection c;
    c.fd = fd;
    c.peer = std::move(*peer.process);
    c.uid = cred.uid;
    c.gid = cred.gid;
    c.pid = cred.pid;
    c.granted = granted;
    c.opened = clock::now();
    if (c.pid > 0 && observer_.available()) note_attempt(c.pid, false);
    connections_.emplace(fd, std::move(c));
  }
  if ((refused_since_said_ > 0 || unpinned_since_said_ > 0) && clock::now() - refusal_said_ >= std::chrono::seconds{1}) {
    if (refused_since_said_ > 0) {
      log(log_level::warn, "dropped {} connection(s) over the caps (--max-connections {}, --max-pending-per-user {})",
          refused_since_said_, options_.max_connections, options_.max_pending_per_user);
    }
    if (unpinned_since_said_ > 0) {
      log(log_level::warn, "dropped {} connection(s) whose process could not be pinned: {}", unpinned_since_said_,
          unpinned_why_);
    }
    refusal_said_ = clock::now();
    refused_since_said_ = 0;
    unpinned_since_said_ = 0;
  }
}

/// Whether a new connection of `cred` fits under the caps: a user's unregistered connections are
/// capped, and at the total cap the oldest unregistered connection gives way to it (registered
/// jobs are never closed to make room).
bool node_server::admit(const ucred& cred) {
  std::size_t pending_of_user = 0;
  const connection* oldest = nullptr;
  for (const auto& [fd, c] : connections_) {
    if (c.job_id != 0) continue;
    if (c.uid == cred.uid) ++pending_of_user;
    if (oldest == nullptr || c.opened < oldest->opened) oldest = &c;
  }
  if (pending_of_user >= options_.max_pending_per_user) return false;
  if (connections_.size() < options_.max_connections) return true;
  if (oldest == nullptr) return false;
  close_connection(oldest->fd);
  return true;
}

void node_server::on_readable(connection& c) {
  alignas(8) char buffer[abi::max_message_bytes];
  const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close_connection(c.fd);
    return;
  }
  const parsed_message m = parse_message(buffer, static_cast<std::size_t>(n));
  switch (m.kind) {
    case message_kind::other_abi: {
      // Another ABI: answer in our version so the job can say which, then forget it.
      abi::reject_reply reject;
      std::snprintf(reject.reason, sizeof(reject.reason), "tgs-node speaks ABI %u", abi::version);
      (void)send_message(c.fd, &reject, sizeof(reject));
      log(log_level::warn, "refused a client speaking ABI {} (ours is {})", m.abi_version, abi::version);
      close_connection(c.fd);
      return;
    }
    case message_kind::register_job:
      if (c.job_id == 0 && c.outbox.empty()) return register_job(c, m.registration);
      break;
    case message_kind::memory_request:
      if (c.job_id != 0) return on_memory_request(c, m.memory);
      break;
    case message_kind::status:
      if (c.job_id == 0 && c.outbox.empty()) return send_status(c, m.status.json != 0);
      break;
    case message_kind::malformed: break;
  }
  log(log_level::warn, "unexpected or malformed message ({} bytes) on connection {} (pid {}, uid {}{}); closed it", n,
      c.fd, c.pid, c.uid,
      c.granted ? fmt::format(", socket gpu{}-{}", c.granted->gpu, to_string(c.granted->cls)) : std::string());
  close_connection(c.fd);
}

void node_server::queue(connection& c, std::string message) {
  if (c.outbox.empty()) c.send_deadline = clock::now() + options_.send_timeout;
  c.outbox.push_back(std::move(message));
}

void node_server::flush(connection& c) {
  while (!c.outbox.empty()) {
    const std::string& m = c.outbox.front();
    if (::send(c.fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(m.size())) {
      if (errno == EAGAIN || errno == EINTR) return;  // the client reads on; POLLOUT resumes it
      close_connection(c.fd);
      return;
    }
    c.outbox.pop_front();
    c.send_deadline = clock::now() + options_.send_timeout;
  }
  if (c.close_when_sent) close_connection(c.fd);
}

/// Closes connections that said nothing within the handshake timeout and answers a client has
/// not read within the send timeout.
void node_server::sweep_connections() {
  const clock::time_point t = clock::now();
  std::vector<int> stale;
  for (const auto& [fd, c] : connections_) {
    if (!c.outbox.empty() ? t >= c.send_deadline : c.job_id == 0 && t - c.opened >= options_.handshake_timeout) {
      stale.push_back(fd);
    }
  }
  for (const int fd : stale) {
    const connection& c = connections_.at(fd);
    log(c.outbox.empty() ? log_level::debug : log_level::warn, "closed connection {} (pid {}, uid {}): {}", fd, c.pid,
        c.uid, c.outbox.empty() ? "no registration in time" : "its answer was not read in time");
    close_connection(fd);
  }
}

void node_server::close_connection(int fd) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const std::uint32_t id = it->second.job_id;
  if (id != 0) {
    on_job_ended(id, "connection closed");  // closes and erases the connection too
    return;
  }
  ::close(fd);
  connections_.erase(it);
}

}  // namespace tgs::cuda::node
