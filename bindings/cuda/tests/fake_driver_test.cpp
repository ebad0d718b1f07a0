// SPDX-License-Identifier: Apache-2.0
// Tests of the fake driver's memory model, without the interposer: a device-wide capacity shared
// by processes (and freed when one dies), unified memory that prefetches move between device and
// host at the link rate, and kernels slowed by host-resident managed memory. ctest gives the
// device 1024 MiB, a 1024 MiB/s link and a private segment name (see CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cuda_subset.hpp"

extern "C" {
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(CUdevice* dev, int ordinal);
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext* ctx);
CUresult cuCtxGetDevice(CUdevice* dev);
CUresult cuStreamCreate(CUstream* stream, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void** params, void** extra);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes);
CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream);
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes, const CUmemAllocationProp* prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes);
CUresult cuMemAdvise_v2(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, CUmemLocation location);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, std::size_t count, CUmemLocation location, unsigned flags,
                               CUstream stream);
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, std::size_t count, CUmemLocation location, unsigned flags,
                                    CUstream stream);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);
// The fake's test hooks.
CUresult tgsFakeDeviceCounters(int ordinal, unsigned long long* kernels, unsigned long long* kernel_ns,
                               unsigned long long* prefetches, unsigned long long* prefetched_bytes);
CUresult tgsFakeManagedState(CUdeviceptr ptr, int* resident_device, CUmemLocation* preferred, unsigned* accessed_by);
}

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t mib = std::size_t{1} << 20;
constexpr std::size_t capacity_mib = 1024;  // TGS_FAKE_MEMORY_MIB in CMakeLists.txt
constexpr double link_mib_per_s = 1024;     // TGS_FAKE_LINK_MIB_PER_S in CMakeLists.txt
constexpr CUmemLocation device0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
constexpr CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
constexpr int on_host = -1;

std::string segment_name() {
  const char* device = std::getenv("TGS_FAKE_DEVICE");
  return "/" + std::string(device != nullptr ? device : "") + "-0";
}

std::size_t free_mib() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total_bytes), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes % mib, 0U);
  return free_bytes / mib;
}

int resident(CUdeviceptr p) {
  int device = -2;
  EXPECT_EQ(tgsFakeManagedState(p, &device, nullptr, nullptr), CUDA_SUCCESS);
  return device;
}

unsigned long long counter_kernel_ns() {
  unsigned long long ns = 0;
  EXPECT_EQ(tgsFakeDeviceCounters(0, nullptr, &ns, nullptr, nullptr), CUDA_SUCCESS);
  return ns;
}

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::string symbol_of(void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_sname == nullptr) return {};
  return info.dli_sname;
}

class FakeDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NE(std::getenv("TGS_FAKE_DEVICE"), nullptr) << "run under ctest, which names a private device";
    shm_unlink(segment_name().c_str());  // a segment left by an earlier, crashed run
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice dev = 0;
    ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context, dev), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context), CUDA_SUCCESS);
  }
  static void TearDownTestSuite() { shm_unlink(segment_name().c_str()); }
  // Every test gives back what it took: the device starts each one empty.
  void SetUp() override { ASSERT_EQ(free_mib(), capacity_mib); }
  void TearDown() override { EXPECT_EQ(free_mib(), capacity_mib) << "the test leaked device memory"; }

  static inline CUcontext context = nullptr;
};

}  // namespace

