// SPDX-License-Identifier: Apache-2.0
/// @file
/// Folders a root daemon writes into, opened once and used only through their descriptor.
///
/// tgs-node and its CDI writer make files in folders that other local users might be able to
/// write to. Every file and folder they make is made relative to a folder opened here (`openat`,
/// `mkdirat`, `renameat`), so a name swapped for a symlink between a check and a use is never
/// followed: the folder itself is opened with `O_NOFOLLOW` and checked on its descriptor
/// (`fstat`), and what is made in it is opened with `O_NOFOLLOW` too.
///
/// A folder is refused, with its path and owner in the message, when it is owned by a user other
/// than the process's (root's folders are accepted: root could do anything anyway), and, unless
/// `allow_shared` is set, when users other than its owner may write to it (group or others write
/// permission): there another user could replace the names the node makes.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tgs::containers {

/// An open descriptor, closed at the end of its scope.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// The descriptor, no longer closed here.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

/// "uid N (name)" for messages.
inline std::string describe_uid(uid_t uid) {
  std::string text = "uid " + std::to_string(uid);
  if (const passwd* p = ::getpwuid(uid); p != nullptr && p->pw_name != nullptr) text += std::string(" (") + p->pw_name + ")";
  return text;
}

/// Why the folder `path`, open as `st` describes, must not be used by this process; empty when it may.
inline std::string folder_refusal(const std::string& path, const struct stat& st, bool allow_shared) {
  const uid_t me = ::geteuid();
  if (!S_ISDIR(st.st_mode)) return path + " is not a folder";
  if (st.st_uid != me && st.st_uid != 0) {
    return path + " is owned by " + describe_uid(st.st_uid) + ", not by this process's " + describe_uid(me) +
           " or root: refusing to use a folder another user controls (remove it, or give it to " + describe_uid(me) + ")";
  }
  if (!allow_shared && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return path + " (mode " + mode + ") is writable by users other than its owner, who could replace what is made in "
           "it: refusing it (chmod go-w " + path + ", or tgs-node --allow-shared-folders if that is meant)";
  }
  return {};
}

/// Opens the folder `name` in the folder open as `parent` (`AT_FDCWD`: the working folder), its
/// last component not followed (a symlink there is refused), and checks it as `folder_refusal`
/// does. Throws `std::runtime_error` naming `path`, the folder's full name.
inline unique_fd open_checked_folder_at(int parent, const std::string& name, const std::string& path, bool allow_shared) {
  unique_fd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    struct stat st{};
    if ((e == ELOOP || e == ENOTDIR) && ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
      throw std::runtime_error(path + " is a symlink: refusing to follow it (name the folder itself)");
    }
    throw std::runtime_error("cannot open the folder " + path + ": " + std::strerror(e));
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) throw std::runtime_error("cannot stat " + path + ": " + std::strerror(errno));
  if (std::string why = folder_refusal(path, st, allow_shared); !why.empty()) throw std::runtime_error(why);
  return fd;
}

/// The parent folder and last component of `path` ("a/b/" gives "a" and "b"; "b" gives "." and "b").
inline std::pair<std::string, std::string> split_path(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

/// Opens the existing folder `path` as `open_checked_folder_at` does.
inline unique_fd open_checked_folder(const std::string& path, bool allow_shared) {
  return open_checked_folder_at(AT_FDCWD, path, path, allow_shared);
}

/// The folder `name` in the folder open as `parent`, made with `mode` if it is missing and opened
/// as `open_checked_folder_at` opens it (`path`, its full name, is for messages). A folder made
/// here gets exactly `mode` (set on its descriptor, whatever the umask); `made` says whether it
/// was made. Nothing above `parent` is looked up again, so a chain of folders made this way from
/// one opened folder never follows a name another user swapped.
inline unique_fd make_checked_folder_at(int parent, const std::string& name, const std::string& path, mode_t mode,
                                        bool allow_shared, bool* made = nullptr) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    throw std::runtime_error("not a folder name: " + path);
  }
  // A folder that could not be made is reported by the open below (missing, or not one).
  const bool created = ::mkdirat(parent, name.c_str(), mode & 07777) == 0;
  unique_fd fd = open_checked_folder_at(parent, name, path, allow_shared);
  // Made by this process and opened without following: the mode goes on the descriptor.
  if (created && ::fchmod(fd.get(), mode & 07777) != 0) {
    throw std::runtime_error("cannot set the mode of " + path + ": " + std::strerror(errno));
  }
  if (made != nullptr) *made = created;
  return fd;
}

