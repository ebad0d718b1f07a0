// SPDX-License-Identifier: Apache-2.0
// End-to-end tests on the fake driver: tgs-node and fake training jobs under the interposer, as
// separate processes. Timing bounds are the issue's (>= 0.95 of standalone, reclaim within 1 s);
// the controller's windows are shortened through its flags so a test takes seconds.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "e2e_support.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;

namespace {

/// The status line of GPU `gpu` (not a job's), parsed; an empty object when there is none.
nlohmann::json gpu_line(const std::string& status, unsigned gpu) {
  std::istringstream in(status);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("gpu") && !j.contains("job") && j["gpu"] == gpu) return j;
  }
  return nlohmann::json::object();
}

}  // namespace

TEST_F(EndToEnd, ProductionKeepsItsThroughputWhileTheOpportunisticJobUsesTheRest) {
  start_steady_node();
  process& prod = start_production();
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 3s);
  ASSERT_GT(alone, 50.0) << "the production job barely ran alone";

  process& opp = start_opportunistic();
  std::this_thread::sleep_for(steady_settle);
  opp.drain();
  const std::size_t opp_first = opp.progress_lines().size();
  const double shared = measure_rate(prod, 4s);
  const std::vector<progress>& o = opp.progress_lines();
  ASSERT_GE(o.size(), opp_first + 2);
  const double opp_rate = static_cast<double>(o.back().iterations - o[opp_first].iterations) /
                          (o.back().t - o[opp_first].t);
  const std::string s = status();
  RecordProperty("production_alone", std::to_string(alone));
  RecordProperty("production_shared", std::to_string(shared));
  RecordProperty("opportunistic_shared", std::to_string(opp_rate));
  std::printf("production alone %.1f it/s, shared %.1f it/s (%.3f); opportunistic %.1f it/s\n%s", alone, shared,
              shared / alone, opp_rate, s.c_str());
  EXPECT_GE(shared, 0.95 * alone);
  EXPECT_GT(opp_rate, 5.0) << "the opportunistic job should use what the production job leaves";
  // The node really throttled it (no throttling would also leave the opportunistic job running).
  EXPECT_EQ(count(s, R"("class":"opportunistic")"), 1) << s;
  EXPECT_EQ(count(s, R"("throttled_s":0.0,)"), 1) << "only the production job should never wait\n" << s;
  // The status shows the controller's own account of its state: its estimate of the production
  // job's rate and the rate it last compared with it; the fake job is steady, so that rate lies
  // near R.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      s, m, std::regex(R"re("max_rate_blocks_per_s":([0-9.e+]+),"sample_blocks_per_s":([0-9.e+]+))re")))
      << s;
  const double r = std::stod(m[1].str());
  EXPECT_GT(r, 0.0);
  EXPECT_NEAR(std::stod(m[2].str()) / r, 1.0, 0.5) << s;
  // The operator's text names the same numbers.
  const std::string text = status(false);
  EXPECT_TRUE(std::regex_search(text, std::regex(R"re(max_rate_blocks_per_s [0-9.e+]+, sample_blocks_per_s [0-9.e+]+)re")))
      << text;
}

TEST_F(EndToEnd, KillingTheOpportunisticJobLeavesProductionRunningAndReclaimsWithinASecond) {
  start_node();
  process& prod = start_production();
  process& opp = start_opportunistic();
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
  std::this_thread::sleep_for(1s);
  opp.kill(SIGKILL);
  opp.wait();
  const auto reclaimed = time_until([&] { return count(status(), R"("job":)") == 1; }, 3s);
  ASSERT_TRUE(reclaimed) << status();
  EXPECT_LE(*reclaimed, 1.0);
  EXPECT_GT(measure_rate(prod, 1s), 50.0) << "the production job must keep running";
}

