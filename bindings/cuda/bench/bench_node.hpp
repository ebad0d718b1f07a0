// SPDX-License-Identifier: Apache-2.0
/// @file
/// What the interposer benchmarks share: a private tgs-node in a temporary folder, private copies
/// of libtgs-intercept.so each registered as its own job, and a check that they really are.
#pragma once

#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace tgs_bench {

/// A tgs-node of the benchmark's own, stopped (and its folder removed) on destruction.
class bench_node {
 public:
  /// Starts TGS_NODE_BINARY with `flags` on a socket in a fresh temporary folder.
  explicit bench_node(const std::vector<std::string>& flags) {
    char dir_template[] = "/tmp/tgs-bench-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return;
    dir_ = dir_template;
    socket_ = (dir_ / "node.sock").string();
    // Two GPUs (the launch benchmark keeps its jobs apart on 0 and 1): without NVML tgs-node
    // needs the count given.
    std::vector<std::string> args{TGS_NODE_BINARY, "--socket", socket_, "--log-level", "warn", "--gpus", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = 0;
      return;
    }
    for (int i = 0; i < 200 && !std::filesystem::exists(socket_); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
  }
  bench_node(const bench_node&) = delete;
  bench_node& operator=(const bench_node&) = delete;
  ~bench_node() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  [[nodiscard]] bool running() const { return pid_ > 0 && std::filesystem::exists(socket_); }
  [[nodiscard]] const std::string& socket() const { return socket_; }
  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

  /// Loads a private copy of the interposer (dlopen'ed RTLD_LOCAL from its own file, so it has its
  /// own registration) that will register with `socket` as `job_class` on `gpu`. The caller's
  /// first CUDA call through it registers, so make it before loading the next copy.
  [[nodiscard]] void* load_copy(const char* tag, const std::string& socket, const char* job_class,
                                const char* gpu) const {
    const std::filesystem::path copy = dir_ / (std::string("libtgs-intercept-") + tag + ".so");
    std::filesystem::copy_file(TGS_INTERCEPT_LIBRARY, copy, std::filesystem::copy_options::overwrite_existing);
    setenv("TGS_NODE_SOCKET", socket.c_str(), 1);
    setenv("TGS_JOB_CLASS", job_class, 1);
    setenv("TGS_GPU", gpu, 1);
    void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) std::fprintf(stderr, "dlopen %s: %s\n", copy.c_str(), dlerror());
    return handle;
  }

  /// Jobs the node lists whose status line contains `also` (empty: every job).
  [[nodiscard]] int jobs(const char* also = "") const {
    int n = 0;
    const std::string command = std::string(TGS_NODE_BINARY) + " status --json --socket " + socket_;
    if (FILE* status = popen(command.c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof(line), status) != nullptr) {
        n += std::strstr(line, "\"job\":") != nullptr && std::strstr(line, also) != nullptr;
      }
      pclose(status);
    }
    return n;
  }

 private:
  std::filesystem::path dir_;
  std::string socket_;
  pid_t pid_ = 0;
};

}  // namespace tgs_bench
