// SPDX-License-Identifier: Apache-2.0
// Tests of the simulator's table readers: good tables load, bad ones name file, line and field.
#include "tgs/sim/catalog.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim_test_support.hpp"

namespace tgs::sim {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

constexpr std::string_view models_header =
    "model,gpu,batch_size,iteration_ms,busy_fraction,kernels_per_iteration,blocks_per_iteration,"
    "gaps_per_iteration,jitter,slice_sensitivity,footprint_gib,hot_gib,provenance,source\n";
constexpr std::string_view gpus_header =
    "gpu,memory_gib,host_link_gbps,mig_slices,interposer_overhead,context_switch_us,gap_exposure,"
    "source\n";
constexpr std::string_view pairs_header =
    "scenario,gpu,production_model,opportunistic_model,policy,memory_policy,budget_gib,"
    "production_idle,settings,production,opportunistic,runs,source\n";

TEST(Catalog, EmbeddedDefaultHasThePapersModelsOnAnA100) {
  const catalog c = load_catalog();
  ASSERT_NE(c.find_gpu("a100-40gb"), nullptr);
  for (const char* model : {"resnet50", "shufflenet", "mobilenet", "gcn", "bert-base", "gpt-350m",
                            "dlrm", "bert-base-b4"}) {
    EXPECT_NE(c.find_model(model, "a100-40gb"), nullptr) << model;
  }
  EXPECT_EQ(c.find_model("resnet50", "no-such-gpu"), nullptr);
  const auto a100 = std::count_if(c.measurements.begin(), c.measurements.end(),
                                  [](const auto& m) { return m.gpu == "a100-40gb"; });
  EXPECT_EQ(a100, 16);
}

TEST(Catalog, EveryModelMeasuredOnOurGpusHasAProfileThere) {
  const catalog c = load_catalog();
  for (const auto& m : c.measurements) {
    for (const auto& model : {m.production_model, m.opportunistic_model}) {
      if (!model.empty()) {
        EXPECT_NE(c.find_model(model, m.gpu), nullptr) << m.origin;
      }
    }
  }
  // The mixed stream's models, so a cluster of H100s or H200s runs it.
  for (const char* gpu : {"h100-80gb", "h200-141gb"}) {
    for (const char* model : {"resnet50", "shufflenet", "mobilenet", "gcn", "bert-base", "dlrm"}) {
      EXPECT_NE(c.find_model(model, gpu), nullptr) << model << " on " << gpu;
    }
  }
}

TEST(Catalog, MeasuredIterationTimesAreMarkedMeasured) {
  const catalog c = load_catalog();
  const model_profile* r = c.find_model("resnet50-b256", "h100-80gb");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->origin_of(profile_field::iteration_time), provenance::measured);
  EXPECT_EQ(r->origin_of(profile_field::busy_fraction), provenance::measured);
  // 15.00 it/s alone, the harness profile of sim/data/gpu_profiles.csv.
  EXPECT_NEAR(to_seconds(r->iteration_time) * 1e3, 1e3 / 14.997575674937341, 0.01);
  const model_profile* gcn = c.find_model("gcn", "h100-80gb");
  ASSERT_NE(gcn, nullptr);
  EXPECT_EQ(gcn->origin_of(profile_field::iteration_time), provenance::estimate);
  EXPECT_EQ(c.find_model("shufflenet", "a100-40gb")->origin_of(profile_field::busy_fraction),
            provenance::paper);
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
                           "m1,g,8,10,0.5,100,1000,50,0.05,0.5,2,1,mpeeeeeef,estimate\r\n# another\n"
                           "m2,g,8,20,1,10,10,0,0,0,1,0,mmmmmmmmm,x\n";
  const auto models = parse_models(text, "t.csv");
  ASSERT_EQ(models.size(), 2U);
  EXPECT_EQ(models[0].model, "m1");
  EXPECT_EQ(models[0].iteration_time, std::chrono::milliseconds{10});
  EXPECT_EQ(models[0].origin_of(profile_field::iteration_time), provenance::measured);
  EXPECT_EQ(models[0].origin_of(profile_field::busy_fraction), provenance::paper);
  EXPECT_EQ(models[0].origin_of(profile_field::hot_set), provenance::fitted);
  EXPECT_DOUBLE_EQ(models[0].jitter, 0.05);
  // 0.5 x 10 ms over 100 kernels; 0.5 x 10 ms of idle time in 50 gaps.
  EXPECT_DOUBLE_EQ(models[0].kernel_seconds(), 50e-6);
  EXPECT_DOUBLE_EQ(models[0].gap_seconds(), 100e-6);
  EXPECT_EQ(models[1].source, "x");
}