TEST_F(EndToEnd, KillingTheProductionJobGivesTheOpportunisticJobTheGpu) {
  start_node();
  process& opp = start_opportunistic();
  std::this_thread::sleep_for(1s);
  const double opp_alone = measure_rate(opp, 2s);
  process& prod = start_production();
  std::this_thread::sleep_for(2s);
  const double opp_shared = measure_rate(opp, 1s);
  prod.kill(SIGKILL);
  prod.wait();
  const auto reclaimed = time_until(
      [&] {
        const std::string s = status();
        return count(s, R"("job":)") == 1 && count(s, R"("budget_blocks":null)") >= 1;
      },
      3s);
  ASSERT_TRUE(reclaimed) << status();
  EXPECT_LE(*reclaimed, 1.0);
  std::this_thread::sleep_for(500ms);
  const double opp_after = measure_rate(opp, 2s);
  std::printf("opportunistic alone %.1f, shared %.1f, after the production job died %.1f it/s\n", opp_alone,
              opp_shared, opp_after);
  EXPECT_GE(opp_after, 0.8 * opp_alone);
  // The default fault policy (separate contexts) handled the death and ended nothing else.
  EXPECT_TRUE(opp.running());
  const nlohmann::json gpu = gpu_line(status(), 0);
  EXPECT_EQ(gpu.value("fault_policy", ""), "separate-contexts") << gpu;
  EXPECT_EQ(gpu.value("faults_handled", -1), 1) << gpu;
  EXPECT_EQ(gpu.value("co_runners_ended", -1), 0) << gpu;
}

TEST_F(EndToEnd, RestartingTheNodeDoesNotStopRunningJobs) {
  start_node();
  process& prod = start_production();
  process& opp = start_opportunistic();
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
  node_->kill(SIGKILL);
  node_->wait();
  // Without a node both jobs run on (the opportunistic one unthrottled).
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  EXPECT_GT(measure_rate(opp, 1s), 5.0);
  start_node();
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 3s, "both jobs registering again");
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  EXPECT_GT(measure_rate(opp, 1s), 0.0);
  EXPECT_EQ(count(prod.stderr_text(), "lost tgs-node"), 1) << prod.stderr_text();
}

TEST_F(EndToEnd, WithoutANodeJobsRunUnthrottledAndSaySoOnce) {
  process& plain = start_production(false);
  std::this_thread::sleep_for(500ms);
  const double without = measure_rate(plain, 2s);
  plain.kill(SIGKILL);
  plain.wait();
  process& interposed = start_production(true);
  std::this_thread::sleep_for(500ms);
  const double with = measure_rate(interposed, 2s);
  EXPECT_GE(with, 0.9 * without) << "with " << with << " without " << without;
  EXPECT_EQ(count(interposed.stderr_text(), "tgs-node not reachable"), 1) << interposed.stderr_text();
}

TEST_F(EndToEnd, GraphLaunchesCountTheirBlocksAndAreThrottledLikeKernels) {
  // Both jobs launch one CUDA graph per iteration instead of kernels: the production job's
  // blocks must reach the controller (counted at instantiation) and the opportunistic job's
  // graphs must pass the same gate, or the production job would lose its throughput.
  start_steady_node();
  process& prod = start_job({"--graph", "--kernels", "20", "--blocks", "100", "--host-ms", "2"}, "production", true);
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 3s);
  ASSERT_GT(alone, 50.0) << prod.stderr_text();
  const std::string s_alone = status();
  // 20 kernels x 100 blocks per iteration: the node sees the blocks, not one block-less launch.
  const std::size_t at = s_alone.find(R"("blocks_per_s":)");
  ASSERT_NE(at, std::string::npos) << s_alone;
  const double blocks_per_s = std::strtod(s_alone.c_str() + at + 15, nullptr);
  EXPECT_GT(blocks_per_s, 0.5 * alone * 2000) << s_alone;

  process& opp = start_job({"--graph", "--kernels", "100", "--blocks", "20", "--host-ms", "0"}, "opportunistic", true);
  std::this_thread::sleep_for(steady_settle);
  const double shared = measure_rate(prod, 4s);
  const double opp_rate = measure_rate(opp, 1s);
  std::printf("graphs: production alone %.1f it/s, shared %.1f (%.3f); opportunistic %.1f it/s\n", alone, shared,
              shared / alone, opp_rate);
  EXPECT_GE(shared, 0.95 * alone);
  EXPECT_GT(opp_rate, 1.0) << "the opportunistic job should use what the production job leaves";
}

