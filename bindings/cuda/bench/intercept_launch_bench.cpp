// SPDX-License-Identifier: Apache-2.0
// tgs-bench-intercept-launch: the time libtgs-intercept.so adds to a kernel launch, against the
// fake driver with zero-cost kernels, for a production and an opportunistic job.
//
// The program starts its own tgs-node, then loads two private copies of the interposer (each
// dlopen'ed RTLD_LOCAL from its own file, so each has its own registration): one registers as a
// production job on GPU 0, the other as an opportunistic job alone on GPU 1 (so the controller
// leaves it unthrottled and the benchmark times the passing gate, not a wait). A third copy finds
// no node and shows the fail-open path. `direct` calls the fake driver without the interposer;
// the added cost is each wrapper's time minus `direct`.
#include <benchmark/benchmark.h>
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

#include "cuda_subset.hpp"

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void** params, void** extra);
}

extern char** environ;

namespace {

using launch_kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**, void**);

launch_kernel production_launch = nullptr;
launch_kernel opportunistic_launch = nullptr;
launch_kernel unmanaged_launch = nullptr;
int kernel_object = 0;

/// Loads a private copy of the interposer registered with `job_class` on `gpu`.
launch_kernel load_copy(const std::filesystem::path& dir, const char* tag, const std::string& socket,
                        const char* job_class, const char* gpu) {
  const std::filesystem::path copy = dir / (std::string("libtgs-intercept-") + tag + ".so");
  std::filesystem::copy_file(TGS_INTERCEPT_LIBRARY, copy, std::filesystem::copy_options::overwrite_existing);
  setenv("TGS_NODE_SOCKET", socket.c_str(), 1);
  setenv("TGS_JOB_CLASS", job_class, 1);
  setenv("TGS_GPU", gpu, 1);
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", copy.c_str(), dlerror());
    return nullptr;
  }
  auto launch = reinterpret_cast<launch_kernel>(dlsym(handle, "cuLaunchKernel"));
  if (launch == nullptr) return nullptr;
  // The first launch registers with the node (synchronously), before the environment changes.
  const CUresult r =
      launch(reinterpret_cast<CUfunction>(&kernel_object), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "the %s copy of the interposer does not launch (%d)\n", tag, static_cast<int>(r));
    return nullptr;
  }
  return launch;
}

void launch_loop(benchmark::State& state, launch_kernel launch) {
  auto* f = reinterpret_cast<CUfunction>(&kernel_object);
  for (auto _ : state) {
    benchmark::DoNotOptimize(launch(f, 64, 1, 1, 128, 1, 1, 0, nullptr, nullptr, nullptr));
  }
  state.SetItemsProcessed(state.iterations());
}

void direct(benchmark::State& state) { launch_loop(state, &cuLaunchKernel); }
void production(benchmark::State& state) { launch_loop(state, production_launch); }
void opportunistic(benchmark::State& state) { launch_loop(state, opportunistic_launch); }
void unmanaged(benchmark::State& state) { launch_loop(state, unmanaged_launch); }

BENCHMARK(direct);
BENCHMARK(production);
BENCHMARK(opportunistic);
BENCHMARK(unmanaged);

}  // namespace

int main(int argc, char** argv) {
  // Zero-cost kernels: the fake driver returns at once, so only the interposer's time differs.
  setenv("TGS_FAKE_NS_PER_BLOCK", "0", 1);
  setenv("TGS_LOG_LEVEL", "error", 1);
  if (cuInit(0) != CUDA_SUCCESS) return 1;

  char dir_template[] = "/tmp/tgs-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return 1;
  const std::filesystem::path dir = dir_template;
  const std::string socket = (dir / "node.sock").string();
  const std::string node = TGS_NODE_BINARY;
  const char* node_argv[] = {node.c_str(), "--socket", socket.c_str(), "--log-level", "warn", nullptr};
  pid_t node_pid = 0;
  if (posix_spawn(&node_pid, node.c_str(), nullptr, nullptr, const_cast<char**>(node_argv), environ) != 0) return 1;
  for (int i = 0; i < 200 && !std::filesystem::exists(socket); ++i) std::this_thread::sleep_for(std::chrono::milliseconds{10});

  production_launch = load_copy(dir, "production", socket, "production", "0");
  opportunistic_launch = load_copy(dir, "opportunistic", socket, "opportunistic", "1");
  unmanaged_launch = load_copy(dir, "unmanaged", (dir / "absent.sock").string(), "production", "0");
  if (production_launch == nullptr || opportunistic_launch == nullptr || unmanaged_launch == nullptr) {
    ::kill(node_pid, SIGTERM);
    ::waitpid(node_pid, nullptr, 0);
    return 1;
  }
  // Both managed copies must really be registered, or the numbers would time the fail-open path.
  int registered = 0;
  if (FILE* status = popen((node + " status --json --socket " + socket).c_str(), "r")) {
    char line[1024];
    while (std::fgets(line, sizeof(line), status) != nullptr) registered += std::strstr(line, "\"job\":") != nullptr;
    pclose(status);
  }
  if (registered != 2) {
    std::fprintf(stderr, "expected 2 jobs registered with the benchmark's tgs-node, found %d\n", registered);
    ::kill(node_pid, SIGTERM);
    return 1;
  }

  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  ::kill(node_pid, SIGTERM);
  ::waitpid(node_pid, nullptr, 0);
  std::filesystem::remove_all(dir);
  return 0;
}
