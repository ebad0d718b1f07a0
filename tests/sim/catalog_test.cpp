// SPDX-License-Identifier: Apache-2.0
// Tests of the simulator's table readers: good tables load, bad ones name file, line and field.
#include "tgs/sim/catalog.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tgs::sim {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view models_header =
    "model,gpu,batch_size,iteration_ms,busy_fraction,blocks_per_iteration,footprint_gib,hot_gib,"
    "source\n";

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Catalog, EmbeddedDefaultHasThePapersModelsOnAnA100) {
  const catalog c = load_catalog();
  ASSERT_NE(c.find_gpu("a100-40gb"), nullptr);
  for (const char* model : {"resnet50", "shufflenet", "mobilenet", "gcn", "bert-base", "gpt-350m",
                            "dlrm", "bert-base-b4"}) {
    EXPECT_NE(c.find_model(model, "a100-40gb"), nullptr) << model;
  }
  EXPECT_EQ(c.find_model("resnet50", "no-such-gpu"), nullptr);
  EXPECT_EQ(c.measurements.size(), 16U);
}

TEST(Catalog, PaperFactsAreInTheProfiles) {
  const catalog c = load_catalog();
  // NSDI'23: ShuffleNet alone keeps ~37% of SMs busy, BERT-base ~85%; DLRM ~38.7 GB.
  EXPECT_DOUBLE_EQ(c.find_model("shufflenet", "a100-40gb")->busy_fraction, 0.37);
  EXPECT_DOUBLE_EQ(c.find_model("bert-base", "a100-40gb")->busy_fraction, 0.85);
  EXPECT_NEAR(c.find_model("dlrm", "a100-40gb")->footprint.gib() * 1.073741824, 38.7, 0.5);
}

TEST(Catalog, ParsesCommentsBlankLinesAndCrLf) {
  const std::string text = "# comment\n\n" + std::string(models_header) +
                           "m1,g,8,10,0.5,1000,2,1,estimate\r\n# another\nm2,g,8,20,1,10,1,0,x\n";
  const auto models = parse_models(text, "t.csv");
  ASSERT_EQ(models.size(), 2U);
  EXPECT_EQ(models[0].model, "m1");
  EXPECT_EQ(models[0].iteration_time, std::chrono::milliseconds{10});
  EXPECT_EQ(models[1].source, "x");
}

TEST(Catalog, BadNumberNamesFileLineAndField) {
  const std::string text = std::string(models_header) + "m1,g,8,10,1.7,1000,2,1,x\n";
  EXPECT_EQ(error_of([&] { (void)parse_models(text, "models.csv"); }),
            "models.csv:2: busy_fraction: expected a number in (0, 1], got \"1.7\"");
}

TEST(Catalog, RejectsWrongHeaderMissingFieldsAndDuplicates) {
  EXPECT_THAT(error_of([] { (void)parse_models("model,gpu\n", "a.csv"); }),
              HasSubstr("a.csv:1: expected the header"));
  EXPECT_THAT(error_of([] {
                (void)parse_models(std::string(models_header) + "m1,g,8,10\n", "b.csv");
              }),
              HasSubstr("b.csv:2: expected 9 comma-separated fields, got 4"));
  EXPECT_THAT(error_of([] {
                (void)parse_models(std::string(models_header) +
                                       "m1,g,8,10,0.5,1,2,1,x\nm1,g,8,10,0.5,1,2,1,x\n",
                                   "c.csv");
              }),
              HasSubstr("c.csv:3: model \"m1\" on \"g\" appears twice"));
  EXPECT_THAT(error_of([] { (void)parse_models("", "empty.csv"); }),
              HasSubstr("empty.csv: empty table"));
}

TEST(Catalog, HotSetLargerThanFootprintIsAnError) {
  const std::string text = std::string(models_header) + "m1,g,8,10,0.5,1000,2,3,x\n";
  EXPECT_THAT(error_of([&] { (void)parse_models(text, "m.csv"); }),
              HasSubstr("m.csv:2: hot_gib: expected at most footprint_gib"));
}

TEST(Catalog, BadNamesAndIntegersAreErrors) {
  EXPECT_THAT(error_of([] {
                (void)parse_gpus("gpu,memory_gib,host_link_gbps,mig_slices\nA100 GPU,40,25,7\n",
                                 "g.csv");
              }),
              HasSubstr("g.csv:2: gpu: expected a name"));
  EXPECT_THAT(error_of([] {
                (void)parse_gpus("gpu,memory_gib,host_link_gbps,mig_slices\na,40,25,seven\n",
                                 "g.csv");
              }),
              HasSubstr("g.csv:2: mig_slices: expected an integer in [0, 64]"));
  EXPECT_THAT(error_of([] {
                (void)parse_measurements(
                    "scenario,gpu,production_model,opportunistic_model,policy,production,"
                    "opportunistic\ns,g,a,b,tgs,-0.1,0.5\n",
                    "p.csv");
              }),
              HasSubstr("p.csv:2: production: expected a normalized throughput"));
}

TEST(Catalog, MissingFileIsNamed) {
  EXPECT_THAT(error_of([] { (void)read_file("/nonexistent/models.csv"); }),
              HasSubstr("/nonexistent/models.csv: cannot open file"));
}

TEST(Catalog, MeasurementOfUnknownModelIsAnError) {
  const std::string dir = TGS_TEST_DATA_DIR;
  EXPECT_THAT(error_of([&] {
                (void)load_catalog({.gpus = "", .models = "",
                                    .measurements = dir + "/unknown_model_pairs.csv"});
              }),
              HasSubstr("unknown_model_pairs.csv:2: no profile for model \"alexnet\""));
}

}  // namespace
}  // namespace tgs::sim
