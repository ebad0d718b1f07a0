// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of the memory side on the fake driver: tgs-node's memory policy, the
// interposer's managed-memory conversion and evictor, and fault isolation, with fake training
// jobs as separate processes on one fake device whose memory all of them share.
//
// The device has 1024 MiB and the node a 1024 MiB budget: an opportunistic job holding 704 MiB and
// a production job asking for 576 MiB do not fit together, so the production job gets its memory
// only if the opportunistic job's unified memory really leaves the device first (the control test
// shows that without the memory policy it runs out of memory).
#include <cstdlib>

#include "e2e_support.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;

namespace {

constexpr double mib = 1024.0 * 1024.0;

/// The number after `"key":` in a JSON line, or empty (null or absent).
std::optional<double> json_number(const std::string& line, const std::string& key) {
  const std::size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nullopt;
  const char* start = line.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return v;
}

class MemoryEndToEnd : public EndToEnd {
 protected:
  void SetUp() override {
    EndToEnd::SetUp();
    job_env_ = {"TGS_FAKE_MEMORY_MIB=1024"};
  }

  void start_tgs_node(const std::string& policy = "tgs", const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"--memory-policy", policy, "--memory-budget-mib", "1024"};
    if (policy == "tgs") args.insert(args.end(), {"--memory.tgs.reserve-mib", "64"});
    args.insert(args.end(), extra.begin(), extra.end());
    start_node(args);
  }

  /// A job holding `alloc_mib` MiB beyond its 64 MiB of weights.
  process& start_memory_job(const std::string& cls, int alloc_mib, std::vector<std::string> more = {}) {
    std::vector<std::string> args = cls == "production"
                                        ? std::vector<std::string>{"--kernels", "20", "--blocks", "100", "--host-ms", "2"}
                                        : std::vector<std::string>{"--kernels", "100", "--blocks", "20", "--host-ms", "0"};
    args.insert(args.end(), {"--alloc-mib", std::to_string(alloc_mib)});
    args.insert(args.end(), more.begin(), more.end());
    return start_job(args, cls, true);
  }

  /// The status line of the job of class `cls`, or empty.
  std::string job_line(const std::string& cls) {
    std::istringstream in(status());
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"job\":") != std::string::npos && line.find("\"class\":\"" + cls + "\"") != std::string::npos) {
        return line;
      }
    }
    return "";
  }

  static bool has_event(process& p, const std::string& event) {
    for (const std::string& line : p.stdout_lines()) {
      if (line.find("\"event\":\"" + event + "\"") != std::string::npos) return true;
    }
    return false;
  }
  static int count_events(process& p, const std::string& event) {
    int n = 0;
    for (const std::string& line : p.stdout_lines()) n += line.find("\"event\":\"" + event + "\"") != std::string::npos;
    return n;
  }
  static std::string event_line(process& p, const std::string& event) {
    std::string found;
    for (const std::string& line : p.stdout_lines()) {
      if (line.find("\"event\":\"" + event + "\"") != std::string::npos) found = line;
    }
    return found;
  }

  /// The bytes of managed memory the fake driver holds on the device for `p`, from its latest
  /// progress line (the driver's truth, against which the interposer's accounting is checked).
  static std::optional<double> driver_managed_device_bytes(process& p) {
    const std::vector<std::string>& lines = p.stdout_lines();
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
      if (const auto v = json_number(*it, "managed_device_bytes")) return v;
    }
    return std::nullopt;
  }

  /// Waits until tgs-node's count of `cls`'s resident managed bytes equals what the driver holds
  /// on the device for `p` (both move while the evictor works: they must meet once it is done).
  void expect_accounting_matches_driver(process& p, const std::string& cls) {
    p.drain();
    const bool met = static_cast<bool>(time_until(
        [&] {
          p.drain();
          const auto counted = json_number(job_line(cls), "managed_resident_bytes");
          const auto held = driver_managed_device_bytes(p);
          return counted && held && *counted == *held;
        },
        3s));
    EXPECT_TRUE(met) << "tgs-node counts " << job_line(cls) << "\nthe driver holds "
                     << driver_managed_device_bytes(p).value_or(-1) << " bytes on the device";
  }

  /// Starts an opportunistic job holding 704 MiB and waits until the node counts all of it.
  process& start_big_opportunistic(std::vector<std::string> more = {}) {
    process& opp = start_memory_job("opportunistic", 640, std::move(more));
    wait_until(
        [&] {
          const auto m = json_number(job_line("opportunistic"), "managed_bytes");
          return m && *m >= 704 * mib;
        },
        5s, "the opportunistic job's 704 MiB of managed memory");
    return opp;
  }
};

