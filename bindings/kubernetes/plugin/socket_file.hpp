// SPDX-License-Identifier: Apache-2.0
// What the two kubelet plugins ask of the files they serve and watch: which file a path names now
// (to tell a socket made anew, by kubelet or by someone who removed ours, from the one seen
// before), and whether a path is a socket or a regular file.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <optional>

namespace tgs::kubernetes {

/// Which file a path names now.
struct file_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

inline std::optional<file_identity> identity_of(const std::filesystem::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return file_identity{st.st_dev, st.st_ino};
}

inline bool is_socket(const std::filesystem::path& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

inline bool is_file(const std::filesystem::path& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace tgs::kubernetes
