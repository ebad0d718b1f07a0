// SPDX-License-Identifier: Apache-2.0
// tgs-node's server: registration over a Unix socket with peer credentials, one memfd segment per
// job, per-GPU control loops, liveness checks and status.
#include "node_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

namespace tgs::cuda::node {

namespace {

std::string errno_text() { return std::strerror(errno); }

/// The start time of process `pid` (clock ticks since boot, /proc/<pid>/stat field 22) and
/// whether it is still running (not a zombie); empty when it is gone. The start time tells a
/// recycled pid from the registered process.
std::optional<std::uint64_t> process_start(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  std::string state;
  fields >> state;
  if (state == "Z" || state == "X" || state == "x") return std::nullopt;
  std::string field;
  for (int i = 4; i < 22 && (fields >> field); ++i) {
  }
  std::uint64_t start = 0;
  if (!(fields >> start)) return std::nullopt;
  return start;
}

bool send_all(int fd, const void* data, std::size_t size) {
  return ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(size);
}

const char* level_name(log_level l) {
  switch (l) {
    case log_level::error: return "error";
    case log_level::warn: return "warn";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "?";
}

}  // namespace

std::optional<job_class> parse_job_class(std::string_view s) noexcept {
  if (s == "production") return job_class::production;
  if (s == "opportunistic") return job_class::opportunistic;
  return std::nullopt;
}

/// A registered job: its process, its class and GPU, and the node's mapping of its segment.
struct node_server::job {
  std::uint32_t id = 0;
  int fd = -1;
  pid_t pid = 0;
  uid_t uid = 0;
  std::uint64_t start_ticks = 0;
  job_class cls = job_class::production;
  std::uint32_t gpu = 0;
  std::string name;
  abi::job_segment* segment = nullptr;
  clock::time_point since;

  ~job() {
    if (segment != nullptr) ::munmap(segment, abi::segment_bytes);
  }
};

/// A client connection: a job (after registration) or a status query.
struct node_server::connection {
  int fd = -1;
  std::uint32_t job_id = 0;  ///< 0 until it registers
};

template <typename... Args>
void node_server::log(log_level level, const char* format, const Args&... args) const {
  if (level > options_.verbosity) return;
  const double t = std::chrono::duration<double>(clock::now() - start_).count();
  fmt::print(stderr, "tgs-node [{:9.3f}] {:5} {}\n", t, level_name(level), fmt::format(fmt::runtime(format), args...));
}

node_server::node_server(node_options options)
    : options_(std::move(options)), start_(clock::now()), next_liveness_(start_) {
  // Validate the controller configuration now, so a bad flag fails at start, not at the first job.
  (void)any_rate_controller{options_.controller};
  if (options_.memory_policy) {
    (void)any_memory_policy{*options_.memory_policy};
    if (options_.memory_budget == bytes{}) {
      throw std::runtime_error("a memory policy needs a memory budget (--memory-budget-mib)");
    }
  }
}

node_server::~node_server() {
  for (auto& [fd, c] : connections_) ::close(fd);
}

instant node_server::now() const noexcept { return epoch + (clock::now() - start_); }

void node_server::bind() {
  listener_ = socket_listener(options_.socket_path, options_.socket_mode, 64);
  log(log_level::info,
      "listening on {} (ABI {}, policy {}, memory policy {}, budget {} MiB per GPU, residency split {}, "
      "opportunistic launch window {})",
      options_.socket_path, abi::version, any_rate_controller{options_.controller}.policy_name(),
      options_.memory_policy ? any_memory_policy{*options_.memory_policy}.policy_name() : "off",
      options_.memory_budget.count() >> 20, to_string(options_.residency),
      options_.max_inflight_launches == 0 ? std::string("off") : std::to_string(options_.max_inflight_launches));
}

void node_server::run(const std::atomic<bool>& stop_flag) {
  std::vector<pollfd> fds;
  while (!stop_flag.load(std::memory_order_relaxed)) {
    const instant t = now();
    instant next = t + std::chrono::milliseconds{100};  // heartbeat and liveness cadence
    const std::uint64_t heartbeat = abi::monotonic_ns();
    for (auto& [gpu, l] : gpus_) next = std::min(next, l->run(t, heartbeat));
    // Frees, evictions and restores change the footprints between requests: re-observe.
    for (auto& [gpu, m] : memory_gpus_) m->run(t);
    send_pending_replies();
    // A held-back allocation is answered as soon as the evictions it waits for are done.
    if (!pending_.empty()) next = std::min(next, t + std::chrono::milliseconds{2});
    if (clock::now() >= next_liveness_) {
      check_liveness();
      next_liveness_ = clock::now() + options_.liveness_period;
    }

    fds.clear();
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const auto& [fd, c] : connections_) fds.push_back({fd, POLLIN, 0});
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::max(next - now(), duration::zero()));
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("poll: " + errno_text());
    }
    if (ready == 0) continue;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == listener_.fd()) {
        accept_connections();
        continue;
      }
      auto it = connections_.find(p.fd);
      if (it == connections_.end()) continue;
      if ((p.revents & POLLIN) != 0) {
        on_readable(it->second);
      } else {
        close_connection(p.fd);  // POLLHUP / POLLERR without data: the peer is gone
      }
    }
  }
  log(log_level::info, "stopping; {} job(s) keep running unthrottled until a node is back", jobs_.size());
}

