// SPDX-License-Identifier: Apache-2.0
// A stand-in libcuda.so.1 with a simulated device, so CI (no GPU) runs the interposer and
// tgs-node end to end.
//
// The device: kernels take `blocks x TGS_FAKE_NS_PER_BLOCK` ns of device time and run one at a
// time across all processes (a real GPU time-slices contexts; here the slice is one kernel). Each
// launch reserves the next free interval on a device timeline kept in a small shared-memory
// segment (one atomic word, compare-and-swap), so no process ever holds a lock a SIGKILL could
// leave behind: a killed process's reserved kernels simply finish, as in-flight kernels would.
// A stream holds at most TGS_FAKE_QUEUE_DEPTH unfinished kernels; a launch into a full stream
// blocks until half of it drained, so a busy job is paced by the device as on a real GPU.
// Synchronisation sleeps until the stream's (or the context's) last kernel ends.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "cuda_subset.hpp"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr std::uint64_t device_magic = 0x4b414654554447ULL;  // "GDUTFAK"
constexpr int max_devices = 8;

/// The shared device: one timeline per simulated GPU, shared by every process of the same user
/// (or of the same TGS_FAKE_DEVICE name).
struct device_state {
  std::uint64_t magic;
  std::atomic<std::uint64_t> busy_until_ns;  ///< end of the last reserved kernel
  std::atomic<std::uint64_t> kernels;        ///< kernels run, for tests
};

struct settings {
  std::uint64_t ns_per_block = 1000;
  std::size_t queue_depth = 64;
  int device_count = 1;
  std::uint64_t memory_bytes = 16ULL << 30;
};

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return fallback;
  return std::strtoull(s, nullptr, 10);
}

