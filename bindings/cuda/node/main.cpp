// SPDX-License-Identifier: Apache-2.0
// tgs-node: the per-node daemon (`tgs-node [flags]`) and its status query (`tgs-node status`).
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <string>

#include "node_abi.hpp"
#include "node_server.hpp"

namespace {

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested.store(true, std::memory_order_relaxed); }

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
  node_options options;
  std::string default_class = "opportunistic";
  std::string policy = "tgs";
  std::string level = "info";
  int liveness_ms = static_cast<int>(options.liveness_period.count());
  tgs::tgs_rate_control::config tgs_cfg;
  double production_window_ms = std::chrono::duration<double, std::milli>(tgs_cfg.production_window).count();
  double budget_window_ms = std::chrono::duration<double, std::milli>(tgs_cfg.budget_window).count();

  app.add_option("--socket", options.socket_path, "Unix socket jobs register on")->capture_default_str();
  app.add_option("--socket-mode", options.socket_mode, "file mode of the socket (octal as decimal, e.g. 438 = 0666)")
      ->capture_default_str();
  app.add_option("--allow-uid", options.allowed_uids, "users allowed to register (default: anyone reaching the socket)");
  app.add_option("--default-class", default_class, "class of a job whose operator set no TGS_JOB_CLASS")
      ->check(CLI::IsMember({"production", "opportunistic"}))
      ->capture_default_str();
  app.add_option("--gpus", options.gpus, "GPUs on this node")->check(CLI::Range(1U, 1024U))->capture_default_str();
  app.add_option("--policy", policy, "rate controller: " + tgs::rate_controller_list())->capture_default_str();
  app.add_option("--liveness-ms", liveness_ms, "period of the check for dead job processes")
      ->check(CLI::Range(10, 1000))
      ->capture_default_str();
  app.add_option("--log-level", level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  app.add_option("--production-window-ms", production_window_ms, "tgs: production window (controller step period)")
      ->capture_default_str();
  app.add_option("--budget-window-ms", budget_window_ms, "tgs: refill period of the opportunistic budget")
      ->capture_default_str();
  app.add_option("--profile-windows", tgs_cfg.profile_windows, "tgs: minimum profiling windows")->capture_default_str();
  app.add_option("--max-profile-windows", tgs_cfg.max_profile_windows, "tgs: maximum profiling windows")
      ->capture_default_str();
  app.add_option("--initial-budget", tgs_cfg.initial_budget, "tgs: first budget, blocks per budget window")
      ->capture_default_str();
  app.add_option("--warmup-windows", tgs_cfg.warmup_windows, "tgs: control windows before the idle rules apply")
      ->capture_default_str();
  app.add_option("--dead-band", tgs_cfg.dead_band, "tgs: dead band around the production rate")->capture_default_str();
  app.add_option("--rate-smoothing", tgs_cfg.rate_smoothing,
                 "tgs: weight of the previous production rate in a moving average (the released code's alpha, "
                 "0); raise it for production jobs whose launch rate is noisy")
      ->capture_default_str();

  bool status_json = false;
  CLI::App* status = app.add_subcommand("status", "show GPUs, jobs, classes, rates and budgets of a running node");
  status->add_flag("--json", status_json, "one JSON object per line");
  status->fallthrough();  // `tgs-node status --socket PATH` takes the daemon's --socket
  CLI11_PARSE(app, argc, argv);

  if (status->parsed()) return query_status(options.socket_path, status_json);

  options.default_class = *parse_job_class(default_class);
  options.liveness_period = std::chrono::milliseconds{liveness_ms};
  if (level == "error") options.verbosity = log_level::error;
  if (level == "warn") options.verbosity = log_level::warn;
  if (level == "debug") options.verbosity = log_level::debug;
  std::optional<tgs::any_rate_controller::config> cfg = tgs::any_rate_controller::default_config(policy);
  if (!cfg) {
    fmt::print(stderr, "tgs-node: unknown policy '{}'; known: {}\n", policy, tgs::rate_controller_list());
    return 2;
  }
  if (auto* t = std::get_if<tgs::tgs_rate_control::config>(&*cfg)) {
    tgs_cfg.production_window = tgs::from_seconds(production_window_ms / 1e3);
    tgs_cfg.budget_window = tgs::from_seconds(budget_window_ms / 1e3);
    *t = tgs_cfg;
  }
  options.controller = *cfg;

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