void node_server::accept_connections() {
  for (;;) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    connections_[fd] = connection{fd, 0};
  }
}

void node_server::on_readable(connection& c) {
  alignas(8) char buffer[abi::max_message_bytes];
  const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    close_connection(c.fd);
    return;
  }
  abi::message_header header;
  if (static_cast<std::size_t>(n) < sizeof(header)) {
    close_connection(c.fd);
    return;
  }
  std::memcpy(&header, buffer, sizeof(header));
  if (header.magic != abi::message_magic || header.abi_version != abi::version) {
    // Another ABI: answer in our version so the job can say which, then forget it.
    abi::reject_reply reject;
    std::snprintf(reject.reason, sizeof(reject.reason), "tgs-node speaks ABI %u", abi::version);
    send_all(c.fd, &reject, sizeof(reject));
    log(log_level::warn, "refused a client speaking ABI {} (ours is {})", header.abi_version, abi::version);
    close_connection(c.fd);
    return;
  }
  if (header.type == abi::message_type::register_job && c.job_id == 0 &&
      static_cast<std::size_t>(n) >= sizeof(abi::register_request)) {
    abi::register_request req;
    std::memcpy(&req, buffer, sizeof(req));
    register_job(c, req);
  } else if (header.type == abi::message_type::memory_request && c.job_id != 0 &&
             static_cast<std::size_t>(n) >= sizeof(abi::memory_request)) {
    abi::memory_request req;
    std::memcpy(&req, buffer, sizeof(req));
    on_memory_request(c, req);
  } else if (header.type == abi::message_type::status && static_cast<std::size_t>(n) >= sizeof(abi::status_request)) {
    abi::status_request req;
    std::memcpy(&req, buffer, sizeof(req));
    send_status(c, req.json != 0);
  } else {
    log(log_level::warn, "unexpected message type {} on connection {}", static_cast<unsigned>(header.type), c.fd);
    close_connection(c.fd);
  }
}

