// SPDX-License-Identifier: Apache-2.0
// Holding a process through cgroup v2's freezer (process_hold.hpp says why not through SIGSTOP).
#include "process_hold.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pinned_process.hpp"
#include "safe_dir.hpp"

namespace tgs::cuda::node {

namespace {

/// Writes `text` to the cgroup file `path` in one write; empty, or why not.
std::string write_cgroup_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return path + ": " + std::strerror(errno);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int error = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return path + ": " + std::strerror(n < 0 ? error : EIO);
  return {};
}

/// The pids a cgroup's `cgroup.procs` lists.
std::vector<pid_t> procs_of(const std::string& cgroup_folder) {
  std::vector<pid_t> out;
  std::ifstream in(cgroup_folder + "/cgroup.procs");
  for (long long pid = 0; in >> pid;) {
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

/// Whether the cgroup's `cgroup.events` says it is frozen.
bool frozen(const std::string& cgroup_folder) {
  std::ifstream in(cgroup_folder + "/cgroup.events");
  for (std::string key, value; in >> key >> value;) {
    if (key == "frozen") return value == "1";
  }
  return false;
}

/// A mount point as /proc/self/mountinfo escapes it (`\040` for a space), unescaped.
std::string unescaped(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int value = 0;
      const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 4, value, 8);
      if (ec == std::errc{} && end == s.data() + i + 4) {
        out += static_cast<char>(value);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

/// Where the cgroup v2 hierarchy is mounted at its root (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid host); empty when it is not.
std::optional<std::string> cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream before(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    before >> id >> parent >> device >> root >> mount_point;
    if (root == "/") return unescaped(mount_point);
  }
  return std::nullopt;
}

/// Whether `origin` is a cgroup a process may be moved back to: a path of the hierarchy the node
/// sees, and not a frozen cgroup of any node (under `/tgs-held`, or a `tgs-held.<pid>` inside
/// another): a process is never sent back into a hold, this node's or another's.
bool valid_origin(const std::string& origin) {
  if (origin.empty() || origin.front() != '/' || origin.find("/..") != std::string::npos) return false;
  if (origin.find('\n') != std::string::npos || origin.find("/tgs-held.") != std::string::npos) return false;
  return origin != "/tgs-held" && origin.rfind("/tgs-held/", 0) != 0;
}

}  // namespace

std::string_view to_string(hold_method m) noexcept {
  return m == hold_method::cgroup_freeze ? "cgroup-freeze" : "sigstop";
}

std::string_view to_string(hold_observed o) noexcept {
  switch (o) {
    case hold_observed::frozen: return "frozen";
    case hold_observed::freezing: return "freezing";
    case hold_observed::stopped: return "stopped";
    case hold_observed::running: return "running";
    case hold_observed::gone: return "gone";
  }
  return "?";
}

std::optional<std::string> cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return std::nullopt;
}

std::optional<hold_cgroups> hold_cgroups::open(std::string_view tag, std::string& why) {
  const std::optional<std::string> mount = cgroup2_mount();
  if (!mount) {
    why = "no cgroup v2 hierarchy is mounted at its root";
    return std::nullopt;
  }
  if (const std::optional<std::string> own = cgroup_of(::getpid()); !own || own->rfind("/..", 0) == 0) {
    why = "the node's own cgroup is outside its cgroup namespace";
    return std::nullopt;
  }
  const std::string relative = "/tgs-held/" + std::string(tag);
  // Made where missing and checked as every folder the node makes (safe_dir.hpp): another user's,
  // or one others may write to, is refused.
  try {
    for (const std::string& folder : {*mount + "/tgs-held", *mount + relative}) {
      (void)containers::make_checked_folder(folder, 0755, false);
    }
  } catch (const std::runtime_error& e) {
    why = e.what();
    return std::nullopt;
  }
  if (::access((*mount + relative + "/cgroup.freeze").c_str(), W_OK) != 0) {
    why = "the kernel has no cgroup freezer (" + *mount + relative + "/cgroup.freeze: " + std::strerror(errno) + ")";
    return std::nullopt;
  }
  return hold_cgroups(*mount, relative);
}

bool hold_cgroups::in_place(const std::string& origin) const {
  if (origin == "/" || !valid_origin(origin)) return false;
  // The node's user's alone: a cgroup delegated to a user (its files chowned to them) lets that
  // user move processes between its children, ours among them.
  struct stat st{};
  if (::stat((mount_ + origin + "/cgroup.procs").c_str(), &st) != 0) return false;
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
  // No controllers enabled for its children: a cgroup that has them may hold no process of its
  // own in a child's stead ("no internal processes") and is some manager's to divide.
  std::ifstream subtree(mount_ + origin + "/cgroup.subtree_control");
  std::string controller;
  return subtree.good() && !(subtree >> controller);
}

std::string hold_cgroups::leaf_for(pid_t pid, const std::string& origin) const {
  return in_place(origin) ? inner_leaf(pid, origin) : folder_leaf(pid);
}

hold_cgroups::held hold_cgroups::hold(pid_t pid, const std::string& origin) const {
  if (!valid_origin(origin)) {
    return {.origin = {}, .why = "its cgroup '" + origin + "' is not one the node can move it back to"};
  }
  const std::string leaf = mount_ + leaf_for(pid, origin);
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
    return {.origin = {}, .why = "cannot make " + leaf + ": " + std::strerror(errno)};
  }
  // Frozen before the process arrives: a process moved into a frozen cgroup freezes there, so
  // it never runs outside its hold.
  if (std::string why = write_cgroup_file(leaf + "/cgroup.freeze", "1"); !why.empty()) {
    (void)::rmdir(leaf.c_str());
    return {.origin = {}, .why = std::move(why)};
  }
  if (std::string why = write_cgroup_file(leaf + "/cgroup.procs", std::to_string(pid)); !why.empty()) {
    (void)write_cgroup_file(leaf + "/cgroup.freeze", "0");
    (void)::rmdir(leaf.c_str());
    return {.origin = {}, .why = std::move(why)};
  }
  return {.origin = origin, .why = {}};
}

