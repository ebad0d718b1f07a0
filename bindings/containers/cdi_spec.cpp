// SPDX-License-Identifier: Apache-2.0
// Renders and writes the CDI spec of tgs's devices with nlohmann::json.
#include "cdi_spec.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
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

void write_cdi_spec(const std::filesystem::path& file, const cdi_spec_options& options) {
  const std::string text = render_cdi_spec(options);
  std::filesystem::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw std::runtime_error(file.string() + ": cannot write the CDI spec (" + std::strerror(errno) + ")");
    }
    out << text;
    out.flush();
    if (!out) {
      const std::string reason = std::strerror(errno);
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw std::runtime_error(file.string() + ": cannot write the CDI spec (" + reason + ")");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error(file.string() + ": cannot write the CDI spec (" + ec.message() + ")");
  }
}

}  // namespace tgs::containers
