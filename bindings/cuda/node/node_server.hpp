// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's server: the Unix socket jobs register on, the job table, liveness checks and one
/// `gpu_control_loop` per GPU, all driven from one poll loop on the steady clock. No client can
/// stall the loop: every socket is non-blocking, answers are queued and sent as the client reads
/// them, and connections, registrations and unanswered time are capped per user and per process.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "control_loop.hpp"
#include "gpu_observer.hpp"
#include "held_record.hpp"
#include "job_profiles.hpp"
#include "listener.hpp"
#include "memory_loop.hpp"
#include "metrics.hpp"
#include "mps_daemons.hpp"
#include "pinned_process.hpp"
#include "process_hold.hpp"
#include "process_origin.hpp"
#include "service_notify.hpp"
#include "node_abi.hpp"
#include "tgs/fault/any_fault_policy.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sharing/mechanism_choice.hpp"

namespace tgs::cuda::node {

/// Verbosity of the node's log.
enum class log_level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// What the node does about a process that uses a GPU and never registered there (its
/// interposer was not loaded, or it registered for another GPU): the observer finds it through
/// NVML (docs/trust-model.md, "Classes").
/// In increasing strength: the order in which the stronger of two is taken.
enum class unregistered_action : std::uint8_t {
  report,  ///< log it, show it in the status and the metrics
  pause,   ///< also hold it while a production job is on its GPU (`hold_with`), release it when none is
  kill,    ///< also end it (SIGKILL)
};

[[nodiscard]] std::string_view to_string(unregistered_action a) noexcept;
[[nodiscard]] std::optional<unregistered_action> parse_unregistered_action(std::string_view s) noexcept;

/// How the node holds a process it pauses (process_hold.hpp): `automatic` freezes it in a cgroup
/// of the node's where the node can make one, else stops it with SIGSTOP (the log says which).
enum class hold_preference : std::uint8_t { automatic, cgroup, signal };
[[nodiscard]] std::string_view to_string(hold_preference p) noexcept;
[[nodiscard]] std::optional<hold_preference> parse_hold_preference(std::string_view s) noexcept;

/// What the operator configures (flags or config file). The defaults suit a node shared by
/// several users (docs/trust-model.md).
struct node_options {
  std::string socket_path = "/run/tgs/node.sock";
  /// File mode of the socket: who may connect. Owner and group only by default: jobs of other
  /// users (other containers) reach it through `socket_group`, or a wider mode the operator sets.
  unsigned socket_mode = 0660;
  /// The socket's group (`--socket-group`); empty: the node's own.
  std::optional<gid_t> socket_group;
  /// Users allowed to register; with `allowed_gids` also empty: any user that can reach the socket.
  std::vector<uid_t> allowed_uids;
  /// Groups allowed to register (a peer's primary or supplementary group).
  std::vector<gid_t> allowed_gids;
  /// The class of a job whose operator set none, and of a job on the main socket whose user may
  /// not choose its own class.
  job_class default_class = job_class::opportunistic;
  /// Users and groups whose jobs may choose their class (`TGS_JOB_CLASS`) on the main socket. The
  /// node's own user always may (it could do anything the node does). Everyone else's jobs get
  /// `default_class` there; their class is granted by a class socket.
  std::vector<uid_t> trusted_uids;
  std::vector<gid_t> trusted_gids;
  /// Where to serve one socket per GPU and class (`gpu<i>-production.sock`,
  /// `gpu<i>-opportunistic.sock`); empty: none. A job that registers on one has that socket's
  /// class and GPU, whatever it asks: the operator grants a class by giving a container the
  /// socket (a CDI device, a Kubernetes allocation) or a user access to it.
  std::string class_socket_dir;
  /// The group of `class_socket_dir` (`--class-sockets-group`): the folder is given to it with
  /// mode 0710, so its members reach the class sockets on the host and other local users do not;
  /// containers reach theirs through its bind mount either way. Empty: the folder keeps its group
  /// and mode (0700 where the node makes it).
  std::optional<gid_t> class_socket_group;
  /// File modes of the production and opportunistic sockets. Anyone may connect by default: a
  /// container reaches only the socket mounted into it, whatever user it runs as; who reaches
  /// them on the host is decided by `class_socket_dir`'s own mode or by narrower modes here.
  unsigned production_socket_mode = 0666;
  unsigned opportunistic_socket_mode = 0666;
  /// Start even where every local user reaches a production socket (its mode gives others write
  /// and its folder lets others in); refused at start otherwise (`--allow-open-production-socket`).
  bool allow_open_production_socket = false;
  /// Accept socket and CDI spec folders that users other than their owner may write to; refused
  /// at start otherwise (`--allow-shared-folders`). A folder owned by another user than the
  /// node's (or root) is refused always.
  bool allow_shared_folders = false;
  /// Write the CDI spec of the class sockets (`tgs.io/gpu=<i>-<class>`) to this file at start.
  std::string cdi_spec_path;
  /// The interposer the CDI spec mounts into containers (on the host).
  std::string interposer_path;
  /// Serve Prometheus metrics on this address (`HOST:PORT`); empty: no metrics.
  std::string metrics_address;
  /// Keep a Node Feature Discovery local feature file here (`--node-features-file`); empty: none.
  std::string node_features_path;
  /// What to do about processes on a GPU that never registered there, once they have been seen
  /// for `unregistered_grace` (a starting job registers within it).
  unregistered_action on_unregistered = unregistered_action::report;
  /// The same on a GPU whose jobs the node makes MPS clients of its daemon, where the stronger of
  /// the two applies. There an unregistered process has bypassed the interposer: as a client of
  /// the node's daemon it chose its own dispatch priority (MPS takes a client's word for it) and
  /// shares the production job's fault domain; as a context of its own it time-slices against
  /// the MPS server. Either way it undoes the sharing the node deploys, so by default it is held
  /// while a production job is on its GPU (docs/trust-model.md, "MPS").
  unregistered_action on_unregistered_under_mps = unregistered_action::pause;
  std::chrono::milliseconds unregistered_grace{3000};
  /// How a paused process is held (`--hold-with`); `cgroup` where the node cannot is an error at
  /// start.
  hold_preference hold_with = hold_preference::automatic;
  /// Users whose unregistered GPU processes are only reported, never paused or killed (an MPS
  /// server's, for example).
  std::vector<uid_t> unregistered_exempt_uids;
  /// GPUs the node serves, [0, gpus): 0 means every GPU NVML sees, found at `bind`; a number
  /// narrows them (more than NVML sees is an error; without NVML the number is taken as given).
  /// A registration for a GPU index outside is refused.
  std::uint32_t gpus = 0;
  /// The rate controller's configuration (its alternative picks the policy).
  any_rate_controller::config controller = idle_harvest::config{};
  /// Whether the operator named the policy. A default whose mechanism is MPS gives way to
  /// `fallback_controller` where MPS is not available on the node (said in the log, the status
  /// and the metrics); a named one is an error there.
  bool policy_named = true;
  /// The policy in force where the default needs MPS and the node has none (idle-harvest).
  std::optional<any_rate_controller::config> fallback_controller;
  /// How opportunistic jobs may share where the policy in force shares through MPS
  /// (`--opportunistic-mechanism`): chosen per job from what the node measures
  /// (`tgs::mechanism_choice`; the default: no job whose kernels it has not timed short is an MPS
  /// client, so none can end production by dying in a long kernel), an MPS client wherever no
  /// other tenant's production job is on the GPU, or never a client.
  mechanism_preference opportunistic_mechanism = mechanism_preference::automatic;
  /// The choice's thresholds (`--mechanism-choice.long-kernel-ms`, `--mechanism-choice.gpu-bound-wait`).
  mechanism_choice::config choice;
  /// The MPS control daemons (`--mps`): managed by the node, the operator's, or none. An empty
  /// `mps.runtime_dir` is the socket's folder + `/mps`.
  mps_options mps;
  /// The memory policy's configuration; empty: no memory policy (allocations are only counted).
  std::optional<any_memory_policy::config> memory_policy;
  /// The fault policy's configuration (its alternative picks the policy): what a job's death
  /// does to the other jobs on its GPU. Separate contexts by default: nothing else ends.
  any_fault_policy::config fault_policy = separate_contexts::config{};
  /// Whether the operator named the fault policy. Unnamed, it follows the rate policy in force:
  /// `shared-fault-domain` where jobs are clients of one MPS server (a GPU fault of one ends the
  /// other: docs/results/mps-faults.md), `separate-contexts` otherwise.
  bool fault_policy_named = true;
  /// The per-GPU memory budget the memory policy shares out (smaller than the card).
  bytes memory_budget{};
  /// How an opportunistic job's resident limit is shared among its allocations
  /// (`tgs::plan_residency`, carried out by its interposer).
  residency_split residency = residency_split::in_order;
  /// How many of an opportunistic job's launches may be unfinished on the GPU at once (its
  /// interposer's launch window); 0: no bound.
  std::uint32_t max_inflight_launches = 0;
  /// How often a production job's interposer samples its GPU activity while an opportunistic job
  /// shares its GPU, in microseconds (`--activity-sample-us`).
  std::uint32_t activity_sample_us = abi::default_sample_period_us;
  /// How long a production allocation may wait for opportunistic memory to be evicted before
  /// the node lets it proceed anyway.
  std::chrono::milliseconds eviction_wait{5000};
  /// How long an opportunistic job over its limit may move nothing before allocations stop
  /// waiting for it (`gpu_memory_loop::settled`).
  std::chrono::milliseconds eviction_stall{1000};
  /// How often job processes are checked for having died (a dead job's share is reclaimed within
  /// this period even when a forked child keeps its connection open).
  std::chrono::milliseconds liveness_period{200};
  /// Watch the GPUs through NVML (`gpu_observer`): a production job steers the controller only
  /// once it holds a context on its GPU, and memory claimed at registration is checked.
  bool observe_gpus = true;
  /// Connections the node keeps open at most; 0: what its descriptor limit allows.
  std::size_t max_connections = 0;
  /// Connections of one user that have not registered (or are being answered a status), at most.
  std::size_t max_pending_per_user = 16;
  /// Registered jobs of one user, and of one process, at most.
  std::size_t max_jobs_per_user = 64;
  std::size_t max_jobs_per_process = 4;
  /// A connection that has not registered or asked for status within this is closed.
  std::chrono::milliseconds handshake_timeout{2000};
  /// A status answer the client has not read within this is dropped with its connection.
  std::chrono::milliseconds send_timeout{5000};
  log_level verbosity = log_level::info;
};

/// The node daemon. `run` serves until `stop` is called (or a signal sets the flag it watches).
class node_server {
 public:
  explicit node_server(node_options options);
  ~node_server();
  node_server(const node_server&) = delete;
  node_server& operator=(const node_server&) = delete;

