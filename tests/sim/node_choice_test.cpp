// SPDX-License-Identifier: Apache-2.0
// tgs-node's choice of mechanism as `tgs-sim pairs` predicts it: each pair's choice follows its
// facts, every measured pair gets one in every output, and the verdict is tgs::mechanism_choice's.
#include "tgs/sim/node_choice.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include "sim_test_support.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/sim/report.hpp"

namespace tgs::sim {
namespace {

using namespace std::chrono_literals;
using testing::default_model;
using testing::error_of;

/// The default model with the two facts of a production and an opportunistic model set (empty:
/// unmeasured), as if job_facts.csv said so.
calibrated_model with_facts(const std::string& gpu, const std::string& production,
                            std::optional<double> wait, const std::string& opportunistic,
                            std::optional<duration> longest_span) {
  calibrated_model m = default_model();
  for (model_profile& p : m.data.models) {
    if (p.gpu != gpu) continue;
    if (p.model == production) p.production_gpu_wait = wait;
    if (p.model == opportunistic) p.opportunistic_longest_span = longest_span;
  }
  return m;
}

/// `tgs-sim pairs --gpu GPU --production P --opportunistic O --policies priority-share`.
pairs_command custom_pair(const std::string& gpu, const std::string& production,
                          const std::string& opportunistic) {
  pairs_command cmd;
  cmd.gpu = gpu;
  cmd.production = production;
  cmd.opportunistic = opportunistic;
  cmd.policies = {"priority-share"};
  return cmd;
}

/// The same, with the operator's `--mechanism-choice.gpu-bound-wait 0.25`: a host-bound production
/// job gets no MPS co-runner.
pairs_command custom_pair_gpu_bound_only(const std::string& gpu, const std::string& production,
                                         const std::string& opportunistic) {
  pairs_command cmd = custom_pair(gpu, production, opportunistic);
  cmd.choice.gpu_bound_wait = 0.25;
  return cmd;
}

/// The choice of `r`'s pair under `p`; a test failure, and a choice of nothing, without one.
const node_choice& under(const pair_result& r, mechanism_preference p) {
  static const node_choice none{};
  const node_choice* c = r.node ? r.node->under(p) : nullptr;
  if (c == nullptr) ADD_FAILURE() << r.request.scenario << ": no choice under " << to_string(p);
  return c != nullptr ? *c : none;
}

mechanism_verdict verdict(opportunistic_mechanism m, choice_reason why) {
  return {m, why};
}

/// `auto`'s verdict on one custom pair with `m`'s facts and the node's default thresholds.
mechanism_verdict auto_verdict(const calibrated_model& m, const std::string& gpu,
                               const std::string& production, const std::string& opportunistic) {
  const pairs_outcome out = run_pairs(m, custom_pair(gpu, production, opportunistic));
  return under(out.results.at(0), mechanism_preference::automatic).verdict;
}

TEST(NodeChoice, AGpuBoundProductionBesideShortKernelsIsAnMpsClientUnderPriorityShare) {
  // ResNet-50 b256's measured wait (0.51 of its time) beside a co-runner whose kernels are short.
  const calibrated_model m =
      with_facts("h200-141gb", "resnet50-b256", 0.514, "shufflenet-b128", 3ms);
  const pairs_outcome out =
      run_pairs(m, custom_pair("h200-141gb", "resnet50-b256", "shufflenet-b128"));
  const pair_result& r = out.results.at(0);
  const node_choice& c = under(r, mechanism_preference::automatic);
  EXPECT_EQ(c.verdict, verdict(opportunistic_mechanism::mps_client, choice_reason::measured_safe));
  EXPECT_TRUE(r.node->unmeasured.empty());
  // An MPS client is the pair under priority-share, as the policy's own cell.
  EXPECT_DOUBLE_EQ(c.production, r.outcome.production);
  EXPECT_DOUBLE_EQ(c.opportunistic, r.outcome.opportunistic);
  ASSERT_TRUE(c.production_se && c.opportunistic_se);
  EXPECT_DOUBLE_EQ(*c.opportunistic_se, *r.opportunistic_se);
}

TEST(NodeChoice, AHostBoundProductionIsATimeSlicedContextUnderTheSameCapWhereTheOperatorAsks) {
  // MobileNet v2's measured wait (0.015): by default its co-runner is an MPS client as any other ...
  const calibrated_model m = with_facts("h200-141gb", "mobilenet", 0.015, "shufflenet", 3ms);
  EXPECT_EQ(auto_verdict(m, "h200-141gb", "mobilenet", "shufflenet"),
            verdict(opportunistic_mechanism::mps_client, choice_reason::measured_safe));
  // ... and far below a threshold the operator sets.
  const pairs_outcome out = run_pairs(m, custom_pair_gpu_bound_only("h200-141gb", "mobilenet", "shufflenet"));
  const pair_result& r = out.results.at(0);
  const node_choice& c = under(r, mechanism_preference::automatic);
  EXPECT_EQ(c.verdict,
            verdict(opportunistic_mechanism::time_sliced, choice_reason::production_host_bound));
  // Its cell is priority-share's cap on a context of its own, not the MPS client's.
  const pair_request own = request_under(r.request, opportunistic_mechanism::time_sliced,
                                         m.data.find_gpu("h200-141gb")->memory);
  EXPECT_TRUE(own.opportunistic_time_sliced);
  EXPECT_EQ(own.policy, node_choice_policy);
  const pair_result in_own_context = run_pair_request(m.data, own, {});
  EXPECT_DOUBLE_EQ(c.production, in_own_context.outcome.production);
  EXPECT_DOUBLE_EQ(c.opportunistic, in_own_context.outcome.opportunistic);
  EXPECT_NE(c.opportunistic, r.outcome.opportunistic)
      << "time slicing shares otherwise than an MPS client";
  // Under the node's default preference the same pair is an MPS client, whatever its facts.
  EXPECT_EQ(under(r, mechanism_preference::mps).verdict,
            verdict(opportunistic_mechanism::mps_client, choice_reason::operator_mps));
  EXPECT_DOUBLE_EQ(under(r, mechanism_preference::mps).opportunistic, r.outcome.opportunistic);
}

TEST(NodeChoice, AnOpportunisticJobWithLongKernelsIsTimeSliced) {
  const calibrated_model m = with_facts("h200-141gb", "resnet50-b256", 0.438, "shufflenet-b128", 259ms);
  EXPECT_EQ(auto_verdict(m, "h200-141gb", "resnet50-b256", "shufflenet-b128"),
            verdict(opportunistic_mechanism::time_sliced, choice_reason::long_kernels));
}

TEST(NodeChoice, TheHighPairOnItsMeasuredFactsIsAnMpsClient) {
  // The H200 high pair as measured (sim/data/job_facts.csv): ResNet-50 b256 waits 0.44 of its
  // time, ShuffleNet b128's longest kernel span is 12.8 ms.
  pairs_command cmd;
  cmd.gpu = "h200-141gb";
  const pairs_outcome out = run_pairs(default_model(), cmd);
  std::size_t high = 0;
  for (const pair_result& r : out.results) {
    if (r.request.production_model != "resnet50-b256" ||
        r.request.opportunistic_model != "shufflenet-b128") {
      continue;
    }
    ++high;
    EXPECT_EQ(under(r, mechanism_preference::automatic).verdict,
              verdict(opportunistic_mechanism::mps_client, choice_reason::measured_safe));
    ASSERT_TRUE(r.node->facts.production_gpu_wait && r.node->facts.longest_kernel);
    EXPECT_DOUBLE_EQ(*r.node->facts.production_gpu_wait, 0.438);
    EXPECT_NEAR(to_seconds(*r.node->facts.longest_kernel), 0.01283, 1e-9);
    EXPECT_TRUE(r.node->unmeasured.empty());
  }
  EXPECT_GE(high, 2U);
}

TEST(NodeChoice, AFactNeverMeasuredIsPassedEmptyAndTheChoiceTakesItsSafeSide) {
  // Nothing measured on the A100: the first rule that needs a fact stops at the kernels.
  pairs_command a100;
  const pairs_outcome paper = run_pairs(default_model(), a100);
  const pair_result& low = paper.results.at(0);
  ASSERT_EQ(low.request.scenario, "low-contention");
  EXPECT_EQ(under(low, mechanism_preference::automatic).verdict,
            verdict(opportunistic_mechanism::time_sliced, choice_reason::kernels_unmeasured));
  EXPECT_FALSE(low.node->facts.production_gpu_wait);
  EXPECT_FALSE(low.node->facts.longest_kernel);
  EXPECT_EQ(low.node->unmeasured,
            (std::vector<std::string_view>{production_gpu_wait_fact, longest_span_fact}));
  // Kernels known short, the production job's wait not measured on the H100: the wait decides
  // only where the operator set a threshold.
  const calibrated_model m =
      with_facts("h100-80gb", "resnet50-b256", std::nullopt, "shufflenet-b128", 3ms);
  EXPECT_EQ(auto_verdict(m, "h100-80gb", "resnet50-b256", "shufflenet-b128"),
            verdict(opportunistic_mechanism::mps_client, choice_reason::measured_safe));
  const pairs_outcome h100 =
      run_pairs(m, custom_pair_gpu_bound_only("h100-80gb", "resnet50-b256", "shufflenet-b128"));
  const pair_result& r = h100.results.at(0);
  EXPECT_EQ(under(r, mechanism_preference::automatic).verdict,
            verdict(opportunistic_mechanism::time_sliced, choice_reason::production_unmeasured));
  EXPECT_EQ(r.node->unmeasured, (std::vector<std::string_view>{production_gpu_wait_fact}));
  // The table says which facts were never measured, and of which jobs.
  const std::string table = render_pairs(h100.results, output_format::table);
  EXPECT_NE(table.find("passed empty as tgs-node would"), std::string::npos) << table;
  EXPECT_NE(table.find("h100-80gb: production_gpu_wait of resnet50-b256"), std::string::npos)
      << table;
}

TEST(NodeChoice, MemoryBeyondTheBudgetIsTimeSliced) {
  // The paper's DLRM (36 GiB) beside ResNet-50 (11 GiB) on a 40 GiB A100.
  pairs_command a100;
  std::size_t cells = 0;
  for (const pair_result& r : run_pairs(default_model(), a100).results) {
    if (r.request.scenario != "memory-oversubscribed") continue;
    ++cells;
    EXPECT_EQ(under(r, mechanism_preference::automatic).verdict,
              verdict(opportunistic_mechanism::time_sliced, choice_reason::memory_oversubscribed));
  }
  EXPECT_EQ(cells, 4U) << "the paper's four policies";
  // The capacity is the budget the pair runs under: the H200 high pair beside a 10 GiB budget.
  pairs_command cmd = custom_pair("h200-141gb", "resnet50-b256", "shufflenet-b128");
  cmd.memory_budget_gib = 10;
  const pair_result r = run_pairs(default_model(), cmd).results.at(0);
  EXPECT_EQ(under(r, mechanism_preference::automatic).verdict,
            verdict(opportunistic_mechanism::time_sliced, choice_reason::memory_oversubscribed));
  ASSERT_TRUE(r.node->facts.capacity);
  EXPECT_EQ(*r.node->facts.capacity, from_gib(10));
}

/// The table's pair groups: each label line (or the label of a row) and the lines up to the next.
std::vector<std::pair<std::string, std::vector<std::string>>> groups_of(const std::string& table) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line) && !line.empty()) {
    // A label starts its line, alone or before its first row; scenario names hold no ')'.
    if (line.front() != ' ') out.push_back({line.substr(0, line.find(')') + 1), {}});
    if (!out.empty()) out.back().second.push_back(line);
  }
  return out;
}

