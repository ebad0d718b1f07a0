// SPDX-License-Identifier: Apache-2.0
/// @file
/// Where a process runs: its cgroup (`/proc/<pid>/cgroup`), the container and the Kubernetes pod
/// that cgroup names, if any, as the kernel says; and the pod's name and namespace, as the
/// process's environment says (`TGS_POD_NAME`, `TGS_POD_NAMESPACE`, which a pod spec sets from the
/// downward API: neither the cgroup nor the device plugin's Allocate knows them). tgs-node labels
/// jobs and unregistered GPU processes with them in its status and metrics, so an operator can
/// tell which container and pod a pid belongs to.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace tgs::cuda::node {

/// A process's cgroup and container.
struct process_origin {
  /// The cgroup path: the unified (v2) hierarchy's, else the v1 `name=systemd` one, else the first
  /// listed; empty when the process is gone.
  std::string cgroup;
  /// The container the cgroup names (`container_of_cgroup`); empty for a process on the host.
  std::string container;
  /// The UID of the Kubernetes pod the cgroup names (`pod_uid_of_cgroup`); empty outside a pod.
  std::string pod_uid;
  /// The pod's name and namespace from the process's environment, read only for a process in a
  /// pod's cgroup and kept only if they can be Kubernetes names (the environment is the job's to
  /// write: a label, never a grant); empty otherwise.
  std::string pod;
  std::string pod_namespace;
};

/// The cgroup path in the text of a `/proc/<pid>/cgroup` file (`hierarchy:controllers:path` lines).
/// On a hybrid host the unified line is `0::/` for every process while the v1 lines hold the
/// container's path: a root unified path gives way to the v1 ones.
///
/// ```
/// cgroup_of_proc_text("0::/system.slice/docker-0123....scope\n") == "/system.slice/docker-0123....scope"
/// ```
[[nodiscard]] std::string cgroup_of_proc_text(std::string_view text);

/// The container ID a cgroup path names: the last run of exactly 64 hexadecimal digits in it, which
/// is how podman (`libpod-<id>`), docker (`docker-<id>.scope`, `/docker/<id>`), containerd
/// (`cri-containerd-<id>.scope`) and CRI-O (`crio-<id>.scope`) name a container's cgroup; empty
/// when there is none (a process on the host).
[[nodiscard]] std::string container_of_cgroup(std::string_view cgroup);

/// The UID of the Kubernetes pod a cgroup path names, as the kubelet names pods' cgroups: with the
/// cgroupfs driver `/kubepods/<qos>/pod<uid>/<container>`, with the systemd driver
/// `kubepods-<qos>-pod<uid with _ for ->.slice`; empty when there is none.
///
/// ```
/// pod_uid_of_cgroup("/kubepods.slice/kubepods-besteffort.slice/"
///                   "kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-....scope")
///     == "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
/// ```
[[nodiscard]] std::string pod_uid_of_cgroup(std::string_view cgroup);

/// The value of `name` in the text of a `/proc/<pid>/environ` file (NUL-separated `NAME=value`).
[[nodiscard]] std::string environment_value(std::string_view environ_text, std::string_view name);

/// The origin from the texts of `/proc/<pid>/cgroup` and `/proc/<pid>/environ`.
[[nodiscard]] process_origin origin_of_texts(std::string_view cgroup_text, std::string_view environ_text);

/// The origin of process `pid` (empty fields when it is gone).
[[nodiscard]] process_origin origin_of(pid_t pid);

/// A container ID as `docker ps` and `podman ps` show it: its first 12 digits.
[[nodiscard]] inline std::string short_container_id(std::string_view id) { return std::string(id.substr(0, 12)); }

}  // namespace tgs::cuda::node