TEST_F(EndToEnd, AWindowedJobCanStillCaptureAGraph) {
  // PyTorch makes its CUDA graphs by stream capture: a launch into a capturing stream becomes a
  // node, and nothing runs. The launch window must leave such launches alone: an event recorded
  // in a capture cannot be waited for, and the fake (like a strict driver) then invalidates the
  // capture, so the job could not build its graph. Its graph launches are windowed as usual.
  start_node({"--policy", "co-execution", "--max-inflight-launches", "2"});
  process& opp =
      start_job({"--graph", "--capture", "--kernels", "16", "--blocks", "20", "--host-ms", "0"}, "opportunistic", true);
  std::this_thread::sleep_for(1s);
  const double rate = measure_rate(opp, 1s);
  EXPECT_GT(rate, 5.0) << "the captured graph should run\n" << opp.stderr_text();
  const std::string s = status();
  EXPECT_EQ(count(s, R"("max_inflight_launches":2)"), 1) << s;
  EXPECT_EQ(count(s, R"("window_timeouts":0,)"), 1) << s;
}

TEST_F(EndToEnd, AFixedShareHoldsTheOpportunisticJobToItsBudgetWhateverTheProductionJobDoes) {
  // --policy token-bucket --token-bucket.budget-blocks: the static share the GPU memory scenarios sweep
  // to map what each opportunistic rate costs the production job. The opportunistic job launches
  // 100 kernels x 20 blocks per iteration, so B blocks per 50 ms allow at most B / 100 it/s.
  auto opportunistic_rate = [&](const char* budget_blocks) {
    start_node({"--policy", "token-bucket", "--token-bucket.budget-blocks", budget_blocks,
                "--token-bucket.budget-window-ms", "50"});
    process& prod = start_production();
    process& opp = start_opportunistic();
    wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
    std::this_thread::sleep_for(1s);
    const double rate = measure_rate(opp, 3s);
    const std::string s = status();
    EXPECT_EQ(count(s, std::string(R"("budget_blocks":)") + budget_blocks), 3)
        << "the GPU, its controller's state and the job\n" << s;
    opp.kill(SIGKILL);
    prod.kill(SIGKILL);
    opp.wait();
    prod.wait();
    return rate;
  };
  const double small = opportunistic_rate("1000");   // at most 10 it/s
  const double large = opportunistic_rate("20000");  // at most 200 it/s
  std::printf("fixed share: 1000 blocks per 50 ms %.1f it/s, 20000 blocks %.1f it/s\n", small, large);
  EXPECT_LE(small, 10.0 * 1.1);
  EXPECT_GE(small, 10.0 * 0.5) << "the share should be used, not withheld";
  EXPECT_GT(large, 2.0 * small) << "a larger share should let the job run faster";
}

TEST_F(EndToEnd, SyncWaitGrowsWithGpuContentionNotWithTheJobsOwnHostTime) {
  // The time a job blocks in its synchronisation calls is the completion signal the interposer
  // gets for free: it must rise when another job takes the device and stay low when the job
  // itself spends its time on the host.
  const auto sync_wait = [&] {
    const std::string s = status();
    const std::size_t at = s.find(R"("sync_wait_fraction":)");
    return at == std::string::npos ? -1.0 : std::strtod(s.c_str() + at + 21, nullptr);
  };
  start_node({"--policy", "co-execution"});
  start_job({"--kernels", "20", "--blocks", "100", "--host-ms", "6"}, "production", true);
  std::this_thread::sleep_for(2500ms);  // two status rate periods
  const double alone = sync_wait();
  // Long kernels back to back: the production job's kernels queue behind them on the device.
  process& opp = start_job({"--kernels", "100", "--blocks", "200", "--host-ms", "0"}, "opportunistic", true);
  std::this_thread::sleep_for(2500ms);
  const std::string s = status();
  const std::size_t at = s.find(R"("sync_wait_fraction":)");  // the production job is listed first
  ASSERT_NE(at, std::string::npos) << s;
  const double shared = std::strtod(s.c_str() + at + 21, nullptr);
  std::printf("production sync wait: alone %.3f, beside an unthrottled job %.3f\n%s", alone, shared, s.c_str());
  // Alone: 2 ms of kernels and 6 ms of host time per iteration, so about a quarter of its time.
  EXPECT_GT(alone, 0.1);
  EXPECT_LT(alone, 0.4);
  EXPECT_GT(shared, alone + 0.15);
  EXPECT_GT(measure_rate(opp, 500ms), 0.0);
  // Both jobs launch thousands of kernels a second, so each timed some (one in 64) in the last
  // rate period: the driver's launch call is measured, a positive time.
  EXPECT_EQ(count(s, R"("launch_call_us":)"), 2) << s;
  EXPECT_EQ(count(s, R"("launch_call_us":null)"), 0) << s;
  const std::size_t launch_at = s.find(R"("launch_call_us":)");
  EXPECT_GT(std::strtod(s.c_str() + launch_at + 17, nullptr), 0.0) << s;
}