  /// Binds the socket (`socket_listener`: replacing a stale one, refusing when another node holds
  /// it or the path is not a socket). Throws `std::runtime_error` with the reason.
  void bind();
  /// Serves until `stop_flag` becomes true.
  void run(const std::atomic<bool>& stop_flag);

 private:
  using clock = std::chrono::steady_clock;
  struct job;
  struct connection;
  struct gpu_page_file;
  /// What a class socket grants every job that registers on it.
  struct grant {
    job_class cls;
    std::uint32_t gpu;
  };
  /// A class socket and its grant.
  struct class_listener {
    socket_listener socket;
    grant granted;
  };
  /// A process seen on a GPU without a registration there.
  struct unregistered_process {
    std::uint32_t gpu = 0;
    pid_t pid = 0;
    uid_t uid = 0;
    std::optional<std::uint64_t> used_bytes;
    process_origin origin;
    clock::time_point first_seen;
    bool reported = false;
    /// The node holds it (means to: `observed` says whether the hold is in force), and how.
    bool paused = false;
    hold_method method = hold_method::sigstop;
    /// Under `cgroup_freeze`, the cgroup it came from and goes back to.
    std::string origin_cgroup;
    /// What the node last found when it looked at the process it holds, and how often it found
    /// it running and held it again (someone lifted the hold).
    hold_observed observed = hold_observed::running;
    std::uint64_t held_again = 0;
    bool killed = false;
    /// Its registration was under way at the last look (`registering`).
    bool excused = false;
    /// The process as first seen (its pid with its start time then): every signal goes through it.
    pinned_process process;
    /// What the node made of it, as the status and the metrics say: "held" only while it finds
    /// the hold in force, "holding" while it does not (yet).
    [[nodiscard]] const char* state() const noexcept {
      return killed ? "killed" : paused ? (holding(observed) ? "held" : "holding") : reported ? "reported" : "seen";
    }
  };
  using loop = gpu_control_loop<any_rate_controller>;
  /// How often the metrics snapshot is rebuilt: a scrape sees values at most this old.
  static constexpr std::chrono::milliseconds metrics_period{1000};
  /// How often the GPUs are searched for processes that never registered.
  static constexpr std::chrono::milliseconds unregistered_check_period{500};
  /// How often the processes the node holds are looked at: one found running again is held
  /// again within this.
  static constexpr std::chrono::milliseconds hold_check_period{50};
  using memory_loop = gpu_memory_loop<any_memory_policy>;
  /// One GPU's fault policy and what it has handled (for status).
  struct gpu_faults {
    any_fault_policy policy;
    std::uint64_t handled = 0;           ///< jobs that ended abruptly on the GPU while registered (faults)
    std::uint64_t co_runners_ended = 0;  ///< jobs the node ended because the policy said so
  };
  /// A verdict held back until the opportunistic jobs have made room (or the wait ran out).
  struct pending_reply {
    int fd;
    std::uint32_t job_id;
    std::uint32_t gpu;
    std::uint8_t verdict;
    std::uint32_t sequence;
    clock::time_point deadline;
    clock::time_point since;
  };