/// The folder `path`, made with `mode` if it is missing (its parent must exist) and opened, through
/// its parent's descriptor, as `make_checked_folder_at` makes and opens it.
inline unique_fd make_checked_folder(const std::string& path, mode_t mode, bool allow_shared, bool* made = nullptr) {
  const auto [parent_path, name] = split_path(path);
  unique_fd parent(::open(parent_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (parent.get() < 0) {
    throw std::runtime_error("cannot open the folder " + parent_path + " (to make " + path + " in it): " +
                             std::strerror(errno));
  }
  return make_checked_folder_at(parent.get(), name, path, mode, allow_shared, made);
}

/// Gives the folder open as `fd` (`path`, for messages) to `group` with `mode`, on its descriptor:
/// the folder checked when it was opened is the one changed, whatever its name names now. Used for
/// a folder whose group may search it (0710: its members reach what is in it, others do not).
inline void give_folder_to_group(int fd, const std::string& path, gid_t group, mode_t mode) {
  if (::fchown(fd, static_cast<uid_t>(-1), group) != 0) {
    throw std::runtime_error("cannot give " + path + " to group " + std::to_string(group) + ": " + std::strerror(errno));
  }
  if (::fchmod(fd, mode & 07777) != 0) {
    throw std::runtime_error("cannot set the mode of " + path + ": " + std::strerror(errno));
  }
}

/// Replaces the file `name` in the folder open as `folder` with `text`, mode `mode` (whatever the
/// umask), atomically: a reader sees the old file or the new one, never a part. The text goes
/// into a temporary file with a random name (`.NAME.tmp-` and 16 random hex digits), made
/// exclusively and never through a symlink, so no name another user could predict or plant
/// beforehand is ever written; it is synced, then renamed over `name`. Returns why it could not
/// (empty: done); nothing is left behind on failure.
inline std::string replace_file_at(int folder, const std::string& name, std::string_view text, mode_t mode) {
  std::string tmp;
  unique_fd out;
  for (int attempt = 0; attempt < 16 && out.get() < 0; ++attempt) {
    unsigned long long random = 0;
    if (::getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      return std::string("getrandom: ") + std::strerror(errno);
    }
    char suffix[24];
    std::snprintf(suffix, sizeof(suffix), "%016llx", random);
    tmp = "." + name + ".tmp-" + suffix;
    out = unique_fd(::openat(folder, tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, mode & 0777));
    if (out.get() < 0 && errno != EEXIST) return "cannot create " + tmp + ": " + std::strerror(errno);
  }
  if (out.get() < 0) return "no free temporary name beside " + name;
  const auto failed = [&](const char* what, int error) {
    ::unlinkat(folder, tmp.c_str(), 0);
    return std::string(what) + " " + tmp + ": " + std::strerror(error);
  };
  if (::fchmod(out.get(), mode & 07777) != 0) return failed("cannot set the mode of", errno);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(out.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failed("cannot write", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(out.get()) != 0) return failed("cannot sync", errno);
  out.reset();
  if (::renameat(folder, tmp.c_str(), folder, name.c_str()) != 0) {
    const int error = errno;
    ::unlinkat(folder, tmp.c_str(), 0);
    return "cannot rename " + tmp + " to " + name + ": " + std::strerror(error);
  }
  (void)::fsync(folder);  // the rename itself survives a crash
  return {};
}

}  // namespace tgs::containers
