// SPDX-License-Identifier: Apache-2.0
// tgs-fake-train: a training loop for the fake driver (iterations of kernel launches, then a sync
// and host time), reporting iterations per second as JSON lines on stdout.
//
// It finds cuLaunchKernel the way the CUDA runtime does: dlsym for cuGetProcAddress_v2, which it
// then asks for cuGetProcAddress, which it asks for everything else. Every fourth kernel goes
// through a direct call of the linked cuLaunchKernelEx instead, so both paths are exercised.
//
// `--graph` runs each iteration as one CUDA graph launch instead: a graph of the same kernels
// (half of them in a child graph, so nesting is exercised), built once at start and instantiated
// as the runtime does it: cuGetProcAddress("cuGraphInstantiate", 13000) hands out the WithFlags
// form, and cuGraphLaunch comes from cuGetProcAddress too. `--capture` builds that graph by
// stream capture instead, as PyTorch's CUDA graphs do: the iteration's kernels are launched into
// a capturing stream (through the same cuLaunchKernel), which makes them nodes, not work.
//
// Memory scenarios for the end-to-end tests: `--alloc-mib` takes device memory at `--alloc-at`
// (and `--free-at` gives it back), `--late-mib` one more allocation at `--late-at` (as a job's
// activations and workspaces come after its weights); out of memory ends the job with status 3, as a PyTorch job dies
// on its OOM exception. `--fail-at` with `--fail segv|abort|oom` makes the job die; `--fail illegal-address` gives its
// context a device fault (its launches and synchronisations fail from then on), and it exits 1;
// `--fail device-assert` does the same with a device-side assert's error (710). The memory
// calls are direct calls of the linked driver functions, so a preloaded interposer sees them.
#include <csignal>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_subset.hpp"
#include "driver_api.hpp"

// The fake driver's test hook (no CUDA counterpart; tgs-fake-train runs on the fake driver only).
extern "C" CUresult tgsFakeManagedResidency(unsigned long long* device_bytes, unsigned long long* host_bytes);
extern "C" CUresult tgsFakeAllocationResidency(CUdeviceptr ptr, unsigned long long* device_bytes);
extern "C" CUresult tgsFakeProcessCounters(unsigned long long* most_unfinished_kernels);
extern "C" CUresult tgsFakeInjectFault(CUresult error);

namespace {

using get_proc_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using launch_kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**, void**);
using graph_instantiate = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
using graph_launch = CUresult (*)(CUgraphExec, CUstream);

int fail(const char* what, int code) {
  std::fprintf(stderr, "tgs-fake-train: %s failed (%d)\n", what, code);
  return 1;
}

constexpr int oom_status = 3;

/// Out of device memory: one JSON line, a message, and the exit status of a job killed by it.
[[noreturn]] void die_of_oom(double t, unsigned long long allocated_mib, unsigned long long wanted_mib) {
  std::printf("{\"event\":\"oom\",\"t\":%.3f,\"allocated_mib\":%llu}\n", t, allocated_mib);
  std::fflush(stdout);
  std::fprintf(stderr, "tgs-fake-train: CUDA out of memory: tried to allocate %llu MiB (%llu MiB allocated)\n",
               wanted_mib, allocated_mib);
  std::exit(oom_status);
}

/// Reports the device's memory as the job sees it.
int report_memory(double t, CUdevice dev) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t device_bytes = 0;
  if (const CUresult r = cuMemGetInfo_v2(&free_bytes, &total_bytes); r != CUDA_SUCCESS) return fail("cuMemGetInfo_v2", r);
  if (const CUresult r = cuDeviceTotalMem_v2(&device_bytes, dev); r != CUDA_SUCCESS) {
    return fail("cuDeviceTotalMem_v2", r);
  }
  // Where the driver holds the job's managed memory right now (the tests check that the job is
  // within its resident limit as soon as its allocations return).
  unsigned long long managed_device = 0;
  unsigned long long managed_host = 0;
  tgsFakeManagedResidency(&managed_device, &managed_host);
  std::printf(
      "{\"event\":\"memory\",\"t\":%.3f,\"free_mib\":%llu,\"total_mib\":%llu,\"device_total_mib\":%llu,"
      "\"managed_device_bytes\":%llu}\n",
      t, static_cast<unsigned long long>(free_bytes >> 20), static_cast<unsigned long long>(total_bytes >> 20),
      static_cast<unsigned long long>(device_bytes >> 20), managed_device);
  std::fflush(stdout);
  return 0;
}

