// SPDX-License-Identifier: Apache-2.0
// The DRA kubelet plugin's run loop: its DRAPlugin service on a socket in its own folder, its
// registration socket in kubelet's plugin registry (served again if it disappears), the node's
// ResourceSlice kept current through the API server, and the prepared claims kept in a
// checkpoint beside the service socket, so a restarted plugin answers kubelet as before.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "api_client.hpp"
#include "devices.hpp"
#include "gpu_discovery.hpp"
#include "plugin_server.hpp"

namespace tgs::kubernetes::dra {

struct dra_options {
  /// This node's name (the pool, the slice's node), as the API server knows it.
  std::string node_name;
  /// kubelet's plugin registry: the registration socket goes there.
  std::filesystem::path registry_dir = "/var/lib/kubelet/plugins_registry";
  /// The plugin's own folder: its service socket `dra.sock` and its checkpoint `claims.json`.
  std::filesystem::path plugin_dir = "/var/lib/kubelet/plugins/gpu.tgs.io";
  /// tgs-node's Node Feature Discovery file; empty: the slice says nothing of MPS or policies.
  std::string node_features;
  /// How often tgs-node's sockets, its feature file and the registration socket are checked.
  std::chrono::milliseconds check_period{2000};
  /// Publish every GPU, whether or not tgs-node serves its class sockets.
  bool always_healthy = false;
};

/// The registration socket's file name in the registry: `gpu.tgs.io-reg.sock`.
[[nodiscard]] std::string registration_socket_name();

/// The ResourceSlice this node publishes now (for `--print-resourceslice` and the run loop):
/// the GPUs of `devices` whose tgs-node class sockets are there (all with `always_healthy`),
/// described as `described` says (by index), with tgs-node's features.
[[nodiscard]] nlohmann::json current_slice(const inventory& devices, const dra_options& options,
                                           const std::vector<gpu_description>& described,
                                           const std::string& node_uid, std::int64_t generation);

/// Serves kubelet and keeps the slice published until `stop_fd` becomes readable; then stops
/// serving, removes its sockets (the slice stays: kubelet removes a driver's slices when its
/// plugin is gone for good) and returns 0. Returns 1, after logging why, when it cannot serve or
/// its checkpoint cannot be read.
int run_dra_plugin(const inventory& devices, const dra_options& options, const api_client& api, const logger& log,
                   int stop_fd);

}  // namespace tgs::kubernetes::dra
