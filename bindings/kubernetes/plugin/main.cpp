// SPDX-License-Identifier: Apache-2.0
// tgs-device-plugin: kubelet's device plugin for tgs's two resources, tgs.io/gpu-production and
// tgs.io/gpu-opportunistic.
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "plugin_server.hpp"
#include "tgs/version.hpp"
#include "tool_support.hpp"

namespace {

using namespace tgs::kubernetes;

int usage_error(const std::string& message) { return tgs::kubernetes::usage_error("tgs-device-plugin", message); }

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
  add_device_options(app, gpus, cfg, "containers", TGS_INTERPOSER_FROM_BIN);
  app.add_option("--check-period-ms", check_period_ms,
                 "how often device health and kubelet's socket are checked besides file events")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  app.add_flag("--always-healthy", options.always_healthy,
               "report every device healthy even when tgs-node's socket or the interposer is missing");
  add_log_level_option(app, level);
  CLI11_PARSE(app, argc, argv);

  const logger log(parse_log_level(level));
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

  std::string why;
  const std::optional<unsigned> found = gpus_or_discovered(gpus, log, /*quiet=*/false, why);
  if (!found) return usage_error("no GPUs found (" + why + "); pass --gpus N");
  gpus = *found;
  cfg.gpus = gpus;
  const inventory devices(cfg);

  // Signals arrive through a file descriptor the run loop polls; blocked before gRPC starts its
  // threads, so no thread takes them asynchronously.
  const int stop_fd = stop_signal_fd();
  if (stop_fd < 0) return usage_error(std::string("signalfd: ") + std::strerror(errno));
  const int status = run_device_plugin(devices, options, log, stop_fd);
  ::close(stop_fd);
  return status;
}