void node_server::register_job(connection& c, const abi::register_request& req) {
  auto refuse = [&](const std::string& why) {
    abi::reject_reply reject;
    std::snprintf(reject.reason, sizeof(reject.reason), "%s", why.c_str());
    send_all(c.fd, &reject, sizeof(reject));
    log(log_level::warn, "refused a job: {}", why);
    close_connection(c.fd);
  };
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(c.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return refuse("no peer credentials");
  if (!options_.allowed_uids.empty() &&
      std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(), cred.uid) == options_.allowed_uids.end()) {
    return refuse(fmt::format("uid {} is not allowed", cred.uid));
  }
  if (req.gpu >= options_.gpus) return refuse(fmt::format("GPU {} is not on this node ({} GPUs)", req.gpu, options_.gpus));
  const std::optional<std::uint64_t> start_ticks = process_start(cred.pid);
  if (!start_ticks) return refuse("process already gone");

  job_class cls = options_.default_class;
  if (req.job_class == abi::class_code::production) cls = job_class::production;
  if (req.job_class == abi::class_code::opportunistic) cls = job_class::opportunistic;

  const int memfd = ::memfd_create("tgs-job", MFD_CLOEXEC);
  if (memfd < 0) return refuse("memfd_create: " + errno_text());
  if (::ftruncate(memfd, abi::segment_bytes) != 0) {
    ::close(memfd);
    return refuse("ftruncate: " + errno_text());
  }
  void* mapping = ::mmap(nullptr, abi::segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (mapping == MAP_FAILED) {
    ::close(memfd);
    return refuse("mmap: " + errno_text());
  }
  auto j = std::make_unique<job>();
  j->id = next_job_id_++;
  j->fd = c.fd;
  j->pid = cred.pid;
  j->uid = cred.uid;
  j->start_ticks = *start_ticks;
  j->cls = cls;
  j->gpu = req.gpu;
  j->name.assign(req.name, strnlen(req.name, sizeof(req.name)));
  j->since = clock::now();
  // The page is zero-filled: every counter starts at 0; only the identity needs writing.
  auto* seg = new (mapping) abi::job_segment{};
  seg->magic = abi::segment_magic;
  seg->abi_version = abi::version;
  seg->size_bytes = sizeof(abi::job_segment);
  seg->job_id = j->id;
  seg->gpu = j->gpu;
  seg->job_class = cls == job_class::opportunistic ? abi::class_code::opportunistic : abi::class_code::production;
  seg->heartbeat_ns.store(abi::monotonic_ns(), std::memory_order_release);
  // The launch window paces opportunistic jobs only: a production job queues as it would alone.
  if (cls == job_class::opportunistic) {
    seg->max_inflight_launches.store(options_.max_inflight_launches, std::memory_order_relaxed);
  }
  j->segment = seg;
  // The allowance must be in place before the job can launch, so the loop sees the job first.
  gpu_loop(j->gpu).add_job(j->id, cls, seg, now());
  if (memory_loop* m = gpu_memory(j->gpu)) m->add_job(j->id, cls, seg, now());

  abi::register_reply reply;
  reply.job_id = j->id;
  reply.job_class = seg->job_class;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &memfd, sizeof(int));
  const bool sent = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(reply));
  ::close(memfd);
  const std::uint32_t id = j->id;
  log(log_level::info, "job {} registered: pid {} uid {} {} on GPU {} ({})", id, j->pid, j->uid, to_string(cls), j->gpu,
      j->name);
  c.job_id = id;
  jobs_[id] = std::move(j);
  if (!sent) remove_job(id, "could not send the registration reply");
}