TEST_F(MemoryEndToEnd, OpportunisticMemoryIsEvictedSoTheProductionJobGetsItsMemoryAndRestoredWhenItLeaves) {
  start_tgs_node();
  process& opp = start_big_opportunistic();
  const std::string before = job_line("opportunistic");
  EXPECT_EQ(json_number(before, "managed_resident_bytes"), 704 * mib) << before;
  EXPECT_EQ(json_number(before, "device_bytes"), 0) << "tgs serves the opportunistic job from unified memory";

  process& prod = start_memory_job("production", 512);
  wait_until([&] { return has_event(prod, "memory") || has_event(prod, "oom"); }, 10s, "production allocation");
  ASSERT_FALSE(has_event(prod, "oom")) << prod.stderr_text();
  std::this_thread::sleep_for(300ms);
  const std::string p = job_line("production");
  const std::string o = job_line("opportunistic");
  std::printf("%s\n%s\n", p.c_str(), o.c_str());
  EXPECT_EQ(json_number(p, "device_bytes"), 576 * mib) << "production memory stays device memory";
  const auto limit = json_number(o, "resident_limit");
  const auto resident = json_number(o, "managed_resident_bytes");
  ASSERT_TRUE(limit && resident) << o;
  EXPECT_EQ(*limit, (1024 - 64 - 576) * mib);
  EXPECT_LE(*resident, *limit);
  EXPECT_GE(json_number(o, "evictions").value_or(0), 1);
  expect_accounting_matches_driver(opp, "opportunistic");
  EXPECT_GT(measure_rate(prod, 1s), 50.0) << "the production job runs";
  // Three seconds, not one: beside a busy production job under the default gap filling, a loaded
  // two-core machine has left the opportunistic job a second without a finished iteration.
  EXPECT_GT(measure_rate(opp, 3s), 0.0) << "the evicted job runs too, from host memory";

  // The production job leaves: its share is reclaimed and the evicted memory comes back.
  prod.kill(SIGKILL);
  prod.wait();
  const auto restored = time_until(
      [&] {
        const std::string line = job_line("opportunistic");
        return count(status(), R"("job":)") == 1 && json_number(line, "managed_resident_bytes") == 704 * mib;
      },
      3s);
  ASSERT_TRUE(restored) << status();
  std::printf("opportunistic memory restored %.2f s after the production job was killed\n", *restored);
  EXPECT_LE(*restored, 1.5);
  EXPECT_GE(json_number(job_line("opportunistic"), "restores").value_or(0), 1);
  expect_accounting_matches_driver(opp, "opportunistic");
}

// The residency plan (tgs::plan_residency): under its limit the opportunistic job keeps its small
// allocations whole and as much of its large one as fits, and a later small allocation is placed
// on the GPU at the cost of the large one's tail. (Evicting newest first, or placing on host
// whatever comes while the job is at its limit, would leave the small ones on host.)
TEST_F(MemoryEndToEnd, SmallAllocationsStayOnTheGpuAndTheLargeOneIsEvictedInPart) {
  // A card larger than the budget, as in a demonstration: the interposer never converts an
  // allocation the card's free memory could not hold (safety), whatever the budget says.
  job_env_ = {"TGS_FAKE_MEMORY_MIB=2048"};
  start_tgs_node();
  process& prod = start_memory_job("production", 512);
  wait_until([&] { return has_event(prod, "memory"); }, 5s, "the production job's memory");
  // Limit: 1024 - 64 (reserve) - 576 = 384 MiB. The job holds 64 MiB of weights, a 640 MiB table,
  // then 32 MiB more after a second.
  process& opp = start_memory_job("opportunistic", 640, {"--chunk-mib", "640", "--late-mib", "32", "--late-at", "1"});
  wait_until([&] { return json_number(job_line("opportunistic"), "managed_bytes") == 704 * mib; }, 5s,
             "the weights and the table");
  std::string o = job_line("opportunistic");
  EXPECT_EQ(json_number(o, "resident_limit"), 384 * mib) << o;
  EXPECT_EQ(json_number(o, "managed_resident_bytes"), 384 * mib) << "the weights and 320 MiB of the table" << o;
  EXPECT_EQ(json_number(o, "host_placed_bytes"), 320 * mib) << o;

  wait_until(
      [&] {
        o = job_line("opportunistic");
        return json_number(o, "managed_bytes") == 736 * mib && json_number(o, "evicted_bytes_total") == 32 * mib &&
               json_number(o, "managed_resident_bytes") == 384 * mib;
      },
      3s, "the late 32 MiB on the GPU, the table's last 32 MiB evicted");
  EXPECT_EQ(json_number(o, "host_placed_bytes"), 320 * mib) << "the late allocation was placed on the GPU" << o;
  EXPECT_EQ(json_number(o, "evictions"), 1) << o;
  expect_accounting_matches_driver(opp, "opportunistic");
  EXPECT_GT(measure_rate(opp, 1s), 0.0);
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
}

