// SPDX-License-Identifier: Apache-2.0
// The node's listening socket: a lock file decides which node owns the path, and a node removes
// only the socket it created.
#include "listener.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
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

}  // namespace

socket_listener::socket_listener(const std::string& path, unsigned mode, int backlog) : path_(path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    throw std::runtime_error("socket path must be 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
                             " characters: " + path);
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  // Create the parent directory if it is missing (/run/tgs after a reboot).
  if (const std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  }
  // The lock first: until this process holds it, nothing at the path is touched. It is never
  // removed (removing a lock file lets two processes hold locks on two different files).
  const std::string lock_path = path + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0) throw std::runtime_error("cannot open the lock file " + lock_path + ": " + errno_text());
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const std::string why = errno == EWOULDBLOCK ? "another tgs-node holds " + lock_path + " (it serves " + path + ")"
                                                 : "cannot lock " + lock_path + ": " + errno_text();
    release();
    throw std::runtime_error(why);
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
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
    ::unlink(path.c_str());
  }
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    const std::string why = "socket: " + errno_text();
    release();
    throw std::runtime_error(why);
  }
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = "bind " + path + ": " + errno_text();
    release();
    throw std::runtime_error(why);
  }
  if (::lstat(path.c_str(), &st) == 0) {
    created_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  ::chmod(path.c_str(), mode);
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
      dev_(other.dev_),
      ino_(other.ino_),
      created_(std::exchange(other.created_, false)) {}

socket_listener& socket_listener::operator=(socket_listener&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    dev_ = other.dev_;
    ino_ = other.ino_;
    created_ = std::exchange(other.created_, false);
  }
  return *this;
}

void socket_listener::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  // Only the socket this process created, and only while the path still names it.
  struct stat st{};
  if (created_ && ::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    ::unlink(path_.c_str());
  }
  created_ = false;
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock, after the socket is gone
  lock_fd_ = -1;
}

}  // namespace tgs::cuda::node
