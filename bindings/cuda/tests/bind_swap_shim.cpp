// SPDX-License-Identifier: Apache-2.0
// Preloaded into tgs-node by lifecycle_test.cpp: right after a Unix socket whose name ends with
// TGS_TEST_SWAP_NAME is bound, its name is swapped for a symlink to TGS_TEST_SWAP_AFTER_BIND, as
// another user who may write to the socket's folder could between the bind and a chmod or chown
// by name. Deterministic, where the race itself is not.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) {
  using bind_fn = int (*)(int, const sockaddr*, socklen_t);
  static const auto real = reinterpret_cast<bind_fn>(::dlsym(RTLD_NEXT, "bind"));
  const int result = real(fd, addr, len);
  const char* target = std::getenv("TGS_TEST_SWAP_AFTER_BIND");
  const char* name = std::getenv("TGS_TEST_SWAP_NAME");
  if (result != 0 || target == nullptr || name == nullptr || addr->sa_family != AF_UNIX) return result;
  const char* path = reinterpret_cast<const sockaddr_un*>(addr)->sun_path;
  const std::size_t n = std::strlen(path);
  const std::size_t k = std::strlen(name);
  if (n >= k && std::strcmp(path + n - k, name) == 0) {
    ::unlink(path);
    (void)!::symlink(target, path);
  }
  return result;
}