TEST_F(FakeDriver, TotalMemoryIsTheCapacity) {
  std::size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, capacity_mib * mib);
  std::size_t free_bytes = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, capacity_mib * mib);
  EXPECT_EQ(free_bytes, capacity_mib * mib);
  EXPECT_EQ(cuDeviceTotalMem_v2(&total, 7), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceTotalMem_v2(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeDriver, AllocationBeyondCapacityIsOutOfMemory) {
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemAlloc_v2(&a, (capacity_mib + 1) * mib), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc_v2(&a, std::size_t{1} << 40), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc_v2(&a, 512 * mib), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), 512U);
  ASSERT_EQ(cuMemAllocAsync(&b, 256 * mib, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), 256U);
  EXPECT_EQ(cuMemCreate(&h, 257 * mib, nullptr, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemCreate(&h, 256 * mib, nullptr, 0), CUDA_SUCCESS);  // exactly full
  EXPECT_EQ(free_mib(), 0U);
  CUdeviceptr c = 0;
  EXPECT_EQ(cuMemAlloc_v2(&c, mib), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(b, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);  // not twice
}

TEST_F(FakeDriver, CapacityIsDeviceWideAndADeadProcessGivesItsMemoryBack) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Another job on the same device: takes 768 MiB and holds them until killed.
    CUdeviceptr p = 0;
    const char ok = cuMemAlloc_v2(&p, 768 * mib) == CUDA_SUCCESS ? 'y' : 'n';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(ok, 'y');
  EXPECT_EQ(free_mib(), 256U);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 512 * mib), CUDA_ERROR_OUT_OF_MEMORY);
  // A managed allocation that does not fit starts on the host.
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 512 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), on_host);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 512 * mib, device0, 0, nullptr), CUDA_ERROR_OUT_OF_MEMORY);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  // Dead but not reaped (a zombie): the driver frees a context when its process dies.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(free_mib(), capacity_mib);
  ASSERT_EQ(cuMemAlloc_v2(&p, 512 * mib), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 512 * mib, device0, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), 0U);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
}

TEST_F(FakeDriver, SlotsOfDeadProcessesAreReused) {
  // More short-lived processes than the device has slots: each finds a dead one's slot.
  for (int i = 0; i < 80; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      CUdeviceptr p = 0;
      ::_exit(cuMemAlloc_v2(&p, 64 * mib) == CUDA_SUCCESS ? 0 : 1);  // exits holding it
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << i;
  }
  EXPECT_EQ(free_mib(), capacity_mib);
}

TEST_F(FakeDriver, PrefetchMovesManagedMemoryBetweenDeviceAndHost) {
  unsigned long long prefetches0 = 0;
  unsigned long long bytes0 = 0;
  ASSERT_EQ(tgsFakeDeviceCounters(0, nullptr, nullptr, &prefetches0, &bytes0), CUDA_SUCCESS);
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 64 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), 0);  // fits: on the device
  EXPECT_EQ(free_mib(), capacity_mib - 64);

  // To the host: its device memory is free again. Any range inside the allocation moves all of it.
  ASSERT_EQ(cuMemPrefetchAsync_v2(m + 16 * mib, 16 * mib, host, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), on_host);
  EXPECT_EQ(free_mib(), capacity_mib);
  ASSERT_EQ(cuMemPrefetchAsync_v2(m, 64 * mib, host, 0, nullptr), CUDA_SUCCESS);  // already there: no copy
  // And back, through the per-thread-stream variant.
  ASSERT_EQ(cuMemPrefetchAsync_v2_ptsz(m, 64 * mib, device0, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), 0);
  EXPECT_EQ(free_mib(), capacity_mib - 64);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);

  unsigned long long prefetches = 0;
  unsigned long long bytes = 0;
  ASSERT_EQ(tgsFakeDeviceCounters(0, nullptr, nullptr, &prefetches, &bytes), CUDA_SUCCESS);
  EXPECT_EQ(prefetches - prefetches0, 3U);
  EXPECT_EQ(bytes - bytes0, 2 * 64 * mib);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
}

