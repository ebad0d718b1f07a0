// SPDX-License-Identifier: Apache-2.0
// The node's listening socket: a lock file decides which node owns the path, and a node removes
// only the socket it created.
#include "listener.hpp"

#include "safe_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

namespace tgs::cuda::node {

namespace {

std::string errno_text() { return std::strerror(errno); }

/// Whether a process listens on the socket at `addr`: a non-blocking connect is accepted at once
/// (or refused with EAGAIN when its backlog is full: someone listens, but is busy or wedged).
bool someone_listens(const sockaddr_un& addr) {
  const int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) return false;
  const bool answered =
      ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN;
  ::close(probe);
  return answered;
}

/// The pid a holder wrote into the lock file (`holder pid N`), or empty.
std::string holder_of(int lock_fd) {
  char text[64] = {};
  const ssize_t n = ::pread(lock_fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return {};
  std::string_view s(text, static_cast<std::size_t>(n));
  if (const std::size_t nl = s.find('\n'); nl != std::string_view::npos) s = s.substr(0, nl);
  return std::string(s);
}

}  // namespace

socket_listener::socket_listener(const std::string& path, unsigned mode, int backlog,
                                 std::chrono::milliseconds takeover_wait, const socket_folder_rules& rules)
    : path_(path) {
  const auto [folder_path, name] = containers::split_path(path);
  if (path.empty() || name.empty() || name == "." || name == "..") throw std::runtime_error("not a socket path: " + path);
  // The folder, made if it is missing (/run/tgs after a reboot), opened once without following a
  // symlink and refused if another user owns it or (unless allowed) may write to it. Everything
  // below is relative to this descriptor: the lock file (openat), the socket's own name (bound and
  // reached as /proc/self/fd/<folder>/<name>, which the kernel resolves to this very folder), its
  // mode and group, and its removal.
  folder_fd_ = containers::make_checked_folder(folder_path, 0755, rules.allow_shared).release();
  name_ = name;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string bound = "/proc/self/fd/" + std::to_string(folder_fd_) + "/" + name;
  if (bound.size() >= sizeof(addr.sun_path)) {
    const std::string why = "socket name must be at most " +
                            std::to_string(sizeof(addr.sun_path) - 1 - (bound.size() - name.size())) +
                            " characters: " + name;
    release();
    throw std::runtime_error(why);
  }
  std::strncpy(addr.sun_path, bound.c_str(), sizeof(addr.sun_path) - 1);
  // The lock first: until this process holds it, nothing at the path is touched. It is never
  // removed (removing a lock file lets two processes hold locks on two different files).
  const std::string lock_path = path + ".lock";
  lock_fd_ = ::openat(folder_fd_, (name + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0) {
    const std::string why = "cannot open the lock file " + lock_path + ": " + errno_text();
    release();
    throw std::runtime_error(why);
  }
  struct stat st{};
  if (::fstat(lock_fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    const std::string why = "the lock file " + lock_path + " is not a file of this process's user " +
                            containers::describe_uid(::geteuid()) + ": refusing it";
    release();
    throw std::runtime_error(why);
  }
  // A node that serves the path answers on it: refused at once. A holder that no longer listens
  // is a node on its way out (it closes its sockets first, then stops its MPS daemons and its
  // metrics, then lets the lock go: `stop_listening`), or one between taking the lock and
  // listening: waited for, up to `takeover_wait`.
  const auto deadline = std::chrono::steady_clock::now() + takeover_wait;
  while (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      const std::string why = "cannot lock " + lock_path + ": " + errno_text();
      release();
      throw std::runtime_error(why);
    }
    const std::string holder = holder_of(lock_fd_);
    const std::string who = "another tgs-node" + (holder.empty() ? std::string() : " (" + holder + ")");
    if (someone_listens(addr)) {
      release();
      throw std::runtime_error(who + " holds " + lock_path + " and serves " + path);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      release();
      throw std::runtime_error(
          who + " holds " + lock_path + " and has not let it go within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(takeover_wait).count()) +
          " ms of no longer serving " + path + " (is it stuck stopping?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  // Who holds it, for the message of a node that finds it held (the file is never removed:
  // overwritten in place). Best effort: without it that message only lacks the pid.
  const std::string holder = "pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) == 0) (void)!::pwrite(lock_fd_, holder.data(), holder.size(), 0);
  if (::fstatat(folder_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      release();
      throw std::runtime_error(path + " exists and is not a socket: refusing to replace it");
    }
    // A socket whose node is gone (we hold the lock), unless a node of a build without the lock
    // still serves it: ask before removing it.
    if (someone_listens(addr)) {
      release();
      throw std::runtime_error("another tgs-node is serving " + path);
    }
    ::unlinkat(folder_fd_, name.c_str(), 0);
  }
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    const std::string why = "socket: " + errno_text();
    release();
    throw std::runtime_error(why);
  }
  // The socket file's mode and group cannot be set through the socket's descriptor (fchmod on it
  // changes the socket, not the file), and a name can be swapped for a symlink between bind and a
  // chmod by path. So: the file is made 0600 (umask 0177 for the bind, at start, before the node
  // runs threads that make files), reachable by nobody else yet; then the name is opened with
  // O_PATH | O_NOFOLLOW relative to the folder, which pins one inode (a symlink swapped in is
  // opened as the symlink itself), checked to be a socket of this user, and only that inode gets
  // the mode (through /proc/self/fd, as glibc's fchmodat(AT_SYMLINK_NOFOLLOW) does) and the group
  // (fchownat(AT_EMPTY_PATH)). A file another user swapped in is never changed: there is no
  // window in which a chmod or chown follows a name.
  const mode_t old_umask = ::umask(0177);
  const int bound_ok = ::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound_ok != 0) {
    const std::string why = "bind " + path + ": " + std::strerror(bind_errno);
    release();
    throw std::runtime_error(why);
  }
  {
    containers::unique_fd file(::openat(folder_fd_, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (file.get() < 0 || ::fstat(file.get(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
      const std::string why = path + " changed between bind and chmod (not this node's socket any more): refusing it";
      release();
      throw std::runtime_error(why);
    }
    created_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    const std::string pinned = "/proc/self/fd/" + std::to_string(file.get());
    if (::chmod(pinned.c_str(), mode) != 0) {
      const std::string why = "cannot set the mode of " + path + ": " + errno_text();
      release();
      throw std::runtime_error(why);
    }
    if (rules.group && ::fchownat(file.get(), "", static_cast<uid_t>(-1), *rules.group, AT_EMPTY_PATH) != 0) {
      const std::string why = "cannot give " + path + " to group " + std::to_string(*rules.group) + ": " + errno_text();
      release();
      throw std::runtime_error(why);
    }
  }
  if (::listen(fd_, backlog) != 0) {
    const std::string why = "listen: " + errno_text();
    release();
    throw std::runtime_error(why);
  }
}

socket_listener::~socket_listener() { release(); }

socket_listener::socket_listener(socket_listener&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      folder_fd_(std::exchange(other.folder_fd_, -1)),
      name_(std::move(other.name_)),
      dev_(other.dev_),
      ino_(other.ino_),
      created_(std::exchange(other.created_, false)) {}

socket_listener& socket_listener::operator=(socket_listener&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    folder_fd_ = std::exchange(other.folder_fd_, -1);
    name_ = std::move(other.name_);
    dev_ = other.dev_;
    ino_ = other.ino_;
    created_ = std::exchange(other.created_, false);
  }
  return *this;
}

void socket_listener::stop_listening() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void socket_listener::release() noexcept {
  stop_listening();
  // Only the socket this process created, and only while the path still names it.
  struct stat st{};
  if (created_ && folder_fd_ >= 0 && ::fstatat(folder_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st.st_dev == dev_ && st.st_ino == ino_) {
    ::unlinkat(folder_fd_, name_.c_str(), 0);
  }
  created_ = false;
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock, after the socket is gone
  lock_fd_ = -1;
  if (folder_fd_ >= 0) ::close(folder_fd_);
  folder_fd_ = -1;
}

}  // namespace tgs::cuda::node
