// SPDX-License-Identifier: Apache-2.0
// tgs-dra-plugin: the kubelet plugin of the Dynamic Resource Allocation driver gpu.tgs.io.
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "dra_model.hpp"
#include "dra_server.hpp"
#include "tgs/version.hpp"
#include "tool_support.hpp"

namespace {

using namespace tgs::kubernetes;
using namespace tgs::kubernetes::dra;

int usage_error(const std::string& message) { return tgs::kubernetes::usage_error("tgs-dra-plugin", message); }

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
  add_device_options(app, gpus, cfg, "claims", TGS_INTERPOSER_FROM_BIN);
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
  add_log_level_option(app, level);
  CLI11_PARSE(app, argc, argv);

  const logger log(parse_log_level(level), "tgs-dra-plugin");
  options.registry_dir = registry_dir;
  options.plugin_dir = plugin_dir;
  options.check_period = std::chrono::milliseconds{check_period_ms};

  if (options.node_name.empty()) return usage_error("no node name: pass --node-name or set NODE_NAME");
  if (cfg.paths.interposer.empty() || cfg.paths.interposer.front() != '/' || cfg.paths.socket_dir.empty() ||
      cfg.paths.socket_dir.front() != '/') {
    return usage_error("--interposer and --socket-dir must be absolute paths (the container runtime mounts them)");
  }
  std::string why;
  const std::optional<unsigned> found = gpus_or_discovered(gpus, log, /*quiet=*/print_slice, why);
  if (!found) return usage_error("no GPUs found (" + why + "); pass --gpus N");
  gpus = *found;
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
  const int stop_fd = stop_signal_fd();
  if (stop_fd < 0) return usage_error(std::string("signalfd: ") + std::strerror(errno));
  const api_client client(api);
  const int status = run_dra_plugin(devices, options, client, log, stop_fd);
  ::close(stop_fd);
  return status;
}