/// Allocates `mib` MiB in chunks of `chunk_mib` into `out`; dies of OOM as a training job would.
int allocate(unsigned long long mib, unsigned long long chunk_mib, double t, std::vector<CUdeviceptr>& out) {
  unsigned long long done = 0;
  while (done < mib) {
    const unsigned long long step = std::min(chunk_mib, mib - done);
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, static_cast<std::size_t>(step) << 20);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) die_of_oom(t, done, step);
    if (r != CUDA_SUCCESS) return fail("cuMemAlloc_v2", r);
    out.push_back(p);
    done += step;
  }
  return 0;
}

/// Dies the requested way.
int fail_now(const std::string& how, unsigned long long oom_mib, double t) {
  std::fflush(stdout);
  if (how == "segv") {
    // A real invalid access: the pointer comes through a volatile, so the compiler can neither
    // see it is null nor turn the store into a trap instruction (SIGILL).
    static int* volatile nowhere = nullptr;
    *nowhere = 1;
  } else if (how == "abort") {
    std::abort();
  } else if (how == "illegal-address") {
    // A device fault of this context: the next launch fails, and every call after it; the loop
    // then ends the job as a CUDA program does on an error (it exits, in order).
    if (const CUresult r = tgsFakeInjectFault(CUDA_ERROR_ILLEGAL_ADDRESS); r != CUDA_SUCCESS) return fail("tgsFakeInjectFault", r);
  } else if (how == "device-assert") {
    // A device-side assert (a PyTorch index out of bounds): sticky in this context alone.
    if (const CUresult r = tgsFakeInjectFault(CUDA_ERROR_ASSERT); r != CUDA_SUCCESS) return fail("tgsFakeInjectFault", r);
  } else if (how == "oom") {
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, static_cast<std::size_t>(oom_mib) << 20);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) die_of_oom(t, 0, oom_mib);
    if (r != CUDA_SUCCESS) return fail("cuMemAlloc_v2", r);
    std::fprintf(stderr, "tgs-fake-train: --fail oom: %llu MiB fit, running on\n", oom_mib);
  }
  return 0;
}

/// Adds `count` kernel nodes of `blocks` blocks each to `graph`, each depending on the one before
/// (`last`, null for none), and leaves the last one in `last`.
int add_kernels(CUgraph graph, unsigned count, unsigned blocks, CUfunction kernel, CUgraphNode& last) {
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  params.func = kernel;
  params.gridDimX = blocks;
  params.gridDimY = 1;
  params.gridDimZ = 1;
  params.blockDimX = 128;
  params.blockDimY = 1;
  params.blockDimZ = 1;
  for (unsigned k = 0; k < count; ++k) {
    CUgraphNode node = nullptr;
    const CUresult r = cuGraphAddKernelNode_v2(&node, graph, last == nullptr ? nullptr : &last, last == nullptr ? 0 : 1,
                                               &params);
    if (r != CUDA_SUCCESS) return fail("cuGraphAddKernelNode_v2", r);
    last = node;
  }
  return 0;
}

/// One iteration's kernels as a graph: the first half as kernel nodes, the rest in a child graph.
int build_graph(unsigned kernels, unsigned blocks, CUfunction kernel, CUgraph& graph) {
  if (const CUresult r = cuGraphCreate(&graph, 0); r != CUDA_SUCCESS) return fail("cuGraphCreate", r);
  CUgraphNode last = nullptr;
  const unsigned nested = kernels / 2;
  if (const int rc = add_kernels(graph, kernels - nested, blocks, kernel, last); rc != 0) return rc;
  if (nested == 0) return 0;
  CUgraph child = nullptr;
  if (const CUresult r = cuGraphCreate(&child, 0); r != CUDA_SUCCESS) return fail("cuGraphCreate", r);
  CUgraphNode child_last = nullptr;
  if (const int rc = add_kernels(child, nested, blocks, kernel, child_last); rc != 0) return rc;
  CUgraphNode node = nullptr;
  const CUresult r = cuGraphAddChildGraphNode(&node, graph, &last, 1, child);
  cuGraphDestroy(child);  // the node holds its own copy
  return r == CUDA_SUCCESS ? 0 : fail("cuGraphAddChildGraphNode", r);
}

