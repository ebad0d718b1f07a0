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
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cuda_subset.hpp"
#include "driver_api.hpp"

// The fake driver's own test hooks (no CUDA counterpart).
extern "C" {
CUresult tgsFakeDeviceCounters(int ordinal, unsigned long long* kernels, unsigned long long* kernel_ns,
                               unsigned long long* prefetches, unsigned long long* prefetched_bytes);
CUresult tgsFakeManagedState(CUdeviceptr ptr, int* resident_device, CUmemLocation* preferred, unsigned* accessed_by);
CUresult tgsFakeManagedResidency(unsigned long long* device_bytes, unsigned long long* host_bytes);
CUresult tgsFakeAllocationResidency(CUdeviceptr ptr, unsigned long long* device_bytes);
CUresult tgsFakeProcessCounters(unsigned long long* most_unfinished_kernels);
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

unsigned long long counter_kernels() {
  unsigned long long n = 0;
  EXPECT_EQ(tgsFakeDeviceCounters(0, &n, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  return n;
}

/// The device time and kernel count a call adds to the device counters.
struct device_work {
  unsigned long long kernels = 0;
  unsigned long long ns = 0;
  bool operator==(const device_work& o) const { return kernels == o.kernels && ns == o.ns; }
  friend std::ostream& operator<<(std::ostream& os, const device_work& w) {
    return os << w.kernels << " kernels, " << w.ns << " ns";
  }
};

template <class F>
device_work work_of(F&& f) {
  const unsigned long long kernels0 = counter_kernels();
  const unsigned long long ns0 = counter_kernel_ns();
  f();
  return {counter_kernels() - kernels0, counter_kernel_ns() - ns0};
}

/// A CUfunction the fake accepts (any non-null pointer).
CUfunction some_kernel() {
  static int kernel = 0;
  return reinterpret_cast<CUfunction>(&kernel);
}

CUDA_KERNEL_NODE_PARAMS_v2 kernel_params(unsigned gx, unsigned gy = 1, unsigned gz = 1) {
  CUDA_KERNEL_NODE_PARAMS_v2 p{};
  p.func = some_kernel();
  p.gridDimX = gx;
  p.gridDimY = gy;
  p.gridDimZ = gz;
  p.blockDimX = 128;
  p.blockDimY = 1;
  p.blockDimZ = 1;
  return p;
}

/// Adds a kernel node of `gx x gy x gz` blocks, no dependencies.
CUgraphNode add_kernel(CUgraph g, unsigned gx, unsigned gy = 1, unsigned gz = 1) {
  CUgraphNode n = nullptr;
  const CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params(gx, gy, gz);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), CUDA_SUCCESS);
  return n;
}

CUgraph new_graph() {
  CUgraph g = nullptr;
  EXPECT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  return g;
}

std::size_t node_count(CUgraph g) {
  std::size_t n = 0;
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
  return n;
}

std::string lookup_symbol(const char* name, int version, cuuint64_t flags) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult r = cuGetProcAddress_v2(name, &p, version, flags, &status);
  return r == CUDA_SUCCESS ? symbol_of(p) : "error " + std::to_string(r) + "/" + std::to_string(status);
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

  // A range to the host: only its pages move, and their device memory is free again.
  ASSERT_EQ(cuMemPrefetchAsync_v2(m + 16 * mib, 16 * mib, host, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(resident(m + 16 * mib), on_host);
  EXPECT_EQ(resident(m + 32 * mib - 1), on_host);
  EXPECT_EQ(resident(m), 0);
  EXPECT_EQ(resident(m + 32 * mib), 0);
  EXPECT_EQ(free_mib(), capacity_mib - 48);
  unsigned long long on_device = 0;
  unsigned long long on_host_bytes = 0;
  ASSERT_EQ(tgsFakeManagedResidency(&on_device, &on_host_bytes), CUDA_SUCCESS);
  EXPECT_EQ(on_device, 48 * mib);
  EXPECT_EQ(on_host_bytes, 16 * mib);
  // The same split for the one allocation; only its start names it.
  unsigned long long allocation_on_device = 0;
  ASSERT_EQ(tgsFakeAllocationResidency(m, &allocation_on_device), CUDA_SUCCESS);
  EXPECT_EQ(allocation_on_device, 48 * mib);
  EXPECT_EQ(tgsFakeAllocationResidency(m + mib, &allocation_on_device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(tgsFakeAllocationResidency(m, nullptr), CUDA_ERROR_INVALID_VALUE);
  // The whole allocation: the rest follows; the range already on host is not copied again.
  ASSERT_EQ(cuMemPrefetchAsync_v2(m, 64 * mib, host, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), on_host);
  EXPECT_EQ(free_mib(), capacity_mib);
  ASSERT_EQ(cuMemPrefetchAsync_v2(m, 64 * mib, host, 0, nullptr), CUDA_SUCCESS);  // already there: no copy
  // And back, through the per-thread-stream variant; a range that starts inside a page moves it whole.
  ASSERT_EQ(cuMemPrefetchAsync_v2_ptsz(m + 1, 64 * mib - 1, device0, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(resident(m), 0);
  EXPECT_EQ(free_mib(), capacity_mib - 64);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);

  unsigned long long prefetches = 0;
  unsigned long long bytes = 0;
  ASSERT_EQ(tgsFakeDeviceCounters(0, nullptr, nullptr, &prefetches, &bytes), CUDA_SUCCESS);
  EXPECT_EQ(prefetches - prefetches0, 4U);
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

  // Advice is recorded for the pages of its range and moves nothing.
  ASSERT_EQ(cuMemAdvise_v2(m + mib, mib, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_SET_ACCESSED_BY, device0), CUDA_SUCCESS);
  int device = -2;
  CUmemLocation preferred{};
  unsigned accessed_by = 0;
  ASSERT_EQ(tgsFakeManagedState(m + mib, &device, &preferred, &accessed_by), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(preferred.type, CU_MEM_LOCATION_TYPE_HOST);
  EXPECT_EQ(accessed_by, 1U);
  ASSERT_EQ(tgsFakeManagedState(m, nullptr, &preferred, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(preferred.type, CU_MEM_LOCATION_TYPE_INVALID);  // outside the advised range
  ASSERT_EQ(tgsFakeManagedState(m + 2 * mib, nullptr, &preferred, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(preferred.type, CU_MEM_LOCATION_TYPE_INVALID);
  EXPECT_EQ(free_mib(), capacity_mib - 128);
  // UNSET_PREFERRED_LOCATION ignores the location, as the real driver does.
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, CUmemLocation{}), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAdvise_v2(m, 64 * mib, CU_MEM_ADVISE_UNSET_ACCESSED_BY, device0), CUDA_SUCCESS);
  ASSERT_EQ(tgsFakeManagedState(m + mib, &device, &preferred, &accessed_by), CUDA_SUCCESS);
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

TEST_F(FakeDriver, AnEventIsReadyWhenTheWorkBeforeItOnItsStreamHasRun) {
  // What the interposer's launch window relies on: an event recorded after a launch becomes ready
  // when that kernel has run, on the stream it was recorded on (the special handles included).
  CUevent e = nullptr;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS) << "nothing queued: ready at once";
  for (CUstream s : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    const auto t0 = clock_type::now();
    ASSERT_EQ(cuLaunchKernel(some_kernel(), 20'000, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);  // 20 ms
    ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    ASSERT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
    EXPECT_GE(seconds_since(t0), 0.019);
    EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventRecord(nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(nullptr), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(FakeDriver, TheCaptureModeIsExchanged) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL) << "the default";
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED) << "back as it was set";
}

TEST_F(FakeDriver, ACapturingStreamMakesLaunchesGraphNodesNotWork) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamIsCapturing(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
      << "the default stream cannot capture";

  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  const auto t0 = clock_type::now();
  for (int i = 0; i < 3; ++i) {  // 3 x 100 ms if they ran
    ASSERT_EQ(cuLaunchKernel(some_kernel(), 100'000, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_LT(seconds_since(t0), 0.1) << "captured kernels do not run";
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);
  std::size_t count = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3U);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE) << "no capture left to end";
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, WaitingForAnEventRecordedInACaptureIsAnErrorThatEndsTheCapture) {
  // What the launch window must never do: on a real GPU such an event cannot be queried, and
  // the fake invalidates the capture too, so a tool that tries is seen when the capture ends.
  CUstream s = nullptr;
  CUevent e = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(some_kernel(), 1000, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS) << "recording into a capture is allowed";
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_ERROR_CAPTURED_EVENT);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuLaunchKernel(some_kernel(), 1000, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph g = reinterpret_cast<CUgraph>(&s);
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  // Recorded again outside a capture, the event is an ordinary one.
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, TheProcessCounterKeepsTheDeepestQueueOfUnfinishedKernels) {
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  unsigned long long before = 0;
  ASSERT_EQ(tgsFakeProcessCounters(&before), CUDA_SUCCESS);
  CUstream a = nullptr;
  CUstream b = nullptr;
  ASSERT_EQ(cuStreamCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, 0), CUDA_SUCCESS);
  // 1 ms kernels, 12 queued at once across two streams: more than any earlier test queued.
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(cuLaunchKernel(some_kernel(), 1000, 1, 1, 128, 1, 1, 0, a, nullptr, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cuLaunchKernel(some_kernel(), 1000, 1, 1, 128, 1, 1, 0, b, nullptr, nullptr), CUDA_SUCCESS);
  }
  unsigned long long most = 0;
  ASSERT_EQ(tgsFakeProcessCounters(&most), CUDA_SUCCESS);
  EXPECT_EQ(most, std::max(before, 12ULL));
  EXPECT_EQ(tgsFakeProcessCounters(nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(b), CUDA_SUCCESS);
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
  EXPECT_EQ(lookup("cuEventDestroy", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuEventDestroy_v2");
  EXPECT_EQ(lookup("cuEventRecord", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "cuEventRecord_ptsz");
  EXPECT_EQ(lookup("cuStreamIsCapturing", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuStreamIsCapturing");
  EXPECT_EQ(lookup("cuThreadExchangeStreamCaptureMode", 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            "cuThreadExchangeStreamCaptureMode");
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

// --- graphs ----------------------------------------------------------------------------------------

TEST_F(FakeDriver, GraphNodesCanBeListedAndInspected) {
  CUgraph g = new_graph();
  EXPECT_EQ(node_count(g), 0U);
  const CUDA_KERNEL_NODE_PARAMS_v2 p1 = [] {
    CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params(7, 3, 2);
    p.blockDimX = 64;
    p.blockDimY = 2;
    p.blockDimZ = 4;
    p.sharedMemBytes = 4096;
    static void* args[1] = {nullptr};
    p.kernelParams = args;
    return p;
  }();
  CUDA_KERNEL_NODE_PARAMS_v2 p2 = kernel_params(5);
  p2.func = nullptr;  // a CUkernel instead of a CUfunction
  int library_kernel = 0;
  p2.kern = reinterpret_cast<CUkernel>(&library_kernel);
  CUgraphNode k1 = nullptr;
  CUgraphNode k2 = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&k1, g, nullptr, 0, &p1), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddKernelNode_v2(&k2, g, &k1, 1, &p2), CUDA_SUCCESS);
  CUgraph child = new_graph();
  const CUgraphNode child_kernel = add_kernel(child, 11);
  CUgraphNode c = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&c, g, &k2, 1, child), CUDA_SUCCESS);

  // Count only, then every node, then fewer, then more (the rest nulled).
  EXPECT_EQ(node_count(g), 3U);
  std::vector<CUgraphNode> nodes(5, reinterpret_cast<CUgraphNode>(&library_kernel));
  std::size_t n = 3;
  ASSERT_EQ(cuGraphGetNodes(g, nodes.data(), &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 3U);
  EXPECT_EQ(nodes[0], k1);
  EXPECT_EQ(nodes[1], k2);
  EXPECT_EQ(nodes[2], c);
  nodes.assign(5, reinterpret_cast<CUgraphNode>(&library_kernel));
  n = 2;
  ASSERT_EQ(cuGraphGetNodes(g, nodes.data(), &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 2U);
  EXPECT_EQ(nodes[0], k1);
  EXPECT_EQ(nodes[1], k2);
  EXPECT_EQ(nodes[2], reinterpret_cast<CUgraphNode>(&library_kernel)) << "written past the count given";
  n = 5;
  ASSERT_EQ(cuGraphGetNodes(g, nodes.data(), &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 3U);
  EXPECT_EQ(nodes[2], c);
  EXPECT_EQ(nodes[3], nullptr);
  EXPECT_EQ(nodes[4], nullptr);
  n = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nodes.data(), &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 0U);

  // Types and kernel parameters, exactly as given.
  CUgraphNodeType type{};
  ASSERT_EQ(cuGraphNodeGetType(k1, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  ASSERT_EQ(cuGraphNodeGetType(c, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_GRAPH);
  CUDA_KERNEL_NODE_PARAMS_v2 out{};
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(k1, &out), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(&out, &p1, sizeof(out)), 0);
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(k2, &out), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(&out, &p2, sizeof(out)), 0);
  EXPECT_EQ(cuGraphKernelNodeGetParams_v2(c, &out), CUDA_ERROR_INVALID_VALUE);
  CUgraph embedded = nullptr;
  EXPECT_EQ(cuGraphChildGraphNodeGetGraph(k1, &embedded), CUDA_ERROR_INVALID_VALUE);

  // The child node holds a copy taken when it was added: later edits of `child` don't reach it.
  ASSERT_EQ(cuGraphChildGraphNodeGetGraph(c, &embedded), CUDA_SUCCESS);
  ASSERT_NE(embedded, nullptr);
  EXPECT_NE(embedded, child);
  add_kernel(child, 13);
  EXPECT_EQ(node_count(child), 2U);
  ASSERT_EQ(node_count(embedded), 1U);
  CUgraphNode inner = nullptr;
  n = 1;
  ASSERT_EQ(cuGraphGetNodes(embedded, &inner, &n), CUDA_SUCCESS);
  EXPECT_NE(inner, child_kernel);
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(inner, &out), CUDA_SUCCESS);
  EXPECT_EQ(out.gridDimX, 11U);
  EXPECT_EQ(cuGraphDestroy(child), CUDA_SUCCESS);
  EXPECT_EQ(node_count(embedded), 1U);  // still there
  EXPECT_EQ(cuGraphDestroy(embedded), CUDA_ERROR_INVALID_VALUE) << "the node owns its graph";

  // Destroying the graph takes its nodes and embedded graphs with it.
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphNodeGetType(k1, &type), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphNodeGetType(inner, &type), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphGetNodes(embedded, nullptr, &n), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(FakeDriver, GraphBuildingChecksItsArguments) {
  CUgraph g = nullptr;
  EXPECT_EQ(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  g = new_graph();
  CUgraph other = new_graph();
  const CUgraphNode foreign = add_kernel(other, 1);
  const CUgraphNode first = add_kernel(g, 1);
  CUgraphNode n = nullptr;
  CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params(4);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddKernelNode_v2(nullptr, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE);
  p.func = nullptr;
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE);  // no kernel at all
  for (int dim = 0; dim < 3; ++dim) {
    p = kernel_params(4, 2, 2);
    (dim == 0 ? p.gridDimX : dim == 1 ? p.gridDimY : p.gridDimZ) = 0;
    EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE) << "grid dimension " << dim;
  }
  p = kernel_params(4);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 1, &p), CUDA_ERROR_INVALID_VALUE);  // no dependency array
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, &foreign, 1, &p), CUDA_ERROR_INVALID_VALUE);  // another graph's node
  const CUgraphNode bogus = reinterpret_cast<CUgraphNode>(&p);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, &bogus, 1, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, nullptr, nullptr, 0, &p), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, reinterpret_cast<CUgraph>(&p), nullptr, 0, &p), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphAddChildGraphNode(&n, g, nullptr, 0, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphAddChildGraphNode(&n, g, &foreign, 1, other), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddChildGraphNode(nullptr, g, nullptr, 0, other), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(node_count(g), 1U) << "a failed add leaves the graph alone";
  const CUgraphNode deps[] = {first, first};
  ASSERT_EQ(cuGraphAddKernelNode_v2(&n, g, deps, 2, &p), CUDA_SUCCESS);
  // A graph may embed a copy of itself: the copy is taken before the node is added.
  CUgraphNode self_node = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&self_node, g, &n, 1, g), CUDA_SUCCESS);
  CUgraph embedded = nullptr;
  ASSERT_EQ(cuGraphChildGraphNodeGetGraph(self_node, &embedded), CUDA_SUCCESS);
  EXPECT_EQ(node_count(embedded), 2U);
  EXPECT_EQ(node_count(g), 3U);
  // The embedded graph may be edited through its handle, as CUDA allows.
  add_kernel(embedded, 2);
  EXPECT_EQ(node_count(embedded), 3U);

  CUgraphNodeType type{};
  CUDA_KERNEL_NODE_PARAMS_v2 out{};
  std::size_t count = 0;
  EXPECT_EQ(cuGraphGetNodes(g, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphGetNodes(nullptr, nullptr, &count), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphNodeGetType(first, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetType(nullptr, &type), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphKernelNodeGetParams_v2(first, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphKernelNodeGetParams_v2(bogus, &out), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphChildGraphNodeGetGraph(self_node, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphChildGraphNodeGetGraph(bogus, &embedded), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(other), CUDA_SUCCESS);
}

TEST_F(FakeDriver, EveryInstantiateFormMakesALaunchableExec) {
  CUgraph g = new_graph();
  add_kernel(g, 10);
  const device_work one_kernel{1, 10'000};
  const auto launches = [&](CUgraphExec e) {
    return work_of([&] {
      EXPECT_EQ(cuGraphLaunch(e, nullptr), CUDA_SUCCESS);
      EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    });
  };

  CUgraphExec e = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(launches(e), one_kernel);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 1), CUDA_SUCCESS);  // auto free on launch
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);

  CUgraphNode error_node = add_kernel(g, 1);  // anything non-null: cleared on success
  char log[16] = "untouched";
  e = nullptr;
  ASSERT_EQ(cuGraphInstantiate_v2(&e, g, &error_node, log, sizeof(log)), CUDA_SUCCESS);
  EXPECT_EQ(error_node, nullptr);
  EXPECT_STREQ(log, "");
  EXPECT_EQ(launches(e), (device_work{2, 11'000}));
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiate_v2(&e, g, nullptr, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);

  // The params struct is opaque here: any non-null pointer will do.
  alignas(8) unsigned char params[64] = {};
  auto* ip = reinterpret_cast<CUDA_GRAPH_INSTANTIATE_PARAMS*>(params);
  for (auto* instantiate : {&cuGraphInstantiateWithParams, &cuGraphInstantiateWithParams_ptsz}) {
    e = nullptr;
    ASSERT_EQ(instantiate(&e, g, ip), CUDA_SUCCESS);
    EXPECT_EQ(launches(e), (device_work{2, 11'000}));
    EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
    EXPECT_EQ(instantiate(&e, g, nullptr), CUDA_ERROR_INVALID_VALUE);
  }

  EXPECT_EQ(cuGraphInstantiateWithFlags(&e, g, 1ULL << 20), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiateWithFlags(nullptr, g, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiateWithFlags(&e, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphInstantiate_v2(&e, reinterpret_cast<CUgraph>(log), nullptr, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // Exported under its own name too, as the real driver does.
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(dlsym(self, "cuGraphInstantiateWithFlags"), reinterpret_cast<void*>(&cuGraphInstantiateWithFlags));
  EXPECT_EQ(dlsym(self, "cuGraphInstantiate_v2"), reinterpret_cast<void*>(&cuGraphInstantiate_v2));
  dlclose(self);
}

TEST_F(FakeDriver, GetProcAddressHandsOutTheGraphEntryPointsByVersion) {
  const std::string not_sufficient = "error " + std::to_string(CUDA_ERROR_NOT_FOUND) + "/" +
                                     std::to_string(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // "cuGraphInstantiate" is the WithFlags signature from 12.0 (what the runtime asks for), _v2 before.
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphInstantiateWithFlags");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 12000, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphInstantiateWithFlags");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            "cuGraphInstantiateWithFlags");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 11999, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphInstantiate_v2");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 11000, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphInstantiate_v2");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiate", 10020, CU_GET_PROC_ADDRESS_DEFAULT), not_sufficient);
  EXPECT_EQ(lookup_symbol("cuGraphInstantiateWithFlags", 11040, CU_GET_PROC_ADDRESS_DEFAULT),
            "cuGraphInstantiateWithFlags");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiateWithParams", 12000, CU_GET_PROC_ADDRESS_DEFAULT),
            "cuGraphInstantiateWithParams");
  EXPECT_EQ(lookup_symbol("cuGraphInstantiateWithParams", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            "cuGraphInstantiateWithParams_ptsz");
  EXPECT_EQ(lookup_symbol("cuGraphAddKernelNode", 12000, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphAddKernelNode_v2");
  EXPECT_EQ(lookup_symbol("cuGraphAddKernelNode", 11080, CU_GET_PROC_ADDRESS_DEFAULT), not_sufficient);
  EXPECT_EQ(lookup_symbol("cuGraphKernelNodeGetParams", 13000, CU_GET_PROC_ADDRESS_DEFAULT),
            "cuGraphKernelNodeGetParams_v2");
  EXPECT_EQ(lookup_symbol("cuGraphExecUpdate", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuGraphExecUpdate_v2");
  for (const char* name : {"cuGraphCreate", "cuGraphDestroy", "cuGraphAddChildGraphNode", "cuGraphGetNodes",
                           "cuGraphNodeGetType", "cuGraphChildGraphNodeGetGraph", "cuGraphExecDestroy",
                           "cuGraphLaunch"}) {
    EXPECT_EQ(lookup_symbol(name, 13000, CU_GET_PROC_ADDRESS_DEFAULT), name);
  }
  EXPECT_EQ(lookup_symbol("cuGraphLaunch", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "cuGraphLaunch_ptsz");
}

TEST_F(FakeDriver, AnExecIsASnapshotThatExecUpdateReplaces) {
  CUgraph g = new_graph();
  add_kernel(g, 1000);
  CUgraph child = new_graph();
  add_kernel(child, 100);
  CUgraphNode c = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&c, g, nullptr, 0, child), CUDA_SUCCESS);
  CUgraphExec e = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  const auto launch = [&] {
    return work_of([&] {
      EXPECT_EQ(cuGraphLaunch(e, nullptr), CUDA_SUCCESS);
      EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    });
  };
  const device_work original{2, 1'100'000};
  EXPECT_EQ(launch(), original);

  // Edits of the graph, of its embedded child, even its destruction: the exec runs as instantiated.
  add_kernel(g, 500);
  CUgraph embedded = nullptr;
  ASSERT_EQ(cuGraphChildGraphNodeGetGraph(c, &embedded), CUDA_SUCCESS);
  add_kernel(embedded, 50);
  EXPECT_EQ(launch(), original);

  // An update takes the graph as it is now: 1000 + (100 + 50) + 500 blocks.
  ASSERT_EQ(cuGraphExecUpdate_v2(e, g, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch(), (device_work{4, 1'650'000}));
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(launch(), (device_work{4, 1'650'000}));

  // Updated to another graph, here an empty one: a launch then takes no device time.
  CUgraph empty = new_graph();
  ASSERT_EQ(cuGraphExecUpdate_v2(e, empty, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch(), (device_work{0, 0}));
  // `g` was destroyed before `empty` was made: handles are never reused, so it stays invalid.
  EXPECT_EQ(cuGraphExecUpdate_v2(e, g, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphExecUpdate_v2(nullptr, empty, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecUpdate_v2(e, empty, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(empty), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(child), CUDA_SUCCESS);
}

TEST_F(FakeDriver, AGraphLaunchTakesTheDeviceTimeOfItsKernels) {
  // Kernels of 40, 2x3x4 and 7 blocks at the top; 9 and, one level deeper, 16 in child graphs.
  CUgraph grandchild = new_graph();
  add_kernel(grandchild, 4, 4);
  CUgraph child = new_graph();
  add_kernel(child, 9);
  CUgraphNode n = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&n, child, nullptr, 0, grandchild), CUDA_SUCCESS);
  CUgraph g = new_graph();
  add_kernel(g, 40);
  ASSERT_EQ(cuGraphAddChildGraphNode(&n, g, nullptr, 0, child), CUDA_SUCCESS);
  add_kernel(g, 2, 3, 4);
  add_kernel(g, 7);
  CUgraphExec e = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);

  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  const device_work as_graph = work_of([&] {
    EXPECT_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  });
  EXPECT_EQ(as_graph, (device_work{5, (40 + 9 + 16 + 24 + 7) * 1000ULL}));
  const device_work as_kernels = work_of([&] {
    for (const unsigned blocks : {40U, 9U, 16U, 24U, 7U}) {
      EXPECT_EQ(cuLaunchKernel(some_kernel(), blocks, 1, 1, 128, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  });
  EXPECT_EQ(as_graph, as_kernels);
  EXPECT_EQ(work_of([&] { EXPECT_EQ(cuGraphLaunch_ptsz(e, nullptr), CUDA_SUCCESS); }), as_graph);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);

  // Device time is real time on the stream: ten 5 ms kernels keep a sync waiting 50 ms.
  CUgraph slow = new_graph();
  for (int i = 0; i < 10; ++i) add_kernel(slow, 5000);
  CUgraphExec slow_exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&slow_exec, slow, 0), CUDA_SUCCESS);
  const auto t0 = clock_type::now();
  ASSERT_EQ(cuGraphLaunch(slow_exec, s), CUDA_SUCCESS);
  EXPECT_LT(seconds_since(t0), 0.025) << "a launch queues its kernels, it does not wait for them";
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_GE(seconds_since(t0), 0.050);

  // More kernels than a stream holds (TGS_FAKE_QUEUE_DEPTH, 64): the launch blocks as launches do.
  CUgraph big = new_graph();
  for (int i = 0; i < 200; ++i) add_kernel(big, 1);
  CUgraphExec big_exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&big_exec, big, 0), CUDA_SUCCESS);
  EXPECT_EQ(work_of([&] { EXPECT_EQ(cuGraphLaunch(big_exec, s), CUDA_SUCCESS); }), (device_work{200, 200'000}));
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);

  for (CUgraphExec x : {e, slow_exec, big_exec}) EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  for (CUgraph x : {g, child, grandchild, slow, big}) EXPECT_EQ(cuGraphDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(FakeDriver, LaunchingADestroyedOrUnknownExecFails) {
  CUgraph g = new_graph();
  add_kernel(g, 10);
  CUgraphExec e = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(work_of([&] {
              EXPECT_EQ(cuGraphLaunch(e, nullptr), CUDA_ERROR_INVALID_HANDLE);
              EXPECT_EQ(cuGraphLaunch_ptsz(e, nullptr), CUDA_ERROR_INVALID_HANDLE);
            }),
            (device_work{0, 0}));
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphExecDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphLaunch(nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  int made_up = 0;
  EXPECT_EQ(cuGraphLaunch(reinterpret_cast<CUgraphExec>(&made_up), nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(&made_up)), CUDA_ERROR_INVALID_HANDLE);
  // A graph handle is not an exec handle.
  CUgraph h = new_graph();
  EXPECT_EQ(cuGraphLaunch(reinterpret_cast<CUgraphExec>(h), nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(h), CUDA_SUCCESS);
}

TEST_F(FakeDriver, GraphsAreBuiltAndLaunchedFromManyThreads) {
  constexpr int threads = 4;
  constexpr int rounds = 50;
  std::atomic<int> failures{0};
  const unsigned long long kernels0 = counter_kernels();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      CUstream s = nullptr;
      if (cuStreamCreate(&s, 0) != CUDA_SUCCESS) failures.fetch_add(1);
      for (int i = 0; i < rounds; ++i) {
        CUgraph g = nullptr;
        CUgraph child = nullptr;
        CUgraphNode n = nullptr;
        CUgraphExec e = nullptr;
        const CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params(1);
        const bool ok = cuGraphCreate(&g, 0) == CUDA_SUCCESS && cuGraphCreate(&child, 0) == CUDA_SUCCESS &&
                        cuGraphAddKernelNode_v2(&n, child, nullptr, 0, &p) == CUDA_SUCCESS &&
                        cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p) == CUDA_SUCCESS &&
                        cuGraphAddChildGraphNode(&n, g, &n, 1, child) == CUDA_SUCCESS &&
                        cuGraphDestroy(child) == CUDA_SUCCESS &&
                        cuGraphInstantiateWithFlags(&e, g, 0) == CUDA_SUCCESS &&
                        cuGraphDestroy(g) == CUDA_SUCCESS && cuGraphLaunch(e, s) == CUDA_SUCCESS &&
                        cuGraphExecDestroy(e) == CUDA_SUCCESS;
        if (!ok) failures.fetch_add(1);
      }
      if (cuStreamSynchronize(s) != CUDA_SUCCESS || cuStreamDestroy_v2(s) != CUDA_SUCCESS) failures.fetch_add(1);
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(counter_kernels() - kernels0, 2U * threads * rounds);
}
