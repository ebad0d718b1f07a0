// SPDX-License-Identifier: Apache-2.0
// Tests of the tables generated from hooked_symbols.def and of the cuGetProcAddress variant rule.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "hook_table.hpp"

using namespace tgs::cuda::intercept;

namespace {
const char* classified(const char* base, int version, cuuint64_t flags) {
  const auto id = classify(base, version, flags);
  return id ? hook_table[index(*id)].symbol : "none";
}
}  // namespace

TEST(HookTable, ListsEveryLaunchAndAllocationPathOnce) {
  std::set<std::string> names;
  for (const hook_entry& e : hook_table) EXPECT_TRUE(names.insert(e.symbol).second) << e.symbol;
  for (const char* required :
       {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz",
        "cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate", "cuMemMap",
        "cuMemAllocManaged", "cuMemFree_v2", "cuMemFreeAsync", "cuMemRelease", "cuGetProcAddress",
        "cuGetProcAddress_v2"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
  EXPECT_EQ(names.size(), hook_count);
}

TEST(HookTable, FindsExportedNamesOnly) {
  ASSERT_TRUE(find_symbol("cuLaunchKernel_ptsz"));
  EXPECT_STREQ(hook_table[index(*find_symbol("cuLaunchKernel_ptsz"))].symbol, "cuLaunchKernel_ptsz");
  EXPECT_FALSE(find_symbol("cuMemAlloc"));  // v1 (32-bit sizes) is not hooked
  EXPECT_FALSE(find_symbol("cuDeviceGet"));
  // cuInit is hooked: the job's MPS client environment must be in place before the driver reads it.
  ASSERT_TRUE(find_symbol("cuInit"));
}

TEST(Classify, PicksThePerThreadVariantOnlyWhenAsked) {
  EXPECT_STREQ(classified("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_DEFAULT), "cuLaunchKernel");
  EXPECT_STREQ(classified("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), "cuLaunchKernel");
  EXPECT_STREQ(classified("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
               "cuLaunchKernel_ptsz");
  // No per-thread form: the flag does not matter.
  EXPECT_STREQ(classified("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), "cuMemAlloc_v2");
}

TEST(Classify, FollowsTheRequestedVersion) {
  EXPECT_STREQ(classified("cuGetProcAddress", 11080, 0), "cuGetProcAddress");
  EXPECT_STREQ(classified("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2");
  EXPECT_STREQ(classified("cuMemAlloc", 3000, 0), "none");  // the driver hands out v1: not ours
  EXPECT_STREQ(classified("cuLaunchKernelEx", 11000, 0), "none");
  EXPECT_STREQ(classified("cuDeviceGet", 13000, 0), "none");
  EXPECT_STREQ(classified("cuInit", 13000, 0), "cuInit");
  // "cuGraphInstantiate" is the 5-argument form before CUDA 12.0 and WithFlags from 12.0 on.
  EXPECT_STREQ(classified("cuGraphInstantiate", 11080, 0), "cuGraphInstantiate_v2");
  EXPECT_STREQ(classified("cuGraphInstantiate", 12000, 0), "cuGraphInstantiateWithFlags");
  EXPECT_STREQ(classified("cuGraphInstantiateWithParams", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
               "cuGraphInstantiateWithParams_ptsz");
}
