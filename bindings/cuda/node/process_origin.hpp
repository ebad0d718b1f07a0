// SPDX-License-Identifier: Apache-2.0
/// @file
/// Where a process runs, as the kernel says: its cgroup (`/proc/<pid>/cgroup`) and the container
/// that cgroup names, if any. tgs-node labels jobs and unregistered GPU processes with them in its
/// status and metrics, so an operator can tell which container a pid belongs to.
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

/// The origin of process `pid` (empty fields when it is gone).
[[nodiscard]] process_origin origin_of(pid_t pid);

/// A container ID as `docker ps` and `podman ps` show it: its first 12 digits.
[[nodiscard]] inline std::string short_container_id(std::string_view id) { return std::string(id.substr(0, 12)); }

}  // namespace tgs::cuda::node