TEST(Catalog, BadNumberNamesFileLineAndField) {
  const std::string text = std::string(models_header) + "m1,g,8,10,1.7,100,1000,50,0,0,2,1,eeeeeeeee,x\n";
  EXPECT_EQ(error_of([&] { (void)parse_models(text, "models.csv"); }),
            "models.csv:2: busy_fraction: expected a number in (0, 1], got \"1.7\"");
}

TEST(Catalog, ProvenanceNeedsOneKnownLetterPerField) {
  for (const char* bad : {"eeee", "eeeeeeeex", "eeeeeeeeee"}) {
    const std::string text =
        std::string(models_header) + "m1,g,8,10,0.5,100,1000,50,0,0,2,1," + bad + ",x\n";
    EXPECT_THAT(error_of([&] { (void)parse_models(text, "m.csv"); }),
                HasSubstr("m.csv:2: provenance: expected 9 letters"))
        << bad;
  }
}

TEST(Catalog, MeasuredPairsKeepTheirSettingsAndMissingSides) {
  const std::string text = std::string(pairs_header) +
                           "s,g,a,b,token-bucket,tgs,12.5,0,token-bucket.budget-blocks=5 memory.tgs.reserve-mib=1024,0.9,,2,x\n"
                           "s,g,a,b,co-execution,tgs,12,1,,,0.4,1,y\n";
  const auto pairs = parse_measurements(text, "p.csv");
  ASSERT_EQ(pairs.size(), 2U);
  EXPECT_EQ(pairs[0].memory_policy, "tgs");
  ASSERT_TRUE(pairs[0].memory_budget.has_value());
  EXPECT_DOUBLE_EQ(pairs[0].memory_budget->gib(), 12.5);
  ASSERT_EQ(pairs[0].settings.size(), 2U);
  EXPECT_EQ(pairs[0].settings[0].first, "token-bucket.budget-blocks");
  EXPECT_EQ(pairs[0].settings[0].second, "5");
  EXPECT_EQ(pairs[0].production, 0.9);
  EXPECT_FALSE(pairs[0].opportunistic.has_value());
  EXPECT_TRUE(pairs[1].production_idle);
  EXPECT_FALSE(pairs[1].production.has_value());
  EXPECT_EQ(pairs[0].pair_key(), "g/a/b");
  EXPECT_THAT(error_of([&] {
                (void)parse_measurements(std::string(pairs_header) + "s,g,a,b,tgs,,,0,,,,1,x\n", "q.csv");
              }),
              HasSubstr("q.csv:2: production: expected at least one measured throughput"));
  EXPECT_THAT(error_of([&] {
                (void)parse_measurements(std::string(pairs_header) + "s,g,a,b,tgs,,,0,oops,1,1,1,x\n", "q.csv");
              }),
              HasSubstr("q.csv:2: settings: expected space-separated policy.setting=value items"));
}

TEST(Catalog, MeasuredPairsMayCarryTheCallsAloneRates) {
  // The two last columns are optional: a table written before them still loads.
  const std::string header = std::string(pairs_header.substr(0, pairs_header.size() - 1)) +
                             ",production_alone_it_per_s,opportunistic_alone_it_per_s\n";
  const auto pairs = parse_measurements(header +
                                            "s,g,a,b,co-execution,,,0,,0.5,0.8,1,x,15.1,36.25\n"
                                            "s,g,a,b,co-execution,,,0,,0.5,0.8,1,x,,\n"
                                            "s,g,a,,tgs,hard-limit,,0,,1.0,,1,x,30,\n",
                                        "p.csv");
  ASSERT_EQ(pairs.size(), 3U);
  EXPECT_EQ(pairs[0].production_alone_rate, 15.1);
  EXPECT_EQ(pairs[0].opportunistic_alone_rate, 36.25);
  EXPECT_FALSE(pairs[1].production_alone_rate.has_value());
  EXPECT_FALSE(pairs[1].opportunistic_alone_rate.has_value());
  EXPECT_EQ(pairs[2].production_alone_rate, 30.0);
  EXPECT_FALSE(parse_measurements(std::string(pairs_header) + "s,g,a,b,tgs,,,0,,1,0,1,x\n", "old.csv")[0]
                   .production_alone_rate.has_value());
  EXPECT_THAT(error_of([&] { (void)parse_measurements(header + "s,g,a,b,tgs,,,0,,1,0,1,x,0,3\n", "q.csv"); }),
              HasSubstr("q.csv:2: production_alone_it_per_s: expected iterations per second above 0"));
  EXPECT_THAT(error_of([&] { (void)parse_measurements(header + "s,g,a,,tgs,,,0,,1,,1,x,3,3\n", "q.csv"); }),
              HasSubstr("q.csv:2: opportunistic_alone_it_per_s: expected nothing: the row names no "
                        "opportunistic model"));
  // One optional column without the other is not a header this table has.
  EXPECT_THAT(error_of([&] {
                (void)parse_measurements(std::string(pairs_header.substr(0, pairs_header.size() - 1)) +
                                             ",production_alone_it_per_s\n",
                                         "r.csv");
              }),
              HasSubstr("r.csv:1: expected the header"));
}