TEST_F(MemoryEndToEnd, WithoutAMemoryPolicyTheProductionJobRunsOutOfMemory) {
  // The control for the test above: the same jobs with the memory policy off.
  start_node();
  start_memory_job("opportunistic", 640);
  std::this_thread::sleep_for(1s);
  process& prod = start_memory_job("production", 512);
  EXPECT_EQ(prod.wait(), 3) << prod.stderr_text();
  EXPECT_TRUE(has_event(prod, "oom"));
}

/// The latest `held_device_bytes` list of `p`'s progress lines (bytes of each --alloc-mib
/// allocation on the device, as the fake driver holds them), in MiB; empty before the first.
std::vector<double> held_device_mib(process& p) {
  p.drain();
  const std::vector<std::string>& lines = p.stdout_lines();
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::size_t at = it->find("\"held_device_bytes\":[");
    if (at == std::string::npos) continue;
    std::vector<double> out;
    const char* c = it->c_str() + at + 21;
    while (*c != ']' && *c != '\0') {
      char* end = nullptr;
      out.push_back(std::strtod(c, &end) / mib);
      if (end == c) break;
      c = *end == ',' ? end + 1 : end;
    }
    return out;
  }
  return {};
}

// tgs-node --residency-split: an opportunistic job with two equal tables over its limit keeps the
// older table whole and the newer on host (in-order, the default), or the same prefix of each
// (even). Both keep the same bytes on the GPU; the driver shows which.
class ResidencySplitEndToEnd : public MemoryEndToEnd {
 protected:
  void expect_tables_on_device(const std::string& split, const std::vector<double>& expected) {
    job_env_ = {"TGS_FAKE_MEMORY_MIB=2048"};
    start_tgs_node("tgs", {"--residency-split", split});
    process& prod = start_memory_job("production", 512);
    wait_until([&] { return has_event(prod, "memory"); }, 5s, "the production job's memory");
    // Limit: 1024 - 64 (reserve) - 576 = 384 MiB: the 64 MiB of weights and 320 MiB of tables.
    process& opp = start_memory_job("opportunistic", 640, {"--chunk-mib", "320"});
    // Its memory line right after its allocations returned: already within its limit (a table
    // that displaces part of an older one is placed only once that part is on host).
    wait_until([&] { return count_events(opp, "memory") >= 2; }, 5s, "the opportunistic job's tables");
    const std::string after_alloc = event_line(opp, "memory");
    EXPECT_LE(json_number(after_alloc, "managed_device_bytes").value_or(1e18), 384 * mib) << after_alloc;
    const bool met = static_cast<bool>(time_until([&] { return held_device_mib(opp) == expected; }, 5s));
    const std::vector<double> got = held_device_mib(opp);
    EXPECT_TRUE(met) << "tables on the device (MiB): " << (got.empty() ? -1 : got[0]) << ", "
                     << (got.size() < 2 ? -1 : got[1]) << "\n" << status();
    EXPECT_NE(status().find("\"residency_split\":\"" + split + "\""), std::string::npos) << status();
    EXPECT_EQ(json_number(job_line("opportunistic"), "managed_resident_bytes"), 384 * mib);
    expect_accounting_matches_driver(opp, "opportunistic");
  }
};

TEST_F(ResidencySplitEndToEnd, InOrderKeepsTheOlderTableWhole) { expect_tables_on_device("in-order", {320, 0}); }

TEST_F(ResidencySplitEndToEnd, EvenKeepsTheSamePrefixOfEachTable) { expect_tables_on_device("even", {160, 160}); }

