// SPDX-License-Identifier: Apache-2.0
// tgs-node's job table: registration (authorised, capped, one sealed memfd segment per job),
// what a job's claims are bounded by, departures, liveness, and memory requests.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "container_edits.hpp"
#include "fd_message.hpp"
#include "server_parts.hpp"

namespace tgs::cuda::node {

namespace {

std::string errno_text() { return std::strerror(errno); }

/// A memfd of one page, sealed so that nobody (the job holds the descriptor too) can shrink or
/// grow it: a shrunk segment would raise SIGBUS in the node at its next read.
int sealed_segment_fd(const char* name = "tgs-job", std::uint32_t bytes = abi::segment_bytes) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, bytes) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Whether NVML lists `pid` among the processes on a GPU, or cannot say (then the node goes by the
/// job's word, as without an observer).
bool listed_or_unknown(const std::optional<std::vector<gpu_process>>& list, pid_t pid) {
  return !list || std::any_of(list->begin(), list->end(), [&](const gpu_process& p) { return p.pid == pid; });
}

}  // namespace

/// Why a registration must be refused, if it must: an unauthorised user, a GPU the node does not
/// have, or a user or process already at its cap of jobs.
std::optional<std::string> node_server::refusal(const connection& c, std::uint32_t gpu) const {
  const bool restricted = !options_.allowed_uids.empty() || !options_.allowed_gids.empty();
  const bool uid_ok = std::find(options_.allowed_uids.begin(), options_.allowed_uids.end(), c.uid) !=
                      options_.allowed_uids.end();
  const bool gid_ok = std::any_of(options_.allowed_gids.begin(), options_.allowed_gids.end(),
                                  [&](gid_t g) { return c.peer.in_group(g); });
  if (restricted && !uid_ok && !gid_ok) return fmt::format("uid {} is not allowed to register", c.uid);
  if (gpu >= options_.gpus) return fmt::format("GPU {} is not on this node ({} GPUs)", gpu, options_.gpus);
  const auto count = [&](auto same) { return std::count_if(jobs_.begin(), jobs_.end(), [&](const auto& e) { return same(*e.second); }); };
  if (static_cast<std::size_t>(count([&](const job& j) { return j.pid == c.pid; })) >= options_.max_jobs_per_process) {
    return fmt::format("process {} already has {} jobs (--max-jobs-per-process)", c.pid, options_.max_jobs_per_process);
  }
  if (static_cast<std::size_t>(count([&](const job& j) { return j.uid == c.uid; })) >= options_.max_jobs_per_user) {
    return fmt::format("uid {} already has {} jobs (--max-jobs-per-user)", c.uid, options_.max_jobs_per_user);
  }
  return std::nullopt;
}

/// The memory a registering job claims to hold, bounded by what the node can check: the budget,
/// and where NVML says how much GPU memory the process uses, that (a process NVML does not list
/// holds nothing on the GPU). Managed bytes on the host are only bounded by the budget.
abi::job_holdings node_server::bounded_holdings(const job& j, const abi::job_holdings& claimed) const {
  abi::job_holdings h = claimed;
  if (options_.memory_policy) {
    const std::uint64_t budget = options_.memory_budget.count();
    h.device_bytes = std::min(h.device_bytes, budget);
    h.managed_bytes = std::min(h.managed_bytes, budget);
  }
  if (const std::optional<gpu_process> seen = observer_.process(j.gpu, j.pid)) {
    const std::uint64_t used = seen->pid == 0 ? 0 : seen->used_bytes.value_or(UINT64_MAX);
    h.device_bytes = std::min(h.device_bytes, used);
    h.managed_resident_bytes = std::min(h.managed_resident_bytes, used - h.device_bytes);
  }
  h.managed_resident_bytes = std::min(h.managed_resident_bytes, h.managed_bytes);
  if (h.device_bytes != claimed.device_bytes || h.managed_bytes != claimed.managed_bytes ||
      h.managed_resident_bytes != claimed.managed_resident_bytes) {
    log(log_level::warn,
        "job {} (pid {}) claims {} MiB device, {} MiB managed ({} MiB on the GPU); counted: {}, {} ({})", j.id, j.pid,
        claimed.device_bytes >> 20, claimed.managed_bytes >> 20, claimed.managed_resident_bytes >> 20,
        h.device_bytes >> 20, h.managed_bytes >> 20, h.managed_resident_bytes >> 20);
  }
  return h;
}

/// Puts a job into its GPU's control loop: at registration, or for a production job once the
/// node sees it hold a context on its GPU (it then starts steering the controller).
void node_server::enter_control(job& j) {
  loop& l = gpu_loop(j.gpu);
  l.add_job(j.id, j.cls, j.segment, now(), j.marks_wait);
  // A job chosen to wait waits from its first launch; so does a late one (register_job).
  if (j.mechanism && j.mechanism->mechanism == opportunistic_mechanism::held) l.hold(j.id, true);
  if (j.late && j.cls == job_class::opportunistic &&
      !(j.mechanism && j.mechanism->mechanism == opportunistic_mechanism::time_sliced)) {
    l.hold(j.id, true);
  }
  j.in_control = true;
}

void node_server::register_job(connection& c, const abi::register_request& req) {
  auto refuse = [&](const std::string& why) {
    abi::reject_reply reject;
    std::snprintf(reject.reason, sizeof(reject.reason), "%s", why.c_str());
    // What the node will do once the refused job uses a GPU unregistered: a job it would end
    // ends itself, with the reason on its stderr, instead of a SIGKILL it cannot explain.
    const unregistered_action then = unregistered_action_for(c.granted ? c.granted->gpu : req.gpu, c.uid);
    reject.then = then == unregistered_action::report ? abi::refused_then::runs
                  : then == unregistered_action::kill ? abi::refused_then::ended
                                                      : abi::refused_then::held;
    // Logged before the job hears it: what a refused job reports is already in the node's log.
    log(log_level::warn, "refused a job of pid {} uid {}: {}", c.pid, c.uid, why);
    (void)send_message(c.fd, &reject, sizeof(reject));
    close_connection(c.fd);
  };
  // The class and GPU are the operator's grant: the class socket's, else the job's own request
  // only from a user trusted to choose it, else the default (docs/trust-model.md, "Classes").
  std::optional<job_class> asked;
  if (req.job_class == abi::class_code::production) asked = job_class::production;
  if (req.job_class == abi::class_code::opportunistic) asked = job_class::opportunistic;
  job_class cls = options_.default_class;
  std::uint32_t gpu = req.gpu;
  std::string class_from = "default";
  if (c.granted) {
    cls = c.granted->cls;
    gpu = c.granted->gpu;  // the job's own index counts the GPUs its container sees
    class_from = containers::node_socket_name(gpu, cls);
  } else if (asked && trusted(c)) {
    cls = *asked;
    class_from = "request";
  }
  if (asked && *asked != cls) {
    log(log_level::info, "pid {} uid {} asked to be {}; it is {} ({})", c.pid, c.uid, to_string(*asked), to_string(cls),
        c.granted ? "the class of the socket it came through" : "its user may not choose its class");
  }
  if (const std::optional<std::string> why = refusal(c, gpu)) return refuse(*why);
  // The registrant is the process that connected, pinned at accept with its start time and groups.
  // If it has ended, its pid may name another process by now (another user's, one an attacker
  // waited for): nothing of that process is taken, and no job stands for it. The origin is read
  // before the check, so that a check passed says the read was of the registrant.
  process_origin origin = origin_of(c.pid);
  if (c.peer.exited()) return refuse("the process that connected has ended");

  const int memfd = sealed_segment_fd();
  if (memfd < 0) return refuse("cannot create a sealed segment: " + errno_text());
  void* mapping = ::mmap(nullptr, abi::segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (mapping == MAP_FAILED) {
    ::close(memfd);
    return refuse("mmap: " + errno_text());
  }
  auto j = std::make_unique<job>();
  j->id = next_job_id_++;
  j->fd = c.fd;
  j->process = std::move(c.peer);
  j->pid = j->process.pid();
  j->uid = j->process.uid();
  j->cls = cls;
  j->gpu = gpu;
  j->name.assign(req.name, strnlen(req.name, sizeof(req.name)));
  j->class_from = std::move(class_from);
  j->origin = std::move(origin);
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
  // Under the mechanism choice, with a policy that shares through MPS, their kernels are timed:
  // the longest decides whether a later start may be an MPS client. Elsewhere (another preference,
  // or a policy of separate contexts such as --mps off) nothing reads it, and the job is spared
  // the events.
  if (cls == job_class::opportunistic) {
    seg->max_inflight_launches.store(options_.max_inflight_launches, std::memory_order_relaxed);
    const bool timed = options_.opportunistic_mechanism == mechanism_preference::automatic && mps_share_.has_value();
    seg->time_kernels.store(timed ? 1 : 0, std::memory_order_relaxed);
  }
  // A job registering again (its node restarted) holds memory: the policy must count it from the
  // first step, before the job rewrites these lines with its own sums.
  const abi::job_holdings holdings = bounded_holdings(*j, req.holdings);
  seg->device_bytes.store(holdings.device_bytes, std::memory_order_relaxed);
  seg->managed_bytes.store(holdings.managed_bytes, std::memory_order_relaxed);
  seg->managed_resident_bytes.store(holdings.managed_resident_bytes, std::memory_order_relaxed);
  j->segment = seg;
  // How it shares the GPU is chosen before its context exists: the reply below carries it.
  if (cls == job_class::opportunistic) choose_mechanism(*j);
  // A production job is a client wherever the node runs MPS; an opportunistic one only where the
  // choice made it one (else its context is its own, time-sliced against the server's).
  abi::mps_client settings{};
  if (cls == job_class::production ||
      (j->mechanism && j->mechanism->mechanism == opportunistic_mechanism::mps_client)) {
    settings = mps_client_for(cls, j->gpu);
  }
  // CUDA already started in the process, outside the server it should be a client of: it cannot
  // join it now. Beside production, an opportunistic job outside MPS would take turns with the
  // server's work at normal priority, so it is held until it restarts.
  j->marks_wait = (req.flags & abi::register_flag_marks_wait) != 0;
  j->late = (req.flags & abi::register_flag_cuda_started) != 0 && settings.client != 0 &&
            (req.flags & abi::register_flag_mps_client) == 0;
  // Under `auto` the node may choose a separate context for it anyway: it shares that way.
  if (j->late && j->mechanism && options_.opportunistic_mechanism == mechanism_preference::automatic) {
    j->mechanism->mechanism = opportunistic_mechanism::time_sliced;
  }
  if (j->late) {
    log(log_level::warn, "job {} (pid {}, {}) started CUDA before it registered, outside GPU {}'s MPS server; {}",
        j->id, j->pid, to_string(cls), j->gpu,
        cls == job_class::production ? "it runs outside MPS, unprotected by the MPS priority, until it restarts"
        : j->mechanism && j->mechanism->mechanism == opportunistic_mechanism::time_sliced
            ? "it shares time-sliced instead (--opportunistic-mechanism auto)"
            : "held beside production until it restarts");
  }
  // The allowance must be in place before the job can launch, so the loop sees the job first.
  // A production job that holds no context on its GPU yet waits for one (check_liveness).
  if (cls != job_class::production || listed_or_unknown(observer_.processes(j->gpu), j->pid)) enter_control(*j);
  if (memory_loop* m = gpu_memory(j->gpu)) m->add_job(j->id, cls, seg, now(), holdings);

  // The GPU's page goes with the segment: writable to the production job that writes it (the
  // first on the GPU while none does), read-only to every other job.
  int page_fd = -1;
  if (gpu_page_file* gp = gpu_page(j->gpu)) {
    std::uint32_t none = 0;
    const bool writer = cls == job_class::production &&
                        gp->page->writer_job_id.compare_exchange_strong(none, j->id, std::memory_order_acq_rel);
    page_fd = writer ? ::fcntl(gp->fd, F_DUPFD_CLOEXEC, 0)
                     : ::open(fmt::format("/proc/self/fd/{}", gp->fd).c_str(), O_RDONLY | O_CLOEXEC);
    if (page_fd < 0) {
      log(log_level::warn, "job {}: cannot hand out GPU {}'s page ({}): no gap filling for it", j->id, j->gpu,
          errno_text());
      if (writer) gp->page->writer_job_id.store(0, std::memory_order_release);
    }
  }

  abi::register_reply reply;
  reply.job_id = j->id;
  reply.job_class = seg->job_class;
  reply.mps = settings;
  j->mps_client = settings.client != 0 && !j->late;
  const int fds[2] = {memfd, page_fd};
  const bool sent = send_with_fds(c.fd, &reply, sizeof(reply), fds, page_fd >= 0 ? 2 : 1);
  ::close(memfd);
  if (page_fd >= 0) ::close(page_fd);
  const std::uint32_t id = j->id;
  log(log_level::info, "job {} registered: pid {} uid {} {} ({}) on GPU {} ({}){}{}{}", id, j->pid, j->uid,
      to_string(cls), j->class_from, j->gpu, printable(j->name),
      j->origin.container.empty() ? "" : ", container " + short_container_id(j->origin.container),
      j->mechanism ? fmt::format(", {} ({})", to_string(j->mechanism->mechanism), to_string(j->mechanism->reason))
                   : std::string(j->mps_client ? ", an MPS client" : ""),
      j->in_control ? "" : "; it steers the controller once it holds a context there");
  c.job_id = id;
  // Its registration is through: no longer an attempt, and its user is making progress (a user
  // whose attempts keep getting through is not held to the patience of one who never registers).
  attempts_.erase(j->pid);
  last_registered_at_[j->uid] = clock::now();
  jobs_[id] = std::move(j);
  if (!sent) remove_job(id, "could not send the registration reply");
}

/// Whether the user of `c` may choose its job's class on the main socket: the node's own user (it
/// could do anything the node does), or a user or group the operator trusts.
bool node_server::trusted(const connection& c) const {
  if (c.uid == ::geteuid()) return true;
  if (std::find(options_.trusted_uids.begin(), options_.trusted_uids.end(), c.uid) != options_.trusted_uids.end()) {
    return true;
  }
  return std::any_of(options_.trusted_gids.begin(), options_.trusted_gids.end(),
                     [&](gid_t g) { return c.peer.in_group(g); });
}

void node_server::remove_job(std::uint32_t id, const char* why) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  job& j = *it->second;
  log(log_level::info, "job {} (pid {}, {}) left: {}", id, j.pid, to_string(j.cls), why);
  // What its run measured stays in its profile for its next start.
  note_profile(j);
  if (j.cls == job_class::opportunistic && j.profile) {
    ++profiles_.at(*j.profile).runs;
    profiles_changed_ = true;
  }
  if (auto g = gpus_.find(j.gpu); g != gpus_.end() && j.in_control) g->second->remove_job(id, now());
  // The page's writer gone, its samples no longer stand: no gap is open on them, and the next
  // production job to register writes the page.
  if (auto p = pages_.find(j.gpu); p != pages_.end() && p->second->page->writer_job_id.load() == id) {
    p->second->clear_activity();
    p->second->page->writer_job_id.store(0, std::memory_order_release);
  }
  // Its memory no longer counts: the co-runner's limit rises (and its evicted memory returns).
  if (auto m = memory_gpus_.find(j.gpu); m != memory_gpus_.end()) m->second->remove_job(id, now());
  std::erase_if(pending_, [id](const pending_reply& p) { return p.job_id == id; });
  if (auto c = connections_.find(j.fd); c != connections_.end()) {
    ::close(j.fd);
    connections_.erase(c);
  }
  jobs_.erase(it);
}

/// A job ends in order when its interposer's exit handler ran (`job_segment::exited`: `exit`, a
/// return from `main`) and none of its CUDA calls returned an error that leaves its context
/// unusable: not a fault, so the fault policy is not stepped and nothing is counted; its share and
/// memory are taken back all the same. A job whose calls returned such an error
/// (`job_segment::gpu_error`, `abi::sticky_context_error`) ended with a GPU fault of its own
/// context, however its process ended: the policy is stepped with `fault_kind::gpu_exception`.
/// Any other end (its connection closed or its process gone without the mark: a signal, SIGKILL,
/// a crash, an interposer older than the mark) is stepped as `fault_kind::killed` (the node is not
/// the job's parent and reads no exit status). An exit is no evidence of a GPU fault: whatever a
/// policy says of a `killed` job, the node ends no co-runner on one (docs/trust-model.md).
void node_server::on_job_ended(std::uint32_t id, const char* why) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const clock::time_point detected = clock::now();
  const job& failed = *it->second;
  const std::uint32_t gpu_error = failed.segment->gpu_error.load(std::memory_order_acquire);
  const bool gpu_fault = abi::sticky_context_error(gpu_error);
  if (!gpu_fault && failed.segment->exited.load(std::memory_order_acquire) != 0) {
    const std::string said = std::string(why) + ", after an orderly exit";
    remove_job(id, said.c_str());
    return;
  }
  const std::uint32_t gpu = failed.gpu;
  const job_class cls = failed.cls;
  const pid_t failed_pid = failed.pid;
  const fault_kind kind = gpu_fault ? fault_kind::gpu_exception : fault_kind::killed;
  if (gpu_fault) {
    log(log_level::warn, "job {} (pid {}, {}) on GPU {} reports CUDA error {} from its calls: a GPU fault of its context",
        id, failed_pid, to_string(cls), gpu, gpu_error);
  }
  // The co-runners: the jobs of the other class registered on the same GPU (a production job
  // still waiting for its context included: its process is there all the same) of the same user,
  // both clients of the GPU's MPS server. Another user's job shares no fault domain with it (MPS
  // servers are per user), nor, under the fault policy the rate policy implies, does a job in a
  // context of its own (the mechanism choice made it time-sliced); a fault policy the operator
  // named applies as named (a shared fault domain then models MPS for comparison). The node never
  // ends another user's job on what this job's segment says (docs/trust-model.md).
  const uid_t failed_uid = failed.uid;
  std::vector<std::uint32_t> co_runners;
  for (const auto& [other_id, other] : jobs_) {
    const bool one_domain = options_.fault_policy_named || (failed.mps_client && other->mps_client);
    if (other_id != id && other->gpu == gpu && other->cls != cls && other->uid == failed_uid && one_domain) {
      co_runners.push_back(other_id);
    }
  }
  gpu_faults& faults = gpu_fault_state(gpu);
  const fault_decision d = faults.policy.step(
      {.now = now(), .failed = cls, .kind = kind, .co_runner_present = !co_runners.empty()});
  ++faults.handled;
  // A process that is gone holds no share and no memory: the node always takes both back (what
  // `reclaim_share` and `reclaim_memory` ask); a policy that says otherwise is told so.
  if (!d.reclaim_share || !d.reclaim_memory) {
    log(log_level::warn, "fault policy {} keeps job {}'s {}; the node reclaims it anyway: the job is gone",
        faults.policy.policy_name(), id, !d.reclaim_share ? "share" : "memory");
  }
  remove_job(id, why);
  // Ending another user's job on a bare exit would hand every user a kill switch: a job that
  // registers, does nothing and exits. Under MPS the GPU itself ends a co-runner that a client's
  // end harms (docs/results/mps-faults.md); the node need not.
  // Nor on a fault the GPU keeps to the faulting client (a device-side assert).
  const bool end_co_runners =
      d.co_runner_terminated && kind == fault_kind::gpu_exception && abi::fault_crosses_mps_clients(gpu_error);
  if (d.co_runner_terminated && !end_co_runners) {
    log(log_level::info, "fault policy {} would end job {}'s co-runner; the node does not: {}",
        faults.policy.policy_name(), id,
        kind != fault_kind::gpu_exception ? "no GPU fault was seen"
                                          : "the GPU keeps this fault to the client that made it");
  }
  if (end_co_runners) {
    for (const std::uint32_t other_id : co_runners) {
      const auto o = jobs_.find(other_id);
      if (o == jobs_.end()) continue;
      const job& other = *o->second;
      log(log_level::warn,
          "ending job {} (pid {}, {}) on GPU {}: it shares the fault domain of job {} (pid {}, {}), which ended "
          "(fault policy {})",
          other_id, other.pid, to_string(other.cls), gpu, id, failed_pid, to_string(cls), faults.policy.policy_name());
      // Only the registered process itself, through its pidfd: a process that was given its pid
      // later is never reached.
      const signal_outcome sent = other.process.signal(SIGKILL);
      if (sent == signal_outcome::failed) {
        log(log_level::warn, "job {}: cannot send pid {} SIGKILL: {}", other_id, other.pid, errno_text());
      } else if (sent == signal_outcome::gone) {
        log(log_level::info, "job {} (pid {}) had ended already: nothing sent", other_id, other.pid);
      }
      ++faults.co_runners_ended;
      remove_job(other_id, "ended by the fault policy");
    }
  }
  const auto took = clock::now() - detected;
  if (took > d.reclaim_within) {
    log(log_level::warn, "job {}: reclaiming took {:.0f} ms, over the fault policy's {:.0f} ms", id,
        std::chrono::duration<double, std::milli>(took).count(),
        std::chrono::duration<double, std::milli>(d.reclaim_within).count());
  }
}

