// SPDX-License-Identifier: Apache-2.0
// tgs-bench-intercept-launch: the time libtgs-intercept.so adds to a kernel launch, against the
// fake driver with zero-cost kernels, for a production and an opportunistic job.
//
// The program starts its own tgs-node, then loads two private copies of the interposer (each
// dlopen'ed RTLD_LOCAL from its own file, so each has its own registration): one registers as a
// production job on GPU 0, the other as an opportunistic job alone on GPU 1 (so the controller
// leaves it unthrottled and the benchmark times the passing gate, not a wait). A third copy finds
// no node and shows the fail-open path. A fourth registers as an opportunistic job with a second
// node that gives it a launch window (`--max-inflight-launches 64`): its launches record an
// event each and query the oldest, which with zero-cost kernels has always finished, so it times
// the window's bookkeeping, not a wait. `direct` calls the fake driver without the interposer;
// the added cost is each wrapper's time minus `direct`.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench_node.hpp"
#include "cuda_subset.hpp"
#include "driver_api.hpp"

namespace {

using launch_kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**, void**);

launch_kernel production_launch = nullptr;
launch_kernel opportunistic_launch = nullptr;
launch_kernel unmanaged_launch = nullptr;
launch_kernel windowed_launch = nullptr;
int kernel_object = 0;

/// A private copy of the interposer's cuLaunchKernel, registered by a first launch.
launch_kernel load_copy(const tgs_bench::bench_node& node, const char* tag, const std::string& socket,
                        const char* job_class, const char* gpu) {
  void* handle = node.load_copy(tag, socket, job_class, gpu);
  auto launch = handle == nullptr ? nullptr : reinterpret_cast<launch_kernel>(dlsym(handle, "cuLaunchKernel"));
  if (launch == nullptr) return nullptr;
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
void opportunistic_with_launch_window(benchmark::State& state) { launch_loop(state, windowed_launch); }

BENCHMARK(direct);
BENCHMARK(production);
BENCHMARK(opportunistic);
BENCHMARK(unmanaged);
BENCHMARK(opportunistic_with_launch_window);

}  // namespace

int main(int argc, char** argv) {
  // Zero-cost kernels: the fake driver returns at once, so only the interposer's time differs.
  setenv("TGS_FAKE_NS_PER_BLOCK", "0", 1);
  setenv("TGS_LOG_LEVEL", "error", 1);
  if (cuInit(0) != CUDA_SUCCESS) return 1;
  // A current context, as a CUDA program has: the launch window keeps its events per context.
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuDeviceGet(&device, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    return 1;
  }

  tgs_bench::bench_node node({});
  if (!node.running()) return 1;
  production_launch = load_copy(node, "production", node.socket(), "production", "0");
  opportunistic_launch = load_copy(node, "opportunistic", node.socket(), "opportunistic", "1");
  tgs_bench::bench_node windowing_node({"--max-inflight-launches", "64"});
  if (!windowing_node.running()) return 1;
  windowed_launch = load_copy(windowing_node, "windowed", windowing_node.socket(), "opportunistic", "1");
  // Last: a copy with no node retries registration with whatever TGS_NODE_SOCKET says then.
  unmanaged_launch = load_copy(node, "unmanaged", (node.dir() / "absent.sock").string(), "production", "0");
  if (production_launch == nullptr || opportunistic_launch == nullptr || unmanaged_launch == nullptr ||
      windowed_launch == nullptr) {
    return 1;
  }
  // The managed copies must really be registered, or the numbers would time the fail-open path.
  if (const int registered = node.jobs(); registered != 2) {
    std::fprintf(stderr, "expected 2 jobs registered with the benchmark's tgs-node, found %d\n", registered);
    return 1;
  }
  if (windowing_node.jobs(R"("max_inflight_launches":64)") != 1) {
    std::fprintf(stderr, "the windowed copy is not registered with its launch window\n");
    return 1;
  }

  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
