// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's server: the Unix socket jobs register on, the job table, liveness checks and one
/// `gpu_control_loop` per GPU, all driven from one poll loop on the steady clock.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "control_loop.hpp"
#include "listener.hpp"
#include "memory_loop.hpp"
#include "node_abi.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"

namespace tgs::cuda::node {

/// Verbosity of the node's log.
enum class log_level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// What the operator configures (flags or config file).
struct node_options {
  std::string socket_path = "/run/tgs/node.sock";
  /// File mode of the socket: who may register (jobs in other containers need write access).
  unsigned socket_mode = 0666;
  /// Users allowed to register; empty: any user that can reach the socket.
  std::vector<uid_t> allowed_uids;
  /// The class of a job whose operator set none.
  job_class default_class = job_class::opportunistic;
  /// GPUs on this node; a registration for a GPU index outside [0, gpus) is refused.
  std::uint32_t gpus = 8;
  /// The rate controller's configuration (its alternative picks the policy).
  any_rate_controller::config controller = tgs_rate_control::config{};
  /// The memory policy's configuration; empty: no memory policy (allocations are only counted).
  std::optional<any_memory_policy::config> memory_policy;
  /// The per-GPU memory budget the memory policy shares out (smaller than the card).
  bytes memory_budget{};
  /// How an opportunistic job's resident limit is shared among its allocations
  /// (`tgs::plan_residency`, carried out by its interposer).
  residency_split residency = residency_split::in_order;
  /// How many of an opportunistic job's launches may be unfinished on the GPU at once (its
  /// interposer's launch window); 0: no bound.
  std::uint32_t max_inflight_launches = 0;
  /// How long a production allocation may wait for opportunistic memory to be evicted before
  /// the node lets it proceed anyway.
  std::chrono::milliseconds eviction_wait{5000};
  /// How often job processes are checked for having died (a dead job's share is reclaimed within
  /// this period even when a forked child keeps its connection open).
  std::chrono::milliseconds liveness_period{200};
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
  struct job;
  struct connection;
  using clock = std::chrono::steady_clock;
  using loop = gpu_control_loop<any_rate_controller>;
  using memory_loop = gpu_memory_loop<any_memory_policy>;
  /// A verdict held back until the opportunistic jobs have made room (or the wait ran out).
  struct pending_reply {
    int fd;
    std::uint32_t job_id;
    std::uint32_t gpu;
    std::uint8_t verdict;
    clock::time_point deadline;
    clock::time_point since;
  };

  [[nodiscard]] instant now() const noexcept;
  void accept_connections();
  void on_readable(connection& c);
  void register_job(connection& c, const abi::register_request& req);
  void send_status(connection& c, bool json);
  void on_memory_request(connection& c, const abi::memory_request& req);
  void send_pending_replies();
  memory_loop* gpu_memory(std::uint32_t gpu);
  void remove_job(std::uint32_t id, const char* why);
  void check_liveness();
  void close_connection(int fd);
  loop& gpu_loop(std::uint32_t gpu);
  template <typename... Args>
  void log(log_level level, const char* format, const Args&... args) const;

  node_options options_;
  socket_listener listener_;
  clock::time_point start_;
  std::map<int, connection> connections_;
  std::map<std::uint32_t, std::unique_ptr<job>> jobs_;
  std::map<std::uint32_t, std::unique_ptr<loop>> gpus_;
  std::map<std::uint32_t, std::unique_ptr<memory_loop>> memory_gpus_;
  std::vector<pending_reply> pending_;
  std::uint32_t next_job_id_ = 1;
  clock::time_point next_liveness_;
};

/// Parses "production" / "opportunistic".
[[nodiscard]] std::optional<job_class> parse_job_class(std::string_view s) noexcept;

}  // namespace tgs::cuda::node
