// SPDX-License-Identifier: Apache-2.0
// tgs-node: the per-node daemon (`tgs-node [flags]`) and its status query (`tgs-node status`).
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <string>

#include "container_edits.hpp"
#include "metrics.hpp"
#include "node_abi.hpp"
#include "node_server.hpp"
#include "tgs/core/settings_flags.hpp"
#include "tgs/fault/any_fault_policy.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/version.hpp"

namespace {

/// The default policy where the node has MPS (when the registry has it).
constexpr std::string_view mps_default_policy = "priority-share";

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested.store(true, std::memory_order_relaxed); }

/// A file mode as an operator writes it: octal with a leading 0, as chmod takes it (`0660`); a
/// number without the leading 0 is decimal, as earlier releases read every mode (`432` is 0660).
std::string parse_file_mode(const std::string& text, unsigned& mode) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return "a file mode is a number: octal with a leading 0 (0660), or decimal (432), not '" + text + "'";
  }
  const bool octal = text.size() > 1 && text.front() == '0';
  if (octal && text.find_first_of("89") != std::string::npos) {
    return "'" + text + "' starts with 0 (octal) and holds a digit over 7";
  }
  errno = 0;
  const unsigned long value = std::strtoul(text.c_str(), nullptr, octal ? 8 : 10);
  if (errno != 0 || value > 07777) {
    return fmt::format("a socket mode must be at most 07777, got {}", text);
  }
  mode = static_cast<unsigned>(value);
  return {};
}

/// Adds a socket-mode option that takes `parse_file_mode`'s forms and shows its default in octal.
CLI::Option* add_mode_option(CLI::App& app, const std::string& name, unsigned& mode, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [&mode, name](const std::string& text) {
            if (std::string why = parse_file_mode(text, mode); !why.empty()) throw CLI::ValidationError(name, why);
          },
          help + fmt::format(" (default {:04o})", mode))
      ->type_name("MODE");
}

/// The group `text` names (a group's name, or a number), for `flag`; empty, said on stderr, when
/// no group has that name.
std::optional<gid_t> resolve_group(const std::string& flag, const std::string& text) {
  if (const group* g = ::getgrnam(text.c_str())) return g->gr_gid;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<gid_t>(std::stoul(text));
  }
  fmt::print(stderr, "tgs-node: {}: no group named '{}'\n", flag, text);
  return std::nullopt;
}