TEST(Catalog, FuzzSeedsParseOrFailWithAnInputError) {
  // sim/fuzz/corpus: the libFuzzer target's seeds (its first byte picks the table), so a g++-only
  // CI still runs each through its reader: a table, or an input_error naming the input.
  const std::filesystem::path root = std::filesystem::path{TGS_SOURCE_DIR} / "sim" / "fuzz" / "corpus";
  std::size_t files = 0;
  std::size_t parsed = 0;
  for (const char* folder : {"gpus", "models", "pairs", "facts"}) {
    ASSERT_TRUE(std::filesystem::is_directory(root / folder)) << folder;
    for (const auto& entry : std::filesystem::directory_iterator{root / folder}) {
      std::ifstream in{entry.path(), std::ios::binary};
      std::stringstream buffer;
      buffer << in.rdbuf();
      const std::string text = buffer.str().substr(1);
      ++files;
      try {
        const std::string_view f = folder;
        if (f == "gpus") (void)parse_gpus(text, "seed.csv");
        if (f == "models") (void)parse_models(text, "seed.csv");
        if (f == "pairs") (void)parse_measurements(text, "seed.csv");
        if (f == "facts") (void)parse_job_facts(text, "seed.csv");
        ++parsed;
      } catch (const input_error& e) {
        EXPECT_THAT(e.what(), HasSubstr("seed.csv")) << entry.path();
      }
    }
  }
  EXPECT_GE(files, 8U);
  EXPECT_GE(parsed, 4U) << "each table's seed should parse";
}

TEST(Catalog, InputsHashFollowsEveryTable) {
  catalog_inputs a{"g", "m", "p"};
  catalog_inputs b = a;
  EXPECT_EQ(a.hash(), b.hash());
  b.models += " ";
  EXPECT_NE(a.hash(), b.hash());
  // Moving text from one table to the next changes it too.
  EXPECT_NE((catalog_inputs{"gm", "", "p"}).hash(), (catalog_inputs{"g", "m", "p"}).hash());
}

TEST(Catalog, RejectsWrongHeaderMissingFieldsAndDuplicates) {
  EXPECT_THAT(error_of([] { (void)parse_models("model,gpu\n", "a.csv"); }),
              HasSubstr("a.csv:1: expected the header"));
  EXPECT_THAT(error_of([] {
                (void)parse_models(std::string(models_header) + "m1,g,8,10\n", "b.csv");
              }),
              HasSubstr("b.csv:2: expected 14 comma-separated fields, got 4"));
  const std::string row = "m1,g,8,10,0.5,1,1,1,0,0,2,1,eeeeeeeee,x\n";
  EXPECT_THAT(error_of([&] { (void)parse_models(std::string(models_header) + row + row, "c.csv"); }),
              HasSubstr("c.csv:3: model \"m1\" on \"g\" appears twice"));
  EXPECT_THAT(error_of([] { (void)parse_models("", "empty.csv"); }),
              HasSubstr("empty.csv: empty table"));
}

