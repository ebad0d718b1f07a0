// SPDX-License-Identifier: Apache-2.0
// A process's cgroup, container and pod, read from /proc.
#include "process_origin.hpp"

#include <fstream>
#include <sstream>

namespace tgs::cuda::node {

namespace {

bool is_hex(char c) noexcept { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/// Whether `s` is a UUID in its 8-4-4-4-12 shape, with `-` or (systemd's escaping) `_` between.
bool uuid_shaped(std::string_view s) noexcept {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool separator = i == 8 || i == 13 || i == 18 || i == 23;
    if (separator ? (s[i] != '-' && s[i] != '_') : !is_hex(s[i])) return false;
  }
  return true;
}

/// Environment values become labels: at most a DNS subdomain's length (what Kubernetes allows
/// for a name).
constexpr std::size_t max_name_bytes = 253;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string cgroup_of_proc_text(std::string_view text) {
  std::string unified;
  std::string systemd;
  std::string first;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    const std::size_t colon1 = line.find(':');
    const std::size_t colon2 = colon1 == std::string_view::npos ? colon1 : line.find(':', colon1 + 1);
    if (colon2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(colon1 + 1, colon2 - colon1 - 1);
    const std::string path(line.substr(colon2 + 1));
    if (path.empty()) continue;
    if (line.substr(0, colon1) == "0" && controllers.empty()) {
      unified = path;
    } else if (controllers == "name=systemd") {
      systemd = path;
    } else if (first.empty()) {
      first = path;
    }
  }
  if (!unified.empty() && unified != "/") return unified;
  if (!systemd.empty() && systemd != "/") return systemd;
  if (!first.empty() && first != "/") return first;
  return !unified.empty() ? unified : (!systemd.empty() ? systemd : first);
}

std::string container_of_cgroup(std::string_view cgroup) {
  std::string_view found;
  std::size_t i = 0;
  while (i < cgroup.size()) {
    if (!is_hex(cgroup[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cgroup.size() && is_hex(cgroup[j])) ++j;
    if (j - i == 64) found = cgroup.substr(i, 64);
    i = j;
  }
  return std::string(found);
}

std::string pod_uid_of_cgroup(std::string_view cgroup) {
  std::string found;
  for (std::size_t at = cgroup.find("pod"); at != std::string_view::npos; at = cgroup.find("pod", at + 1)) {
    const std::string_view rest = cgroup.substr(at + 3);
    if (rest.size() < 36 || !uuid_shaped(rest.substr(0, 36))) continue;
    if (rest.size() > 36 && (is_hex(rest[36]) || rest[36] == '-' || rest[36] == '_')) continue;
    found = std::string(rest.substr(0, 36));
  }
  for (char& c : found) {
    if (c == '_') c = '-';
  }
  return found;
}

std::string environment_value(std::string_view environ_text, std::string_view name) {
  std::size_t at = 0;
  while (at < environ_text.size()) {
    std::size_t end = environ_text.find('\0', at);
    if (end == std::string_view::npos) end = environ_text.size();
    const std::string_view entry = environ_text.substr(at, end - at);
    at = end + 1;
    if (entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=') {
      return std::string(entry.substr(name.size() + 1));
    }
  }
  return {};
}

/// `value` if it can be a Kubernetes object's name (a DNS subdomain: lower-case letters, digits,
/// `-` and `.`), else empty: the environment is the job's, and the labels take nothing else.
std::string kubernetes_name(std::string value) {
  const bool valid = !value.empty() && value.size() <= max_name_bytes &&
                     value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") == std::string::npos;
  return valid ? value : std::string();
}

process_origin origin_of_texts(std::string_view cgroup_text, std::string_view environ_text) {
  process_origin o;
  o.cgroup = cgroup_of_proc_text(cgroup_text);
  o.container = container_of_cgroup(o.cgroup);
  o.pod_uid = pod_uid_of_cgroup(o.cgroup);
  if (!o.pod_uid.empty()) {
    o.pod = kubernetes_name(environment_value(environ_text, "TGS_POD_NAME"));
    o.pod_namespace = kubernetes_name(environment_value(environ_text, "TGS_POD_NAMESPACE"));
  }
  return o;
}

process_origin origin_of(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  const std::string cgroup = read_file(proc + "/cgroup");
  // The environment only matters in a pod: not read for host processes.
  return origin_of_texts(cgroup, pod_uid_of_cgroup(cgroup_of_proc_text(cgroup)).empty()
                                     ? std::string()
                                     : read_file(proc + "/environ"));
}

}  // namespace tgs::cuda::node