/// Asks the node on `socket_path` for its status and prints the lines it sends.
int query_status(const std::string& socket_path, bool json) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    fmt::print(stderr, "tgs-node status: socket path too long\n");
    return 2;
  }
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    fmt::print(stderr, "tgs-node status: no node on {}: {}\n", socket_path, std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return 1;
  }
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  tgs::cuda::abi::status_request req;
  req.json = json ? 1 : 0;
  if (::send(fd, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) {
    fmt::print(stderr, "tgs-node status: send: {}\n", std::strerror(errno));
    ::close(fd);
    return 1;
  }
  char buffer[tgs::cuda::abi::max_message_bytes];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    tgs::cuda::abi::message_header h;
    if (n < static_cast<ssize_t>(sizeof(h))) {
      fmt::print(stderr, "tgs-node status: the node closed the connection early\n");
      ::close(fd);
      return 1;
    }
    std::memcpy(&h, buffer, sizeof(h));
    if (h.magic != tgs::cuda::abi::message_magic || h.abi_version != tgs::cuda::abi::version) {
      fmt::print(stderr, "tgs-node status: the node speaks ABI {}, this tool {}\n", h.abi_version,
                 tgs::cuda::abi::version);
      ::close(fd);
      return 1;
    }
    if (h.type == tgs::cuda::abi::message_type::status_end) break;
    if (h.type == tgs::cuda::abi::message_type::status_line) {
      fmt::print("{}\n", std::string_view(buffer + sizeof(h), static_cast<std::size_t>(n) - sizeof(h)));
    }
  }
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tgs::cuda::node;
  CLI::App app{"tgs-node: per-node daemon of transparent GPU sharing (TGS rate control on real GPUs)"};
  app.set_config("--config", "", "read options from a TOML/INI file (flags override it)");
  app.set_version_flag("--version", "tgs-node " TGS_VERSION);
  node_options options;
  std::string default_class = "opportunistic";
  // The default policy: priority-share where the node has MPS, idle-harvest where it has not
  // (node_options::policy_named); a policy the operator names is used as named.
  std::string policy;
  std::string level = "info";
  int liveness_ms = static_cast<int>(options.liveness_period.count());
  tgs::any_rate_controller::configs rate_settings;
  tgs::any_memory_policy::configs memory_settings;
  tgs::any_fault_policy::configs fault_settings;

  app.add_option("--socket", options.socket_path, "Unix socket jobs register on")->capture_default_str();
  add_mode_option(app, "--socket-mode", options.socket_mode,
                  "file mode of the socket, octal with a leading 0 (0660: owner and group; 0666 lets every local user "
                  "connect; a number without the leading 0 is decimal, 432 = 0660)");
  std::string socket_group;
  app.add_option("--socket-group", socket_group, "group of the socket (a name or a number): its members may connect");
  app.add_option("--allow-uid", options.allowed_uids,
                 "users allowed to register (with --allow-gid also unset: anyone reaching the socket)");
  app.add_option("--allow-gid", options.allowed_gids, "groups allowed to register (a process's primary or supplementary group)");
  // What one user can take of the node (docs/trust-model.md): caps and timeouts.
  app.add_option("--max-connections", options.max_connections,
                 "connections kept open at most (default: what the descriptor limit allows)");
  app.add_option("--max-pending-per-user", options.max_pending_per_user,
                 "connections of one user that have not registered (or await a status answer), at most")
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}))
      ->capture_default_str();
  app.add_option("--max-jobs-per-user", options.max_jobs_per_user, "registered jobs of one user, at most")
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}))
      ->capture_default_str();
  app.add_option("--max-jobs-per-process", options.max_jobs_per_process, "registered jobs of one process, at most")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}))
      ->capture_default_str();
  int handshake_timeout_ms = static_cast<int>(options.handshake_timeout.count());
  app.add_option("--handshake-timeout-ms", handshake_timeout_ms,
                 "a connection that has not registered or asked for status within this is closed")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  std::string gpu_observer = "nvml";
  app.add_option("--gpu-observer", gpu_observer,
                 "how the node sees the GPUs without asking the jobs: nvml (processes and their memory; checks what "
                 "jobs report) or none")
      ->check(CLI::IsMember({"nvml", "none"}))
      ->capture_default_str();
  app.add_option("--default-class", default_class,
                 "class of a job on the main socket whose operator set no TGS_JOB_CLASS, or whose user may not "
                 "choose its class (--trust-uid, --trust-gid)")
      ->check(CLI::IsMember({"production", "opportunistic"}))
      ->capture_default_str();
  // Classes the job cannot forge (docs/trust-model.md, "Classes"): a class socket's, or a trusted
  // user's own choice on the main socket.
  app.add_option("--class-sockets", options.class_socket_dir,
                 "serve one socket per GPU and class in this folder (gpu<i>-production.sock, "
                 "gpu<i>-opportunistic.sock): a job registered there has that class and GPU whatever it asks; "
                 "the device plugin and the CDI spec mount them into containers (e.g. /run/tgs)");
  std::string class_sockets_group;
  app.add_option("--class-sockets-group", class_sockets_group,
                 "give the --class-sockets folder to this group (a name or a number) with mode 0710: its members "
                 "reach the class sockets on the host, other local users do not (containers reach theirs through "
                 "its mount either way); a name that is no group is an error at start. The package's unit names "
                 "tgs-production, a group the package makes");
  add_mode_option(app, "--production-socket-mode", options.production_socket_mode,
                  "file mode of the production class sockets, octal with a leading 0 (0666: any process that reaches "
                  "the file; 0660: owner and --socket-group)");
  add_mode_option(app, "--opportunistic-socket-mode", options.opportunistic_socket_mode,
                  "file mode of the opportunistic class sockets, octal with a leading 0");
  app.add_flag("--allow-open-production-socket", options.allow_open_production_socket,
               "start even where every local user can register as production: the production sockets' mode gives "
               "others write (the default 0666) and the --class-sockets folder lets others in (o+x); refused at start "
               "otherwise");
  app.add_flag("--allow-shared-folders", options.allow_shared_folders,
               "accept a socket folder (of --socket or --class-sockets) or a --cdi-spec folder that users other than "
               "its owner may write to (group or others write permission), where they could replace the files the "
               "node makes; refused at start otherwise. A folder owned by another user than the node's (or root) is "
               "refused always");
  app.add_option("--trust-uid", options.trusted_uids,
                 "users whose jobs may choose their class (TGS_JOB_CLASS) on the main socket; the node's own user "
                 "always may, everyone else's jobs get --default-class there");
  app.add_option("--trust-gid", options.trusted_gids,
                 "groups whose jobs may choose their class on the main socket (a process's primary or supplementary "
                 "group)");
  app.add_option("--cdi-spec", options.cdi_spec_path,
                 "write the CDI spec of the class sockets (devices tgs.io/gpu=<i>-production and "
                 "tgs.io/gpu=<i>-opportunistic) to this file at start, e.g. /etc/cdi/tgs.json or /run/cdi/tgs.json; "
                 "needs --class-sockets");
  app.add_option("--interposer", options.interposer_path,
                 "the interposer the CDI spec mounts into containers (default: " TGS_INTERPOSER_FROM_BIN
                 " beside tgs-node, where the package installs it)");
  app.add_option("--metrics-address", options.metrics_address,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IPv4 address, localhost, or empty for "
                 "every interface; PORT 0 picks a free one, which the log names), e.g. 127.0.0.1:9400");
  app.add_option("--node-features-file", options.node_features_path,
                 "keep a Node Feature Discovery local feature file here (e.g. "
                 "/etc/kubernetes/node-feature-discovery/features.d/tgs): tgs's version, GPUs, classes, MPS and "
                 "policies, which NFD turns into feature.node.kubernetes.io/tgs.* node labels; rewritten when they "
                 "change, removed when tgs-node stops. Its folder must exist");
  std::string unregistered = std::string(to_string(options.on_unregistered));
  app.add_option("--unregistered-action", unregistered,
                 "what to do about a process that uses a GPU (as NVML lists it) without having registered there: "
                 "report (the log, the status, the metrics), pause (also hold it while a production job is on its "
                 "GPU: see --hold-with) or kill (also SIGKILL it)")
      ->check(CLI::IsMember({"report", "pause", "kill"}))
      ->capture_default_str();
  std::string unregistered_under_mps = std::string(to_string(options.on_unregistered_under_mps));
  app.add_option("--unregistered-action-under-mps", unregistered_under_mps,
                 "the same on a GPU whose jobs are clients of the node's MPS daemon, where the stronger of the two "
                 "applies: a process there that never registered went around the interposer and chose its own MPS "
                 "priority, so by default it is held while a production job is on its GPU")
      ->check(CLI::IsMember({"report", "pause", "kill"}))
      ->capture_default_str();
  int unregistered_grace_ms = static_cast<int>(options.unregistered_grace.count());
  app.add_option("--unregistered-grace-ms", unregistered_grace_ms,
                 "how long a process may use a GPU unregistered before the node reports it and acts (a starting "
                 "job registers within it)")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  std::string hold_with = std::string(to_string(options.hold_with));
  app.add_option("--hold-with", hold_with,
                 "how a paused process is held: cgroup (moved into a frozen cgroup v2 of the node's, which its owner "
                 "cannot thaw; needs root), signal (SIGSTOP, sent again whenever it is found running) or auto "
                 "(cgroup where the node can make one, else signal; the log says which)")
      ->check(CLI::IsMember({"auto", "cgroup", "signal"}))
      ->capture_default_str();
  app.add_option("--unregistered-exempt-uid", options.unregistered_exempt_uids,
                 "users whose unregistered GPU processes are only reported, never paused or killed (an MPS "
                 "server's user, for example)");
  app.add_option("--gpus", options.gpus,
                 "serve GPUs 0 to N-1 (default: every GPU NVML sees; more than NVML sees is an error; required "
                 "where NVML cannot be loaded)")
      ->check(CLI::Range(1U, 1024U));
  std::vector<std::string> node_policies;  // the controllers tgs-node can carry out
  for (std::string_view n : tgs::rate_controller_names()) {
    const auto t = tgs::any_rate_controller::traits_of_policy(n);
    // An MPS policy's partition is carried out by the node's MPS daemons and the jobs' client
    // settings (--mps); MIG needs the GPU repartitioned and AntMan the framework.
    if (t->enforced_by == tgs::enforcement::interposer || t->enforced_by == tgs::enforcement::placement ||
        t->mechanism == tgs::sharing_mechanism::mps) {
      node_policies.emplace_back(n);
    }
  }
  const std::string fallback_policy = "idle-harvest";
  const std::string default_policy =
      tgs::any_rate_controller::traits_of_policy(mps_default_policy) ? std::string(mps_default_policy) : fallback_policy;
  app.add_option("--policy", policy,
                 "rate controller (default: " + default_policy +
                     (default_policy == fallback_policy ? std::string()
                                                        : " where MPS is available on the node, else " + fallback_policy) +
                     "; an MPS policy needs --mps managed or external; MIG is carried out by the GPU and AntMan by "
                     "the framework, not by tgs-node)")
      ->check(CLI::IsMember(node_policies));
  std::string mps_mode_name = "managed";
  app.add_option("--mps", mps_mode_name,
                 "MPS control daemons: managed (tgs-node starts one per GPU, with its pipe and log folders in <the "
                 "socket's folder>/mps/gpu<N>, restarts it if it dies and stops it at exit), external (the operator "
                 "runs them: --mps-pipe-dir) or off. MPS makes the default policy priority-share; without it the "
                 "node falls back to idle-harvest")
      ->check(CLI::IsMember({"managed", "external", "off"}))
      ->capture_default_str();
  std::string opportunistic_mechanism = std::string(tgs::to_string(options.opportunistic_mechanism));
  app.add_option("--opportunistic-mechanism", opportunistic_mechanism,
                 "how an opportunistic job shares its GPU where the policy shares through MPS: auto (chosen per job at "
                 "registration from what the node measures: an MPS client only beside a production job of the same "
                 "tenant, with its kernels measured short in an earlier run and its memory fitting, else a "
                 "time-sliced context of its own; docs/operator-guide.md, \"How each opportunistic job shares\"), "
                 "mps (an MPS client wherever no other tenant's production job is on its GPU; a SIGKILL of it in a "
                 "long kernel ends production) or time-sliced (never an MPS client)")
      ->check(CLI::IsMember({"auto", "mps", "time-sliced"}))
      ->capture_default_str();
  // The choice's thresholds under auto, from its settings table as every policy's:
  // `--mechanism-choice.long-kernel-ms`, `--mechanism-choice.gpu-bound-wait`.
  std::vector<tgs::policy_flag<CLI::Option>> choice_flags;
  tgs::add_setting_flags<tgs::mechanism_choice, CLI::App, CLI::Option>(app, options.choice, "", choice_flags);
  app.add_option("--mps-control", options.mps.control,
                 "the MPS control program for --mps managed (a path, or a name looked up on PATH)")
      ->capture_default_str();
  app.add_option("--mps-pipe-dir", options.mps.pipe_dir,
                 "--mps external: the pipe folder of the operator's control daemons (CUDA_MPS_PIPE_DIRECTORY); %u in "
                 "it stands for the GPU index, e.g. /run/nvidia-mps/gpu%u");
  app.add_option("--liveness-ms", liveness_ms, "period of the check for dead job processes")
      ->check(CLI::Range(10, 1000))
      ->capture_default_str();
  app.add_option("--log-level", level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  // Pacing beside any rate policy: how far ahead of the GPU an opportunistic job may queue
  // (intercept/launch_window.hpp says why; docs/cuda-backend.md, "The launch window").
  app.add_option("--max-inflight-launches", options.max_inflight_launches,
                 "how many of an opportunistic job's launches may be unfinished on the GPU at once (its launch "
                 "window; 0: no bound, as without tgs)")
      ->check(CLI::Range(std::uint32_t{0}, tgs::cuda::abi::max_launch_window))
      ->capture_default_str();
  // Gap filling's signal: faster samples find shorter gaps and cost the production job's driver
  // more queries (docs/cuda-backend.md, "Gap filling").
  app.add_option("--activity-sample-us", options.activity_sample_us,
                 "how often a production job's interposer queries its streams while an opportunistic job shares "
                 "its GPU, microseconds")
      ->check(CLI::Range(tgs::cuda::abi::fastest_sample_period_us, tgs::cuda::abi::slowest_sample_period_us))
      ->capture_default_str();
  // Every policy's settings, from the tables tgs-sim shares: `--tgs.dead-band`, `--memory.tgs.reserve-mib`.
  const auto rate_flags = tgs::add_registry_flags<tgs::any_rate_controller, CLI::Option>(app, rate_settings, "");

  std::string memory_policy = "off";
  double memory_budget_mib = 0;
  int eviction_wait_ms = static_cast<int>(options.eviction_wait.count());
  std::vector<std::string> memory_names{"off"};
  memory_names.insert(memory_names.end(), tgs::memory_policy_names().begin(), tgs::memory_policy_names().end());
  app.add_option("--memory-policy", memory_policy,
                 "memory policy (off: allocations are only counted; tgs: production memory on the GPU, opportunistic "
                 "memory in unified memory, evicted to host when the budget is oversubscribed)")
      ->check(CLI::IsMember(memory_names))
      ->capture_default_str();
  app.add_option("--memory-budget-mib", memory_budget_mib,
                 "per-GPU memory budget the memory policy shares out, MiB (smaller than the card; required "
                 "with a memory policy)")
      ->check(CLI::Range(0.0, 1e9));
  const auto memory_flags =
      tgs::add_registry_flags<tgs::any_memory_policy, CLI::Option>(app, memory_settings, "memory.");
  std::string residency_split_name = std::string(tgs::to_string(options.residency));
  app.add_option("--residency-split", residency_split_name,
                 "how an opportunistic job's resident limit is shared among its allocations, smallest first: "
                 "in-order (each whole until one does not fit, which keeps what fits) or even (the ones that do "
                 "not fit whole keep equal prefixes: every embedding table keeps its first rows)")
      ->check(CLI::IsMember({std::string(tgs::to_string(tgs::residency_split::in_order)),
                             std::string(tgs::to_string(tgs::residency_split::even))}))
      ->capture_default_str();
  app.add_option("--eviction-wait-ms", eviction_wait_ms,
                 "how long a production allocation waits for opportunistic memory to be evicted")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  int eviction_stall_ms = static_cast<int>(options.eviction_stall.count());
  app.add_option("--eviction-stall-ms", eviction_stall_ms,
                 "an opportunistic job over its limit that moves nothing for this long is no longer waited for")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();

  // What a job's death does to the other jobs on its GPU (docs/cuda-backend.md, "Fault policies").
  std::string fault_policy = std::string(tgs::separate_contexts::name);
  const std::vector<std::string> fault_names(tgs::fault_policy_names().begin(), tgs::fault_policy_names().end());
  app.add_option("--fault-policy", fault_policy,
                 "fault policy: what the end of a job does to the jobs of the other class on its GPU (the node "
                 "ends those the policy says share the failed job's fault domain; docs/policies/memory-and-faults.md). "
                 "Default: shared-fault-domain where the rate policy in force makes the jobs MPS clients (one "
                 "client's GPU fault ends the other: docs/results/mps-faults.md), else separate-contexts")
      ->check(CLI::IsMember(fault_names));
  const auto fault_flags = tgs::add_registry_flags<tgs::any_fault_policy, CLI::Option>(app, fault_settings, "fault.");

  bool status_json = false;
  CLI::App* status = app.add_subcommand("status", "show GPUs, jobs, classes, rates and budgets of a running node");
  status->add_flag("--json", status_json, "one JSON object per line");
  status->fallthrough();  // `tgs-node status --socket PATH` takes the daemon's --socket
  CLI11_PARSE(app, argc, argv);

  if (status->parsed()) return query_status(options.socket_path, status_json);

  options.default_class = *parse_job_class(default_class);
  options.handshake_timeout = std::chrono::milliseconds{handshake_timeout_ms};
  options.eviction_stall = std::chrono::milliseconds{eviction_stall_ms};
  options.observe_gpus = gpu_observer == "nvml";
  if (options.interposer_path.empty()) {
    options.interposer_path = tgs::containers::installed_interposer(TGS_INTERPOSER_FROM_BIN);
  }
  options.on_unregistered = *parse_unregistered_action(unregistered);  // CLI::IsMember checked it
  options.on_unregistered_under_mps = *parse_unregistered_action(unregistered_under_mps);
  options.unregistered_grace = std::chrono::milliseconds{unregistered_grace_ms};
  options.hold_with = *parse_hold_preference(hold_with);  // CLI::IsMember checked it
  if (!options.metrics_address.empty()) {
    if (const auto [address, why] = parse_listen_address(options.metrics_address); !address) {
      fmt::print(stderr, "tgs-node: --metrics-address {}\n", why);
      return 2;
    }
    if (!metrics_supported()) {
      fmt::print(stderr, "tgs-node: --metrics-address: this tgs-node was built without prometheus-cpp or libmicrohttpd\n");
      return 2;
    }
  }
  if (!options.cdi_spec_path.empty() && options.class_socket_dir.empty()) {
    fmt::print(stderr, "tgs-node: --cdi-spec needs --class-sockets (the spec's devices mount the class sockets)\n");
    return 2;
  }
  if (!socket_group.empty()) {
    options.socket_group = resolve_group("--socket-group", socket_group);
    if (!options.socket_group) return 2;
  }
  if (!class_sockets_group.empty()) {
    if (options.class_socket_dir.empty()) {
      fmt::print(stderr, "tgs-node: --class-sockets-group needs --class-sockets (the folder it is given to)\n");
      return 2;
    }
    options.class_socket_group = resolve_group("--class-sockets-group", class_sockets_group);
    if (!options.class_socket_group) return 2;
  }
  options.liveness_period = std::chrono::milliseconds{liveness_ms};
  if (level == "error") options.verbosity = log_level::error;
  if (level == "warn") options.verbosity = log_level::warn;
  if (level == "debug") options.verbosity = log_level::debug;
  options.policy_named = !policy.empty();
  if (policy.empty()) policy = default_policy;
  options.mps.mode = *parse_mps_mode(mps_mode_name);  // CLI::IsMember checked it
  options.opportunistic_mechanism = *tgs::parse_mechanism_preference(opportunistic_mechanism);  // checked by IsMember
  if (options.mps.mode == mps_mode::external && options.mps.pipe_dir.empty()) {
    fmt::print(stderr, "tgs-node: --mps external needs --mps-pipe-dir (the operator's daemons' pipe folder)\n");
    return 2;
  }
  if (options.mps.mode != mps_mode::external && !options.mps.pipe_dir.empty()) {
    fmt::print(stderr, "tgs-node: --mps-pipe-dir is for --mps external\n");
    return 2;
  }
  // The policies whose settings may be given: the named one, or the default and its fallback.
  std::vector<std::string> settable{policy};
  if (!options.policy_named && policy != fallback_policy) settable.push_back(fallback_policy);
  if (auto why = tgs::unused_policy_flag(rate_flags, settable)) {
    fmt::print(stderr, "tgs-node: {}\n", *why);
    return 2;
  }
  if (auto why = tgs::unused_policy_flag(memory_flags, std::vector<std::string>{memory_policy})) {
    fmt::print(stderr, "tgs-node: {}\n", *why);
    return 2;
  }
  if (auto why = tgs::unused_policy_flag(fault_flags, std::vector<std::string>{fault_policy})) {
    fmt::print(stderr, "tgs-node: {}\n", *why);
    return 2;
  }
  // The choice's thresholds count only where the node chooses.
  std::vector<std::string> choosing;
  if (opportunistic_mechanism == "auto") choosing.emplace_back(tgs::mechanism_choice::name);
  if (auto why = tgs::unused_policy_flag(choice_flags, choosing)) {
    fmt::print(stderr, "tgs-node: {} (--opportunistic-mechanism auto)\n", *why);
    return 2;
  }
  options.fault_policy = *fault_settings.find(fault_policy);  // CLI::IsMember checked the name
  options.fault_policy_named = app.get_option("--fault-policy")->count() > 0;
  try {
    tgs::any_fault_policy check{options.fault_policy};
  } catch (const tgs::config_error& e) {
    fmt::print(stderr, "tgs-node: {}\n", e.what());
    return 2;
  }
  options.controller = *rate_settings.find(policy);
  if (!options.policy_named && policy != fallback_policy) options.fallback_controller = *rate_settings.find(fallback_policy);
  try {
    tgs::any_rate_controller check{options.controller};  // validated now, not at the first job
    if (options.fallback_controller) tgs::any_rate_controller fallback{*options.fallback_controller};
  } catch (const tgs::config_error& e) {
    fmt::print(stderr, "tgs-node: {}\n", e.what());
    return 2;
  }
  if (options.policy_named && options.mps.mode == mps_mode::off &&
      tgs::any_rate_controller{options.controller}.traits().mechanism == tgs::sharing_mechanism::mps) {
    fmt::print(stderr, "tgs-node: --policy {} shares the GPU through MPS, and --mps is off\n", policy);
    return 2;
  }

  options.eviction_wait = std::chrono::milliseconds{eviction_wait_ms};
  options.residency = *tgs::parse_residency_split(residency_split_name);  // CLI::IsMember checked it
  if (memory_policy != "off") {
    if (memory_budget_mib <= 0) {
      fmt::print(stderr, "tgs-node: --memory-policy {} needs --memory-budget-mib (the per-GPU budget)\n",
                 memory_policy);
      return 2;
    }
    options.memory_policy = *memory_settings.find(memory_policy);
    try {
      tgs::any_memory_policy check{*options.memory_policy};
    } catch (const tgs::config_error& e) {
      fmt::print(stderr, "tgs-node: {}\n", e.what());
      return 2;
    }
    options.memory_budget = tgs::bytes{static_cast<std::uint64_t>(memory_budget_mib * 1024.0 * 1024.0)};
    // The reserve comes off the budget (transparent_unified_memory.hpp): a budget at or below it
    // leaves the jobs nothing, or less than the operator meant to give.
    if (const auto* tum = std::get_if<tgs::transparent_unified_memory::config>(&*options.memory_policy);
        tum != nullptr && options.memory_budget <= tum->reserve) {
      fmt::print(stderr,
                 "tgs-node: --memory-budget-mib {} is not above the memory reserve, --memory.tgs.reserve-mib {}: the "
                 "jobs would share nothing. Raise --memory-budget-mib above {} (the GPU's memory less what to keep "
                 "free) or lower --memory.tgs.reserve-mib below {}\n",
                 memory_budget_mib, tum->reserve.count() >> 20, tum->reserve.count() >> 20, memory_budget_mib);
      return 2;
    }
  } else if (memory_budget_mib > 0) {
    fmt::print(stderr, "tgs-node: --memory-budget-mib has no effect without --memory-policy\n");
    return 2;
  }

  struct sigaction sa{};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll returns EINTR and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  try {
    node_server server{options};
    server.bind();
    server.run(stop_requested);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tgs-node: {}\n", e.what());
    return 1;
  }
  return 0;
}
