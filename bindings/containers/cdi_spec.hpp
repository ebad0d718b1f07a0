// SPDX-License-Identifier: Apache-2.0
// The CDI spec of tgs's devices (kind tgs.io/gpu): two devices per GPU, `<index>-production` and
// `<index>-opportunistic`, whose container edits load the interposer and mount the node's socket
// for that GPU and class, for podman, docker, containerd and CRI-O with CDI enabled.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "container_edits.hpp"

namespace tgs::containers {

/// What the spec describes.
struct cdi_spec_options {
  /// The host's GPU indices (as NVIDIA's own CDI spec numbers them); at least one.
  std::vector<unsigned> gpus;
  /// Where the interposer and tgs-node's sockets are on the host; both absolute.
  host_paths paths;
  /// The spec version written. 0.5.0 is the oldest that allows a device name starting with a
  /// digit, and the spec uses nothing newer: runtimes refuse versions their CDI library does not
  /// know, so the oldest sufficient one loads in the most runtimes (the CDI library itself
  /// computes its minimum required version the same way).
  std::string cdi_version = "0.5.0";
};

/// The spec as JSON text (two-space indented, newline at the end).
/// Throws `std::invalid_argument` for no GPUs, a GPU listed twice or a relative path.
///
/// ```
/// const std::string json = render_cdi_spec({.gpus = {0, 1}, .paths = {}});
/// // {"cdiVersion": "0.5.0", "kind": "tgs.io/gpu", "devices": [{"name": "0-production", ...
/// ```
[[nodiscard]] std::string render_cdi_spec(const cdi_spec_options& options);

/// Writes the spec to `file` (for example `/etc/cdi/tgs.json`) through a temporary file in the
/// same folder and a rename, so a runtime reading the folder never sees half a spec.
/// Everything is done relative to the folder, opened once without following a symlink: the
/// temporary file has a random name and is made exclusively (`O_EXCL | O_NOFOLLOW`), its mode
/// (0644) is set on its descriptor, it is synced, renamed within the folder, and the folder synced.
/// A folder owned by another user than this process's (or root) is refused, and so, unless
/// `allow_shared_folder`, is one that others may write to (safe_dir.hpp).
/// Throws `std::invalid_argument` as `render_cdi_spec` does and `std::runtime_error` naming the
/// file when it cannot be written.
void write_cdi_spec(const std::filesystem::path& file, const cdi_spec_options& options,
                    bool allow_shared_folder = false);

}  // namespace tgs::containers
