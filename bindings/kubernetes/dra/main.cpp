// SPDX-License-Identifier: Apache-2.0
// tgs-dra-plugin: the kubelet plugin of the Dynamic Resource Allocation driver gpu.tgs.io.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "dra_model.hpp"
#include "dra_server.hpp"
#include "gpu_discovery.hpp"
#include "tgs/version.hpp"

namespace {

using namespace tgs::kubernetes;
using namespace tgs::kubernetes::dra;

bool is_folder(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int usage_error(const std::string& message) {
  fmt::print(stderr, "tgs-dra-plugin: error: {}\n", message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tgs-dra-plugin: the kubelet plugin of tgs's Dynamic Resource Allocation driver gpu.tgs.io "
      "(resource.k8s.io/v1, kubelet 1.34 and later).\n\n"
      "It publishes the node's ResourceSlice: per GPU that tgs-node serves, a device gpu<i>-production "
      "and --opportunistic-replicas devices gpu<i>-opportunistic-<r>, with the attributes class, index, "
      "model, tgsVersion and, from tgs-node's feature file, mps, memoryPolicy, policy and "
      "opportunisticMechanism, and the capacity memory. A GPU whose tgs-node class sockets go away leaves "
      "the slice. It registers with kubelet through its plugin registry and prepares a claim's device as "
      "the CDI devices tgs.io/gpu=<i>-<class> and nvidia.com/gpu=<i> (tgs-node's CDI spec), which give the "
      "container the interposer and that GPU's class socket, and no other. It refuses a claim of more than "
      "one device, and a GPU's production device while another prepared claim holds it. Prepared claims "
      "are kept in <plugin-dir>/claims.json, so a restart answers kubelet as before. It stops on SIGTERM."};
  app.set_version_flag("--version", "tgs-dra-plugin " TGS_VERSION);

  dra_options options;
  api_config api = in_cluster_config();
  const char* node_env = std::getenv("NODE_NAME");
  options.node_name = node_env != nullptr ? node_env : "";
  std::string registry_dir = options.registry_dir.string();
  std::string plugin_dir = options.plugin_dir.string();
  unsigned gpus = 0;
  inventory::config cfg;
  cfg.paths.interposer = tgs::containers::installed_interposer(TGS_INTERPOSER_FROM_BIN);
  int check_period_ms = static_cast<int>(options.check_period.count());
  std::string level = "info";
  bool print_slice = false;

  app.add_option("--node-name", options.node_name, "this node's name (default: $NODE_NAME, from the downward API)");
  app.add_option("--api-server", api.server,
                 "the API server's URL (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)");
  app.add_option("--token-file", api.token_file, "the service account's token, read again for every request")
      ->capture_default_str();
  app.add_option("--ca-file", api.ca_file, "the CA bundle of the API server's certificate")->capture_default_str();
  app.add_option("--registry-dir", registry_dir, "kubelet's plugin registry, where the registration socket goes")
      ->capture_default_str();
  app.add_option("--plugin-dir", plugin_dir,
                 "this plugin's folder, kubelet's plugins/<driver>: its socket dra.sock and checkpoint claims.json")
      ->capture_default_str();
  app.add_option("--gpus", gpus,
                 "GPUs on this node, indices 0..N-1 (default: as many as NVML sees, else the CUDA driver)")
      ->check(CLI::Range(1U, 1024U));
  app.add_option("--opportunistic-replicas", cfg.opportunistic_replicas,
                 "opportunistic devices per GPU: how many opportunistic claims may share one GPU")
      ->check(CLI::Range(1U, 64U))
      ->capture_default_str();
  app.add_option("--socket-dir", cfg.paths.socket_dir,
                 "folder where tgs-node serves one socket per GPU and class (gpu<index>-<class>.sock)")
      ->capture_default_str();
  app.add_option("--interposer", cfg.paths.interposer,
                 "the host's libtgs-intercept.so (default: " TGS_INTERPOSER_FROM_BIN " from this program's folder)");
  app.add_option("--node-features", options.node_features,
                 "tgs-node's Node Feature Discovery file (its --node-features-file): MPS and policies for the slice");
  app.add_option("--check-period-ms", check_period_ms,
                 "how often tgs-node's sockets, its feature file and the registration socket are checked")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  app.add_flag("--always-healthy", options.always_healthy,
               "publish every GPU even when tgs-node does not serve its class sockets");
  app.add_flag("--print-resourceslice", print_slice,
               "print the ResourceSlice this node would publish now (JSON) and exit, without kubelet or API server");
  app.add_option("--log-level", level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const logger log(level == "error" ? log_level::error
                   : level == "warn" ? log_level::warn
                   : level == "debug" ? log_level::debug
                                      : log_level::info,
                   "tgs-dra-plugin");
  options.registry_dir = registry_dir;
  options.plugin_dir = plugin_dir;
  options.check_period = std::chrono::milliseconds{check_period_ms};

  if (options.node_name.empty()) return usage_error("no node name: pass --node-name or set NODE_NAME");
  if (cfg.paths.interposer.empty() || cfg.paths.interposer.front() != '/' || cfg.paths.socket_dir.empty() ||
      cfg.paths.socket_dir.front() != '/') {
    return usage_error("--interposer and --socket-dir must be absolute paths (the container runtime mounts them)");
  }
  if (gpus == 0) {
    std::string why;
    const std::optional<gpu_count> found = discover_gpus(why);
    if (!found) return usage_error("no GPUs found (" + why + "); pass --gpus N");
    gpus = found->count;
    if (!print_slice) log.log(log_level::info, "{} GPUs (from {})", gpus, found->source);
  }
  cfg.gpus = gpus;
  const inventory devices(cfg);

  if (print_slice) {
    std::cout << current_slice(devices, options, describe_gpus(gpus), "", 1).dump(1) << "\n";
    return 0;
  }
  if (api.server.empty()) return usage_error("no API server: pass --api-server or run in a pod (KUBERNETES_SERVICE_HOST)");
  for (const std::string& folder : {registry_dir, plugin_dir}) {
    if (!is_folder(folder)) return usage_error(folder + ": no such folder (kubelet's, mounted from the host)");
  }
  for (const std::filesystem::path& socket :
       {options.registry_dir / registration_socket_name(), options.plugin_dir / "dra.sock"}) {
    if (socket.string().size() >= sizeof(sockaddr_un::sun_path)) {
      return usage_error("the socket path " + socket.string() + " is longer than a Unix socket path may be");
    }
  }

  // Signals arrive through a file descriptor the run loop polls, blocked before gRPC starts threads.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const int stop_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (stop_fd < 0) return usage_error(std::string("signalfd: ") + std::strerror(errno));
  const api_client client(api);
  const int status = run_dra_plugin(devices, options, client, log, stop_fd);
  ::close(stop_fd);
  return status;
}