node_server::gpu_faults& node_server::gpu_fault_state(std::uint32_t gpu) {
  auto it = faults_.find(gpu);
  if (it == faults_.end()) it = faults_.emplace(gpu, gpu_faults{any_fault_policy{options_.fault_policy}}).first;
  return it->second;
}

void node_server::check_liveness() {
  std::vector<std::uint32_t> dead;
  for (const auto& [id, j] : jobs_) {
    if (j->process.exited()) dead.push_back(id);
    note_profile(*j);  // a live job's measurements count for jobs that start beside it
  }
  for (std::uint32_t id : dead) on_job_ended(id, "process exited");
  // Production jobs waiting for a context on their GPU: one NVML query per GPU.
  std::map<std::uint32_t, std::optional<std::vector<gpu_process>>> seen;
  for (auto& [id, j] : jobs_) {
    if (j->in_control) continue;
    auto [at, fresh] = seen.try_emplace(j->gpu);
    if (fresh) at->second = observer_.processes(j->gpu);
    if (listed_or_unknown(at->second, j->pid)) {
      log(log_level::info, "job {} (pid {}) holds a context on GPU {}: it steers the controller now", id, j->pid, j->gpu);
      enter_control(*j);
    } else if (!j->said_unseen && clock::now() - j->since > std::chrono::seconds{10}) {
      // A real training job holds a context within seconds; one that does not may be seen under
      // another pid (the node outside the host's PID namespace) or not at all (some MPS setups).
      log(log_level::warn,
          "job {} (pid {}, production) is not listed by NVML on GPU {} after 10 s and does not steer the "
          "controller; if the node runs in another PID namespace, or NVML does not list MPS clients here, "
          "run it with --gpu-observer none",
          id, j->pid, j->gpu);
      j->said_unseen = true;
    }
  }
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
  const pending_reply reply{c.fd, j.id, j.gpu, static_cast<std::uint8_t>(verdict), req.sequence,
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
    reply.sequence = p.sequence;
    if (!send_message(p.fd, &reply, sizeof(reply))) log(log_level::warn, "job {}: could not send a memory reply", p.job_id);
  }
  pending_ = std::move(waiting);
}

