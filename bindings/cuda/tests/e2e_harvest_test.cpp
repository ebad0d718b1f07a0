// SPDX-License-Identifier: Apache-2.0
/// @file
/// End to end on the fake driver: idle-harvest fills the production job's idle gaps, gives the
/// GPU back to a production burst within a bound, and reads the production job's GPU-side speed,
/// which host jitter does not move.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "e2e_support.hpp"

namespace {

using namespace std::chrono_literals;
using tgs_e2e::EndToEnd;
using tgs_e2e::measure_rate;
using tgs_e2e::process;
using tgs_e2e::progress;

/// A production job half the time on the device: 20 kernels of 100 blocks (2 ms of device
/// time), then 2 ms of host time per iteration: the device is idle in the host phase.
const std::vector<std::string> production_args{"--kernels", "20", "--blocks", "100", "--host-ms", "2"};
/// An opportunistic job of short kernels back to back (20 us each), as much device as it gets.
const std::vector<std::string> opportunistic_args{"--kernels", "100", "--blocks", "20", "--host-ms", "0"};

/// The iteration rate over the progress lines after index `first`.
double rate_since(process& job, std::size_t first) {
  const std::vector<progress>& lines = job.progress_lines();
  if (lines.size() < first + 2) return 0.0;
  return static_cast<double>(lines.back().iterations - lines[first].iterations) / (lines.back().t - lines[first].t);
}

/// A number field of the status line of the job of class `cls`, or -1.
double job_field(const std::string& status, const std::string& cls, const std::string& field) {
  const std::regex line("\\{\"job\":[^\\n]*\"class\":\"" + cls + "\"[^\\n]*");
  std::smatch m;
  if (!std::regex_search(status, m, line)) return -1;
  const std::string s = m.str();
  const std::size_t at = s.find("\"" + field + "\":");
  return at == std::string::npos ? -1 : std::strtod(s.c_str() + at + field.size() + 3, nullptr);
}

TEST_F(EndToEnd, IdleHarvestFillsTheProductionJobsIdleGaps) {
  start_node({"--policy", "idle-harvest"});
  process& prod = start_job(production_args, "production", true);
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 3s);
  ASSERT_GT(alone, 50.0) << "the production job barely ran alone";

  process& opp = start_job(opportunistic_args, "opportunistic", true);
  std::this_thread::sleep_for(3s);  // the reference (1.5 s) and the gate's first loosening
  opp.drain();
  const std::size_t opp_first = opp.progress_lines().size();
  const double shared = measure_rate(prod, 4s);
  const double opp_rate = rate_since(opp, opp_first);
  const std::string s = status();
  std::printf("idle-harvest: production alone %.1f it/s, shared %.1f (%.3f); opportunistic %.1f it/s\n%s", alone,
              shared, shared / alone, opp_rate, s.c_str());
  EXPECT_GE(shared, 0.9 * alone) << "the gaps are filled, not the production job's device time";
  // The production job leaves the device idle half the time; the opportunistic job needs 2 ms of
  // it per iteration, so the gaps hold up to about 250 of its iterations a second.
  EXPECT_GT(opp_rate, 50.0) << "the opportunistic job should fill the gaps";
  EXPECT_NE(s.find(R"("phase":"harvesting")"), std::string::npos) << s;
  EXPECT_GT(job_field(s, "opportunistic", "gap_launches"), 0.0) << s;
  const double busy = job_field(s, "production", "gpu_busy_fraction");
  EXPECT_GT(busy, 0.2) << "the production job's sampler measures its device time\n" << s;
  EXPECT_LT(busy, 0.9) << s;
}

TEST_F(EndToEnd, AProductionJobResumingFromAnIdlePhaseGetsTheGpuBackAtOnce) {
  start_node({"--policy", "idle-harvest"});
  process& prod = start_job(production_args, "production", true);
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 2s);
  process& opp = start_job(opportunistic_args, "opportunistic", true);
  std::this_thread::sleep_for(3s);
  // An idle phase: the opportunistic job has the whole device to itself...
  prod.kill(SIGUSR1);
  std::this_thread::sleep_for(300ms);
  opp.drain();
  const std::size_t during = opp.progress_lines().size();
  std::this_thread::sleep_for(1500ms);
  const double opp_idle = rate_since(opp, during);
  // ...and once the production job resumes, its first second runs at its rate.
  prod.kill(SIGUSR2);
  const double back = measure_rate(prod, 1s);
  std::printf("resume: production alone %.1f it/s, first second after an idle phase %.1f (%.3f); opportunistic "
              "during the idle phase %.1f it/s\n",
              alone, back, back / alone, opp_idle);
  EXPECT_GT(opp_idle, 250.0) << "the idle production job leaves the opportunistic job the device";
  EXPECT_GE(back, 0.9 * alone) << "the production job waits for at most a few short kernels";
}

TEST_F(EndToEnd, HostJitterOfTheProductionJobStarvesTgsButNotIdleHarvest) {
  // The production job's host time varies by +-20% for 0.3 s at a time: its launch rate moves,
  // its device time per block does not. The released controller reads the launch rate; the
  // harvester reads the device time per block.
  struct rates {
    double alone = 0;
    double shared = 0;
    double opportunistic = 0;
  };
  const auto run = [&](const std::vector<std::string>& node_flags) {
    start_node(node_flags);
    std::vector<std::string> args = production_args;
    args.insert(args.end(), {"--host-jitter", "0.4", "--jitter-period-s", "0.3"});
    process& prod = start_job(args, "production", true);
    std::this_thread::sleep_for(1s);
    rates r;
    r.alone = measure_rate(prod, 4s);
    process& opp = start_job(opportunistic_args, "opportunistic", true);
    std::this_thread::sleep_for(3s);
    opp.drain();
    const std::size_t first = opp.progress_lines().size();
    r.shared = measure_rate(prod, 5s);
    r.opportunistic = rate_since(opp, first);
    std::printf("%s: production alone %.1f it/s, shared %.1f (%.3f); opportunistic %.1f it/s\n",
                node_flags[1].c_str(), r.alone, r.shared, r.shared / r.alone, r.opportunistic);
    opp.kill(SIGKILL);
    prod.kill(SIGKILL);
    opp.wait();
    prod.wait();
    return r;
  };
  const rates released = run({"--policy", "tgs"});
  const rates harvest = run({"--policy", "idle-harvest"});
  EXPECT_GE(harvest.shared, 0.9 * harvest.alone);
  EXPECT_GT(harvest.opportunistic, 2.0 * std::max(released.opportunistic, 10.0));
}

}  // namespace
