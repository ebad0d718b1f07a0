// SPDX-License-Identifier: Apache-2.0
// tgs-fake-train: a training loop for the fake driver (iterations of kernel launches, then a sync
// and host time), reporting iterations per second as JSON lines on stdout.
//
// It finds cuLaunchKernel the way the CUDA runtime does: dlsym for cuGetProcAddress_v2, which it
// then asks for cuGetProcAddress, which it asks for everything else. Every fourth kernel goes
// through a direct call of the linked cuLaunchKernelEx instead, so both paths are exercised.
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cuda_subset.hpp"

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(CUdevice* dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuStreamCreate(CUstream* stream, unsigned flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuModuleLoadData(CUmodule* module, const void* image);
CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name);
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
}

namespace {

using get_proc_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using launch_kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**, void**);

int fail(const char* what, int code) {
  std::fprintf(stderr, "tgs-fake-train: %s failed (%d)\n", what, code);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A fake training job for the fake CUDA driver"};
  unsigned kernels = 20;
  unsigned blocks = 100;
  double host_ms = 1.0;
  double seconds = 5.0;
  double report_s = 0.5;
  int device = 0;
  app.add_option("--kernels", kernels, "kernel launches per iteration")->check(CLI::Range(1U, 100000U));
  app.add_option("--blocks", blocks, "thread blocks per kernel")->check(CLI::Range(1U, 1U << 30));
  app.add_option("--host-ms", host_ms, "host time per iteration after the sync, ms")->check(CLI::Range(0.0, 1e4));
  app.add_option("--seconds", seconds, "run time; 0 runs until killed")->check(CLI::Range(0.0, 1e6));
  app.add_option("--report", report_s, "seconds between progress lines")->check(CLI::Range(0.01, 1e3));
  app.add_option("--device", device, "device ordinal");
  CLI11_PARSE(app, argc, argv);

  // The runtime's path: dlopen the driver, dlsym one entry point, ask it for itself.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) return fail("dlopen libcuda.so.1", 0);
  auto bootstrap = reinterpret_cast<get_proc_v2>(dlsym(driver, "cuGetProcAddress_v2"));
  if (bootstrap == nullptr) return fail("dlsym cuGetProcAddress_v2", 0);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (const CUresult r = bootstrap("cuGetProcAddress", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS) {
    return fail("cuGetProcAddress(cuGetProcAddress)", r);
  }
  auto get_proc = reinterpret_cast<get_proc_v2>(p);
  if (const CUresult r = get_proc("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status); r != CUDA_SUCCESS) {
    return fail("cuGetProcAddress(cuLaunchKernel)", r);
  }
  auto launch = reinterpret_cast<launch_kernel>(p);

  if (const CUresult r = cuInit(0); r != CUDA_SUCCESS) return fail("cuInit", r);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (const CUresult r = cuDeviceGet(&dev, device); r != CUDA_SUCCESS) return fail("cuDeviceGet", r);
  if (const CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxRetain", r);
  if (const CUresult r = cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);
  CUstream stream = nullptr;
  if (const CUresult r = cuStreamCreate(&stream, 0); r != CUDA_SUCCESS) return fail("cuStreamCreate", r);
  static const char image[] = "fake module";
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  if (const CUresult r = cuModuleLoadData(&module, image); r != CUDA_SUCCESS) return fail("cuModuleLoadData", r);
  if (const CUresult r = cuModuleGetFunction(&kernel, module, "step"); r != CUDA_SUCCESS) return fail("cuModuleGetFunction", r);
  CUdeviceptr weights = 0;
  if (const CUresult r = cuMemAlloc_v2(&weights, 64 << 20); r != CUDA_SUCCESS) return fail("cuMemAlloc_v2", r);

  const CUlaunchConfig config{blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, 0};
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto last_report = start;
  std::uint64_t iterations = 0;
  std::uint64_t last_iterations = 0;
  const auto host_time = std::chrono::duration<double, std::milli>(host_ms);
  for (;;) {
    for (unsigned k = 0; k < kernels; ++k) {
      const CUresult r = (k % 4 == 3) ? cuLaunchKernelEx(&config, kernel, nullptr, nullptr)
                                      : launch(kernel, blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
      if (r != CUDA_SUCCESS) return fail("launch", r);
    }
    if (const CUresult r = cuStreamSynchronize(stream); r != CUDA_SUCCESS) return fail("cuStreamSynchronize", r);
    if (host_ms > 0) std::this_thread::sleep_for(host_time);
    ++iterations;
    const auto now = clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double since_report = std::chrono::duration<double>(now - last_report).count();
    const bool done = seconds > 0 && elapsed >= seconds;
    if (since_report >= report_s || done) {
      std::printf("{\"event\":\"%s\",\"t\":%.3f,\"iterations\":%llu,\"iter_per_s\":%.2f}\n", done ? "done" : "progress",
                  elapsed, static_cast<unsigned long long>(iterations),
                  static_cast<double>(iterations - last_iterations) / since_report);
      std::fflush(stdout);
      last_report = now;
      last_iterations = iterations;
    }
    if (done) break;
  }
  cuMemFree_v2(weights);
  return 0;
}
