// SPDX-License-Identifier: Apache-2.0
// Tests of the commands every front end shares: their checks, messages and runs.
#include "tgs/sim/commands.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "sim/sim_test_support.hpp"

namespace tgs::sim {
namespace {

using testing::default_model;
using testing::error_of;

TEST(Commands, RangesAreWordedAsTheCommandLineWordsThem) {
  pairs_command cmd;
  cmd.duration_s = 0.5;
  EXPECT_EQ(error_of([&] { check(cmd); }),
            "--duration: Value 0.5 not in range 1.000000 to 10000000.000000");
  mixed_command mixed;
  mixed.stream.production_jobs = -1;
  EXPECT_EQ(error_of([&] { check(mixed); }),
            "--production-jobs: Value -1 not in range 0 to 1000000");
}

TEST(Commands, UnknownNamesListTheKnownOnes) {
  pairs_command cmd;
  cmd.policies = {"tgs", "foo"};
  EXPECT_EQ(error_of([&] { check(cmd); }).rfind("--policies: foo not in {tgs,", 0), 0U);
  replay_command replay;
  replay.trace_format = "x";
  EXPECT_EQ(error_of([&] { check(replay); }),
            "--trace-format: x not in {philly-json,philly-csv,pollux-csv,tgs-csv,job-stream}");
}

TEST(Commands, PairsRefusesASettingOfAPolicyItDoesNotRun) {
  pairs_command cmd;
  cmd.policies = {"mps"};
  cmd.settings.rate_given = {{"tgs", "tgs.dead-band"}};
  EXPECT_EQ(error_of([&] { check(cmd); }),
            "tgs.dead-band is a setting of tgs, which this run does not use");
  cmd.policies = {"tgs"};
  EXPECT_EQ(error_of([&] { check(cmd); }), "(no error)");
}

TEST(Commands, PairsNeedsBothModelsOfACustomPair) {
  pairs_command cmd;
  cmd.production = "resnet50";
  EXPECT_EQ(error_of([&] { check(cmd); }), "--production and --opportunistic go together");
}

TEST(Commands, TimelineCarriesTheControllersPhase) {
  pairs_command cmd;
  cmd.production = "resnet50";
  cmd.opportunistic = "shufflenet";
  cmd.policies = {"tgs", "co-execution"};
  cmd.timeline = true;
  const pairs_outcome out = run_pairs(default_model(), cmd);
  ASSERT_EQ(out.results.size(), 2U);
  std::set<std::string> tgs_phases;
  for (const auto& row : out.timeline) {
    if (row.policy == "tgs") {
      tgs_phases.insert(row.phase);
    } else {
      EXPECT_EQ(row.phase, "") << "co-execution reports no phase";
    }
  }
  // Algorithm 1 profiles after the arrival, then grows the budget in slow start.
  EXPECT_TRUE(tgs_phases.contains("profiling"));
  EXPECT_TRUE(tgs_phases.contains("slow_start"));
  EXPECT_FALSE(tgs_phases.contains(""));
}

TEST(Commands, ClusterRunsAddTheBaselineFirst) {
  mixed_command cmd;
  cmd.cluster.policies = {"tgs"};
  cmd.stream.production_jobs = 3;
  cmd.stream.opportunistic_jobs = 3;
  const cluster_workload w = mixed_workload(default_model(), cmd);
  EXPECT_EQ(w.label, "mixed stream: 3 production + 3 opportunistic jobs on 1x2:a100-40gb");
  EXPECT_EQ(w.jobs.size(), 6U);
  std::vector<std::string> finished;
  cmd.cluster.finished = [&](const cluster_run& r) { finished.push_back(r.result.policy); };
  const auto runs = run_cluster_command(default_model(), w, cmd.cluster);
  ASSERT_EQ(runs.size(), 2U);
  EXPECT_EQ(runs[0].result.policy, baseline_policy());
  EXPECT_EQ(finished, (std::vector<std::string>{baseline_policy(), "tgs"}));
}

TEST(Commands, ReplayNamesAJobTooLargeForTheCluster) {
  traces::trace t;
  t.source = "jobs.csv";
  traces::job_record big;
  big.gpus = 64;
  big.run_time = std::chrono::seconds{60};
  big.source_line = 7;
  t.jobs.push_back(big);
  replay_command cmd;
  cmd.cluster.cluster = "2x8";
  EXPECT_EQ(error_of([&] { check_fits(t, cmd); }),
            "jobs.csv:7: job 0 needs 64 GPUs but --cluster 2x8 has 16");
}

}  // namespace
}  // namespace tgs::sim
