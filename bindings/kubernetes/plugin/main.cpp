// SPDX-License-Identifier: Apache-2.0
// tgs-device-plugin: kubelet's device plugin for tgs's two resources, tgs.io/gpu-production and
// tgs.io/gpu-opportunistic.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "gpu_discovery.hpp"
#include "plugin_server.hpp"
#include "tgs/version.hpp"

namespace {

using namespace tgs::kubernetes;

bool is_folder(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int usage_error(const std::string& message) {
  fmt::print(stderr, "tgs-device-plugin: error: {}\n", message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tgs-device-plugin: kubelet's device plugin (API v1beta1) for transparent GPU sharing.\n\n"
      "It advertises two resources per GPU: tgs.io/gpu-production (one device per GPU: at most one "
      "production job) and tgs.io/gpu-opportunistic (--opportunistic-replicas devices per GPU). A "
      "container given one gets the CDI devices tgs.io/gpu=<index>-<class> and nvidia.com/gpu=<index>, "
      "and for runtimes without CDI the same as environment and mounts: LD_PRELOAD of the interposer, "
      "and tgs-node's socket for that GPU and class (<socket-dir>/gpu<index>-<class>.sock) at "
      "/run/tgs/tgs.sock. A device is healthy while tgs-node serves its socket and the interposer is "
      "installed. The plugin registers again whenever kubelet restarts, and stops on SIGTERM."};
  app.set_version_flag("--version", "tgs-device-plugin " TGS_VERSION);

  plugin_options options;
  std::string kubelet_dir = options.kubelet_dir.string();
  unsigned gpus = 0;
  inventory::config cfg;
  // The package puts <prefix>/bin/tgs-device-plugin beside <prefix>/lib/tgs/libtgs-intercept.so.
  cfg.paths.interposer = tgs::containers::installed_interposer(TGS_INTERPOSER_FROM_BIN);
  int check_period_ms = static_cast<int>(options.check_period.count());
  std::string level = "info";

  app.add_option("--kubelet-dir", kubelet_dir,
                 "kubelet's device-plugin folder: kubelet.sock is there, and this plugin's sockets go there")
      ->capture_default_str();
  app.add_option("--gpus", gpus,
                 "GPUs on this node, indices 0..N-1 (default: as many as NVML sees, else the CUDA driver)")
      ->check(CLI::Range(1U, 1024U));
  app.add_option("--opportunistic-replicas", cfg.opportunistic_replicas,
                 "opportunistic devices per GPU: how many opportunistic containers may share one GPU")
      ->check(CLI::Range(1U, 64U))
      ->capture_default_str();
  app.add_option("--socket-dir", cfg.paths.socket_dir,
                 "folder where tgs-node serves one socket per GPU and class (gpu<index>-<class>.sock)")
      ->capture_default_str();
  // No default shown: it depends on where this program is installed, and the help feeds the man page.
  app.add_option("--interposer", cfg.paths.interposer,
                 "the host's libtgs-intercept.so, mounted into containers (default: " TGS_INTERPOSER_FROM_BIN
                 " from this program's folder, where the package installs it)");
  app.add_option("--check-period-ms", check_period_ms,
                 "how often device health and kubelet's socket are checked besides file events")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  app.add_flag("--always-healthy", options.always_healthy,
               "report every device healthy even when tgs-node's socket or the interposer is missing");
  app.add_option("--log-level", level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const logger log(level == "error" ? log_level::error
                   : level == "warn" ? log_level::warn
                   : level == "debug" ? log_level::debug
                                      : log_level::info);
  options.kubelet_dir = kubelet_dir;
  options.check_period = std::chrono::milliseconds{check_period_ms};

  if (!is_folder(kubelet_dir)) {
    return usage_error("--kubelet-dir " + kubelet_dir + ": no such folder (kubelet's device-plugin folder, " +
                       "mounted from the host)");
  }
  if (!is_folder(cfg.paths.socket_dir)) {
    return usage_error("--socket-dir " + cfg.paths.socket_dir +
                       ": no such folder (tgs-node serves its sockets there; is it running?)");
  }
  if (cfg.paths.interposer.empty() || cfg.paths.interposer.front() != '/' || cfg.paths.socket_dir.front() != '/') {
    return usage_error("--interposer and --socket-dir must be absolute paths (kubelet mounts them)");
  }
  for (const tgs::job_class cls : {tgs::job_class::production, tgs::job_class::opportunistic}) {
    const std::filesystem::path socket = options.kubelet_dir / endpoint_socket_name(cls);
    if (socket.string().size() >= sizeof(sockaddr_un::sun_path)) {
      return usage_error("--kubelet-dir " + kubelet_dir + ": the socket path " + socket.string() +
                         " is longer than a Unix socket path may be");
    }
  }

  if (gpus == 0) {
    std::string why;
    const std::optional<gpu_count> found = discover_gpus(why);
    if (!found) return usage_error("no GPUs found (" + why + "); pass --gpus N");
    gpus = found->count;
    log.log(log_level::info, "{} GPUs (from {})", gpus, found->source);
  }
  cfg.gpus = gpus;
  const inventory devices(cfg);

  // Signals arrive through a file descriptor the run loop polls; blocked before gRPC starts its
  // threads, so no thread takes them asynchronously.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const int stop_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (stop_fd < 0) return usage_error(std::string("signalfd: ") + std::strerror(errno));
  const int status = run_device_plugin(devices, options, log, stop_fd);
  ::close(stop_fd);
  return status;
}