void node_server::send_status(connection& c, bool json) {
  std::vector<std::string> lines;
  const double uptime = std::chrono::duration<double>(clock::now() - start_).count();
  const any_rate_controller sample{options_.controller};
  if (json) {
    lines.push_back(fmt::format(R"({{"node":{{"abi":{},"policy":"{}","socket":"{}","uptime_s":{:.3f},"jobs":{}}}}})",
                                abi::version, sample.policy_name(), options_.socket_path, uptime, jobs_.size()));
  } else {
    lines.push_back(fmt::format("tgs-node: ABI {}, policy {}, socket {}, up {:.1f} s, {} job(s)", abi::version,
                                sample.policy_name(), options_.socket_path, uptime, jobs_.size()));
  }
  for (const auto& [gpu, l] : gpus_) {
    const rate_decision& d = l->decision();
    std::string phase = "-";
    // The controller's view of the production job (R and the band), so an operator can see why
    // it throttles: R per second and the dead band in force; null for other policies.
    std::string max_rate = "null";
    std::string dead_band = "null";
    // The rate the controller compared with R in its last window: with --sync-wait-correction
    // it is not the launched rate, so the deviation it acted on is only visible here.
    std::string sample_rate = "null";
    // Completed reference refreshes since the pairing (--refresh-every-windows): beside the
    // "refreshing" phase it tells a refresh that measured R from one an idle window ended.
    std::string refreshes = "null";
    if (const auto* t = l->controller().target<tgs_rate_control>()) {
      phase = std::string(to_string(t->phase()));
      const double window_s = std::chrono::duration<double>(t->settings().production_window).count();
      if (t->max_rate() > 0.0) max_rate = fmt::format("{:.0f}", t->max_rate() / window_s);
      if (t->last_sample() > 0.0) sample_rate = fmt::format("{:.0f}", t->last_sample() / window_s);
      dead_band = fmt::format("{:.4f}", t->dead_band());
      refreshes = std::to_string(t->refreshes());
    }
    const std::string budget = d.opportunistic_budget ? std::to_string(*d.opportunistic_budget) : "unthrottled";
    const double window_ms = std::chrono::duration<double, std::milli>(d.budget_window).count();
    const memory_loop* m = gpu_memory(gpu);
    const std::string memory_policy = m != nullptr ? std::string(m->policy().policy_name()) : "off";
    const bool capped = m != nullptr && m->opportunistic_resident_limit() != bytes::max();
    const std::string limit = capped ? std::to_string(m->opportunistic_resident_limit().count()) : "null";
    if (json) {
      lines.push_back(fmt::format(
          R"({{"gpu":{},"phase":"{}","budget_blocks":{},"budget_window_ms":{:.1f},"memory_policy":"{}",)"
          R"("memory_budget_bytes":{},"opportunistic_resident_limit":{},"residency_split":{},)"
          R"("max_rate_blocks_per_s":{},"dead_band":{},"sample_blocks_per_s":{},"refreshes":{}}})",
          gpu, phase, d.opportunistic_budget ? budget : "null", window_ms, memory_policy,
          m != nullptr ? m->budget().count() : 0, limit,
          m != nullptr ? fmt::format("\"{}\"", to_string(m->split())) : std::string("null"), max_rate, dead_band,
          sample_rate, refreshes));
    } else {
      const std::string estimate =
          max_rate == "null" ? std::string()
                             : fmt::format(" (R {} blocks/s, dead band {}, last sample {} blocks/s)", max_rate,
                                           dead_band, sample_rate == "null" ? std::string("-") : sample_rate);
      lines.push_back(fmt::format("GPU {}: phase {}{}, opportunistic budget {} blocks per {:.0f} ms; memory policy {}{}",
                                  gpu, phase, estimate, budget, window_ms, memory_policy,
                                  m == nullptr ? std::string()
                                               : fmt::format(", budget {} MiB, opportunistic resident limit {} (split {})",
                                                             m->budget().count() >> 20,
                                                             capped ? fmt::format("{} MiB", m->opportunistic_resident_limit().count() >> 20)
                                                                    : std::string("none"),
                                                             to_string(m->split()))));
    }
    for (const job_report& r : l->report()) {
      const auto it = jobs_.find(r.id);
      if (it == jobs_.end()) continue;
      const job& j = *it->second;
      const double alive_s = std::chrono::duration<double>(clock::now() - j.since).count();
      const abi::job_segment& seg = *j.segment;
      const double mem_mib = static_cast<double>(seg.device_bytes.load() + seg.managed_bytes.load()) /
                             static_cast<double>(1 << 20);
      const std::uint64_t managed = seg.managed_bytes.load();
      const std::uint64_t managed_resident = std::min(managed, seg.managed_resident_bytes.load());
      const std::uint64_t job_limit = seg.resident_limit.load();
      const double throttled_s = static_cast<double>(j.segment->throttled_ns.load()) / 1e9;
      const std::string job_budget = r.budget_blocks ? std::to_string(*r.budget_blocks) : "unthrottled";
      if (json) {
        lines.push_back(fmt::format(
            R"({{"job":{},"gpu":{},"pid":{},"uid":{},"class":"{}","name":"{}","up_s":{:.1f},"blocks_per_s":{:.0f},)"
            R"("launches_per_s":{:.0f},"budget_blocks":{},"memory_mib":{:.1f},"throttled_s":{:.3f},)"
            R"("device_bytes":{},"managed_bytes":{},"alloc_calls":{},"free_calls":{},"map_calls":{},)"
            R"("managed_resident_bytes":{},"resident_bytes":{},"resident_limit":{},"evictions":{},"restores":{},)"
            R"("evicted_bytes_total":{},"restored_bytes_total":{},"evict_s_total":{:.3f},"restore_s_total":{:.3f},)"
            R"("denied_allocs":{},"converted_allocs":{},"host_placed_bytes":{},"sync_calls":{},)"
            R"("sync_wait_fraction":{:.3f},"max_inflight_launches":{},"window_waits":{},"window_wait_s":{:.3f},)"
            R"("window_timeouts":{},"launch_call_us":{}}})",
            j.id, gpu, j.pid, j.uid, to_string(j.cls), j.name, alive_s, r.blocks_per_s, r.launches_per_s,
            r.budget_blocks ? job_budget : "null", mem_mib, throttled_s, seg.device_bytes.load(), managed,
            seg.alloc_calls.load(), seg.free_calls.load(), seg.map_calls.load(), managed_resident,
            seg.device_bytes.load() + managed_resident,
            job_limit == abi::no_resident_limit || seg.memory_policy_active.load() == 0 ? std::string("null")
                                                                                         : std::to_string(job_limit),
            seg.evictions.load(), seg.restores.load(), seg.evicted_bytes_total.load(), seg.restored_bytes_total.load(),
            static_cast<double>(seg.evict_ns_total.load()) / 1e9, static_cast<double>(seg.restore_ns_total.load()) / 1e9,
            seg.denied_allocs.load(), seg.converted_allocs.load(), seg.host_placed_bytes.load(), seg.sync_calls.load(),
            r.sync_wait_fraction, seg.max_inflight_launches.load(), seg.window_waits.load(),
            static_cast<double>(seg.window_wait_ns.load()) / 1e9, seg.window_timeouts.load(),
            r.launch_call_us ? fmt::format("{:.2f}", *r.launch_call_us) : std::string("null")));
      } else {
        const std::uint32_t window = seg.max_inflight_launches.load();
        lines.push_back(fmt::format("  job {} pid {} {} '{}': {:.0f} blocks/s, {:.0f} launches/s, budget {}, "
                                    "{:.1f} MiB ({:.1f} MiB managed, {:.1f} MiB of it on the GPU), throttled {:.2f} s{}",
                                    j.id, j.pid, to_string(j.cls), j.name, r.blocks_per_s, r.launches_per_s,
                                    job_budget, mem_mib, static_cast<double>(managed) / (1 << 20),
                                    static_cast<double>(managed_resident) / (1 << 20), throttled_s,
                                    window == 0 ? std::string()
                                                : fmt::format(", launch window {} (waited {:.2f} s)", window,
                                                              static_cast<double>(seg.window_wait_ns.load()) / 1e9)));
      }
    }
  }
  for (const std::string& line : lines) {
    std::string message(sizeof(abi::message_header), '\0');
    abi::status_line_header h;
    const std::size_t text = std::min(line.size(), abi::max_message_bytes - sizeof(h));
    h.header.size = static_cast<std::uint32_t>(sizeof(h) + text);
    std::memcpy(message.data(), &h, sizeof(h));
    message.append(line, 0, text);
    if (!send_all(c.fd, message.data(), message.size())) break;
  }
  abi::message_header end{abi::message_magic, abi::version, abi::message_type::status_end, sizeof(abi::message_header)};
  send_all(c.fd, &end, sizeof(end));
}

