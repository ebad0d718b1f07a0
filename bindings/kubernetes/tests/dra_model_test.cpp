// SPDX-License-Identifier: Apache-2.0
// The DRA driver's model: the slice, reading an allocation, the refusals, the checkpoint.
#include "dra_model.hpp"

#include <gtest/gtest.h>

namespace tgs::kubernetes::dra {
namespace {

using nlohmann::json;

inventory two_gpus() { return inventory({.gpus = 2, .opportunistic_replicas = 2, .paths = {}}); }

json claim(const std::string& uid, const json& results) {
  return {{"metadata", {{"namespace", "ns"}, {"name", "c"}, {"uid", uid}}},
          {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
}

json result(const std::string& pool, const std::string& device, const std::string& driver = "gpu.tgs.io") {
  return {{"request", "gpu"}, {"driver", driver}, {"pool", pool}, {"device", device}};
}

TEST(DraModel, TheFeatureFileIsReadAsNfdReadsIt) {
  const auto f = parse_node_features("# comment\n tgs.mps = true \n\nnot a pair\ntgs.policy=tgs\r\n");
  EXPECT_EQ(f, (std::map<std::string, std::string>{{"tgs.mps", "true"}, {"tgs.policy", "tgs"}}));
}

TEST(DraModel, TheSliceHasBothClassesPerGpuAndSaysOnlyWhatItKnows) {
  const json s = resource_slice({.node_name = "n1",
                                 .node_uid = "",
                                 .gpus = {{0, "", 0}, {3, "H200", 1000}},
                                 .features = {{"tgs.mps", "false"}},
                                 .opportunistic_replicas = 1,
                                 .generation = 7});
  EXPECT_EQ(s["metadata"]["name"], "n1-gpu.tgs.io");
  EXPECT_FALSE(s["metadata"].contains("ownerReferences")) << "no owner without the Node's UID";
  EXPECT_EQ(s["spec"]["pool"], json({{"name", "n1"}, {"generation", 7}, {"resourceSliceCount", 1}}));
  const json& d = s["spec"]["devices"];
  ASSERT_EQ(d.size(), 4U);
  EXPECT_EQ(d[2]["name"], "gpu3-production");
  EXPECT_EQ(d[3]["name"], "gpu3-opportunistic-0");
  EXPECT_EQ(d[3]["attributes"]["mps"], json({{"bool", false}}));
  EXPECT_EQ(d[3]["capacity"]["memory"]["value"], "1000");
  // An unknown model or memory is left out, not guessed.
  EXPECT_FALSE(d[0]["attributes"].contains("model"));
  EXPECT_FALSE(d[0].contains("capacity"));
  EXPECT_FALSE(d[0]["attributes"].contains("memoryPolicy"));
  // The generation alone does not make another offer.
  json later = s;
  later["spec"]["pool"]["generation"] = 8;
  EXPECT_EQ(offered(s), offered(later));
}

TEST(DraModel, AnAllocationIsReadForThisDriverThisClaimAndThisNode) {
  const auto got = allocated_here(claim("u1", {result("n1", "gpu0-production"), result("n1", "gpu-0", "nvidia.com")}),
                                  "u1", "n1");
  ASSERT_EQ(got.size(), 1U);
  EXPECT_EQ(got[0].device, "gpu0-production");
  EXPECT_THROW((void)allocated_here(claim("u2", json::array({result("n1", "gpu0-production")})), "u1", "n1"),
               claim_error);
  EXPECT_THROW((void)allocated_here(claim("u1", json::array({result("n2", "gpu0-production")})), "u1", "n1"),
               claim_error);
  EXPECT_THROW((void)allocated_here(json{{"metadata", {{"uid", "u1"}}}}, "u1", "n1"), claim_error);
  EXPECT_THROW((void)allocated_here(json("not an object"), "u1", "n1"), claim_error);
}

TEST(DraModel, OneProductionClaimPerGpuAndOneDevicePerClaim) {
  const inventory devices = two_gpus();
  claim_book book(devices);
  const prepared_claim& p = book.prepare("u1", "ns", "a", {{"gpu", "n1", "gpu1-production"}});
  EXPECT_EQ(p.cdi_devices, (std::vector<std::string>{"tgs.io/gpu=1-production", "nvidia.com/gpu=1"}));
  // Again: the same answer.
  EXPECT_EQ(&book.prepare("u1", "ns", "a", {}), &p);
  try {
    (void)book.prepare("u2", "ns", "b", {{"gpu", "n1", "gpu1-production"}});
    FAIL() << "a second production claim on GPU 1";
  } catch (const claim_error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 1's production device is prepared for claim ns/a (u1)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW((void)book.prepare("u3", "ns", "c", {{"gpu", "n1", "gpu0-production"}}));
  EXPECT_THROW((void)book.prepare("u4", "ns", "d", {{"gpu", "n1", "gpu0-opportunistic-0"},
                                                     {"gpu", "n1", "gpu0-opportunistic-1"}}),
               claim_error);
  EXPECT_THROW((void)book.prepare("u5", "ns", "e", {{"gpu", "n1", "gpu0-opportunistic-2"}}), claim_error)
      << "replica 2 of 2 is not this node's";
  EXPECT_THROW((void)book.prepare("u6", "ns", "f", {{"gpu", "n1", "../../etc"}}), claim_error);
  EXPECT_TRUE(book.unprepare("u1"));
  EXPECT_FALSE(book.unprepare("u1"));
  EXPECT_NO_THROW((void)book.prepare("u2", "ns", "b", {{"gpu", "n1", "gpu1-production"}}));
}

TEST(DraModel, TheCheckpointComesBackAsItWasAndABadOneIsRefused) {
  const inventory devices = two_gpus();
  claim_book book(devices);
  (void)book.prepare("u1", "ns", "a", {{"gpu", "n1", "gpu1-opportunistic-1"}});
  (void)book.prepare("u2", "ns", "b", {{"gpu", "n1", "gpu0-production"}});
  claim_book back(devices);
  back.load(book.to_json());
  EXPECT_EQ(back.to_json(), book.to_json());
  ASSERT_NE(back.find("u2"), nullptr);
  // The production rule holds across the load.
  EXPECT_THROW((void)back.prepare("u9", "ns", "z", {{"gpu", "n1", "gpu0-production"}}), claim_error);

  claim_book bad(devices);
  EXPECT_THROW(bad.load(json::array()), std::runtime_error);
  EXPECT_THROW(bad.load(json{{"driver", "gpu.tgs.io"}, {"version", 2}, {"claims", json::array()}}), std::runtime_error);
  // Found by the fuzzer: a version of another type is a refusal, not a JSON type error.
  EXPECT_THROW(bad.load(json{{"driver", "gpu.tgs.io"}, {"version", json::array()}, {"claims", json::array()}}),
               std::runtime_error);
  json no_uid = book.to_json();
  no_uid["claims"][0].erase("uid");
  EXPECT_THROW(bad.load(no_uid), std::runtime_error);
  json bad_cdi = book.to_json();
  bad_cdi["claims"][0]["cdiDevices"] = json::array({1});
  EXPECT_THROW(bad.load(bad_cdi), std::runtime_error);
  EXPECT_EQ(bad.size(), 0U) << "a refused checkpoint leaves nothing half loaded";
}

}  // namespace
}  // namespace tgs::kubernetes::dra