TEST(NodeChoice, PairsPrintsTheChoiceForEveryMeasuredPairInEveryFormat) {
  for (const char* gpu : {"a100-40gb", "h100-80gb", "h200-141gb"}) {
    pairs_command cmd;
    cmd.gpu = gpu;
    const pairs_outcome out = run_pairs(default_model(), cmd);
    std::set<std::string> pairs;
    std::size_t with_opportunistic = 0;
    for (const pair_result& r : out.results) {
      if (r.request.opportunistic_model.empty()) continue;
      ++with_opportunistic;
      pairs.insert(r.request.scenario + " (" + r.request.production_model + "/" +
                   r.request.opportunistic_model + ")");
      ASSERT_TRUE(r.node) << gpu << " " << r.request.scenario;
      for (const mechanism_preference p : node_preferences) EXPECT_NE(r.node->under(p), nullptr);
    }
    ASSERT_GT(with_opportunistic, 0U) << gpu;
    // Table: every pair's group has a line per preference naming the mechanism and its reason.
    const auto groups = groups_of(render_pairs(out.results, output_format::table));
    std::set<std::string> seen;
    for (const auto& [label, lines] : groups) {
      seen.insert(label);
      for (const mechanism_preference p : node_preferences) {
        const std::string tag = "node: " + std::string(to_string(p));
        const bool found = std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
          return l.find(tag) != std::string::npos &&
                 (l.find(" time-sliced (") != std::string::npos ||
                  l.find(" mps-client (") != std::string::npos);
        });
        EXPECT_TRUE(found) << gpu << ": " << label << " has no line " << tag;
      }
    }
    for (const std::string& p : pairs) EXPECT_TRUE(seen.count(p)) << gpu << ": no group " << p;
    // JSON: one record per line, each with its pair's choices.
    std::istringstream json(render_pairs(out.results, output_format::json));
    std::size_t records = 0;
    std::size_t chosen = 0;
    for (std::string line; std::getline(json, line);) {
      if (line.find("\"scenario\"") == std::string::npos) continue;
      ++records;
      if (line.find("\"opportunistic_model\":\"\"") != std::string::npos) {
        EXPECT_NE(line.find("\"node_choice\":null"), std::string::npos) << line;
        continue;
      }
      ++chosen;
      EXPECT_NE(line.find("\"node_choice\":{\"facts\":{"), std::string::npos) << line;
      EXPECT_NE(line.find("\"auto\":{\"mechanism\":\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"mps\":{\"mechanism\":\"mps-client\",\"reason\":\"operator-mps\""),
                std::string::npos)
          << line;
    }
    EXPECT_EQ(records, out.results.size());
    EXPECT_EQ(chosen, with_opportunistic);
    // CSV: the choices before `extrapolated`, which stays last.
    const std::string csv = render_pairs(out.results, output_format::csv);
    EXPECT_NE(
        csv.find(
            ",node_auto_mechanism,node_auto_reason,node_auto_production,node_auto_opportunistic,"
            "node_mps_mechanism,node_mps_reason,node_mps_production,node_mps_opportunistic,"
            "node_unmeasured,extrapolated\n"),
        std::string::npos);
    EXPECT_NE(csv.find(",mps-client,operator-mps,"), std::string::npos);
  }
}