const settings& config() {
  static const settings s = [] {
    settings out;
    out.ns_per_block = env_u64("TGS_FAKE_NS_PER_BLOCK", out.ns_per_block);
    out.queue_depth = std::max<std::size_t>(2, env_u64("TGS_FAKE_QUEUE_DEPTH", out.queue_depth));
    out.device_count = static_cast<int>(std::clamp<std::uint64_t>(env_u64("TGS_FAKE_DEVICE_COUNT", 1), 1, max_devices));
    out.memory_bytes = env_u64("TGS_FAKE_MEMORY_MIB", out.memory_bytes >> 20) << 20;
    return out;
  }();
  return s;
}

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(std::uint64_t t) {
  const timespec ts{static_cast<time_t>(t / 1'000'000'000ULL), static_cast<long>(t % 1'000'000'000ULL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

/// Maps (creating on first use) the shared timeline of device `ordinal`. A zero-filled new
/// segment is a valid idle device, so creation needs no initialisation race handling.
device_state* device(int ordinal) {
  static std::atomic<device_state*> devices[max_devices];
  device_state* d = devices[ordinal].load(std::memory_order_acquire);
  if (d != nullptr) return d;
  char name[128];
  const char* base = std::getenv("TGS_FAKE_DEVICE");
  if (base != nullptr && *base != '\0') {
    std::snprintf(name, sizeof(name), "/%.100s-%d", base, ordinal);
  } else {
    std::snprintf(name, sizeof(name), "/tgs-fake-gpu-%u-%d", static_cast<unsigned>(::getuid()), ordinal);
  }
  const int fd = ::shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  if (::ftruncate(fd, sizeof(device_state)) != 0) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(device_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  d = static_cast<device_state*>(p);
  device_state* expected = nullptr;
  if (!devices[ordinal].compare_exchange_strong(expected, d)) {
    ::munmap(p, sizeof(device_state));
    return expected;
  }
  return d;
}

/// A stream: the end times of its unfinished kernels, in order.
struct fake_stream {
  std::mutex mutex;
  std::deque<std::uint64_t> ends;
  std::uint64_t last_end = 0;
};

fake_stream default_stream;
std::atomic<std::uint64_t> context_last_end{0};
thread_local int current_device = 0;
std::atomic<bool> initialised{false};

fake_stream& stream_of(CUstream s) { return s == nullptr ? default_stream : *reinterpret_cast<fake_stream*>(s); }

/// Queues a kernel of `blocks` blocks on `stream` and reserves its device time.
CUresult enqueue(CUstream s, std::uint64_t blocks) {
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  const std::uint64_t duration = std::min<std::uint64_t>(blocks, 1ULL << 32) * config().ns_per_block;
  if (duration == 0) return CUDA_SUCCESS;  // zero-cost kernels: the benchmark's driver floor
  device_state* dev = device(current_device);
  if (dev == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  fake_stream& stream = stream_of(s);
  std::lock_guard lock(stream.mutex);
  std::uint64_t now = now_ns();
  while (!stream.ends.empty() && stream.ends.front() <= now) stream.ends.pop_front();
  if (stream.ends.size() >= config().queue_depth) {
    // Full: block until half the queue has run, like a launch into a full hardware queue.
    sleep_until_ns(stream.ends[stream.ends.size() / 2]);
    now = now_ns();
    while (!stream.ends.empty() && stream.ends.front() <= now) stream.ends.pop_front();
  }
  const std::uint64_t ready = std::max(now, stream.last_end);
  std::uint64_t busy = dev->busy_until_ns.load(std::memory_order_relaxed);
  std::uint64_t end = 0;
  do {
    end = std::max(ready, busy) + duration;
  } while (!dev->busy_until_ns.compare_exchange_weak(busy, end, std::memory_order_acq_rel));
  dev->kernels.fetch_add(1, std::memory_order_relaxed);
  stream.last_end = end;
  stream.ends.push_back(end);
  std::uint64_t prev = context_last_end.load(std::memory_order_relaxed);
  while (prev < end && !context_last_end.compare_exchange_weak(prev, end, std::memory_order_relaxed)) {
  }
  return CUDA_SUCCESS;
}

std::uint64_t grid(unsigned gx, unsigned gy, unsigned gz) {
  return std::uint64_t{gx} * std::uint64_t{gy} * std::uint64_t{gz};
}

// Device memory is address space only: a bump allocator per process, never backed, with a
// per-process capacity so cuMemGetInfo and out-of-memory behave.
std::uint64_t next_address = 0x7e0000000000ULL;
std::uint64_t used_bytes = 0;
std::mutex memory_mutex;
std::unordered_map<std::uint64_t, std::uint64_t> allocation_bytes;

CUresult fake_alloc(unsigned long long* dptr, std::size_t bytes) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!initialised.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(memory_mutex);
  if (used_bytes + bytes > config().memory_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  *dptr = next_address;
  next_address += (bytes + 511) & ~std::uint64_t{255};
  used_bytes += bytes;
  allocation_bytes[*dptr] = bytes;
  return CUDA_SUCCESS;
}

CUresult fake_free(unsigned long long key) {
  std::lock_guard lock(memory_mutex);
  const auto it = allocation_bytes.find(key);
  if (it == allocation_bytes.end()) return CUDA_ERROR_INVALID_VALUE;
  used_bytes -= it->second;
  allocation_bytes.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

// --- the exported driver API (the subset the tests and tgs-fake-train use) -------------------------

FAKE_EXPORT CUresult cuInit(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  initialised.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = config().device_count;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= config().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice dev) {
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(length), "tgs fake GPU %d", dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= config().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(dev) + 1);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  const auto dev = reinterpret_cast<std::uintptr_t>(ctx);
  if (dev == 0 || dev > static_cast<std::uintptr_t>(config().device_count)) return CUDA_ERROR_INVALID_CONTEXT;
  current_device = static_cast<int>(dev - 1);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(new fake_stream);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<fake_stream*>(stream);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  fake_stream& stream = stream_of(s);
  std::uint64_t end = 0;
  {
    std::lock_guard lock(stream.mutex);
    end = stream.last_end;
  }
  sleep_until_ns(end);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }
FAKE_EXPORT CUresult cuCtxSynchronize() {
  sleep_until_ns(context_last_end.load(std::memory_order_relaxed));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(const_cast<void*>(image));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (f == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *f = reinterpret_cast<CUfunction>(const_cast<char*>(name));
  return CUDA_SUCCESS;
}

// Launches: every path the interposer hooks. `_ptsz` forms share the default stream here.
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned, unsigned,
                                    unsigned, unsigned, CUstream s, void**, void**) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(s, grid(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                         unsigned by, unsigned bz, unsigned shmem, CUstream s, void** p, void** e) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void**, void**) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(c->hStream, grid(c->gridDimX, c->gridDimY, c->gridDimZ));
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  return cuLaunchKernelEx(c, f, p, e);
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned,
                                               unsigned, unsigned, unsigned, CUstream s, void**) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(s, grid(gx, gy, gz));
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                                    CUstream s, void** p) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, p);
}
// Graphs are not simulated: a launch of any non-null executable graph succeeds and takes no
// device time (the interposer's accounting of it is what the tests look at).
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream) {
  return exec == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return cuGraphLaunch(exec, s); }

