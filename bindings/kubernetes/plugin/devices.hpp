// SPDX-License-Identifier: Apache-2.0
// The device plugin's devices: what each class's resource advertises on a node (one production
// device per GPU, a configurable number of opportunistic replicas per GPU), their IDs, the
// preferred allocation, and what Allocate gives a container. No gRPC here: the service in
// plugin_server.cpp translates.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "container_edits.hpp"
#include "tgs/core/units.hpp"

namespace tgs::kubernetes {

/// The device-plugin API version this plugin speaks.
inline constexpr std::string_view api_version = "v1beta1";
inline constexpr std::string_view healthy = "Healthy";
inline constexpr std::string_view unhealthy = "Unhealthy";

/// The extended resource a class is advertised as: `tgs.io/gpu-production`,
/// `tgs.io/gpu-opportunistic`.
[[nodiscard]] std::string resource_name(job_class cls);

/// One advertised device: a GPU, a class, and for opportunistic devices which replica.
struct device_id {
  unsigned gpu = 0;
  job_class cls = job_class::production;
  unsigned replica = 0;

  friend bool operator==(const device_id&, const device_id&) = default;
};

/// The ID kubelet sees: `gpu0-production`, `gpu0-opportunistic-2`.
[[nodiscard]] std::string to_string(const device_id& id);

/// The device an ID names, or nothing for anything `to_string` does not produce.
[[nodiscard]] std::optional<device_id> parse_device_id(std::string_view id);

/// What Allocate gives one container: the CDI devices for CDI-enabled runtimes and, for those
/// without CDI, the same edits as environment and mounts (plus `NVIDIA_VISIBLE_DEVICES`, which is
/// what NVIDIA's own CDI device amounts to under the NVIDIA container runtime).
struct container_allocation {
  std::vector<std::string> cdi_devices;
  std::vector<containers::env_var> env;
  std::vector<containers::mount> mounts;
};

/// An Allocate or preferred-allocation request this plugin must refuse; the message says why.
class allocation_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The node's devices for both classes.
class inventory {
 public:
  struct config {
    /// GPU indices 0 .. gpus-1.
    unsigned gpus = 0;
    /// Opportunistic devices per GPU (how many opportunistic containers may share one GPU).
    unsigned opportunistic_replicas = 4;
    containers::host_paths paths;
  };

  /// Throws `std::invalid_argument` for no GPUs or no opportunistic replicas.
  explicit inventory(config cfg);

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  /// Every device of `cls`, GPU by GPU.
  [[nodiscard]] std::vector<device_id> devices(job_class cls) const;

  /// Whether `id` is one of this node's devices.
  [[nodiscard]] bool contains(const device_id& id) const noexcept;

  /// What a container that was given the devices `ids` of resource `cls` gets. Every ID must be
  /// one of this node's devices of that class, and all must name one GPU: a job reaches tgs-node
  /// through one socket, which is one GPU's. Throws `allocation_error` naming the offending ID.
  ///
  /// ```
  /// inventory node({.gpus = 2});
  /// container_allocation a = node.allocate(job_class::opportunistic, {"gpu1-opportunistic-3"});
  /// // a.cdi_devices == {"tgs.io/gpu=1-opportunistic", "nvidia.com/gpu=1"}
  /// ```
  [[nodiscard]] container_allocation allocate(job_class cls, const std::vector<std::string>& ids) const;

  /// The devices this plugin would pick: all of `must_include`, then devices of the GPU they name
  /// (or, with none, of the GPU with the most devices still available, so opportunistic jobs
  /// spread over the GPUs), then of the next GPUs in that order. Throws `allocation_error` for an
  /// ID that is not this node's device of `cls`.
  [[nodiscard]] std::vector<std::string> preferred(job_class cls, const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include,
                                                   std::size_t size) const;

 private:
  device_id checked(job_class cls, const std::string& id) const;

  config cfg_;
};

}  // namespace tgs::kubernetes