TEST(NodeChoice, TheMarkdownTableHasARowPerPairAndBudget) {
  pairs_command cmd;
  cmd.gpu = "h200-141gb";
  const std::string md = render_node_choices(run_pairs(default_model(), cmd).results);
  EXPECT_NE(md.find("| h200-141gb | resnet50-b256 / shufflenet-b128 | 141.0 GiB | mps-client "
                    "(measured-safe) | "),
            std::string::npos)
      << md;
  // The memory pair ran with and without a budget: a row for each.
  EXPECT_NE(md.find("| resnet50-b128 / dlrm | 14.9 GiB | time-sliced (memory-oversubscribed) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| resnet50-b128 / dlrm | 141.0 GiB | time-sliced (kernels-unmeasured) |"),
            std::string::npos)
      << md;
  EXPECT_EQ(
      md.find("resnet50-b256 / shufflenet-b128", md.find("resnet50-b256 / shufflenet-b128") + 1),
      std::string::npos)
      << "one row for the pair its four scenarios measured";
}

TEST(NodeChoice, TheVerdictIsTgsMechanismChoicesOwnWithTheNodesSettings) {
  // The thresholds are tgs-node's settings table, not a copy.
  static_assert(std::is_same_v<decltype(pairs_command::choice), mechanism_choice::config>);
  for (const double wait : {0.0, 0.25, 0.4, 0.6}) {
    for (const duration long_kernel : {duration{10ms}, duration{100ms}, duration{1s}}) {
      pairs_command cmd;
      cmd.gpu = "h200-141gb";
      cmd.choice.gpu_bound_wait = wait;
      cmd.choice.long_kernel = long_kernel;
      const mechanism_choice node{cmd.choice};
      for (const pair_result& r : run_pairs(default_model(), cmd).results) {
        if (!r.node) continue;
        for (const node_choice& c : r.node->choices) {
          choice_facts f = r.node->facts;
          f.preference = c.preference;
          EXPECT_EQ(c.verdict, node.step(f))
              << r.request.scenario << " under " << to_string(c.preference);
        }
        if (r.request.production_model == "resnet50-b256" &&
            r.request.opportunistic_model == "shufflenet-b128") {
          // 12.8 ms kernels are long against a 10 ms threshold only; a wait of 0.44 is below a
          // threshold of 0.6 only.
          const choice_reason want = long_kernel <= 12828us ? choice_reason::long_kernels
                                     : wait <= 0.438        ? choice_reason::measured_safe
                                                            : choice_reason::production_host_bound;
          EXPECT_EQ(under(r, mechanism_preference::automatic).verdict.reason, want) << wait;
        }
      }
    }
  }
  pairs_command bad;
  bad.choice.long_kernel = duration::zero();
  EXPECT_EQ(error_of([&] {
              (void)run_pairs(default_model(), bad);
            }).rfind("mechanism_choice: long_kernel must be positive", 0),
            0U);
}

