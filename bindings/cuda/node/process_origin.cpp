// SPDX-License-Identifier: Apache-2.0
// A process's cgroup and container, read from /proc.
#include "process_origin.hpp"

#include <fstream>
#include <sstream>

namespace tgs::cuda::node {

namespace {

bool is_hex(char c) noexcept { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

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

process_origin origin_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  process_origin o;
  o.cgroup = cgroup_of_proc_text(text.str());
  o.container = container_of_cgroup(o.cgroup);
  return o;
}

}  // namespace tgs::cuda::node