/// One iteration's kernels as a graph made by stream capture: `kernels` launches through `launch`
/// into `stream` between cuStreamBeginCapture_v2 and cuStreamEndCapture.
int capture_graph(launch_kernel launch, CUstream stream, unsigned kernels, unsigned blocks, CUfunction kernel,
                  CUgraph& graph) {
  if (const CUresult r = cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) {
    return fail("cuStreamBeginCapture_v2", r);
  }
  CUresult launched = CUDA_SUCCESS;
  for (unsigned k = 0; k < kernels && launched == CUDA_SUCCESS; ++k) {
    launched = launch(kernel, blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
  }
  const CUresult ended = cuStreamEndCapture(stream, &graph);  // ends the capture either way
  if (launched != CUDA_SUCCESS) return fail("cuLaunchKernel (capturing)", launched);
  return ended == CUDA_SUCCESS ? 0 : fail("cuStreamEndCapture", ended);
}

}  // namespace

namespace {
/// Set by SIGUSR1, cleared by SIGUSR2: an idle phase of the training loop (its process and every
/// thread keep running; it launches nothing), as bench/gpu/train.py idles.
volatile std::sig_atomic_t idle_phase = 0;
void on_idle(int) { idle_phase = 1; }
void on_resume(int) { idle_phase = 0; }
}  // namespace

namespace {
/// Holds a connection to the Unix socket `path` that never says anything, connecting again
/// whenever the other side closes it: a process that keeps a registration "in progress" forever.
void hold_idle_connection(std::string path) {
  for (;;) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      char byte = 0;
      while (::recv(fd, &byte, 1, 0) > 0) {
      }
    }
    if (fd >= 0) ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
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
  double host_jitter = 0.0;
  double jitter_period_s = 0.3;
  app.add_option("--host-jitter", host_jitter,
                 "host time varies uniformly within ±this fraction of --host-ms, redrawn every --jitter-period-s "
                 "(a CPU side that runs faster and slower, as a Python loop does)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--jitter-period-s", jitter_period_s, "how long one draw of --host-jitter lasts, s")
      ->check(CLI::Range(0.001, 1e3));
  std::uint64_t jitter_seed = 42;
  app.add_option("--jitter-seed", jitter_seed, "seed of the --host-jitter draws (a benchmark's runs differ by it)");
  app.add_option("--seconds", seconds, "run time; 0 runs until killed")->check(CLI::Range(0.0, 1e6));
  app.add_option("--report", report_s, "seconds between progress lines")->check(CLI::Range(0.01, 1e3));
  app.add_option("--device", device, "device ordinal");
  bool use_graph = false;
  app.add_flag("--graph", use_graph, "launch each iteration's kernels as one CUDA graph");
  bool use_capture = false;
  app.add_flag("--capture", use_capture, "with --graph: build the graph by stream capture, not the graph API")
      ->needs("--graph");
  unsigned long long alloc_mib = 0;
  double alloc_at = 0;
  unsigned long long chunk_mib = 64;
  double free_at = -1;
  double fail_at = -1;
  std::string fail_how = "none";
  unsigned long long oom_mib = 1048576;
  unsigned long long late_mib = 0;
  double late_at = 1;
  app.add_option("--alloc-mib", alloc_mib, "device memory to allocate with cuMemAlloc_v2, MiB");
  app.add_option("--alloc-at", alloc_at, "when to allocate it, s after start (0: before the first iteration)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--chunk-mib", chunk_mib, "allocation size, MiB")->check(CLI::Range(1ULL, 1ULL << 30));
  app.add_option("--free-at", free_at, "when to free the --alloc-mib memory, s after start (default: never)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--fail-at", fail_at, "when to fail as --fail says, s after start")->check(CLI::Range(0.0, 1e6));
  app.add_option("--fail", fail_how, "how to fail at --fail-at")->check(CLI::IsMember({"none", "segv", "abort", "oom", "illegal-address", "device-assert"}));
  app.add_option("--oom-mib", oom_mib, "the single allocation of --fail oom, MiB")->check(CLI::Range(1ULL, 1ULL << 40));
  app.add_option("--late-mib", late_mib, "one more allocation (cuMemAlloc_v2) at --late-at, MiB (default: none)");
  app.add_option("--late-at", late_at, "when to make the --late-mib allocation, s after start")
      ->check(CLI::Range(0.0, 1e6));
  bool init_through_dlsym = false;
  app.add_flag("--init-through-dlsym", init_through_dlsym,
               "call cuInit first, through dlsym, before any other driver call (a program that does not start as the "
               "CUDA runtime does)");
  std::string idle_connection;
  app.add_option("--idle-connection", idle_connection,
                 "also hold a connection to this Unix socket (a node's) that never says anything, made again "
                 "whenever it is closed");
  CLI11_PARSE(app, argc, argv);
  if (!idle_connection.empty()) std::thread(hold_idle_connection, idle_connection).detach();