TEST(NodeChoice, TheProfilesShowTheMeasuredFactsWithTheirSources) {
  const std::string json = render_profiles(default_model().data, output_format::json);
  EXPECT_NE(json.find("\"production_gpu_wait\":0.438,\"production_gpu_wait_source\":\"docs/results/"
                      "mechanism-choice.json production_host_wait_alone: median of 7 runs"),
            std::string::npos);
  EXPECT_NE(
      json.find(
          "\"opportunistic_longest_span_ms\":12.83,\"opportunistic_longest_span_source\":\"docs/"
          "results/mechanism-choice.json"),
      std::string::npos);
  EXPECT_NE(json.find("\"production_gpu_wait\":null,\"production_gpu_wait_source\":null"),
            std::string::npos);
}

TEST(NodeChoice, HeldIsTheProductionJobAlone) {
  // The node holds a job that hurt production under both mechanisms; the simulator's facts never
  // say so, but the request for such a verdict runs production alone.
  const pair_request r{"custom", "h200-141gb", "resnet50-b256", "shufflenet-b128", "tgs"};
  const pair_request held = request_under(r, opportunistic_mechanism::held, from_gib(141));
  EXPECT_TRUE(held.opportunistic_model.empty());
  const pair_result out = run_pair_request(default_model().data, held, {});
  EXPECT_EQ(out.outcome.opportunistic, 0.0);
  EXPECT_GT(out.outcome.production, 0.9);
}

}  // namespace
}  // namespace tgs::sim
