// SPDX-License-Identifier: Apache-2.0
// The names, environment and mounts of tgs's per-GPU, per-class container devices.
#include "container_edits.hpp"

#include <filesystem>

namespace tgs::containers {

std::string installed_interposer(std::string_view relative_from_bin) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return host_paths{}.interposer;
  return (self.parent_path() / relative_from_bin).lexically_normal().string();
}

std::string node_socket_name(unsigned gpu, job_class cls) {
  return "gpu" + std::to_string(gpu) + "-" + std::string(to_string(cls)) + ".sock";
}

std::string node_socket_path(const host_paths& paths, unsigned gpu, job_class cls) {
  std::string dir = paths.socket_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + node_socket_name(gpu, cls);
}

std::string cdi_device_name(unsigned gpu, job_class cls) {
  return std::to_string(gpu) + "-" + std::string(to_string(cls));
}

std::string qualified_cdi_device(unsigned gpu, job_class cls) {
  return std::string(cdi_kind) + "=" + cdi_device_name(gpu, cls);
}

std::string nvidia_cdi_device(unsigned gpu) { return "nvidia.com/gpu=" + std::to_string(gpu); }

container_edits edits_for(unsigned gpu, job_class cls, const host_paths& paths) {
  container_edits e;
  e.env = {{"LD_PRELOAD", std::string(container_interposer)},
           {"TGS_NODE_SOCKET", std::string(container_node_socket)}};
  // The socket stays writable: connecting to a Unix socket needs write permission on it.
  e.mounts = {{paths.interposer, std::string(container_interposer), true},
              {node_socket_path(paths, gpu, cls), std::string(container_node_socket), false}};
  if (const std::string pipe = mps_pipe_dir_of(paths, gpu); !pipe.empty()) {
    // The client connects to the daemon's sockets in the pipe folder (at the path tgs-node told
    // it) and shares memory with the MPS server through /dev/shm: both are the host's.
    e.mounts.push_back({pipe, pipe, false});
    e.mounts.push_back({"/dev/shm", "/dev/shm", false});
  }
  return e;
}

std::string mps_pipe_dir_of(const host_paths& paths, unsigned gpu) {
  std::string dir = paths.mps_pipe_dir;
  if (const std::size_t at = dir.find("%u"); at != std::string::npos) dir.replace(at, 2, std::to_string(gpu));
  return dir;
}

}  // namespace tgs::containers