void node_server::remove_job(std::uint32_t id, const char* why) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  job& j = *it->second;
  log(log_level::info, "job {} (pid {}, {}) left: {}", id, j.pid, to_string(j.cls), why);
  if (auto g = gpus_.find(j.gpu); g != gpus_.end()) g->second->remove_job(id, now());
  // Its memory no longer counts: the co-runner's limit rises (and its evicted memory returns).
  if (auto m = memory_gpus_.find(j.gpu); m != memory_gpus_.end()) m->second->remove_job(id, now());
  std::erase_if(pending_, [id](const pending_reply& p) { return p.job_id == id; });
  if (auto c = connections_.find(j.fd); c != connections_.end()) {
    ::close(j.fd);
    connections_.erase(c);
  }
  jobs_.erase(it);
}

void node_server::check_liveness() {
  std::vector<std::uint32_t> dead;
  for (const auto& [id, j] : jobs_) {
    const std::optional<std::uint64_t> start = process_start(j->pid);
    if (!start || *start != j->start_ticks) dead.push_back(id);
  }
  for (std::uint32_t id : dead) remove_job(id, "process exited");
}

void node_server::close_connection(int fd) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const std::uint32_t id = it->second.job_id;
  if (id != 0) {
    remove_job(id, "connection closed");  // closes and erases the connection too
    return;
  }
  ::close(fd);
  connections_.erase(it);
}

