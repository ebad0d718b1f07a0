// SPDX-License-Identifier: Apache-2.0
// What the two kubelet plugins' programs (tgs-device-plugin, tgs-dra-plugin) share around their
// run loops: usage errors, the log level, the GPU count, and the stop signals.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "gpu_discovery.hpp"
#include "plugin_server.hpp"

namespace tgs::kubernetes {

inline bool is_folder(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// Says `<tool>: error: <message>` and returns 2, a usage error's exit status.
inline int usage_error(std::string_view tool, const std::string& message) {
  fmt::print(stderr, "{}: error: {}\n", tool, message);
  return 2;
}

/// "error", "warn", "info" or "debug" (the option's check lets nothing else through).
inline log_level parse_log_level(std::string_view level) {
  return level == "error" ? log_level::error
         : level == "warn" ? log_level::warn
         : level == "debug" ? log_level::debug
                            : log_level::info;
}

/// The options both plugins take for the node's devices (inventory::config): --gpus,
/// --opportunistic-replicas (`sharers` is what shares a GPU: containers, claims), --socket-dir and
/// --interposer (`interposer_default` is where the package puts it, relative to the program).
inline void add_device_options(CLI::App& app, unsigned& gpus, inventory::config& cfg, const std::string& sharers,
                               const std::string& interposer_default) {
  app.add_option("--gpus", gpus,
                 "GPUs on this node, indices 0..N-1 (default: as many as NVML sees, else the CUDA driver)")
      ->check(CLI::Range(1U, 1024U));
  app.add_option("--opportunistic-replicas", cfg.opportunistic_replicas,
                 "opportunistic devices per GPU: how many opportunistic " + sharers + " may share one GPU")
      ->check(CLI::Range(1U, 64U))
      ->capture_default_str();
  app.add_option("--socket-dir", cfg.paths.socket_dir,
                 "folder where tgs-node serves one socket per GPU and class (gpu<index>-<class>.sock)")
      ->capture_default_str();
  // No default shown: it depends on where this program is installed, and the help feeds the man page.
  app.add_option("--interposer", cfg.paths.interposer,
                 "the host's libtgs-intercept.so, mounted into containers (default: " + interposer_default +
                     " from this program's folder, where the package installs it)");
}

/// --log-level, into `level`.
inline void add_log_level_option(CLI::App& app, std::string& level) {
  app.add_option("--log-level", level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
}

/// `gpus` when the operator gave it, else the GPUs NVML or the driver sees; nothing (with `why`)
/// when none is found.
inline std::optional<unsigned> gpus_or_discovered(unsigned gpus, const logger& log, bool quiet, std::string& why) {
  if (gpus > 0) return gpus;
  const std::optional<gpu_count> found = discover_gpus(why);
  if (!found) return std::nullopt;
  if (!quiet) log.log(log_level::info, "{} GPUs (from {})", found->count, found->source);
  return found->count;
}

/// SIGTERM and SIGINT blocked in this thread (call it before gRPC starts its threads, which
/// inherit the mask) and readable from the returned descriptor, which a run loop polls; -1, with
/// errno set, when no descriptor could be made.
inline int stop_signal_fd() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return ::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
}

}  // namespace tgs::kubernetes