/// The latest value of a numeric field in `job`'s progress lines, or -1.
double last_field(process& job, const std::string& field) {
  const std::vector<std::string>& lines = job.stdout_lines();
  const std::string key = "\"" + field + "\":";
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::size_t at = it->find(key);
    if (at != std::string::npos) return std::strtod(it->c_str() + at + key.size(), nullptr);
  }
  return -1;
}

/// One unthrottled pair, with or without a launch window for the opportunistic job.
struct window_pair {
  double alone = 0;          ///< production it/s alone
  double shared = 0;         ///< production it/s beside the opportunistic job
  double opportunistic = 0;  ///< its it/s
  double opp_queue = 0;      ///< the most kernels the opportunistic job ever had unfinished
  double prod_queue = 0;     ///< the same for the production job
  std::string status;
};

TEST_F(EndToEnd, ALaunchWindowKeepsTheOpportunisticQueueShortSoTheProductionJobWaitsLess) {
  // Under co-execution (no rate control) the opportunistic job queues up to the fake stream's
  // depth (64 kernels) ahead of the device, and every production kernel waits behind that queue,
  // as a production kernel waits for the other context's time slice on a real GPU. With a window
  // of 2 it has at most 2 kernels unfinished, so the production job waits for those alone.
  const auto run = [&](const std::vector<std::string>& flags) {
    start_node(flags);
    process& prod = start_production();
    std::this_thread::sleep_for(1s);
    window_pair r;
    r.alone = measure_rate(prod, 3s);
    process& opp = start_opportunistic();
    std::this_thread::sleep_for(1s);
    opp.drain();
    const std::size_t first = opp.progress_lines().size();
    r.shared = measure_rate(prod, 4s);
    const std::vector<progress>& o = opp.progress_lines();
    if (o.size() >= first + 2) {
      r.opportunistic = static_cast<double>(o.back().iterations - o[first].iterations) / (o.back().t - o[first].t);
    }
    r.opp_queue = last_field(opp, "most_unfinished_kernels");
    r.prod_queue = last_field(prod, "most_unfinished_kernels");
    r.status = status();
    std::printf("%s: production alone %.1f it/s, shared %.1f (%.3f); opportunistic %.1f it/s; most unfinished "
                "kernels: opportunistic %.0f, production %.0f\n",
                flags.size() > 2 ? "window" : "no window", r.alone, r.shared, r.shared / r.alone, r.opportunistic,
                r.opp_queue, r.prod_queue);
    opp.kill(SIGKILL);
    prod.kill(SIGKILL);
    opp.wait();
    prod.wait();
    return r;
  };
  const window_pair without = run({"--policy", "co-execution"});
  const window_pair with = run({"--policy", "co-execution", "--max-inflight-launches", "2"});
  std::printf("%s", with.status.c_str());
  EXPECT_GT(without.opp_queue, 8.0) << "without a window the opportunistic job queues ahead";
  EXPECT_GE(with.opp_queue, 1.0);
  EXPECT_LE(with.opp_queue, 2.0) << "the window bounds its unfinished kernels";
  EXPECT_GE(with.prod_queue, 10.0) << "the production job is never windowed (it launches 20 kernels at once)";
  EXPECT_GE(with.shared, 0.9 * with.alone);
  EXPECT_GT(with.shared / with.alone, without.shared / without.alone + 0.05);
  EXPECT_GT(with.opportunistic, 5.0) << "the opportunistic job still uses what the production job leaves";
  // The node set the window for the opportunistic job alone, and its launches waited in it.
  EXPECT_EQ(count(with.status, R"("max_inflight_launches":2)"), 1) << with.status;
  EXPECT_EQ(count(with.status, R"("max_inflight_launches":0)"), 1) << with.status;
  EXPECT_EQ(count(with.status, R"("window_waits":0,)"), 1) << "only the production job never waits\n" << with.status;
  EXPECT_EQ(count(with.status, R"("window_timeouts":0,)"), 2) << with.status;
}