TEST(Catalog, BadNamesAndIntegersAreErrors) {
  EXPECT_THAT(error_of([] { (void)parse_gpus(std::string(gpus_header) + "A100 GPU,40,25,7,0,25,0.5,x\n", "g.csv"); }),
              HasSubstr("g.csv:2: gpu: expected a name"));
  EXPECT_THAT(error_of([] { (void)parse_gpus(std::string(gpus_header) + "a,40,25,seven,0,25,0.5,x\n", "g.csv"); }),
              HasSubstr("g.csv:2: mig_slices: expected an integer in [0, 64]"));
  EXPECT_THAT(error_of([] { (void)parse_gpus(std::string(gpus_header) + "a,40,25,7,2,25,0.5,x\n", "g.csv"); }),
              HasSubstr("g.csv:2: interposer_overhead: expected a fraction in [0, 1]"));
  EXPECT_THAT(error_of([] {
                (void)parse_measurements(std::string(pairs_header) + "s,g,a,b,tgs,,,0,,-0.1,0.5,1,x\n", "p.csv");
              }),
              HasSubstr("p.csv:2: production: expected a normalized throughput"));
}

TEST(Catalog, TheNodesMeasuredFactsOfAJobAreInItsProfileWithTheirSources) {
  const catalog c = load_catalog();
  const model_profile* resnet = c.find_model("resnet50-b256", "h200-141gb");
  ASSERT_NE(resnet, nullptr);
  ASSERT_TRUE(resnet->production_gpu_wait);
  EXPECT_DOUBLE_EQ(*resnet->production_gpu_wait, 0.438);
  EXPECT_THAT(resnet->production_gpu_wait_source, HasSubstr("docs/results/mechanism-choice.json"));
  EXPECT_FALSE(resnet->opportunistic_longest_span);
  EXPECT_EQ(resnet->opportunistic_longest_span_source, "");
  const model_profile* shufflenet = c.find_model("shufflenet", "h200-141gb");
  ASSERT_NE(shufflenet, nullptr);
  ASSERT_TRUE(shufflenet->opportunistic_longest_span);
  EXPECT_NEAR(to_seconds(*shufflenet->opportunistic_longest_span), 0.01277, 1e-9);
  EXPECT_THAT(shufflenet->opportunistic_longest_span_source, HasSubstr("opportunistic_longest_span_ms"));
  // Measured on the H200 only: the H100's and the A100's profiles have neither fact.
  for (const char* gpu : {"a100-40gb", "h100-80gb"}) {
    for (const model_profile& m : c.models) {
      if (m.gpu != gpu) continue;
      EXPECT_FALSE(m.production_gpu_wait) << m.model << " on " << gpu;
      EXPECT_FALSE(m.opportunistic_longest_span) << m.model << " on " << gpu;
    }
  }
  // Every row of the table names a profile, so none is left out.
  const std::string path = std::string(TGS_SOURCE_DIR) + "/sim/data/job_facts.csv";
  const std::vector<job_facts> rows = parse_job_facts(read_file(path), path);
  EXPECT_GE(rows.size(), 5U);
  for (const job_facts& f : rows) EXPECT_NE(c.find_model(f.model, f.gpu), nullptr) << f.origin;
}

TEST(Catalog, AJobFactNeedsItsSourceAndARange) {
  const std::string header =
      "model,gpu,production_gpu_wait,production_gpu_wait_source,opportunistic_longest_span_ms,"
      "opportunistic_longest_span_source\n";
  const auto facts = parse_job_facts(header + "m,g,0.5,a run,,\nn,g,,,120,another run\n", "f.csv");
  ASSERT_EQ(facts.size(), 2U);
  EXPECT_EQ(facts[0].production_gpu_wait, 0.5);
  EXPECT_FALSE(facts[0].opportunistic_longest_span);
  EXPECT_EQ(facts[1].opportunistic_longest_span, from_seconds(0.12));
  EXPECT_EQ(facts[1].origin, "f.csv:3");
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,0.5,,,\n", "f.csv"); }),
              HasSubstr("f.csv:2: production_gpu_wait_source: expected a value and its source, or neither"));
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,,,,somewhere\n", "f.csv"); }),
              HasSubstr("f.csv:2: opportunistic_longest_span_ms: expected a value and its source, or neither"));
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,1.5,x,,\n", "f.csv"); }),
              HasSubstr("f.csv:2: production_gpu_wait: expected a fraction in [0, 1]"));
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,,,0,x\n", "f.csv"); }),
              HasSubstr("f.csv:2: opportunistic_longest_span_ms: expected milliseconds above 0"));
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,,,,\n", "f.csv"); }),
              HasSubstr("f.csv:2: production_gpu_wait: expected at least one measured fact"));
  EXPECT_THAT(error_of([&] { (void)parse_job_facts(header + "m,g,0.1,x,,\nm,g,0.2,y,,\n", "f.csv"); }),
              HasSubstr("f.csv:3: model \"m\" on \"g\" appears twice"));
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
