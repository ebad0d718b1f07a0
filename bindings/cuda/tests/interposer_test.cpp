// SPDX-License-Identifier: Apache-2.0
// Tests of libtgs-intercept.so loaded with LD_PRELOAD into a program linked to the fake driver:
// which pointers dlsym and cuGetProcAddress hand out, forwarding, and the managed-memory guard.
#include <dlfcn.h>
#include <sys/mman.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda_subset.hpp"
#include "driver_api.hpp"

namespace {

using get_proc_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using launch_kernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void**, void**);

/// The file and symbol an address belongs to.
struct origin {
  std::string file;
  std::string symbol;
};
origin where(void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0) return {};
  return {info.dli_fname != nullptr ? info.dli_fname : "", info.dli_sname != nullptr ? info.dli_sname : ""};
}
bool in_interposer(void* p) { return where(p).file.find("libtgs-intercept") != std::string::npos; }
bool in_driver(void* p) { return where(p).file.find("libcuda.so") != std::string::npos; }

class Interposer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* preload = std::getenv("LD_PRELOAD");
    ASSERT_TRUE(preload != nullptr && std::string(preload).find("libtgs-intercept") != std::string::npos)
        << "run this test under LD_PRELOAD=libtgs-intercept.so (ctest does)";
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    ASSERT_NE(driver, nullptr);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
  static void TearDownTestSuite() {
    // The fake device's shared segment outlives the process by design; this test's is private.
    if (const char* device = std::getenv("TGS_FAKE_DEVICE")) shm_unlink(("/" + std::string(device) + "-0").c_str());
  }
  static inline void* driver = nullptr;
};

}  // namespace

TEST_F(Interposer, DlsymHandsOutWrappersForHookedNames) {
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernelEx_ptsz", "cuGraphLaunch", "cuMemAlloc_v2",
                           "cuGetProcAddress_v2", "cuInit"}) {
    void* p = dlsym(driver, name);
    EXPECT_TRUE(in_interposer(p)) << name << " came from " << where(p).file;
    EXPECT_EQ(where(p).symbol, name);
  }
}

TEST_F(Interposer, DlsymLeavesOtherNamesToTheDriver) {
  EXPECT_TRUE(in_driver(dlsym(driver, "cuDeviceGet")));
  EXPECT_EQ(dlsym(driver, "cuNoSuchFunction"), nullptr);
  EXPECT_NE(dlerror(), nullptr);  // glibc's own error reporting still works
}

TEST_F(Interposer, RtldNextResolvesRelativeToTheCaller) {
  // After this executable comes the preloaded interposer: its dlsym is "next" for us. A dlsym
  // override that looked up RTLD_NEXT from inside itself would answer glibc's instead.
  EXPECT_TRUE(in_interposer(dlsym(RTLD_NEXT, "dlsym")));
}

TEST_F(Interposer, GetProcAddressHandsOutItsOwnWrapperForItself) {
  auto bootstrap = reinterpret_cast<get_proc_v2>(dlsym(driver, "cuGetProcAddress_v2"));
  ASSERT_NE(bootstrap, nullptr);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(bootstrap("cuGetProcAddress", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_TRUE(in_interposer(p));
  EXPECT_EQ(where(p).symbol, "cuGetProcAddress_v2");
  auto get_proc = reinterpret_cast<get_proc_v2>(p);

  ASSERT_EQ(get_proc("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(where(p).symbol, "cuLaunchKernel_ptsz");
  EXPECT_TRUE(in_interposer(p));
  ASSERT_EQ(get_proc("cuLaunchKernel", &p, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status), CUDA_SUCCESS);
  EXPECT_EQ(where(p).symbol, "cuLaunchKernel");
  EXPECT_TRUE(in_interposer(p));
  ASSERT_EQ(get_proc("cuGetProcAddress", &p, 11080, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_EQ(where(p).symbol, "cuGetProcAddress");
  EXPECT_TRUE(in_interposer(p));
  // Not hooked: the driver's own function.
  ASSERT_EQ(get_proc("cuDeviceGet", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_TRUE(in_driver(p));
  // cuInit is hooked, whichever way it is found (the job's MPS environment goes before it).
  ASSERT_EQ(get_proc("cuInit", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_TRUE(in_interposer(p));
}

TEST_F(Interposer, WrappersForwardArgumentsAndResults) {
  auto bootstrap = reinterpret_cast<get_proc_v2>(dlsym(driver, "cuGetProcAddress_v2"));
  void* p = nullptr;
  ASSERT_EQ(bootstrap("cuLaunchKernel", &p, 13000, 0, nullptr), CUDA_SUCCESS);
  auto launch = reinterpret_cast<launch_kernel>(p);
  ASSERT_TRUE(in_interposer(p));
  int kernel = 0;
  auto* f = reinterpret_cast<CUfunction>(&kernel);
  EXPECT_EQ(launch(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  // The driver's own error comes back unchanged (the fake refuses a null function).
  EXPECT_EQ(launch(nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(Interposer, RefusesManagedAllocationsBeyondFreeMemory) {
  // ctest gives the fake device 1024 MiB.
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocManaged(&p, std::size_t{2} << 30, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAllocManaged(&p, std::size_t{256} << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}