  // The runtime's path: dlopen the driver, dlsym one entry point, ask it for itself.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) return fail("dlopen libcuda.so.1", 0);
  if (init_through_dlsym) {
    auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(driver, "cuInit"));
    if (init == nullptr) return fail("dlsym cuInit", 0);
    if (const CUresult r = init(0); r != CUDA_SUCCESS) return fail("cuInit (through dlsym)", r);
  }
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
  graph_instantiate instantiate = nullptr;
  graph_launch launch_graph = nullptr;
  if (use_graph) {
    // Since CUDA 12 the runtime's "cuGraphInstantiate" is the WithFlags signature.
    if (const CUresult r = get_proc("cuGraphInstantiate", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
        r != CUDA_SUCCESS) {
      return fail("cuGetProcAddress(cuGraphInstantiate)", r);
    }
    instantiate = reinterpret_cast<graph_instantiate>(p);
    if (const CUresult r = get_proc("cuGraphLaunch", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
        r != CUDA_SUCCESS) {
      return fail("cuGetProcAddress(cuGraphLaunch)", r);
    }
    launch_graph = reinterpret_cast<graph_launch>(p);
  }

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

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  if (use_graph) {
    const int rc = use_capture ? capture_graph(launch, stream, kernels, blocks, kernel, graph)
                               : build_graph(kernels, blocks, kernel, graph);
    if (rc != 0) return rc;
    if (const CUresult r = instantiate(&exec, graph, 0); r != CUDA_SUCCESS) return fail("cuGraphInstantiate", r);
  }

  const CUlaunchConfig config{blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, 0};
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto since_start = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  if (const int rc = report_memory(since_start(), dev); rc != 0) return rc;
  std::vector<CUdeviceptr> held;  // the --alloc-mib memory
  bool allocated = alloc_mib == 0;
  bool freed = free_at < 0;
  bool failed = fail_at < 0 || fail_how == "none";
  bool late_done = late_mib == 0;
  // Memory events, checked before the first iteration and after each one.
  const auto memory_events = [&]() -> int {
    const double t = since_start();
    if (!allocated && t >= alloc_at) {
      allocated = true;
      if (const int rc = allocate(alloc_mib, chunk_mib, t, held); rc != 0) return rc;
      if (const int rc = report_memory(since_start(), dev); rc != 0) return rc;
    }
    if (allocated && !freed && t >= free_at) {
      freed = true;
      for (const CUdeviceptr ptr : held) {
        if (const CUresult r = cuMemFree_v2(ptr); r != CUDA_SUCCESS) return fail("cuMemFree_v2", r);
      }
      held.clear();
      std::printf("{\"event\":\"freed\",\"t\":%.3f}\n", since_start());
      std::fflush(stdout);
    }
    if (allocated && !late_done && t >= late_at) {
      late_done = true;
      if (const int rc = allocate(late_mib, late_mib, t, held); rc != 0) return rc;
      if (const int rc = report_memory(since_start(), dev); rc != 0) return rc;
    }
    if (!failed && t >= fail_at) {
      failed = true;
      if (const int rc = fail_now(fail_how, oom_mib, t); rc != 0) return rc;
    }
    return 0;
  };
  if (const int rc = memory_events(); rc != 0) return rc;
  auto last_report = start;
  std::uint64_t iterations = 0;
  std::uint64_t last_iterations = 0;
  // A given seed gives the same sequence of host speeds on every run and library (mt19937_64's
  // output is fixed by the standard; the draw in [0, 1) is its top 53 bits, as traces/random.hpp
  // does).
  std::mt19937_64 jitter_engine{jitter_seed};
  double host_factor = 1.0;
  auto next_draw = start;
  std::signal(SIGUSR1, on_idle);
  std::signal(SIGUSR2, on_resume);
  for (;;) {
    if (idle_phase != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // idle: progress lines go on
    } else {
      if (host_jitter > 0 && clock::now() >= next_draw) {
        const double u = static_cast<double>(jitter_engine() >> 11) * 0x1.0p-53;
        host_factor = 1.0 + host_jitter * (2.0 * u - 1.0);
        next_draw = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(jitter_period_s));
      }
      const auto host_time = std::chrono::duration<double, std::milli>(host_ms * host_factor);
      if (use_graph) {
        if (const CUresult r = launch_graph(exec, stream); r != CUDA_SUCCESS) return fail("cuGraphLaunch", r);
      }
      for (unsigned k = 0; !use_graph && k < kernels; ++k) {
        const CUresult r = (k % 4 == 3) ? cuLaunchKernelEx(&config, kernel, nullptr, nullptr)
                                        : launch(kernel, blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
        if (r != CUDA_SUCCESS) return fail("launch", r);
      }
      if (const CUresult r = cuStreamSynchronize(stream); r != CUDA_SUCCESS) return fail("cuStreamSynchronize", r);
      if (host_ms > 0) std::this_thread::sleep_for(host_time);
      ++iterations;
    }
    const auto now = clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double since_report = std::chrono::duration<double>(now - last_report).count();
    const bool done = seconds > 0 && elapsed >= seconds;
    if (since_report >= report_s || done) {
      // Where the driver holds this job's managed memory: the tests check the interposer's
      // accounting (tgs-node status) against it.
      unsigned long long managed_device = 0;
      unsigned long long managed_host = 0;
      tgsFakeManagedResidency(&managed_device, &managed_host);
      // And per --alloc-mib / --late-mib allocation, in allocation order (-1: not managed), for
      // the tests of which part of which allocation the residency plan keeps.
      std::string held_device = "[";
      for (const CUdeviceptr ptr : held) {
        unsigned long long on_device = 0;
        const bool managed = tgsFakeAllocationResidency(ptr, &on_device) == CUDA_SUCCESS;
        if (held_device.size() > 1) held_device += ',';
        held_device += managed ? std::to_string(on_device) : std::string("-1");
      }
      held_device += ']';
      // The deepest this job's queue of unfinished kernels ever was (a launch window bounds it).
      unsigned long long most_unfinished = 0;
      tgsFakeProcessCounters(&most_unfinished);
      std::printf(
          "{\"event\":\"%s\",\"t\":%.3f,\"iterations\":%llu,\"iter_per_s\":%.2f,\"managed_device_bytes\":%llu,"
          "\"managed_host_bytes\":%llu,\"held_device_bytes\":%s,\"most_unfinished_kernels\":%llu}\n",
          done ? "done" : "progress", elapsed, static_cast<unsigned long long>(iterations),
          static_cast<double>(iterations - last_iterations) / since_report, managed_device, managed_host,
          held_device.c_str(), most_unfinished);
      std::fflush(stdout);
      last_report = now;
      last_iterations = iterations;
    }
    if (done) break;
    if (const int rc = memory_events(); rc != 0) return rc;
  }
  for (const CUdeviceptr ptr : held) cuMemFree_v2(ptr);
  cuMemFree_v2(weights);
  if (exec != nullptr) cuGraphExecDestroy(exec);
  if (graph != nullptr) cuGraphDestroy(graph);
  cuStreamDestroy_v2(stream);
  return 0;
}