// Memory: address space only, with a per-process budget of TGS_FAKE_MEMORY_MIB.
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) { return fake_alloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                        std::size_t height, unsigned) {
  if (pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~std::size_t{511};
  return fake_alloc(dptr, *pitch * height);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream) { return fake_alloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream s) {
  return cuMemAllocAsync(dptr, bytes, s);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool, CUstream) {
  return fake_alloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                                  CUstream s) {
  return cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned) { return fake_alloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes, const CUmemAllocationProp*,
                                 unsigned long long) {
  return fake_alloc(handle, bytes);
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return fake_free(handle); }
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, std::size_t bytes, std::size_t, CUmemGenericAllocationHandle handle,
                              unsigned long long) {
  return (ptr == 0 || bytes == 0 || handle == 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t bytes) {
  return (ptr == 0 || bytes == 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return fake_free(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return cuMemFree_v2(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return cuMemFreeAsync(dptr, s); }
FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(memory_mutex);
  *total_bytes = config().memory_bytes;
  *free_bytes = config().memory_bytes - used_bytes;
  return CUDA_SUCCESS;
}

// --- cuGetProcAddress: the driver's symbol table, with its version and stream rules --------------

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status);
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

namespace {
struct export_entry {
  const char* symbol;
  const char* base;
  bool ptds;
  int since;
  void* address;
};

#define FAKE_SYMBOL(symbol, base, ptds, since) {#symbol, #base, ptds, since, reinterpret_cast<void*>(&::symbol)}
const export_entry exports[] = {
    FAKE_SYMBOL(cuInit, cuInit, false, 2000),
    FAKE_SYMBOL(cuDriverGetVersion, cuDriverGetVersion, false, 2020),
    FAKE_SYMBOL(cuDeviceGetCount, cuDeviceGetCount, false, 2000),
    FAKE_SYMBOL(cuDeviceGet, cuDeviceGet, false, 2000),
    FAKE_SYMBOL(cuDeviceGetName, cuDeviceGetName, false, 2000),
    FAKE_SYMBOL(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, false, 7000),
    FAKE_SYMBOL(cuCtxSetCurrent, cuCtxSetCurrent, false, 4000),
    FAKE_SYMBOL(cuStreamCreate, cuStreamCreate, false, 2000),
    FAKE_SYMBOL(cuStreamDestroy_v2, cuStreamDestroy, false, 4000),
    FAKE_SYMBOL(cuStreamSynchronize, cuStreamSynchronize, false, 2000),
    FAKE_SYMBOL(cuStreamSynchronize_ptsz, cuStreamSynchronize, true, 7000),
    FAKE_SYMBOL(cuCtxSynchronize, cuCtxSynchronize, false, 2000),
    FAKE_SYMBOL(cuModuleLoadData, cuModuleLoadData, false, 2000),
    FAKE_SYMBOL(cuModuleGetFunction, cuModuleGetFunction, false, 2000),
    FAKE_SYMBOL(cuLaunchKernel, cuLaunchKernel, false, 4000),
    FAKE_SYMBOL(cuLaunchKernel_ptsz, cuLaunchKernel, true, 7000),
    FAKE_SYMBOL(cuLaunchKernelEx, cuLaunchKernelEx, false, 11060),
    FAKE_SYMBOL(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, true, 11060),
    FAKE_SYMBOL(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, false, 9000),
    FAKE_SYMBOL(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, true, 9000),
    FAKE_SYMBOL(cuGraphLaunch, cuGraphLaunch, false, 10000),
    FAKE_SYMBOL(cuGraphLaunch_ptsz, cuGraphLaunch, true, 10000),
    FAKE_SYMBOL(cuMemAlloc_v2, cuMemAlloc, false, 3020),
    FAKE_SYMBOL(cuMemAllocPitch_v2, cuMemAllocPitch, false, 3020),
    FAKE_SYMBOL(cuMemAllocAsync, cuMemAllocAsync, false, 11020),
    FAKE_SYMBOL(cuMemAllocAsync_ptsz, cuMemAllocAsync, true, 11020),
    FAKE_SYMBOL(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, false, 11020),
    FAKE_SYMBOL(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, true, 11020),
    FAKE_SYMBOL(cuMemAllocManaged, cuMemAllocManaged, false, 6000),
    FAKE_SYMBOL(cuMemCreate, cuMemCreate, false, 10020),
    FAKE_SYMBOL(cuMemRelease, cuMemRelease, false, 10020),
    FAKE_SYMBOL(cuMemMap, cuMemMap, false, 10020),
    FAKE_SYMBOL(cuMemUnmap, cuMemUnmap, false, 10020),
    FAKE_SYMBOL(cuMemFree_v2, cuMemFree, false, 3020),
    FAKE_SYMBOL(cuMemFreeAsync, cuMemFreeAsync, false, 11020),
    FAKE_SYMBOL(cuMemFreeAsync_ptsz, cuMemFreeAsync, true, 11020),
    FAKE_SYMBOL(cuMemGetInfo_v2, cuMemGetInfo, false, 3020),
    FAKE_SYMBOL(cuGetProcAddress, cuGetProcAddress, false, 11030),
    FAKE_SYMBOL(cuGetProcAddress_v2, cuGetProcAddress, false, 12000),
};
#undef FAKE_SYMBOL

/// The driver's rule: the per-thread variant if asked for (and one exists), else the legacy one;
/// of those, the newest the requested version reaches.
CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool found_any = false;
  bool has_ptds = false;
  for (const export_entry& e : exports) {
    if (std::strcmp(e.base, symbol) == 0 && e.ptds) has_ptds = true;
  }
  const export_entry* best = nullptr;
  for (const export_entry& e : exports) {
    if (std::strcmp(e.base, symbol) != 0) continue;
    found_any = true;
    if (has_ptds && e.ptds != want_ptds) continue;
    if (e.since <= version && (best == nullptr || e.since > best->since)) best = &e;
  }
  if (best == nullptr) {
    if (status != nullptr) {
      *status = found_any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->address;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status);
}
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr);
}