/// Two fake GPUs, so a test can see that a fault on one leaves the other alone.
class FaultDomains : public EndToEnd {
 protected:
  void SetUp() override {
    EndToEnd::SetUp();
    // The node (its fake NVML) and every job inherit it.
    ::setenv("TGS_FAKE_DEVICE_COUNT", "2", 1);
  }
  void TearDown() override {
    EndToEnd::TearDown();
    ::unsetenv("TGS_FAKE_DEVICE_COUNT");
    ::shm_unlink(("/" + device_ + "-1").c_str());
  }
  /// A production job on GPU 1.
  process& start_production_on_gpu1() {
    job_env_ = {"TGS_GPU=1", "TGS_JOB_NAME=production-gpu1"};
    process& p = start_job({"--kernels", "20", "--blocks", "100", "--host-ms", "2", "--device", "1"}, "production", true);
    job_env_.clear();
    return p;
  }
};

// A GPU fault (the job's calls returned an illegal address) ends the co-runner; a bare kill does
// not, whatever the policy's settings (Faults.AnAbruptEndWithoutAGpuFaultEndsNoCoRunner).
TEST_F(FaultDomains, InASharedFaultDomainAGpuFaultEndsItsCoRunnerButNotAJobOnAnotherGpu) {
  start_node({"--fault-policy", "shared-fault-domain"});
  process& prod = start_production();
  process& other = start_production_on_gpu1();
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
  process& opp = start_job({"--kernels", "100", "--blocks", "20", "--host-ms", "0", "--fail-at", "0.5", "--fail",
                            "illegal-address"}, "opportunistic", true);
  opp.wait();
  // The node ends the production job on GPU 0: it shared the faulted job's fault domain.
  const std::optional<int> ended = prod.wait_for(3s);
  ASSERT_TRUE(ended) << "the co-runner still runs; node log:\n" << node_->stderr_text();
  EXPECT_EQ(*ended, -SIGKILL);
  EXPECT_NE(node_->stderr_text().find("shares the fault domain of job"), std::string::npos) << node_->stderr_text();
  // The production job on GPU 1 keeps training and stays registered.
  EXPECT_GT(measure_rate(other, 1s), 50.0) << "the job on the other GPU must keep running";
  EXPECT_TRUE(other.running());
  wait_until([&] { return count(status(), R"("job":)") == 1; }, 3s, "only the GPU 1 job registered");
  const std::string s = status();
  EXPECT_NE(s.find(R"("name":"production-gpu1")"), std::string::npos) << s;
  const nlohmann::json gpu0 = gpu_line(s, 0);
  EXPECT_EQ(gpu0.value("fault_policy", ""), "shared-fault-domain") << s;
  EXPECT_EQ(gpu0.value("faults_handled", -1), 1) << s;
  EXPECT_EQ(gpu0.value("co_runners_ended", -1), 1) << s;
  const nlohmann::json gpu1 = gpu_line(s, 1);
  EXPECT_EQ(gpu1.value("faults_handled", -1), 0) << s;
  EXPECT_EQ(gpu1.value("co_runners_ended", -1), 0) << s;
}

// What a kill does is the policy's setting, not its name: by default a shared fault domain assumes
// the MPS server cleans up a departed client, so the co-runner survives and gets the GPU back.
TEST_F(FaultDomains, InASharedFaultDomainWithDefaultSettingsAKillLeavesTheCoRunnerRunning) {
  start_node({"--fault-policy", "shared-fault-domain"});
  process& prod = start_production();
  process& opp = start_opportunistic();
  wait_until([&] { return count(status(), R"("job":)") == 2; }, 5s, "two registered jobs");
  std::this_thread::sleep_for(500ms);
  opp.kill(SIGKILL);
  opp.wait();
  wait_until([&] { return gpu_line(status(), 0).value("faults_handled", 0) == 1; }, 3s, "the fault handled");
  EXPECT_GT(measure_rate(prod, 1s), 50.0) << "the production job must keep running";
  EXPECT_TRUE(prod.running());
  const nlohmann::json gpu0 = gpu_line(status(), 0);
  EXPECT_EQ(gpu0.value("co_runners_ended", -1), 0) << gpu0;
  EXPECT_EQ(node_->stderr_text().find("shares the fault domain"), std::string::npos) << node_->stderr_text();
}