TEST_F(FakeDriver, PrefetchTakesTheLinkTimeOnItsStreamAndLeavesKernelsAlone) {
  constexpr std::size_t size_mib = 768;
  constexpr double copy_s = static_cast<double>(size_mib) / link_mib_per_s;  // 0.75 s
  CUstream copies = nullptr;
  CUstream kernels = nullptr;
  ASSERT_EQ(cuStreamCreate(&copies, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&kernels, 0), CUDA_SUCCESS);
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, size_mib * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(resident(m), 0);
  int kernel = 0;
  auto* f = reinterpret_cast<CUfunction>(&kernel);

  const auto t0 = clock_type::now();
  ASSERT_EQ(cuMemPrefetchAsync_v2(m, size_mib * mib, host, 0, copies), CUDA_SUCCESS);
  // Copy engines run beside kernels: a 1 ms kernel on another stream does not wait for the copy.
  ASSERT_EQ(cuLaunchKernel(f, 1000, 1, 1, 128, 1, 1, 0, kernels, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(kernels), CUDA_SUCCESS);
  EXPECT_LT(seconds_since(t0), copy_s / 2);
  // Work queued behind the copy on its own stream waits for it.
  ASSERT_EQ(cuLaunchKernel(f, 1000, 1, 1, 128, 1, 1, 0, copies, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(copies), CUDA_SUCCESS);
  const double elapsed = seconds_since(t0);
  EXPECT_GE(elapsed, copy_s + 0.001);
  EXPECT_LT(elapsed, copy_s + 5.0);  // generous: a loaded CI machine

  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(copies), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(kernels), CUDA_SUCCESS);
}

TEST_F(FakeDriver, AdviceAndPrefetchNeedARangeInsideOneManagedAllocation) {
  CUdeviceptr plain = 0;
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAlloc_v2(&plain, 64 * mib), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m, 64 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAdvise_v2(plain, 64 * mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync_v2(plain, 64 * mib, host, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync_v2(0, 64 * mib, host, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m + 32 * mib, 33 * mib, host, 0, nullptr), CUDA_ERROR_INVALID_VALUE);  // runs past
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 0, host, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 64 * mib, host, 1, nullptr), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  EXPECT_EQ(cuMemPrefetchAsync_v2(m, 64 * mib, CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, 3}, 0, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAdvise_v2(m, 65 * mib, CU_MEM_ADVISE_SET_ACCESSED_BY, device0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                           CUmemLocation{CU_MEM_LOCATION_TYPE_INVALID, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                           CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, -1}),
            CUDA_ERROR_INVALID_VALUE);

  // Advice is recorded and moves nothing.
  ASSERT_EQ(cuMemAdvise_v2(m + mib, mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_SET_ACCESSED_BY, device0), CUDA_SUCCESS);
  int device = -2;
  CUmemLocation preferred{};
  unsigned accessed_by = 0;
  ASSERT_EQ(tgsFakeManagedState(m, &device, &preferred, &accessed_by), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(preferred.type, CU_MEM_LOCATION_TYPE_HOST);
  EXPECT_EQ(accessed_by, 1U);
  EXPECT_EQ(free_mib(), capacity_mib - 128);
  // UNSET_PREFERRED_LOCATION ignores the location, as the real driver does.
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, CUmemLocation{}), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_UNSET_ACCESSED_BY, device0), CUDA_SUCCESS);
  ASSERT_EQ(tgsFakeManagedState(m, &device, &preferred, &accessed_by), CUDA_SUCCESS);
  EXPECT_EQ(preferred.type, CU_MEM_LOCATION_TYPE_INVALID);
  EXPECT_EQ(accessed_by, 0U);

  EXPECT_EQ(cuMemFree_v2(plain), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
}

