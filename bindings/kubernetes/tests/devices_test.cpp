// SPDX-License-Identifier: Apache-2.0
// Tests of the device plugin's devices: IDs, what each class advertises, Allocate's CDI devices,
// environment and mounts, refusals, and the preferred allocation.
#include "devices.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tgs::kubernetes {
namespace {

using strings = std::vector<std::string>;

inventory node(unsigned gpus, unsigned replicas = 4) {
  return inventory({.gpus = gpus,
                    .opportunistic_replicas = replicas,
                    .paths = {.interposer = "/usr/lib/tgs/libtgs-intercept.so", .socket_dir = "/run/tgs"}});
}

std::string refusal(const auto& call) {
  try {
    call();
  } catch (const allocation_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DeviceId, NamesGpuClassAndReplica) {
  EXPECT_EQ(to_string(device_id{0, job_class::production, 0}), "gpu0-production");
  EXPECT_EQ(to_string(device_id{3, job_class::opportunistic, 2}), "gpu3-opportunistic-2");
  EXPECT_EQ(resource_name(job_class::production), "tgs.io/gpu-production");
  EXPECT_EQ(resource_name(job_class::opportunistic), "tgs.io/gpu-opportunistic");
}

TEST(DeviceId, ParsesWhatItPrintsAndNothingElse) {
  for (const device_id id : {device_id{0, job_class::production, 0}, device_id{17, job_class::opportunistic, 3}}) {
    EXPECT_EQ(parse_device_id(to_string(id)), id);
  }
  for (const char* bad : {"", "gpu", "gpu0", "gpu-production", "gpu00-production", "gpu0-production-1",
                          "gpu0-opportunistic", "gpu0-opportunistic-", "gpu0-opportunistic-01", "gpu+1-production",
                          "gpu0-opportunistic-x", "cpu0-production", "gpu99999999999-production", "gpu0-Production"}) {
    EXPECT_FALSE(parse_device_id(bad)) << bad;
  }
}

TEST(Inventory, OneProductionDevicePerGpuAndReplicasOfOpportunistic) {
  const inventory n = node(2, 3);
  strings production;
  for (const device_id& d : n.devices(job_class::production)) production.push_back(to_string(d));
  strings opportunistic;
  for (const device_id& d : n.devices(job_class::opportunistic)) opportunistic.push_back(to_string(d));
  EXPECT_EQ(production, (strings{"gpu0-production", "gpu1-production"}));
  EXPECT_EQ(opportunistic, (strings{"gpu0-opportunistic-0", "gpu0-opportunistic-1", "gpu0-opportunistic-2",
                                    "gpu1-opportunistic-0", "gpu1-opportunistic-1", "gpu1-opportunistic-2"}));
  // kubelet refuses device IDs over 63 characters; the longest this plugin makes is far shorter.
  EXPECT_LE(to_string(device_id{1023, job_class::opportunistic, 63}).size(), 63U);
}

TEST(Inventory, RefusesAnEmptyNode) {
  EXPECT_THROW(node(0), std::invalid_argument);
  EXPECT_THROW(node(1, 0), std::invalid_argument);
}

TEST(Allocate, ProductionGetsItsGpusCdiDevicesEnvAndMounts) {
  const container_allocation a = node(2).allocate(job_class::production, {"gpu1-production"});
  EXPECT_EQ(a.cdi_devices, (strings{"tgs.io/gpu=1-production", "nvidia.com/gpu=1"}));
  EXPECT_EQ(a.env, (std::vector<containers::env_var>{{"LD_PRELOAD", "/usr/lib/tgs/libtgs-intercept.so"},
                                                     {"TGS_NODE_SOCKET", "/run/tgs/tgs.sock"},
                                                     {"NVIDIA_VISIBLE_DEVICES", "1"}}));
  EXPECT_EQ(a.mounts, (std::vector<containers::mount>{
                          {"/usr/lib/tgs/libtgs-intercept.so", "/usr/lib/tgs/libtgs-intercept.so", true},
                          {"/run/tgs/gpu1-production.sock", "/run/tgs/tgs.sock", false}}));
}

TEST(Allocate, OpportunisticReplicasOfOneGpuShareItsSocket) {
  const container_allocation a =
      node(2).allocate(job_class::opportunistic, {"gpu0-opportunistic-3", "gpu0-opportunistic-1"});
  EXPECT_EQ(a.cdi_devices, (strings{"tgs.io/gpu=0-opportunistic", "nvidia.com/gpu=0"}));
  ASSERT_EQ(a.mounts.size(), 2U);
  EXPECT_EQ(a.mounts[1].host_path, "/run/tgs/gpu0-opportunistic.sock");
}

TEST(Allocate, RefusesWhatItDidNotAdvertise) {
  const inventory n = node(2);
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::production, {"gpu2-production"}); }),
            "unknown device \"gpu2-production\"");
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::opportunistic, {"gpu0-opportunistic-4"}); }),
            "unknown device \"gpu0-opportunistic-4\"");
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::production, {"nonsense"}); }), "unknown device \"nonsense\"");
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::production, {"gpu0-opportunistic-0"}); }),
            "device \"gpu0-opportunistic-0\" is not a tgs.io/gpu-production device");
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::production, {}); }), "no devices in the request");
  EXPECT_EQ(refusal([&] { (void)n.allocate(job_class::production, {"gpu0-production", "gpu1-production"}); }),
            "devices \"gpu0-production\" and \"gpu1-production\" are on different GPUs; a container shares one GPU");
}

TEST(PreferredAllocation, SpreadsSingleDevicesOverTheGpus) {
  const inventory n = node(3);
  // GPU 1 has the most replicas left: an opportunistic job goes where the fewest are.
  const strings available{"gpu0-opportunistic-3", "gpu1-opportunistic-1", "gpu1-opportunistic-2",
                          "gpu1-opportunistic-3", "gpu2-opportunistic-2", "gpu2-opportunistic-3"};
  EXPECT_EQ(n.preferred(job_class::opportunistic, available, {}, 1), (strings{"gpu1-opportunistic-1"}));
  // Ties go to the lower index.
  EXPECT_EQ(n.preferred(job_class::production, {"gpu2-production", "gpu0-production"}, {}, 1),
            (strings{"gpu0-production"}));
}

TEST(PreferredAllocation, KeepsAContainerOnTheGpuItMustInclude) {
  const inventory n = node(2);
  const strings available{"gpu0-opportunistic-0", "gpu0-opportunistic-1", "gpu0-opportunistic-2",
                          "gpu1-opportunistic-0", "gpu1-opportunistic-2"};
  EXPECT_EQ(n.preferred(job_class::opportunistic, available, {"gpu1-opportunistic-2"}, 2),
            (strings{"gpu1-opportunistic-2", "gpu1-opportunistic-0"}));
  // More than the GPU has left: the rest comes from the next GPU (Allocate will then refuse).
  EXPECT_EQ(n.preferred(job_class::opportunistic, available, {"gpu1-opportunistic-2"}, 3),
            (strings{"gpu1-opportunistic-2", "gpu1-opportunistic-0", "gpu0-opportunistic-0"}));
  EXPECT_EQ(refusal([&] { (void)n.preferred(job_class::opportunistic, {"gpu7-opportunistic-0"}, {}, 1); }),
            "unknown device \"gpu7-opportunistic-0\"");
}

}  // namespace
}  // namespace tgs::kubernetes