TEST_F(MemoryEndToEnd, JobsSeeTheirBudgetAsTheDevicesMemory) {
  job_env_ = {"TGS_FAKE_MEMORY_MIB=4096"};
  start_tgs_node();
  process& prod = start_memory_job("production", 128);
  // Two reports: after its weights, and after its 128 MiB.
  wait_until([&] { return count_events(prod, "memory") >= 2; }, 5s, "the production job's memory reports");
  const std::string line = event_line(prod, "memory");
  EXPECT_EQ(json_number(line, "total_mib"), 1024) << line;
  EXPECT_EQ(json_number(line, "device_total_mib"), 1024) << line;
  EXPECT_LE(json_number(line, "free_mib").value_or(1e9), 1024 - 192) << line;
}

TEST_F(MemoryEndToEnd, HardLimitFailsAnAllocationBeyondTheLimitWithOutOfMemory) {
  start_tgs_node("hard-limit",
                 {"--memory.hard-limit.opportunistic-limit-mib", "256", "--memory.hard-limit.production-limit-mib", "768"});
  process& prod = start_memory_job("production", 256);
  process& opp = start_memory_job("opportunistic", 512);
  EXPECT_EQ(opp.wait(), 3) << opp.stderr_text();
  EXPECT_NE(opp.stderr_text().find("out of memory: tgs-node's memory policy refused"), std::string::npos)
      << opp.stderr_text();
  const auto reclaimed = time_until([&] { return count(status(), R"("job":)") == 1; }, 3s);
  ASSERT_TRUE(reclaimed) << status();
  EXPECT_LE(*reclaimed, 1.0);
  EXPECT_GT(measure_rate(prod, 1s), 50.0) << "the production job is not touched";
  EXPECT_FALSE(has_event(prod, "oom"));
}

/// How the production job dies in the fault-isolation tests.
class ProductionFault : public MemoryEndToEnd, public ::testing::WithParamInterface<std::string> {};

TEST_P(ProductionFault, TheOpportunisticJobRunsOnAndGetsItsMemoryBack) {
  start_tgs_node();
  process& opp = start_big_opportunistic();
  process& prod = start_memory_job("production", 512, {"--fail-at", "1.5", "--fail", GetParam()});
  wait_until([&] { return has_event(prod, "memory"); }, 10s, "production allocation");
  wait_until([&] { return json_number(job_line("opportunistic"), "evictions").value_or(0) >= 1; }, 5s, "eviction");
  const int status_code = prod.wait();
  EXPECT_NE(status_code, 0);
  const auto reclaimed = time_until(
      [&] {
        const std::string s = status();
        return count(s, R"("job":)") == 1 && count(s, R"("opportunistic_resident_limit":null)") == 1;
      },
      3s);
  ASSERT_TRUE(reclaimed) << status();
  EXPECT_LE(*reclaimed, 1.0);
  wait_until([&] { return json_number(job_line("opportunistic"), "managed_resident_bytes") == 704 * mib; }, 3s,
             "the evicted memory restored");
  EXPECT_GT(measure_rate(opp, 1s), 5.0) << "the opportunistic job keeps running";
}

INSTANTIATE_TEST_SUITE_P(SegfaultAbortOrOutOfMemory, ProductionFault, ::testing::Values("segv", "abort", "oom"));

/// How the opportunistic job dies.
class OpportunisticFault : public MemoryEndToEnd, public ::testing::WithParamInterface<std::string> {};

TEST_P(OpportunisticFault, TheProductionJobRunsOnAndTheBudgetIsReclaimed) {
  start_tgs_node();
  process& prod = start_memory_job("production", 256);
  process& opp = start_memory_job("opportunistic", 512, {"--fail-at", "1.5", "--fail", GetParam()});
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
  EXPECT_NE(opp.wait(), 0);
  const auto reclaimed = time_until([&] { return count(status(), R"("job":)") == 1; }, 3s);
  ASSERT_TRUE(reclaimed) << status();
  EXPECT_LE(*reclaimed, 1.0);
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  // All of the budget but the production job's own memory is free for it again.
  process& late = start_memory_job("opportunistic", 640);
  wait_until([&] { return has_event(late, "memory") || has_event(late, "oom"); }, 5s, "a new opportunistic job");
  EXPECT_FALSE(has_event(late, "oom")) << late.stderr_text();
}

INSTANTIATE_TEST_SUITE_P(SegfaultAbortOrOutOfMemory, OpportunisticFault, ::testing::Values("segv", "abort", "oom"));

}  // namespace