const node_server::memory_loop* node_server::gpu_memory(std::uint32_t gpu) const {
  const auto it = memory_gpus_.find(gpu);
  return it == memory_gpus_.end() ? nullptr : it->second.get();
}

node_server::memory_loop* node_server::gpu_memory(std::uint32_t gpu) {
  if (!options_.memory_policy) return nullptr;
  auto it = memory_gpus_.find(gpu);
  if (it == memory_gpus_.end()) {
    it = memory_gpus_
             .emplace(gpu, std::make_unique<memory_loop>(any_memory_policy{*options_.memory_policy},
                                                         options_.memory_budget, options_.residency,
                                                         options_.eviction_stall))
             .first;
  }
  return it->second.get();
}

node_server::gpu_page_file* node_server::gpu_page(std::uint32_t gpu) {
  auto it = pages_.find(gpu);
  if (it != pages_.end()) return it->second.get();
  auto file = std::make_unique<gpu_page_file>();
  file->fd = sealed_segment_fd("tgs-gpu", abi::gpu_page_bytes);
  void* mapping = file->fd < 0 ? MAP_FAILED
                               : ::mmap(nullptr, abi::gpu_page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file->fd, 0);
  if (mapping == MAP_FAILED) {
    log(log_level::warn, "cannot make GPU {}'s page ({}): its jobs run without gap filling", gpu, errno_text());
    return nullptr;
  }
  auto* page = new (mapping) abi::gpu_page{};
  page->magic = abi::gpu_page_magic;
  page->abi_version = abi::version;
  page->size_bytes = sizeof(abi::gpu_page);
  page->gpu = gpu;
  file->page = page;
  return pages_.emplace(gpu, std::move(file)).first->second.get();
}

node_server::loop& node_server::gpu_loop(std::uint32_t gpu) {
  auto it = gpus_.find(gpu);
  if (it == gpus_.end()) {
    it = gpus_.emplace(gpu, std::make_unique<loop>(any_rate_controller{options_.controller}, now())).first;
    it->second->operator_inflight_bound = options_.max_inflight_launches;
    it->second->sample_period_us = options_.activity_sample_us;
  }
  return *it->second;
}

}  // namespace tgs::cuda::node