  [[nodiscard]] instant now() const noexcept;
  // node_server.cpp: connections and their I/O.
  void resolve_gpus();
  void bind_class_sockets();
  void write_cdi_spec() const;
  void accept_connections(int listener_fd, std::optional<grant> granted);
  [[nodiscard]] bool admit(const struct ucred& cred);
  void on_readable(connection& c);
  void queue(connection& c, std::string message);
  void flush(connection& c);
  void sweep_connections();
  void close_connection(int fd);
  // node_jobs.cpp: registration, the job table, memory requests.
  void register_job(connection& c, const abi::register_request& req);
  [[nodiscard]] std::optional<std::string> refusal(const connection& c, std::uint32_t gpu) const;
  [[nodiscard]] abi::job_holdings bounded_holdings(const job& j, const abi::job_holdings& claimed) const;
  void enter_control(job& j);
  void on_memory_request(connection& c, const abi::memory_request& req);
  void send_pending_replies();
  /// The GPU's memory loop, made at its first use; null without a memory policy.
  memory_loop* gpu_memory(std::uint32_t gpu);
  /// The GPU's memory loop if it has one already (a reader never makes one).
  [[nodiscard]] const memory_loop* gpu_memory(std::uint32_t gpu) const;
  void remove_job(std::uint32_t id, const char* why);
  /// A registered job ended (its connection closed or its process is gone): steps its GPU's
  /// fault policy and carries out the decision.
  void on_job_ended(std::uint32_t id, const char* why);
  gpu_faults& gpu_fault_state(std::uint32_t gpu);
  void check_liveness();
  [[nodiscard]] bool trusted(const connection& c) const;
  // node_observe.cpp: processes on the GPUs that never registered there.
  void check_unregistered();
  /// Whether `pid`'s registration is under way at `t`, so it is not acted on as unregistered yet:
  /// a connection of its own the caps dropped within the grace, for at most
  /// `registration_patience` graces after its first attempt.
  [[nodiscard]] bool registering(pid_t pid, clock::time_point t) const;
  /// The user's unregistered time on the GPU within `user_window`: (unexcused, excused).
  [[nodiscard]] std::pair<clock::duration, clock::duration> user_unregistered_time(std::uint32_t gpu, uid_t uid) const;
  /// A connection of `pid` accepted, or dropped by the caps.
  void note_attempt(pid_t pid, bool dropped);
  /// How many graces a registration in progress keeps an unregistered process, or a user whose
  /// attempts never get through, from being acted on.
  static constexpr int registration_patience = 10;
  /// How far back a user's unregistered time on a GPU counts.
  [[nodiscard]] clock::duration user_window() const { return 2 * registration_patience * options_.unregistered_grace; }
  /// What the node does about an unregistered process on `gpu` (`--unregistered-action`, and
  /// under MPS the stronger of it and `--unregistered-action-under-mps`); exempt users: report.
  [[nodiscard]] unregistered_action unregistered_action_for(std::uint32_t gpu, uid_t uid) const;
  void act_on(unregistered_process& p, bool production_on_gpu);
  /// Holds `u` (the record already lists it) by the node's method; false when it could not.
  bool hold(unregistered_process& u);
  /// Releases `u`, which the node holds; false when the process is gone.
  bool release(unregistered_process& u);
  /// Looks at every process the node holds and holds again any it finds running.
  void check_holds();
  void continue_paused();
  /// Chooses how the node holds processes (`--hold-with`), said in the log. Throws when the
  /// operator named cgroups and the node cannot make them.
  void open_holds();
  /// The processes the node holds, as its record lists them: (pid, start time) and the cgroup
  /// each came from (empty: held by SIGSTOP).
  using held_set = held_entries;
  [[nodiscard]] held_set held_now() const;
  /// The record of held processes beside the socket (`<socket>.paused`), so a node that dies
  /// holding one leaves its successor what to continue.
  [[nodiscard]] std::string held_record_path() const { return options_.socket_path + ".paused"; }
  /// At start, with the lock held: continues every process a predecessor's record lists whose
  /// start time still matches, then removes the record. A record the node cannot trust (another
  /// user's, not a regular file, too large, malformed) is said in the log and ignored.
  void continue_recorded();
  /// Replaces the record with `held` (removes it when empty), atomically. False, said in the log,
  /// when it could not: a process is then not held.
  bool write_held_record(const held_set& held);
  /// Brings the record in line with what the node holds now.
  void sync_held_record();
  // node_mps.cpp: MPS: the daemons, the policy in force, each job's client settings.
  void start_mps();
  [[nodiscard]] abi::mps_client mps_client_for(job_class cls, std::uint32_t gpu) const;
  // node_mechanism.cpp: how each opportunistic job shares its GPU, and the correction.
  /// The facts the choice reads for an opportunistic job of `uid` from `origin` on `gpu`.
  [[nodiscard]] choice_facts facts_for(std::uint32_t gpu, uid_t uid, const process_origin& origin,
                                       const std::optional<job_profile>& profile) const;
  /// Chooses `j`'s mechanism (an opportunistic job registering): sets its verdict and profile key.
  void choose_mechanism(job& j);
  /// Remembers what `j`'s segment measured (its longest kernel, its memory) in its profile.
  void note_profile(const job& j);
  /// Holds the opportunistic jobs of a GPU whose controller can no longer protect its production
  /// job; remembers it in their profiles once production recovers while they are held, and lets
  /// them go again when it does not within `correction_patience`.
  void correct_mechanisms();
  /// Under auto, the profiles outlive the node in `<socket>.profiles`, read at start (a file that
  /// is not the node's own, or not a profiles file, is ignored and said) and written whole when
  /// they changed, at most once a second and when the node stops.
  [[nodiscard]] std::string profiles_path() const { return options_.socket_path + ".profiles"; }
  void load_profiles();
  void sync_profiles(bool now);
  static constexpr std::chrono::seconds correction_patience{15};
  // node_features.cpp: the Node Feature Discovery feature file.
  [[nodiscard]] std::uint32_t mps_gpus_available() const;
  [[nodiscard]] std::string node_features_text() const;
  /// Rewrites the file when what it says has changed (cheap when it has not: every loop turn).
  void sync_node_features();
  /// Removes the file the node wrote (at its stop).
  void remove_node_features();
  // node_metrics.cpp: the metrics snapshot.
  [[nodiscard]] metric_snapshot metrics_snapshot() const;
  loop& gpu_loop(std::uint32_t gpu);
  /// The GPU's shared page, created on first use; null when it cannot be made (the GPU's jobs
  /// then run without gap filling).
  gpu_page_file* gpu_page(std::uint32_t gpu);
  // node_status.cpp: the status answer.
  struct job_numbers;
  [[nodiscard]] job_numbers numbers_of(const job& j, const std::vector<job_report>& reports, const memory_loop* m) const;
  void send_status(connection& c, bool json);
  [[nodiscard]] nlohmann::ordered_json mps_status() const;
  template <typename... Args>
  void log(log_level level, const char* format, const Args&... args) const;

