// SPDX-License-Identifier: Apache-2.0
// tgs-bench-intercept-alloc: the time libtgs-intercept.so adds to an allocation when tgs-node runs
// a memory policy (the allocation asks the node over the job's socket first), against the fake
// driver: a 2 MiB cuMemAlloc_v2 + cuMemFree_v2 pair, for a production job (granted device memory)
// and an opportunistic job (served from unified memory: cuMemAllocManaged plus its advice), both
// on one GPU under `--memory-policy tgs` with a budget no allocation here comes near.
//
// As tgs-bench-intercept-launch, it starts its own tgs-node and loads private copies of the
// interposer, each registered as its own job. `direct` calls the fake driver without the
// interposer; `unmanaged` is a copy that finds no node (fail-open: accounting only).
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
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
}

extern char** environ;

namespace {

using mem_alloc = CUresult (*)(CUdeviceptr*, std::size_t);
using mem_free = CUresult (*)(CUdeviceptr);

struct alloc_path {
  mem_alloc alloc = nullptr;
  mem_free free = nullptr;
};

alloc_path production_path;
alloc_path opportunistic_path;
alloc_path unmanaged_path;
constexpr std::size_t bytes = std::size_t{2} << 20;

/// Loads a private copy of the interposer registered with `job_class` on GPU 0.
alloc_path load_copy(const std::filesystem::path& dir, const char* tag, const std::string& socket,
                     const char* job_class) {
  const std::filesystem::path copy = dir / (std::string("libtgs-intercept-") + tag + ".so");
  std::filesystem::copy_file(TGS_INTERCEPT_LIBRARY, copy, std::filesystem::copy_options::overwrite_existing);
  setenv("TGS_NODE_SOCKET", socket.c_str(), 1);
  setenv("TGS_JOB_CLASS", job_class, 1);
  setenv("TGS_GPU", "0", 1);
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", copy.c_str(), dlerror());
    return {};
  }
  alloc_path p{reinterpret_cast<mem_alloc>(dlsym(handle, "cuMemAlloc_v2")),
               reinterpret_cast<mem_free>(dlsym(handle, "cuMemFree_v2"))};
  if (p.alloc == nullptr || p.free == nullptr) return {};
  // The first allocation registers with the node (synchronously), before the environment changes.
  CUdeviceptr ptr = 0;
  if (p.alloc(&ptr, bytes) != CUDA_SUCCESS || p.free(ptr) != CUDA_SUCCESS) {
    std::fprintf(stderr, "the %s copy of the interposer does not allocate\n", tag);
    return {};
  }
  return p;
}

void alloc_loop(benchmark::State& state, const alloc_path& p) {
  for (auto _ : state) {
    CUdeviceptr ptr = 0;
    benchmark::DoNotOptimize(p.alloc(&ptr, bytes));
    benchmark::DoNotOptimize(p.free(ptr));
  }
  state.SetItemsProcessed(state.iterations());
}

void direct(benchmark::State& state) { alloc_loop(state, {&cuMemAlloc_v2, &cuMemFree_v2}); }
void production(benchmark::State& state) { alloc_loop(state, production_path); }
void opportunistic(benchmark::State& state) { alloc_loop(state, opportunistic_path); }
void unmanaged(benchmark::State& state) { alloc_loop(state, unmanaged_path); }

BENCHMARK(direct);
BENCHMARK(production);
BENCHMARK(opportunistic);
BENCHMARK(unmanaged);

}  // namespace

int main(int argc, char** argv) {
  setenv("TGS_FAKE_MEMORY_MIB", "65536", 1);
  setenv("TGS_LOG_LEVEL", "error", 1);
  if (cuInit(0) != CUDA_SUCCESS) return 1;
  // The opportunistic path asks the current context where a managed allocation lives.
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return 1;

  char dir_template[] = "/tmp/tgs-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return 1;
  const std::filesystem::path dir = dir_template;
  const std::string socket = (dir / "node.sock").string();
  const std::string node = TGS_NODE_BINARY;
  const char* node_argv[] = {node.c_str(), "--socket", socket.c_str(), "--log-level", "warn", "--memory-policy", "tgs",
                             "--memory-budget-mib", "65536", nullptr};
  pid_t node_pid = 0;
  if (posix_spawn(&node_pid, node.c_str(), nullptr, nullptr, const_cast<char**>(node_argv), environ) != 0) return 1;
  for (int i = 0; i < 200 && !std::filesystem::exists(socket); ++i) std::this_thread::sleep_for(std::chrono::milliseconds{10});

  production_path = load_copy(dir, "production", socket, "production");
  opportunistic_path = load_copy(dir, "opportunistic", socket, "opportunistic");
  unmanaged_path = load_copy(dir, "unmanaged", (dir / "absent.sock").string(), "production");
  int registered = 0;
  if (FILE* status = popen((node + " status --json --socket " + socket).c_str(), "r")) {
    char line[2048];
    while (std::fgets(line, sizeof(line), status) != nullptr) {
      registered += std::strstr(line, "\"job\":") != nullptr && std::strstr(line, "\"alloc_calls\":0,") == nullptr;
    }
    pclose(status);
  }
  if (production_path.alloc == nullptr || opportunistic_path.alloc == nullptr || unmanaged_path.alloc == nullptr ||
      registered != 2) {
    std::fprintf(stderr, "expected 2 jobs allocating through the benchmark's tgs-node, found %d\n", registered);
    ::kill(node_pid, SIGTERM);
    ::waitpid(node_pid, nullptr, 0);
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
