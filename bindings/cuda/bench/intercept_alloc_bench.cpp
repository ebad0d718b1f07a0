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

#include <cstdio>

#include "bench_node.hpp"
#include "cuda_subset.hpp"
#include "driver_api.hpp"

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

/// A private copy of the interposer's allocation calls on GPU 0, registered by a first allocation.
alloc_path load_copy(const tgs_bench::bench_node& node, const char* tag, const std::string& socket,
                     const char* job_class) {
  void* handle = node.load_copy(tag, socket, job_class, "0");
  if (handle == nullptr) return {};
  alloc_path p{reinterpret_cast<mem_alloc>(dlsym(handle, "cuMemAlloc_v2")),
               reinterpret_cast<mem_free>(dlsym(handle, "cuMemFree_v2"))};
  if (p.alloc == nullptr || p.free == nullptr) return {};
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

  tgs_bench::bench_node node({"--memory-policy", "tgs", "--memory-budget-mib", "65536"});
  if (!node.running()) return 1;
  production_path = load_copy(node, "production", node.socket(), "production");
  opportunistic_path = load_copy(node, "opportunistic", node.socket(), "opportunistic");
  unmanaged_path = load_copy(node, "unmanaged", (node.dir() / "absent.sock").string(), "production");
  if (production_path.alloc == nullptr || opportunistic_path.alloc == nullptr || unmanaged_path.alloc == nullptr) {
    return 1;
  }
  // Both managed copies must have allocated through the node, or the numbers would time fail-open.
  if (const int registered = node.jobs("\"alloc_calls\":1,"); registered != 2) {
    std::fprintf(stderr, "expected 2 jobs allocating through the benchmark's tgs-node, found %d\n", registered);
    return 1;
  }

  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
