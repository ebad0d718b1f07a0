// SPDX-License-Identifier: Apache-2.0
// Renders and writes the CDI spec of tgs's devices with nlohmann::json.
#include "cdi_spec.hpp"

#include "safe_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace tgs::containers {

namespace {

// Ordered, so the file reads as the CDI spec lists its fields (name before edits, host before container).
using json = nlohmann::ordered_json;

void require_absolute(const std::string& path, const char* what) {
  if (path.empty() || path.front() != '/') {
    throw std::invalid_argument(std::string("CDI spec: ") + what + " must be an absolute path, got \"" + path + "\"");
  }
}

json cdi_edits(const container_edits& edits) {
  json env = json::array();
  for (const env_var& v : edits.env) env.push_back(v.name + "=" + v.value);
  json mounts = json::array();
  for (const mount& m : edits.mounts) {
    json options = json::array();
    if (m.read_only) options.push_back("ro");
    for (const char* o : {"nosuid", "nodev", "bind"}) options.push_back(o);
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  return {{"env", env}, {"mounts", mounts}};
}

}  // namespace

std::string render_cdi_spec(const cdi_spec_options& options) {
  if (options.gpus.empty()) throw std::invalid_argument("CDI spec: no GPUs (a spec needs at least one device)");
  std::set<unsigned> seen;
  for (unsigned g : options.gpus) {
    if (!seen.insert(g).second) {
      throw std::invalid_argument("CDI spec: GPU " + std::to_string(g) + " is listed twice");
    }
  }
  require_absolute(options.paths.interposer, "the interposer");
  require_absolute(options.paths.socket_dir, "the socket folder");

  json devices = json::array();
  for (unsigned g : options.gpus) {
    for (job_class cls : {job_class::production, job_class::opportunistic}) {
      devices.push_back({{"name", cdi_device_name(g, cls)}, {"containerEdits", cdi_edits(edits_for(g, cls, options.paths))}});
    }
  }
  const json spec = {
      {"cdiVersion", options.cdi_version}, {"kind", std::string(cdi_kind)}, {"devices", devices}};
  return spec.dump(2) + "\n";
}

void write_cdi_spec(const std::filesystem::path& file, const cdi_spec_options& options, bool allow_shared_folder) {
  const std::string text = render_cdi_spec(options);
  const auto fail = [&](const std::string& why) {
    return std::runtime_error(file.string() + ": cannot write the CDI spec (" + why + ")");
  };
  // Everything below is relative to the folder opened here (not followed if it is a symlink, and
  // refused if another user owns it or may write to it: safe_dir.hpp), so a name swapped for a
  // symlink in it is never followed.
  const auto [folder_path, name] = split_path(file.string());
  unique_fd folder(::open(folder_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (folder.get() < 0) {
    const int e = errno;
    struct stat st{};
    if (::lstat(folder_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      throw fail(folder_path + " is a symlink: refusing to follow it");
    }
    throw fail(std::strerror(e));
  }
  {
    struct stat st{};
    if (::fstat(folder.get(), &st) != 0) throw fail(std::strerror(errno));
    if (const std::string why = folder_refusal(folder_path, st, allow_shared_folder); !why.empty()) throw fail(why);
  }
  // Runtimes of any user read the spec: 0644.
  if (const std::string why = replace_file_at(folder.get(), name, text, 0644); !why.empty()) throw fail(why);
}

}  // namespace tgs::containers
