// SPDX-License-Identifier: Apache-2.0
// What a container needs to share one GPU under tgs as one class: the CDI device names, and the
// environment and mounts that load the interposer and reach tgs-node's socket for that GPU and
// class. The CDI spec and the Kubernetes device plugin both take them from here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs::containers {

/// The CDI kind of tgs's devices: `tgs.io/gpu=0-production`, `tgs.io/gpu=0-opportunistic`.
inline constexpr std::string_view cdi_kind = "tgs.io/gpu";
/// Where a container finds the interposer (the path its `LD_PRELOAD` names).
inline constexpr std::string_view container_interposer = "/usr/lib/tgs/libtgs-intercept.so";
/// Where a container finds tgs-node's socket for its GPU and class (its `TGS_NODE_SOCKET`).
inline constexpr std::string_view container_node_socket = "/run/tgs/tgs.sock";

/// Where the interposer and tgs-node's sockets are on the host.
struct host_paths {
  /// The installed interposer (the package puts it in /usr/lib/tgs).
  std::string interposer = "/usr/lib/tgs/libtgs-intercept.so";
  /// The folder where tgs-node serves one socket per GPU and class (`gpu0-production.sock`): the
  /// unit's `--class-sockets`, a folder only root enters on the host.
  std::string socket_dir = "/run/tgs/gpus";
  /// The pipe folder of each GPU's MPS control daemon, `%u` standing for the GPU index
  /// (`/run/tgs/mps/gpu%u/pipe` under `tgs-node --mps managed`); empty: no MPS. An MPS client in a
  /// container needs that folder at the same path (tgs-node tells the job the host's path) and
  /// the host's /dev/shm, where the driver keeps its shared state with the MPS server.
  std::string mps_pipe_dir = {};
};

/// The MPS pipe folder of `gpu` (`paths.mps_pipe_dir` with `%u` replaced); empty without MPS.
[[nodiscard]] std::string mps_pipe_dir_of(const host_paths& paths, unsigned gpu);

/// The interposer where the package installs it relative to the running program: the program's
/// folder (from `/proc/self/exe`) joined with `relative_from_bin` (`../lib/tgs/libtgs-intercept.so`
/// for `<prefix>/bin`); `host_paths{}.interposer` when the program's path cannot be read.
[[nodiscard]] std::string installed_interposer(std::string_view relative_from_bin);

/// One bind mount from the host into the container.
struct mount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;

  friend bool operator==(const mount&, const mount&) = default;
};

/// One environment variable set in the container.
struct env_var {
  std::string name;
  std::string value;

  friend bool operator==(const env_var&, const env_var&) = default;
};

/// The edits that put a container on one GPU as one class.
struct container_edits {
  std::vector<env_var> env;
  std::vector<mount> mounts;
};

/// The file name of tgs-node's socket for `gpu` and `cls` in the socket folder:
/// `node_socket_name(0, job_class::production) == "gpu0-production.sock"`.
[[nodiscard]] std::string node_socket_name(unsigned gpu, job_class cls);

/// The host path of that socket: `<socket_dir>/gpu<gpu>-<class>.sock`.
[[nodiscard]] std::string node_socket_path(const host_paths& paths, unsigned gpu, job_class cls);

/// The CDI device name within tgs's kind: `"0-opportunistic"`.
[[nodiscard]] std::string cdi_device_name(unsigned gpu, job_class cls);

/// The fully qualified CDI device: `"tgs.io/gpu=0-opportunistic"`.
[[nodiscard]] std::string qualified_cdi_device(unsigned gpu, job_class cls);

/// NVIDIA's CDI device for the same GPU, by index as `nvidia-ctk cdi generate` names it:
/// `"nvidia.com/gpu=0"`.
[[nodiscard]] std::string nvidia_cdi_device(unsigned gpu);

/// The environment and mounts of tgs's CDI device for `gpu` and `cls`: `LD_PRELOAD` and
/// `TGS_NODE_SOCKET`, the interposer mounted read-only, and the node's socket for that GPU and
/// class mounted where `TGS_NODE_SOCKET` points. The class comes from which socket the job
/// reaches, never from anything the job can change. With MPS (`paths.mps_pipe_dir`), also the
/// GPU's MPS pipe folder at its host path and the host's /dev/shm at /dev/shm.
///
/// ```
/// const container_edits e = edits_for(0, job_class::production, host_paths{});
/// // e.mounts[1] == {"/run/tgs/gpus/gpu0-production.sock", "/run/tgs/tgs.sock", false}
/// ```
[[nodiscard]] container_edits edits_for(unsigned gpu, job_class cls, const host_paths& paths);

}  // namespace tgs::containers