void node_server::on_memory_request(connection& c, const abi::memory_request& req) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return;
  const job& j = *it->second;
  memory_loop* m = gpu_memory(j.gpu);
  allocation_verdict verdict = allocation_verdict::grant_device;
  if (m != nullptr) verdict = m->request(j.id, bytes{req.bytes}, req.path, now());
  log(verdict == allocation_verdict::deny_out_of_memory ? log_level::info : log_level::debug,
      "job {} ({}) asks for {:.1f} MiB ({}): {}", j.id, to_string(j.cls), static_cast<double>(req.bytes) / (1 << 20),
      req.path == abi::allocation_path::fixed ? "device only" : "movable", to_string(verdict));
  const pending_reply reply{c.fd, j.id, j.gpu, static_cast<std::uint8_t>(verdict),
                            clock::now() + options_.eviction_wait, clock::now()};
  // A granted allocation that needs opportunistic memory evicted first waits for it, so the
  // driver has the room when the job allocates: the policy's "evict first" made real.
  pending_.push_back(reply);
  send_pending_replies();
}

void node_server::send_pending_replies() {
  std::vector<pending_reply> waiting;
  for (const pending_reply& p : pending_) {
    const memory_loop* m = gpu_memory(p.gpu);
    const bool room = m == nullptr || m->settled() ||
                      p.verdict == static_cast<std::uint8_t>(allocation_verdict::deny_out_of_memory);
    const bool late = clock::now() >= p.deadline;
    if (!room && !late) {
      waiting.push_back(p);
      continue;
    }
    if (!room) {
      log(log_level::warn, "job {}: opportunistic memory not evicted within {} ms; allocating anyway", p.job_id,
          options_.eviction_wait.count());
    } else if (clock::now() - p.since > std::chrono::milliseconds{10}) {
      log(log_level::info, "job {}: allocation waited {:.0f} ms for evictions", p.job_id,
          std::chrono::duration<double, std::milli>(clock::now() - p.since).count());
    }
    abi::memory_reply reply;
    reply.verdict = p.verdict;
    if (!send_all(p.fd, &reply, sizeof(reply))) log(log_level::warn, "job {}: could not send a memory reply", p.job_id);
  }
  pending_ = std::move(waiting);
}

node_server::memory_loop* node_server::gpu_memory(std::uint32_t gpu) {
  if (!options_.memory_policy) return nullptr;
  auto it = memory_gpus_.find(gpu);
  if (it == memory_gpus_.end()) {
    it = memory_gpus_
             .emplace(gpu, std::make_unique<memory_loop>(any_memory_policy{*options_.memory_policy},
                                                         options_.memory_budget, options_.residency))
             .first;
  }
  return it->second.get();
}

node_server::loop& node_server::gpu_loop(std::uint32_t gpu) {
  auto it = gpus_.find(gpu);
  if (it == gpus_.end()) {
    it = gpus_.emplace(gpu, std::make_unique<loop>(any_rate_controller{options_.controller}, now())).first;
  }
  return *it->second;
}

}  // namespace tgs::cuda::node
