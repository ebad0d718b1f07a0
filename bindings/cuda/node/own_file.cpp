// SPDX-License-Identifier: Apache-2.0
// Reading and replacing the files tgs-node keeps for its successor.
#include "own_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "safe_dir.hpp"

namespace tgs::cuda::node {

std::optional<std::string> read_own_file(const std::string& path, std::size_t max_bytes, std::string& why) {
  why.clear();
  const containers::unique_fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != ENOENT) {
      why = errno == ELOOP ? std::string("a symbolic link") : std::string("unreadable (") + std::strerror(errno) + ")";
    }
    return std::nullopt;
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    why = std::string("unreadable (") + std::strerror(errno) + ")";
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = fmt::format("owned by uid {}, not by the node's user ({})", st.st_uid, ::geteuid());
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = fmt::format("writable by others (mode {:04o})", st.st_mode & 07777);
  } else if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    why = fmt::format("larger than {} bytes", max_bytes);
  }
  if (!why.empty()) return std::nullopt;
  std::string text(max_bytes + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::string("unreadable (") + std::strerror(errno) + ")";
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got == text.size()) break;
  }
  if (got > max_bytes) {
    why = fmt::format("larger than {} bytes", max_bytes);  // it grew after fstat
    return std::nullopt;
  }
  text.resize(got);
  return text;
}

std::string replace_own_file(const std::string& path, std::string_view text) {
  const auto [folder_path, name] = containers::split_path(path);
  const containers::unique_fd folder(::open(folder_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (folder.get() < 0) return "cannot open its folder: " + std::string(std::strerror(errno));
  return containers::replace_file_at(folder.get(), name, text, 0600);
}

}  // namespace tgs::cuda::node