TEST_F(FakeDriver, ManagedAllocationChecksItsArguments) {
  CUdeviceptr m = 0;
  EXPECT_EQ(cuMemAllocManaged(&m, 64 * mib, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&m, 64 * mib, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(nullptr, 64 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAllocManaged(&m, 64 * mib, CU_MEM_ATTACH_HOST), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
}

TEST_F(FakeDriver, FreeingManagedMemoryReturnsItsDeviceBytes) {
  CUdeviceptr on_device = 0;
  CUdeviceptr evicted = 0;
  ASSERT_EQ(cuMemAllocManaged(&on_device, 256 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&evicted, 256 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), capacity_mib - 512);
  ASSERT_EQ(cuMemPrefetchAsync_v2(evicted, 256 * mib, host, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), capacity_mib - 256);
  EXPECT_EQ(cuMemFree_v2(on_device), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), capacity_mib);
  EXPECT_EQ(cuMemFreeAsync(evicted, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_mib(), capacity_mib);
  EXPECT_EQ(tgsFakeManagedState(evicted, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
}

TEST_F(FakeDriver, KernelsSlowDownWithHostResidentManagedMemory) {
  // Device time is counted exactly (TGS_FAKE_NS_PER_BLOCK = 1000, slowdown 2.0), so no clock.
  int kernel = 0;
  auto* f = reinterpret_cast<CUfunction>(&kernel);
  const auto device_ns_of_one_kernel = [&] {
    const unsigned long long before = counter_kernel_ns();
    EXPECT_EQ(cuLaunchKernel(f, 1000, 1, 1, 128, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
    return counter_kernel_ns() - before;
  };
  EXPECT_EQ(device_ns_of_one_kernel(), 1'000'000U);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(cuMemAllocManaged(&a, 64 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(device_ns_of_one_kernel(), 1'000'000U);  // all on the device
  ASSERT_EQ(cuMemPrefetchAsync_v2(a, 64 * mib, host, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(device_ns_of_one_kernel(), 3'000'000U);  // all on the host: 1 + 2.0
  ASSERT_EQ(cuMemAllocManaged(&b, 64 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(device_ns_of_one_kernel(), 2'000'000U);  // half on the host: 1 + 2.0 x 0.5
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(device_ns_of_one_kernel(), 1'000'000U);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
}

TEST_F(FakeDriver, ContextQueriesAreCurrentPerThread) {
  CUcontext ctx = nullptr;
  CUdevice dev = -1;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, context);
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuCtxGetCurrent(nullptr), CUDA_ERROR_INVALID_VALUE);
  std::thread([] {
    CUcontext none = context;
    CUdevice d = -1;
    EXPECT_EQ(cuCtxGetCurrent(&none), CUDA_SUCCESS);
    EXPECT_EQ(none, nullptr);
    EXPECT_EQ(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
  }).join();
}

TEST_F(FakeDriver, GetProcAddressHandsOutTheNewEntryPoints) {
  const auto lookup = [](const char* name, int version, cuuint64_t flags) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    const CUresult r = cuGetProcAddress_v2(name, &p, version, flags, &status);
    return r == CUDA_SUCCESS ? symbol_of(p) : "error " + std::to_string(r) + "/" + std::to_string(status);
  };
  EXPECT_EQ(lookup("cuMemAdvise", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuMemAdvise_v2");
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuMemPrefetchAsync_v2");
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 12020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            "cuMemPrefetchAsync_v2_ptsz");
  EXPECT_EQ(lookup("cuMemPrefetchAsync", 12010, CU_GET_PROC_ADDRESS_DEFAULT),
            "error " + std::to_string(CUDA_ERROR_NOT_FOUND) + "/" +
                std::to_string(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
  EXPECT_EQ(lookup("cuCtxGetCurrent", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuCtxGetCurrent");
  EXPECT_EQ(lookup("cuCtxGetDevice", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuCtxGetDevice");
  EXPECT_EQ(lookup("cuDeviceTotalMem", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuDeviceTotalMem_v2");
}

TEST_F(FakeDriver, AdviceAndPrefetchFromAnotherThreadWhileAllocatingAndLaunching) {
  // The interposer advises and prefetches from a background thread while the job runs.
  CUdeviceptr m = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 128 * mib, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::atomic<int> failures{0};
  std::thread mover([&] {
    CUstream s = nullptr;
    if (cuStreamCreate(&s, 0) != CUDA_SUCCESS) {
      failures.fetch_add(1);
      return;
    }
    for (int i = 0; !stop.load(); ++i) {
      const CUmemLocation to = i % 2 == 0 ? host : device0;
      if (cuMemAdvise_v2(m, 128 * mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, to) != CUDA_SUCCESS) failures.fetch_add(1);
      const CUresult r = cuMemPrefetchAsync_v2(m, 128 * mib, to, 0, s);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) failures.fetch_add(1);
      moves.fetch_add(1);
    }
    cuStreamDestroy_v2(s);  // pending copies are simulated time only
  });
  int kernel = 0;
  auto* f = reinterpret_cast<CUfunction>(&kernel);
  for (int i = 0; i < 500; ++i) {
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, 256 * mib);
    if (r == CUDA_SUCCESS) {
      EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    } else {
      EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
    }
    EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
    if (i == 499 && moves.load() < 200) i = 498;  // run on until the mover has overlapped enough
  }
  stop.store(true);
  mover.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
}