  node_options options_;
  socket_listener listener_;
  /// The MPS daemons; null until `bind`.
  std::unique_ptr<mps_daemons> mps_;
  /// The MPS partition of the policy in force when its mechanism is MPS (its first decision's).
  std::optional<mps_partition> mps_share_;
  /// Why the policy in force is not the default the operator left (empty when it is).
  std::string policy_fallback_;
  std::vector<class_listener> class_listeners_;
  gpu_observer observer_;
  std::unique_ptr<metrics_endpoint> metrics_;
  clock::time_point next_metrics_;
  /// Readiness, watchdog pings and the stop, told to systemd (nothing outside it).
  service_notifier service_;
  /// Unregistered processes by (GPU, pid), and when the GPUs are next looked at.
  std::map<std::pair<std::uint32_t, pid_t>, unregistered_process> unregistered_;
  /// The registration attempts of processes not registered yet: when the first was accepted or
  /// dropped, and when the caps last dropped one (a busy node, one just restarted). What excuses
  /// a process from being acted on as unregistered, and for how long (node_observe.cpp).
  struct registration_attempt {
    clock::time_point first;
    std::optional<clock::time_point> dropped;
  };
  std::map<pid_t, registration_attempt> attempts_;
  /// When each user last got a job registered.
  std::map<uid_t, clock::time_point> last_registered_at_;
  /// Each user's time on each GPU with unregistered processes there: (when, time unexcused, time
  /// excused by a registration in progress), over the last `user_window`.
  struct user_sample {
    clock::time_point at;
    clock::duration unexcused;
    clock::duration excused;
  };
  std::map<std::pair<std::uint32_t, uid_t>, std::deque<user_sample>> user_time_;
  clock::time_point last_unregistered_check_;
  clock::time_point next_unregistered_check_;
  clock::time_point next_hold_check_;
  /// The node's frozen cgroups; empty where it holds with SIGSTOP.
  std::optional<hold_cgroups> hold_cgroups_;
  std::uint64_t unregistered_killed_ = 0;
  /// What the record of held processes lists now, and why it last could not be written (said
  /// once, until it can again).
  held_set recorded_held_;
  std::string held_record_trouble_;
  /// What the node features file says now (empty: not written), and why it last could not be.
  std::string written_features_;
  std::string features_trouble_;
  clock::time_point start_;
  std::map<int, connection> connections_;
  std::map<std::uint32_t, std::unique_ptr<job>> jobs_;
  std::map<std::uint32_t, std::unique_ptr<loop>> gpus_;
  std::map<std::uint32_t, std::unique_ptr<memory_loop>> memory_gpus_;
  std::map<std::uint32_t, std::unique_ptr<gpu_page_file>> pages_;
  std::map<std::uint32_t, gpu_faults> faults_;
  std::vector<pending_reply> pending_;
  /// The opportunistic jobs' profiles across their runs, and the choice that reads them.
  job_profiles profiles_;
  bool profiles_changed_ = false;
  clock::time_point profiles_written_{};
  std::string profiles_trouble_;
  mechanism_choice chooser_;
  std::uint32_t next_job_id_ = 1;
  clock::time_point next_liveness_;
  /// A spare descriptor, closed to accept (and drop) a connection when the node has run out.
  int reserve_fd_ = -1;
  /// When the node last said it refused connections (said at most once a second).
  clock::time_point refusal_said_;
  std::size_t refused_since_said_ = 0;
  /// Connections dropped since then because their peer could not be pinned (out of descriptors),
  /// and the kernel's last reason.
  std::size_t unpinned_since_said_ = 0;
  std::string unpinned_why_;
};

/// Parses "production" / "opportunistic".
[[nodiscard]] std::optional<job_class> parse_job_class(std::string_view s) noexcept;

}  // namespace tgs::cuda::node
