// SPDX-License-Identifier: Apache-2.0
// The device plugin's run loop: one gRPC endpoint per class in kubelet's device-plugin folder,
// registered with kubelet and registered again whenever kubelet restarts (its socket is made
// anew) or the endpoint's socket disappears; device health from tgs-node's sockets; a clean stop.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "devices.hpp"

namespace tgs::kubernetes {

enum class log_level { error, warn, info, debug };

/// Lines on stderr, prefixed with the tool's name, at or above a level.
class logger {
 public:
  explicit logger(log_level level, std::string_view tool = "tgs-device-plugin") : level_(level), tool_(tool) {}

  template <class... Args>
  void log(log_level level, fmt::format_string<Args...> format, Args&&... args) const {
    if (level > level_) return;
    static constexpr const char* names[] = {"error", "warn", "info", "debug"};
    fmt::print(stderr, "{}: {}: {}\n", tool_, names[static_cast<int>(level)],
               fmt::format(format, std::forward<Args>(args)...));
    std::fflush(stderr);
  }

 private:
  log_level level_;
  std::string_view tool_;
};

struct plugin_options {
  /// kubelet's device-plugin folder: its `kubelet.sock`, and this plugin's sockets.
  std::filesystem::path kubelet_dir = "/var/lib/kubelet/device-plugins";
  /// How often device health and kubelet's socket are checked even without a file event.
  std::chrono::milliseconds check_period{1000};
  /// Report every device healthy, whether or not its socket and the interposer are there.
  bool always_healthy = false;
};

/// The socket file name of a class's endpoint in kubelet's folder: `tgs-gpu-production.sock`.
[[nodiscard]] std::string endpoint_socket_name(job_class cls);

/// Serves both classes' endpoints and keeps them registered with kubelet until `stop_fd` becomes
/// readable (a signalfd for SIGTERM and SIGINT); then stops the endpoints, removes their sockets
/// and returns 0. Returns 1, after logging why, when an endpoint cannot be served.
int run_device_plugin(const inventory& devices, const plugin_options& options, const logger& log, int stop_fd);

}  // namespace tgs::kubernetes
