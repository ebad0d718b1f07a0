// SPDX-License-Identifier: Apache-2.0
/// @file
/// How tgs-node holds a process that uses a GPU without registering there, so that the process's
/// owner cannot lift the hold.
///
/// A SIGSTOP is undone by a SIGCONT, which the process's owner may send at any time. cgroup v2's
/// freezer is not: a process in a frozen cgroup stays frozen whatever signal it is sent (only a
/// fatal one ends it), and only whoever may write the cgroup's files can thaw it or move it out.
/// So where the node may make cgroups (root, a cgroup v2 hierarchy), it moves the process into a
/// frozen cgroup made for it, and back to the cgroup it came from when it releases it. The
/// process's own cgroup is never frozen: other processes of its container or session, production
/// among them perhaps, share it.
///
/// Where the frozen cgroup goes:
/// - **Inside the process's own cgroup** (`<its cgroup>/tgs-held.<pid>`) when that cgroup is the
///   node's user's alone to change (not delegated to a user, whose processes could then be moved
///   back out of it) and has no controllers enabled for children. The process stays under its
///   container's limits and accounting, and its container's cgroup stays populated: a container
///   manager (systemd stops a scope whose cgroup empties, and removes it) never sees it leave.
/// - **In the node's own folder** (`<cgroup2 mount>/tgs-held/<tag>/<pid>`) otherwise: a process in
///   the root cgroup, or in a delegated one, whose user could move it out of a child of its own.
///
/// Elsewhere the node falls back to SIGSTOP, sent again whenever it finds the process running
/// (`node_observe.cpp`).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tgs::cuda::node {

/// How a process is held.
enum class hold_method : std::uint8_t {
  cgroup_freeze,  ///< moved into a frozen cgroup of the node's
  sigstop,        ///< SIGSTOP, sent again whenever the process is found running
};

/// What the node finds when it looks at a process it holds.
enum class hold_observed : std::uint8_t {
  frozen,    ///< in the node's frozen cgroup, which the kernel reports frozen
  freezing,  ///< in the node's cgroup, not frozen yet (the kernel takes a moment)
  stopped,   ///< stopped by a signal (state T)
  running,   ///< neither: the hold has not taken, or was lifted
  gone,      ///< the process has ended
};

[[nodiscard]] std::string_view to_string(hold_method m) noexcept;
[[nodiscard]] std::string_view to_string(hold_observed o) noexcept;
/// Whether `o` is a hold in force (frozen or stopped).
[[nodiscard]] constexpr bool holding(hold_observed o) noexcept {
  return o == hold_observed::frozen || o == hold_observed::stopped;
}

/// The cgroup v2 path of process `pid` as its `/proc/<pid>/cgroup` gives it (`/system.slice/x`),
/// or empty when it is gone or has none. A path outside the reader's cgroup namespace (`/..`) is
/// returned as is; callers refuse it.
[[nodiscard]] std::optional<std::string> cgroup_of(pid_t pid);

/// The node's frozen cgroups, one per held process: inside the process's own cgroup, or under
/// `<cgroup2 mount>/tgs-held/<tag>` (above). `tag` keeps two nodes on a host (one per socket) out
/// of each other's folders.
class hold_cgroups {
 public:
  /// The node's folder of cgroups, made where missing. Empty, with why in `why`, where the node
  /// cannot hold processes this way: no cgroup v2 hierarchy mounted at its root, a folder it may
  /// not make or that another user owns, no freezer (Linux before 5.2).
  [[nodiscard]] static std::optional<hold_cgroups> open(std::string_view tag, std::string& why);

  /// The folder, as a path on the file system (`/sys/fs/cgroup/tgs-held/<tag>`).
  [[nodiscard]] std::string folder() const { return mount_ + relative_; }

  /// What `hold` did: the cgroup the process came from, or why it could not be held this way.
  struct held {
    std::string origin;  ///< empty when not held
    std::string why;
  };
  /// Freezes a cgroup for `pid` and moves the process into it. `origin` is the process's cgroup,
  /// read beforehand (the node writes it in its record before it holds); the frozen cgroup is
  /// `leaf_for(pid, origin)`. A process that left it (only root can move it) is moved there again.
  [[nodiscard]] held hold(pid_t pid, const std::string& origin) const;
  /// Thaws `pid`'s frozen cgroup (either place) and moves every process in it back to `origin`,
  /// then removes the cgroup. Thawed always; empty when everything went back, else why not (those
  /// left run thawed where they are until they end).
  [[nodiscard]] std::string release(pid_t pid, const std::string& origin) const;
  /// What the node finds of `pid`, which it holds in a frozen cgroup.
  [[nodiscard]] hold_observed observe(pid_t pid) const;
  /// Where `pid`, from cgroup `origin`, is frozen (a cgroup path as /proc names it).
  [[nodiscard]] std::string leaf_for(pid_t pid, const std::string& origin) const;
  /// Thaws every cgroup under the folder and removes those that are empty: what a node that died
  /// holding processes left. The pids still in them, which a caller may move back.
  [[nodiscard]] std::vector<pid_t> thaw_all() const;
  /// Removes the folder if nothing is in it (a node that stops holding nothing leaves no cgroup).
  void remove_if_empty() const;

 private:
  hold_cgroups(std::string mount, std::string relative) : mount_(std::move(mount)), relative_(std::move(relative)) {}
  /// The frozen cgroup for `pid` in the node's folder, and inside `origin`.
  [[nodiscard]] std::string folder_leaf(pid_t pid) const { return relative_ + "/" + std::to_string(pid); }
  [[nodiscard]] static std::string inner_leaf(pid_t pid, const std::string& origin) {
    return origin + "/tgs-held." + std::to_string(pid);
  }
  /// Whether `pid` can be frozen inside `origin` (see the file's comment).
  [[nodiscard]] bool in_place(const std::string& origin) const;
  std::string mount_;     ///< the cgroup2 mount point, e.g. /sys/fs/cgroup
  std::string relative_;  ///< the folder as cgroup paths name it, e.g. /tgs-held/<tag>
};

}  // namespace tgs::cuda::node