std::string hold_cgroups::release(pid_t pid, const std::string& origin) const {
  std::string why;
  for (const std::string& relative : {folder_leaf(pid), inner_leaf(pid, origin)}) {
    const std::string leaf = mount_ + relative;
    if (origin.empty() && relative != folder_leaf(pid)) continue;
    if (::access(leaf.c_str(), F_OK) != 0) continue;  // never made, or removed already
    // Moved back first: a process takes its new cgroup's state, so it runs again as it arrives
    // where it came from (never seen thawed in the node's cgroup)...
    if (!valid_origin(origin)) {
      why = "its cgroup '" + origin + "' is not one the node can move it back to";
    } else {
      for (const pid_t p : procs_of(leaf)) {
        if (std::string failed = write_cgroup_file(mount_ + origin + "/cgroup.procs", std::to_string(p)); !failed.empty()) {
          why = std::move(failed);
        }
      }
    }
    // ...then thawed, whatever happened above: a release never leaves a process frozen.
    if (std::string failed = write_cgroup_file(leaf + "/cgroup.freeze", "0"); !failed.empty() && why.empty()) {
      why = std::move(failed);
    }
    if (::rmdir(leaf.c_str()) != 0 && errno != ENOENT && why.empty()) {
      why = "cannot remove " + leaf + ": " + std::strerror(errno);
    }
  }
  return why;
}

hold_observed hold_cgroups::observe(pid_t pid) const {
  const std::optional<std::string> cgroup = cgroup_of(pid);
  const std::optional<process_stat> stat = read_process_stat(pid);
  if (!cgroup || !stat || stat->state == 'Z' || stat->state == 'X') return hold_observed::gone;
  const std::string parent = cgroup->substr(0, cgroup->rfind('/'));
  if (*cgroup == folder_leaf(pid) || *cgroup == inner_leaf(pid, parent)) {
    return frozen(mount_ + *cgroup) ? hold_observed::frozen : hold_observed::freezing;
  }
  return stat->state == 'T' ? hold_observed::stopped : hold_observed::running;
}

std::vector<pid_t> hold_cgroups::thaw_all() const {
  std::vector<pid_t> out;
  DIR* dir = ::opendir(folder().c_str());
  if (dir == nullptr) return out;
  std::vector<std::string> leaves;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    leaves.emplace_back(e->d_name);
  }
  ::closedir(dir);
  for (const std::string& name : leaves) {
    const std::string leaf = folder() + "/" + name;
    (void)write_cgroup_file(leaf + "/cgroup.freeze", "0");
    const std::vector<pid_t> in = procs_of(leaf);
    out.insert(out.end(), in.begin(), in.end());
    if (in.empty()) (void)::rmdir(leaf.c_str());
  }
  return out;
}

void hold_cgroups::remove_if_empty() const {
  (void)thaw_all();  // removes the empty cgroups in it
  (void)::rmdir(folder().c_str());
}

}  // namespace tgs::cuda::node
