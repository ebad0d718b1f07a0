// SPDX-License-Identifier: Apache-2.0
// tgs-node and MPS on the fake driver: the control daemons the node manages (started with their
// folders, which no other user can change, started again when they die, stopped at exit), the
// operator's daemons, the fallback to idle-harvest where MPS is not available (said in the log,
// the status and the metrics), the refusal of a named MPS policy there, the jobs' MPS client
// environment, which the fake driver records at cuInit and at context creation
// (TGS_FAKE_MPS_RECORD) and which is their class socket's whatever they set, and a client that
// skips the interposer, which is unregistered.
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "e2e_support.hpp"
#include "http_get.hpp"
#include "node_client.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;
namespace cabi = tgs::cuda::abi;

namespace {

/// One line of the fake driver's MPS record: `key=value` fields.
using record_line = std::map<std::string, std::string>;

class Mps : public EndToEnd {
 protected:
  void TearDown() override {
    jobs_.clear();
    node_.reset();  // SIGKILL: a managed daemon may be left, as after a node crash
    // A daemon whose start the kill interrupted writes its pid file a moment later.
    std::this_thread::sleep_for(100ms);
    for (const std::string& pipe : daemon_pipes()) stop_daemon(pipe);
    EndToEnd::TearDown();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  /// Every folder under the test's folder that holds a (fake) daemon's pid file.
  [[nodiscard]] std::vector<std::string> daemon_pipes() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->path().filename() == "nvidia-cuda-mps-control.pid") out.push_back(it->path().parent_path().string());
    }
    return out;
  }
  /// The pid in `pipe`'s pid file (0: none).
  static pid_t daemon_pid(const std::string& pipe) {
    std::ifstream in(pipe + "/nvidia-cuda-mps-control.pid");
    long pid = 0;
    in >> pid;
    return static_cast<pid_t>(pid);
  }
  /// Whether `pid` runs (a zombie does not: whoever reaps orphans here may take a while).
  static bool alive(pid_t pid) {
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const std::size_t close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() || (stat[close + 2] != 'Z' && stat[close + 2] != 'X');
  }
  /// Ends a daemon the test left (SIGTERM: the fake's `quit`), bounded.
  static void stop_daemon(const std::string& pipe) {
    const pid_t pid = daemon_pid(pipe);
    if (!alive(pid)) return;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 100 && alive(pid); ++i) std::this_thread::sleep_for(10ms);
    if (alive(pid)) ::kill(pid, SIGKILL);
  }

  [[nodiscard]] std::string pipe_of(unsigned gpu) const { return dir_ + "/mps/gpu" + std::to_string(gpu) + "/pipe"; }
  [[nodiscard]] std::string log_of(unsigned gpu) const { return dir_ + "/mps/gpu" + std::to_string(gpu) + "/log"; }
  [[nodiscard]] std::string record_file() const { return dir_ + "/mps-record.txt"; }

  /// A node (default policy unless `extra` names one) with `node_env` plus `env`.
  void start_mps_node(const std::vector<std::string>& extra, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv{node_bin(), "--socket", socket_, "--liveness-ms", "100", "--log-level", "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<std::string> e = node_env();
    e.insert(e.end(), env.begin(), env.end());
    node_ = std::make_unique<process>(argv, e);
    // The socket is bound before the daemons start; the node serves once it says it listens.
    wait_until([&] { return node_->stderr_text().find("listening on") != std::string::npos || !node_->running(); },
               15s, "the node listening");
    ASSERT_TRUE(node_->running()) << node_->stderr_text();
  }
  void start_managed_node(unsigned gpus = 1, const std::vector<std::string>& extra = {},
                          const std::vector<std::string>& env = {}) {
    std::vector<std::string> args{"--mps-control", TGS_FAKE_MPS_CONTROL, "--gpus", std::to_string(gpus)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> e{"TGS_FAKE_DEVICE_COUNT=" + std::to_string(gpus)};
    e.insert(e.end(), env.begin(), env.end());
    start_mps_node(args, e);
  }

  /// The node line of the status.
  nlohmann::json node_line() {
    for (const nlohmann::json& j : status_lines()) {
      if (j.contains("node")) return j["node"];
    }
    return nlohmann::json::object();
  }

  /// A fake training job of class `cls` on GPU `gpu` that records its MPS client environment.
  process& start_recorded(const std::string& cls, std::vector<std::string> env = {},
                          std::vector<std::string> args = {}) {
    env.push_back("TGS_FAKE_MPS_RECORD=" + record_file());
    job_env_ = std::move(env);
    std::vector<std::string> a{"--kernels", "5", "--blocks", "10", "--host-ms", "1"};
    a.insert(a.end(), args.begin(), args.end());
    process& p = start_job(a, cls, true);
    job_env_.clear();
    return p;
  }
  /// The record's line of `event` for process `pid`, waited for.
  record_line recorded(pid_t pid, const std::string& event) {
    record_line found;
    wait_until(
        [&] {
          std::ifstream in(record_file());
          for (std::string line; std::getline(in, line);) {
            record_line fields;
            std::istringstream words(line);
            for (std::string w; words >> w;) {
              const std::size_t eq = w.find('=');
              if (eq != std::string::npos) fields[w.substr(0, eq)] = w.substr(eq + 1);
            }
            if (fields["pid"] == std::to_string(pid) && fields["event"] == event) {
              found = fields;
              return true;
            }
          }
          return false;
        },
        10s, "the fake driver's MPS record");
    return found;
  }

  /// What the node tells uid 65534 registering on `socket` as `asked`: client, priority, pipe.
  cabi::mps_client settings_as_second_user(const std::string& socket,
                                           cabi::class_code asked = cabi::class_code::production) {
    int report[2];
    EXPECT_EQ(::pipe(report), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(report[0]);
      cabi::mps_client m{};
      if (::setgroups(0, nullptr) == 0 && ::setgid(65534) == 0 && ::setuid(65534) == 0) {
        if (auto client = node_client::connect(socket); client && client->register_as(asked, 0, "second-user")) {
          m = client->registered().mps;
        }
      }
      (void)!::write(report[1], &m, sizeof(m));
      ::_exit(0);
    }
    ::close(report[1]);
    cabi::mps_client m{};
    const bool got = ::read(report[0], &m, sizeof(m)) == static_cast<ssize_t>(sizeof(m));
    ::close(report[0]);
    ::waitpid(child, nullptr, 0);
    EXPECT_TRUE(got);
    return m;
  }

  /// The status line of the job of process `pid` (an empty object while it has none).
  nlohmann::json job_line(pid_t pid) {
    for (const nlohmann::json& j : status_lines()) {
      if (j.contains("job") && j.value("pid", 0) == pid) return j;
    }
    return nlohmann::json::object();
  }
  /// The job's status line once it says how the node had the job share (at its registration).
  nlohmann::json chosen_line(process& job, std::chrono::milliseconds within = 5s) {
    nlohmann::json j;
    wait_until([&] { return (j = job_line(job.pid())).contains("mechanism"); }, within, "the job's mechanism in the status");
    return j;
  }
  /// GPU 0's status line.
  nlohmann::json gpu_line0() {
    for (const nlohmann::json& j : status_lines()) {
      if (j.contains("gpu") && j.contains("controller") && j["gpu"] == 0) return j;
    }
    return nlohmann::json::object();
  }

  /// A GPU-bound production job (5 ms kernels back to back, a sync an iteration, no host time),
  /// started and measured: its host's wait for the GPU is in the status.
  process& start_gpu_bound_production() {
    job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file()};
    process& p = start_job({"--kernels", "4", "--blocks", "5000", "--host-ms", "0"}, "production", true);
    job_env_.clear();
    wait_until(
        [&] {
          const nlohmann::json g = gpu_line0();
          return g.contains("production_gpu_wait") && g["production_gpu_wait"].is_number() &&
                 g["production_gpu_wait"].get<double>() >= 0.5;
        },
        15s, "the production job measured GPU-bound");
    return p;
  }

  /// A managed node under `auto` whose controller decides within a second or two: short windows,
  /// and a floor of 30% of what a co-runner launched uncapped, which on the fake's
  /// one-kernel-at-a-time device costs production more than the 4% it tolerates, so the
  /// correction holds a busy co-runner.
  void start_correcting_node(const std::vector<std::string>& more = {}) {
    std::vector<std::string> flags{"--opportunistic-mechanism", "auto", "--priority-share.period-ms", "200",
                                   "--priority-share.evidence-windows", "4", "--priority-share.tighten-factor", "0.5",
                                   "--priority-share.floor-fraction", "0.3"};
    flags.insert(flags.end(), more.begin(), more.end());
    start_managed_node(1, flags);
  }

  std::string metrics_url() {
    std::string url;
    wait_until(
        [&] {
          const std::string& log = node_->stderr_text();
          const std::size_t at = log.find("metrics on ");
          if (at == std::string::npos) return false;
          url = log.substr(at + 11, log.find('\n', at) - at - 11);
          return true;
        },
        5s, "the metrics URL in the log");
    return url;
  }
};

// --- managed daemons ---------------------------------------------------------------------------

TEST_F(Mps, AManagedDaemonStartsPerGpuWithItsOwnFolders) {
  start_managed_node(2);
  for (unsigned gpu = 0; gpu < 2; ++gpu) {
    EXPECT_EQ(::access((pipe_of(gpu) + "/control").c_str(), F_OK), 0) << "GPU " << gpu;
    EXPECT_TRUE(alive(daemon_pid(pipe_of(gpu)))) << "GPU " << gpu;
    std::ifstream log(log_of(gpu) + "/control.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    // The daemon sees its GPU alone, by the UUID NVML gives it.
    EXPECT_NE(text.find("CUDA_VISIBLE_DEVICES=GPU-fake-" + std::to_string(gpu) + ")"), std::string::npos) << text;
  }
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "priority-share");
  EXPECT_TRUE(n["policy_fallback"].is_null());
  EXPECT_EQ(n["mps"]["mode"], "managed");
  EXPECT_TRUE(n["mps"]["available"].get<bool>());
  ASSERT_EQ(n["mps"]["gpus"].size(), 2U);
  EXPECT_EQ(n["mps"]["gpus"][1]["state"], "running");
  EXPECT_EQ(n["mps"]["gpus"][1]["pipe_dir"], pipe_of(1));
  EXPECT_NE(status(false).find("MPS: managed, available"), std::string::npos);
}

TEST_F(Mps, ADaemonThatDiesIsStartedAgain) {
  start_managed_node(1);
  const pid_t first = daemon_pid(pipe_of(0));
  ASSERT_TRUE(alive(first));
  ASSERT_GT(first, 1);
  ::kill(first, SIGKILL);
  wait_until([&] { return alive(daemon_pid(pipe_of(0))) && daemon_pid(pipe_of(0)) != first; }, 10s,
             "a new daemon");
  EXPECT_NE(node_->stderr_text().find("the control daemon is gone; starting it again"), std::string::npos)
      << node_->stderr_text();
  wait_until([&] { return node_line()["mps"]["gpus"][0]["state"] == "running"; }, 5s, "the daemon running again");
  EXPECT_EQ(node_line()["mps"]["gpus"][0]["restarts"], 1);
}

// --- node features for Node Feature Discovery ------------------------------------------------------

/// The `key=value` lines of a Node Feature Discovery feature file (comments skipped); empty when
/// the file is not there.
std::map<std::string, std::string> feature_lines(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.front() == '#') continue;
    const std::size_t eq = line.find('=');
    out[line.substr(0, eq)] = eq == std::string::npos ? std::string() : line.substr(eq + 1);
  }
  return out;
}

// The node keeps a local feature file for NFD: what it offers (its version, GPUs, classes, MPS,
// policies) as label values, rewritten when MPS goes away and comes back, removed when it stops.
TEST_F(Mps, TheNodeFeaturesFileSaysWhatTheNodeOffersAndFollowsIt) {
  const std::string folder = dir_ + "/features.d";
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  const std::string file = folder + "/tgs";
  start_managed_node(1, {"--node-features-file", file});
  std::map<std::string, std::string> f;
  wait_until([&] { return (f = feature_lines(file)).count("tgs.mps") > 0 && f["tgs.mps"] == "true"; }, 10s,
             "the features file saying MPS is up");
  EXPECT_EQ(f["tgs.gpus"], "1");
  EXPECT_EQ(f["tgs.mps.gpus"], "1");
  EXPECT_EQ(f["tgs.production"], "true");
  EXPECT_EQ(f["tgs.opportunistic"], "true");
  EXPECT_EQ(f["tgs.class-sockets"], "false");
  EXPECT_EQ(f["tgs.policy"], "priority-share");
  EXPECT_EQ(f["tgs.memory-policy"], "off");
  EXPECT_EQ(f["tgs.opportunistic-mechanism"], "auto");
  EXPECT_FALSE(f["tgs.version"].empty());
  // Every value is a valid Kubernetes label value: NFD drops a label that is not.
  const std::regex label_value("^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$");
  for (const auto& [key, value] : f) EXPECT_TRUE(std::regex_match(value, label_value)) << key << "=" << value;
  struct stat st{};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644U) << "NFD's worker reads it";
  // The daemon dies: until it is started again (a second later) MPS is not offered.
  ::kill(daemon_pid(pipe_of(0)), SIGKILL);
  wait_until([&] { return feature_lines(file)["tgs.mps"] == "false"; }, 5s, "the file saying MPS is down");
  EXPECT_EQ(feature_lines(file)["tgs.mps.gpus"], "0");
  wait_until([&] { return feature_lines(file)["tgs.mps"] == "true"; }, 10s, "the file saying MPS is up again");
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(10s));
  EXPECT_NE(::access(file.c_str(), F_OK), 0) << "a stopped node offers nothing";
}

TEST_F(Mps, TheNodeStopsItsDaemonsWhenItStops) {
  start_managed_node(2);
  const pid_t d0 = daemon_pid(pipe_of(0));
  const pid_t d1 = daemon_pid(pipe_of(1));
  ASSERT_TRUE(alive(d0) && alive(d1));
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(10s).has_value()) << "the node did not stop";
  EXPECT_FALSE(alive(d0));
  EXPECT_FALSE(alive(d1));
  EXPECT_TRUE(daemon_pipes().empty()) << "a daemon's pid file is left";
  std::ifstream log(log_of(0) + "/control.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Command: quit"), std::string::npos) << "stopped by `quit`, not a signal: " << text;
  EXPECT_NE(node_->stderr_text().find("MPS on GPU 1: control daemon stopped"), std::string::npos);
}

TEST_F(Mps, ARestartedNodeAdoptsTheDaemonItsPredecessorLeft) {
  start_managed_node(1);
  const pid_t first = daemon_pid(pipe_of(0));
  node_->kill(SIGKILL);
  node_->wait();
  start_managed_node(1);
  EXPECT_EQ(daemon_pid(pipe_of(0)), first);
  EXPECT_NE(node_->stderr_text().find("adopted the control daemon already running"), std::string::npos);
}

TEST_F(Mps, TheCdiSpecMountsTheGpusPipeFolderAndTheHostsSharedMemory) {
  const std::string preload = intercept_preload();
  const std::string interposer = preload.substr(preload.rfind(':') + 1);  // past a sanitizer's runtime
  ::mkdir((dir_ + "/classes").c_str(), 0700);
  start_managed_node(1, {"--class-sockets", dir_ + "/classes", "--cdi-spec", dir_ + "/tgs.json", "--interposer",
                         interposer});
  wait_until([&] { return node_->stderr_text().find("wrote the CDI spec") != std::string::npos; }, 5s, "the CDI spec");
  std::ifstream in(dir_ + "/tgs.json");
  const nlohmann::json spec = nlohmann::json::parse(in);
  for (const nlohmann::json& device : spec.at("devices")) {
    const nlohmann::json& mounts = device.at("containerEdits").at("mounts");
    ASSERT_EQ(mounts.size(), 4U) << device.dump();
    EXPECT_EQ(mounts[2].at("hostPath"), pipe_of(0));
    EXPECT_EQ(mounts[2].at("containerPath"), pipe_of(0));
    EXPECT_EQ(mounts[3].at("hostPath"), "/dev/shm");
  }
}

// --- the daemons' folders: no other user changes them (docs/trust-model.md) -------------------------

TEST_F(Mps, TheDaemonsFoldersAreTheNodesAndOthersMayNotWriteThem) {
  start_managed_node(1);
  for (const std::string& folder : {dir_ + "/mps", dir_ + "/mps/gpu0", pipe_of(0), log_of(0)}) {
    struct stat st{};
    ASSERT_EQ(::lstat(folder.c_str(), &st), 0) << folder;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << folder;
    EXPECT_EQ(st.st_uid, ::geteuid()) << folder;
    // Clients of every user reach `control` in the pipe folder; no one but the node changes them.
    EXPECT_EQ(st.st_mode & 07777, 0755U) << folder;
  }
}

TEST_F(Mps, ASymlinkWhereTheNodeMakesADaemonsFolderIsNotFollowed) {
  // Another folder, with a file in it; the GPU's folder name is a symlink to it.
  const std::string victim = dir_ + "/victim";
  ::mkdir(victim.c_str(), 0700);
  std::ofstream(victim + "/keep") << "mine\n";
  ::mkdir((dir_ + "/mps").c_str(), 0755);
  ::chmod((dir_ + "/mps").c_str(), 0755);
  ASSERT_EQ(::symlink(victim.c_str(), (dir_ + "/mps/gpu0").c_str()), 0);
  start_managed_node(1);
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["mps"]["gpus"][0]["state"], "failed") << n.dump();
  EXPECT_NE(n["mps"]["gpus"][0]["why"].get<std::string>().find(dir_ + "/mps/gpu0 is a symlink: refusing to follow it"),
            std::string::npos)
      << n.dump();
  EXPECT_EQ(n["policy"], "idle-harvest") << "no MPS on the GPU: the default falls back";
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(victim), std::filesystem::directory_iterator()), 1)
      << "nothing made in the folder the symlink names";
  EXPECT_TRUE(daemon_pipes().empty()) << "no daemon started";
}

TEST_F(Mps, ADaemonsFolderOthersMayWriteToIsRefusedUnlessAllowed) {
  ::mkdir((dir_ + "/mps").c_str(), 0777);
  ::chmod((dir_ + "/mps").c_str(), 0777);
  start_managed_node(1);
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["mps"]["gpus"][0]["state"], "failed") << n.dump();
  EXPECT_NE(n["mps"]["gpus"][0]["why"].get<std::string>().find(dir_ + "/mps (mode 0777) is writable by users other "
                                                                       "than its owner"),
            std::string::npos)
      << n.dump();
  EXPECT_TRUE(daemon_pipes().empty()) << "no daemon started in a folder others could change";
  node_.reset();
  start_managed_node(1, {"--allow-shared-folders"});
  EXPECT_EQ(node_line()["mps"]["gpus"][0]["state"], "running") << "the operator who means it says so";
}

TEST_F(Mps, ADaemonsFolderOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the folder to uid 65534";
  ::mkdir((dir_ + "/mps").c_str(), 0755);
  ::mkdir((dir_ + "/mps/gpu0").c_str(), 0755);
  ::mkdir(pipe_of(0).c_str(), 0755);
  ASSERT_EQ(::chown(pipe_of(0).c_str(), 65534, 65534), 0);
  start_managed_node(1, {"--allow-shared-folders"});  // no flag lets a node use it
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["mps"]["gpus"][0]["state"], "failed") << n.dump();
  EXPECT_NE(n["mps"]["gpus"][0]["why"].get<std::string>().find(pipe_of(0) + " is owned by uid 65534"),
            std::string::npos)
      << n.dump();
  EXPECT_TRUE(std::filesystem::is_empty(pipe_of(0))) << "no daemon's files in the other user's folder";
}

// --- the operator's daemons ----------------------------------------------------------------------

TEST_F(Mps, AnExternalDaemonIsUsedWhereItsPipeFolderIs) {
  const std::string pipe = dir_ + "/ext/gpu0";
  process launcher({TGS_FAKE_MPS_CONTROL, "-d"}, {"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + dir_ + "/ext/log"});
  ASSERT_EQ(launcher.wait_for(5s), std::optional<int>(0)) << launcher.stderr_text();
  start_mps_node({"--mps", "external", "--mps-pipe-dir", dir_ + "/ext/gpu%u", "--gpus", "1"});
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "priority-share");
  EXPECT_EQ(n["mps"]["mode"], "external");
  EXPECT_EQ(n["mps"]["gpus"][0]["state"], "ready");
  process& job = start_recorded("production");  // a client wherever the node has MPS
  const record_line r = recorded(job.pid(), "init");
  EXPECT_EQ(r.at("pipe"), pipe);
  EXPECT_EQ(r.at("connected"), "1");
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(10s).has_value());
  EXPECT_TRUE(alive(daemon_pid(pipe))) << "the operator's daemon is the operator's to stop";
}

// --- no MPS: the fallback, and the refusal of a named MPS policy ----------------------------------

TEST_F(Mps, WithMpsOffTheDefaultFallsBackAndSaysSoEverywhere) {
  start_mps_node({"--mps", "off", "--metrics-address", "127.0.0.1:0"});
  EXPECT_NE(node_->stderr_text().find("policy idle-harvest instead of the default priority-share: MPS is not "
                                      "available (--mps off)"),
            std::string::npos)
      << node_->stderr_text();
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "idle-harvest");
  EXPECT_NE(n["policy_fallback"].get<std::string>().find("--mps off"), std::string::npos);
  EXPECT_FALSE(n["mps"]["available"].get<bool>());
  EXPECT_NE(status(false).find("policy idle-harvest (fallback: priority-share needs MPS: --mps off)"), std::string::npos);
  const std::string url = metrics_url();
  std::string text;
  wait_until([&] { return (text = http_get(url)).find("tgs_node_policy_info") != std::string::npos; }, 5s, "metrics");
  EXPECT_NE(text.find(R"(tgs_node_policy_info{policy="idle-harvest",fallback="true",reason="priority-share needs MPS: --mps off",mps="off"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(tgs_node_mps_available{gpu="0",state="off"} 0)"), std::string::npos) << text;
  // Jobs are no MPS clients: their own environment stands.
  process& job = start_recorded("opportunistic", {"CUDA_MPS_CLIENT_PRIORITY=0"});
  EXPECT_EQ(recorded(job.pid(), "init").at("priority"), "0");
}

TEST_F(Mps, WithoutTheControlProgramTheDefaultFallsBack) {
  start_mps_node({"--gpus", "1"});  // the tests' node has no nvidia-cuda-mps-control on its PATH
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "idle-harvest");
  EXPECT_NE(n["policy_fallback"].get<std::string>().find("is not on PATH"), std::string::npos) << n.dump();
  EXPECT_NE(node_->stderr_text().find("instead of the default priority-share"), std::string::npos);
}

TEST_F(Mps, AGpuInMigModeHasNoMpsAndTheDefaultFallsBack) {
  start_managed_node(1, {}, {"TGS_FAKE_MIG_GPUS=0"});
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "idle-harvest");
  EXPECT_NE(n["policy_fallback"].get<std::string>().find("GPU 0 is in MIG mode"), std::string::npos) << n.dump();
  EXPECT_EQ(n["mps"]["gpus"][0]["state"], "mig");
  EXPECT_TRUE(daemon_pipes().empty()) << "no daemon on a GPU in MIG mode";
}

TEST_F(Mps, ADaemonThatFailsToStartMakesTheDefaultFallBack) {
  start_managed_node(1, {}, {"TGS_FAKE_MPS_FAIL=1"});
  const nlohmann::json n = node_line();
  EXPECT_EQ(n["policy"], "idle-harvest");
  EXPECT_NE(n["policy_fallback"].get<std::string>().find("exited with status 1"), std::string::npos) << n.dump();
}

TEST_F(Mps, ANamedMpsPolicyWithoutMpsIsAnErrorAtStart) {
  process off({node_bin(), "--socket", socket_, "--policy", "priority-share", "--mps", "off"}, node_env());
  EXPECT_EQ(off.wait_for(10s), std::optional<int>(2));
  EXPECT_NE(off.stderr_text().find("--policy priority-share shares the GPU through MPS, and --mps is off"),
            std::string::npos)
      << off.stderr_text();
  process missing({node_bin(), "--socket", socket_, "--policy", "priority-share", "--gpus", "1"}, node_env());
  EXPECT_EQ(missing.wait_for(10s), std::optional<int>(1));
  EXPECT_NE(missing.stderr_text().find("--policy priority-share shares the GPU through MPS, which this node does not "
                                       "have: no MPS control program"),
            std::string::npos)
      << missing.stderr_text();
}

// --- the jobs' client environment ----------------------------------------------------------------

TEST_F(Mps, EachClassBecomesTheClientItsPolicySaysWhateverItsOwnEnvironment) {
  start_managed_node(1, {"--opportunistic-mechanism", "mps"});
  // The job's own values count for nothing, and its CUDA_VISIBLE_DEVICES (the host's index of its
  // GPU) goes: the node's daemon shows that GPU as device 0.
  process& opportunistic = start_recorded(
      "opportunistic", {"CUDA_MPS_CLIENT_PRIORITY=0", "CUDA_MPS_PIPE_DIRECTORY=/tmp/elsewhere",
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "CUDA_VISIBLE_DEVICES=0"});
  process& production = start_recorded("production", {"CUDA_MPS_CLIENT_PRIORITY=1"});
  for (const char* event : {"init", "context"}) {
    const record_line o = recorded(opportunistic.pid(), event);
    EXPECT_EQ(o.at("pipe"), pipe_of(0)) << event;
    EXPECT_EQ(o.at("priority"), "1") << event;
    EXPECT_EQ(o.at("threads"), "-") << event;
    EXPECT_EQ(o.at("visible"), "-") << event;
    EXPECT_EQ(o.at("connected"), "1") << event;
    const record_line p = recorded(production.pid(), event);
    EXPECT_EQ(p.at("pipe"), pipe_of(0)) << event;
    EXPECT_EQ(p.at("priority"), "0") << event;
    EXPECT_EQ(p.at("connected"), "1") << event;
  }
}

// On a class socket the settings are the socket's class and GPU: a job that asks for the other
// class, names another GPU and sets its own MPS variables still gets below-normal priority and
// its GPU's daemon.
TEST_F(Mps, OnAClassSocketAJobsClientSettingsAreTheSocketsWhateverItsEnvironment) {
  start_managed_node(2, {"--class-sockets", dir_ + "/classes", "--opportunistic-mechanism", "mps"});
  const std::string classes = dir_ + "/classes";
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file(), "TGS_NODE_SOCKET=" + classes + "/gpu1-opportunistic.sock",
              "TGS_GPU=0", "CUDA_MPS_CLIENT_PRIORITY=0", "CUDA_MPS_PIPE_DIRECTORY=" + pipe_of(0),
              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "TGS_JOB_NAME=forger"};
  process& forger = start_job({"--kernels", "5", "--blocks", "10", "--host-ms", "1"}, "production", true);
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file(), "TGS_NODE_SOCKET=" + classes + "/gpu0-production.sock",
              "CUDA_MPS_CLIENT_PRIORITY=1", "TGS_JOB_NAME=granted"};
  process& granted = start_job({"--kernels", "5", "--blocks", "10", "--host-ms", "1"}, "opportunistic", true);
  job_env_.clear();
  for (const char* event : {"init", "context"}) {
    const record_line o = recorded(forger.pid(), event);
    EXPECT_EQ(o.at("pipe"), pipe_of(1)) << event << ": the socket's GPU's daemon, not the one the job named";
    EXPECT_EQ(o.at("priority"), "1") << event;
    EXPECT_EQ(o.at("threads"), "-") << event;
    EXPECT_EQ(o.at("connected"), "1") << event;
    const record_line p = recorded(granted.pid(), event);
    EXPECT_EQ(p.at("pipe"), pipe_of(0)) << event;
    EXPECT_EQ(p.at("priority"), "0") << event;
  }
}

// A second user's job is told the same: its class socket's settings. Its server is its own: the
// control daemon starts one per user (NVIDIA's MPS), and the node never names another.
TEST_F(Mps, ASecondUsersRegistrationGetsItsSocketsClientSettings) {
  const group* nogroup = ::getgrgid(65534);
  if (::geteuid() != 0 || nogroup == nullptr) GTEST_SKIP() << "needs root and group 65534: the job is a second user's";
  start_managed_node(1, {"--class-sockets", dir_ + "/classes", "--class-sockets-group", "65534",
                         "--opportunistic-mechanism", "mps"});
  ::chmod(dir_.c_str(), 0711);  // the second user reaches the class sockets through the group
  const cabi::mps_client opportunistic = settings_as_second_user(dir_ + "/classes/gpu0-opportunistic.sock");
  EXPECT_EQ(opportunistic.client, 1);
  EXPECT_EQ(opportunistic.priority, 1) << "it asked for production on the opportunistic socket";
  EXPECT_EQ(std::string(opportunistic.pipe_directory), pipe_of(0));
  const cabi::mps_client production = settings_as_second_user(dir_ + "/classes/gpu0-production.sock");
  EXPECT_EQ(production.client, 1);
  EXPECT_EQ(production.priority, 0);
  EXPECT_EQ(std::string(production.pipe_directory), pipe_of(0));
  ::chmod(dir_.c_str(), 0700);
}

// --- how each opportunistic job shares: tgs::mechanism_choice in tgs-node -------------------------

// Under --opportunistic-mechanism auto, beside a GPU-bound production job of the same user, a job
// whose kernels the node has not timed yet is not an MPS client: a SIGKILL in the middle of a long
// kernel would end production. It runs in a context of its own, and the status, the log and the
// metrics say why.
TEST_F(Mps, UnderAutoAJobWhoseKernelsAreNotMeasuredIsTimeSliced) {
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  (void)start_gpu_bound_production();
  process& opp = start_recorded("opportunistic");
  const record_line r = recorded(opp.pid(), "init");
  EXPECT_EQ(r.at("connected"), "0") << "not a client of the node's daemon";
  EXPECT_EQ(r.at("pipe"), "-");
  const nlohmann::json j = chosen_line(opp);
  EXPECT_EQ(j["mechanism"], "time-sliced") << j;
  EXPECT_EQ(j["mechanism_reason"], "kernels-unmeasured") << j;
  EXPECT_FALSE(j["mps_client"].get<bool>());
  EXPECT_NE(node_->stderr_text().find(", time-sliced (kernels-unmeasured)"), std::string::npos) << node_->stderr_text();
  EXPECT_NE(status(false).find("time-sliced (kernels-unmeasured)"), std::string::npos) << status(false);
}

// The node times the job's kernels while it runs and keeps them in its profile: the same job
// started again beside the GPU-bound production job, its kernels short, is an MPS client.
TEST_F(Mps, AJobMeasuredWithShortKernelsIsAnMpsClientAtItsNextStart) {
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  (void)start_gpu_bound_production();
  process& first = start_recorded("opportunistic");
  EXPECT_EQ(recorded(first.pid(), "init").at("connected"), "0");
  wait_until([&] { return job_line(first.pid()).value("kernels_timed", 0) >= 200; }, 20s, "its kernels timed");
  EXPECT_LT(job_line(first.pid())["longest_kernel_ms"].get<double>(), 100.0) << job_line(first.pid());
  first.kill(SIGTERM);
  (void)first.wait();
  process& second = start_recorded("opportunistic");
  const record_line r = recorded(second.pid(), "init");
  EXPECT_EQ(r.at("connected"), "1") << "a client of the node's daemon";
  EXPECT_EQ(r.at("priority"), "1") << "at below-normal priority";
  const nlohmann::json j = chosen_line(second);
  EXPECT_EQ(j["mechanism"], "mps-client") << j;
  EXPECT_EQ(j["mechanism_reason"], "measured-safe");
}

// A job whose host queues an iteration of short kernels at once (600 launches of 0.5 ms) is measured
// short, and is an MPS client at its next start: each launch is timed (a stream holds about a
// thousand before the driver makes the host wait) and charged the GPU's time since the previous
// one, not its wait in the queue. (Here the node's launch cap keeps the queue shorter than it could
// be, so a ring of 64 passed too.)
TEST_F(Mps, AJobWhoseHostRunsFarAheadOfItsShortKernelsIsMeasuredShort) {
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  (void)start_gpu_bound_production();
  const std::vector<std::string> deep_queue{"--kernels", "600", "--blocks", "500", "--host-ms", "0"};
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file()};
  process& first = start_job(deep_queue, "opportunistic", true);
  wait_until([&] { return job_line(first.pid()).value("kernels_timed", 0) >= 3000; }, 30s, "five iterations timed");
  EXPECT_LT(job_line(first.pid())["longest_kernel_ms"].get<double>(), 100.0) << job_line(first.pid());
  first.kill(SIGTERM);
  (void)first.wait();
  process& second = start_job(deep_queue, "opportunistic", true);
  job_env_.clear();
  EXPECT_EQ(recorded(second.pid(), "init").at("connected"), "1") << "a client of the node's daemon";
  EXPECT_EQ(chosen_line(second)["mechanism_reason"], "measured-safe") << job_line(second.pid());
}

// A job whose stream stands empty between iterations (a short kernel, then 40 ms on its host) is
// measured within the poller's short period (10 ms): the GPU's time since the previous launch holds
// the idle stream, so the host's span is the one charged, and a launch wakes the idle poller. A
// poller that slept out its long period (50 ms) charged up to that much. (Alone on its GPU: beside
// the fake's GPU-bound production job each kernel also waits its turn, up to 20 ms.)
TEST_F(Mps, AJobWhoseStreamStandsIdleBetweenShortKernelsIsMeasuredShort) {
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  process& opp = start_job({"--kernels", "2", "--blocks", "500", "--host-ms", "40"}, "opportunistic", true);
  wait_until([&] { return job_line(opp.pid()).value("kernels_timed", 0) >= 60; }, 20s, "thirty iterations timed");
  EXPECT_LT(job_line(opp.pid())["longest_kernel_ms"].get<double>(), 25.0) << job_line(opp.pid());
}

// Under a policy of separate contexts (here MPS off) no job is ever an MPS client, so the default's
// choice has nothing to read a kernel's length for: the job is spared the timing events.
TEST_F(Mps, UnderAPolicyOfSeparateContextsTheDefaultTimesNoKernel) {
  start_managed_node(1, {"--mps", "off", "--policy", "idle-harvest"});
  process& opp = start_job({"--kernels", "2", "--blocks", "500", "--host-ms", "10"}, "opportunistic", true);
  wait_until([&] { return job_line(opp.pid()).value("launches_per_s", 0.0) > 0.0; }, 20s, "the job launching");
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(job_line(opp.pid()).value("kernels_timed", -1), 0) << job_line(opp.pid());
  EXPECT_EQ(job_line(opp.pid())["mechanism"], "time-sliced") << job_line(opp.pid());
}

// A job seen running a kernel past --mechanism-choice.long-kernel-ms stays in a context of its own at its next
// start: one SIGKILL in such a kernel ends every client of the server (docs/results/mps-faults.md).
TEST_F(Mps, AJobSeenWithALongKernelStaysTimeSlicedAtItsNextStart) {
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  (void)start_gpu_bound_production();
  const std::vector<std::string> long_kernels{"--kernels", "1", "--blocks", "150000", "--host-ms", "0"};  // 150 ms
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file()};
  process& first = start_job(long_kernels, "opportunistic", true);
  wait_until([&] { return job_line(first.pid())["longest_kernel_ms"].is_number() &&
                          job_line(first.pid())["longest_kernel_ms"].get<double>() >= 150.0; }, 15s,
             "a kernel of at least 150 ms timed");
  first.kill(SIGTERM);
  (void)first.wait();
  process& second = start_job(long_kernels, "opportunistic", true);
  job_env_.clear();
  EXPECT_EQ(recorded(second.pid(), "init").at("connected"), "0") << "a client of the node's daemon";
  const nlohmann::json j = chosen_line(second);
  EXPECT_EQ(j["mechanism"], "time-sliced") << j;
  EXPECT_EQ(j["mechanism_reason"], "long-kernels");
}

// What a job measured outlives the node: a node killed after the job's long kernel was timed,
// and another started in its place, still makes the job's next start time-sliced for its kernels.
TEST_F(Mps, AJobsProfileOutlivesACrashOfTheNode) {
  const std::vector<std::string> node_args{"--opportunistic-mechanism", "auto"};
  start_managed_node(1, node_args);
  process& production = start_gpu_bound_production();
  const std::vector<std::string> long_kernels{"--kernels", "1", "--blocks", "150000", "--host-ms", "0"};  // 150 ms
  process& first = start_job(long_kernels, "opportunistic", true);
  // Written within a second of the change: a line whose longest kernel is 150 ms or more.
  const std::string profiles = socket_ + ".profiles";
  wait_until(
      [&] {
        std::ifstream in(profiles);
        std::string line;
        std::getline(in, line);
        if (line != "tgs-node job profiles 1") return false;
        while (std::getline(in, line)) {
          std::istringstream fields(line);
          std::string f;
          for (int i = 0; i < 6 && fields >> f; ++i) {}
          if (f != "-" && std::stoull(f) >= 150'000'000ULL) return true;
        }
        return false;
      },
      15s, "the long kernel in the profiles file");
  struct stat st{};
  ASSERT_EQ(::stat(profiles.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U) << "the node's own";
  first.kill(SIGTERM);
  (void)first.wait();
  node_->kill(SIGKILL);
  (void)node_->wait();
  start_managed_node(1, node_args);
  EXPECT_NE(node_->stderr_text().find("job profile(s) read from " + profiles), std::string::npos) << node_->stderr_text();
  // The production job registers again with the new node; the choice needs it there.
  wait_until([&] { return job_line(production.pid()).value("class", "") == "production"; }, 10s,
             "the production job back");
  process& second = start_job(long_kernels, "opportunistic", true);
  const nlohmann::json j = chosen_line(second, 10s);
  EXPECT_EQ(j["mechanism"], "time-sliced") << j;
  EXPECT_EQ(j["mechanism_reason"], "long-kernels") << "remembered across the crash";
}

// A profiles file that is not the node's own is ignored and said; the node starts all the same.
TEST_F(Mps, AProfilesFileOthersCanWriteIsIgnored) {
  const std::string profiles = socket_ + ".profiles";
  {
    std::ofstream out(profiles);
    out << "tgs-node job profiles 1\n";
  }
  ::chmod(profiles.c_str(), 0666);
  start_managed_node(1, {"--opportunistic-mechanism", "auto"});
  EXPECT_NE(node_->stderr_text().find("the job profiles " + profiles + " are writable by others (mode 0666): ignored"),
            std::string::npos)
      << node_->stderr_text();
}

// A co-runner beside which the production job stays below its target with the cap at its floor
// is held within seconds (the controller cannot protect production any other way), and its
// profile says so: its next start shares the other way, here as an MPS client, its kernels short.
TEST_F(Mps, ACoRunnerTheFloorCannotTameIsHeldAndSharesTheOtherWayAtItsNextStart) {
  start_correcting_node();
  process& production = start_gpu_bound_production();
  const std::vector<std::string> busy{"--kernels", "10", "--blocks", "1000", "--host-ms", "0"};  // 1 ms kernels
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file()};
  process& first = start_job(busy, "opportunistic", true);
  job_env_.clear();
  wait_until([&] { return job_line(first.pid()).value("held", false); }, 40s, "the co-runner held");
  const nlohmann::json j = job_line(first.pid());
  EXPECT_TRUE(j["corrected"].get<bool>()) << j;
  EXPECT_EQ(j["budget_blocks"], 0) << j;
  EXPECT_NE(node_->stderr_text().find("held on GPU 0: its production co-runner stays below its target"),
            std::string::npos) << node_->stderr_text();
  EXPECT_TRUE(first.running()) << "held, not ended";
  EXPECT_TRUE(production.running());
  // Held, the co-runner launches nothing, production recovers, and that confirms the correction.
  wait_until([&] { return node_->stderr_text().find("production recovered while it was held") != std::string::npos; },
             20s, "the correction confirmed");
  EXPECT_TRUE(job_line(first.pid()).value("held", false)) << "still held";
  first.kill(SIGTERM);
  (void)first.wait();
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file()};
  process& second = start_job(busy, "opportunistic", true);
  job_env_.clear();
  EXPECT_EQ(recorded(second.pid(), "init").at("connected"), "1");
  EXPECT_EQ(chosen_line(second)["mechanism"], "mps-client") << job_line(second.pid());
}

// The sequence of the GPU fault script (bench/gpu/mps_faults.py): a co-runner the correction held
// for good is killed, and then another job starts. Only the job that hurt production stays held
// (until production leaves): the next job, another command line, is not held and runs, and the
// cap the correction left at its floor opens again once production has recovered.
TEST_F(Mps, AfterAHeldCoRunnerIsKilledTheNextJobIsNotHeldAndRuns) {
  start_correcting_node();
  process& production = start_gpu_bound_production();
  process& first = start_job({"--kernels", "10", "--blocks", "1000", "--host-ms", "0"}, "opportunistic", true);
  wait_until([&] { return node_->stderr_text().find("production recovered while it was held") != std::string::npos; },
             60s, "the correction confirmed");
  ASSERT_TRUE(job_line(first.pid()).value("held", false)) << job_line(first.pid());
  first.kill(SIGKILL);
  (void)first.wait();
  // A light job with another command line: a first start of its own, time-sliced.
  process& next = start_job({"--kernels", "2", "--blocks", "10", "--host-ms", "5"}, "opportunistic", true);
  EXPECT_EQ(chosen_line(next)["mechanism"], "time-sliced") << job_line(next.pid());
  wait_until([&] { return job_line(next.pid()).value("launches_per_s", 0.0) > 0.0; }, 10s, "the next job launching");
  const nlohmann::json j = job_line(next.pid());
  EXPECT_FALSE(j.value("held", true)) << j;
  // A budget to launch with: unthrottled (null) or more than nothing.
  EXPECT_TRUE(j.contains("budget_blocks") && (j["budget_blocks"].is_null() || j["budget_blocks"].get<std::uint64_t>() > 0))
      << j;
  EXPECT_TRUE(production.running());
}

// A production job that stays below its target while its co-runner is held was not slowed by the
// co-runner (its own host, say): the node lets the co-runner go again after its patience, and does
// not hold it again in this run.
TEST_F(Mps, ACoRunnerHeldWhileProductionStaysSlowIsReleased) {
  // An unregistered process slows production below: it is only reported, never held, here.
  start_correcting_node({"--unregistered-action-under-mps", "report"});
  (void)start_gpu_bound_production();
  process& opp = start_job({"--kernels", "2", "--blocks", "100", "--host-ms", "5"}, "opportunistic", true);
  (void)chosen_line(opp);
  std::this_thread::sleep_for(2s);  // sharing, unhurt: the co-runner is light
  // Another process (no interposer) takes half the fake GPU: production loses, held co-runner or not.
  process& rogue = start_job({"--kernels", "4", "--blocks", "5000", "--host-ms", "0"}, "opportunistic", false);
  (void)rogue;
  wait_until([&] { return job_line(opp.pid()).value("held", false); }, 40s, "the co-runner held");
  wait_until([&] { return node_->stderr_text().find("released on GPU 0") != std::string::npos; }, 30s,
             "the co-runner released");
  EXPECT_NE(node_->stderr_text().find("so the loss is not its doing"), std::string::npos) << node_->stderr_text();
  EXPECT_EQ(node_->stderr_text().find("production recovered while it was held"), std::string::npos)
      << "production did not recover: nothing to confirm";
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(job_line(opp.pid()).value("held", true)) << "runs again, and is not held again: " << job_line(opp.pid());
}

// Another user's opportunistic job is never made a client of the server production uses, also
// under the default (every opportunistic job a client where it may be): MPS would join two
// tenants' fault domains, and a server serves one user at a time (the other user's job would wait
// at its first CUDA call).
TEST_F(Mps, AnotherUsersOpportunisticJobIsNeverAnMpsClientBesideProduction) {
  const group* nogroup = ::getgrgid(65534);
  if (::geteuid() != 0 || nogroup == nullptr) GTEST_SKIP() << "needs root and group 65534: the job is a second user's";
  start_managed_node(1, {"--class-sockets", dir_ + "/classes", "--class-sockets-group", "65534"});
  ::chmod(dir_.c_str(), 0711);
  process& production = start_on(dir_ + "/classes/gpu0-production.sock", {"--kernels", "4", "--blocks", "100", "--host-ms", "0"},
                                 "production", "production");
  wait_until([&] { return job_line(production.pid()).contains("class"); }, 5s, "the production job registered");
  const cabi::mps_client m =
      settings_as_second_user(dir_ + "/classes/gpu0-opportunistic.sock", cabi::class_code::opportunistic);
  EXPECT_EQ(m.client, 0) << "another user's job joined production's server";
  EXPECT_NE(node_->stderr_text().find("time-sliced (other-tenant)"), std::string::npos) << node_->stderr_text();
  ::chmod(dir_.c_str(), 0700);
}

// A process that skips the interposer and joins the node's daemon with a priority of its own is
// an MPS client the node never registered: unregistered on its GPU, and --unregistered-action
// acts on it as on any other (here kill), leaving the registered clients alone.
TEST_F(Mps, AClientThatBypassesTheInterposerIsUnregisteredAndActedOn) {
  start_managed_node(1, {"--unregistered-action", "kill", "--unregistered-grace-ms", "500"});
  process& production = start_recorded("production");
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file(), "CUDA_MPS_PIPE_DIRECTORY=" + pipe_of(0),
              "CUDA_MPS_CLIENT_PRIORITY=0", "TGS_JOB_NAME=rogue"};
  process& rogue = start_job({"--kernels", "5", "--blocks", "10", "--host-ms", "1"}, "opportunistic", false);
  job_env_.clear();
  const record_line r = recorded(rogue.pid(), "init");
  EXPECT_EQ(r.at("connected"), "1") << "the rogue is a client of the node's daemon";
  EXPECT_EQ(r.at("priority"), "0") << "with the priority it chose";
  const std::optional<int> status_of_rogue = rogue.wait_for(10s);
  ASSERT_TRUE(status_of_rogue) << "the unregistered client still runs\n" << node_->stderr_text();
  EXPECT_EQ(*status_of_rogue, -SIGKILL);
  EXPECT_NE(node_->stderr_text().find("killed pid " + std::to_string(rogue.pid())), std::string::npos)
      << node_->stderr_text();
  EXPECT_TRUE(production.running()) << "the registered client is left alone";
  EXPECT_TRUE(alive(daemon_pid(pipe_of(0)))) << "so is the daemon";
}

// With no action named, a client that went around the interposer on an MPS GPU is held while a
// production job is there (--unregistered-action-under-mps pause), and continued once none is.
TEST_F(Mps, ByDefaultABypassingClientIsHeldWhileAProductionJobIsOnItsGpu) {
  start_managed_node(1, {"--unregistered-grace-ms", "500"});
  process& production = start_recorded("production");
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file(), "CUDA_MPS_PIPE_DIRECTORY=" + pipe_of(0),
              "CUDA_MPS_CLIENT_PRIORITY=0", "TGS_JOB_NAME=rogue"};
  process& rogue = start_job({"--kernels", "5", "--blocks", "10", "--host-ms", "1"}, "opportunistic", false);
  job_env_.clear();
  EXPECT_EQ(recorded(rogue.pid(), "init").at("priority"), "0") << "the rogue chose normal priority";
  // The node says so once the hold has taken, so the process can be seen held a moment before
  // the line is written: wait for both.
  const std::string said = "holding pid " + std::to_string(rogue.pid());
  wait_until([&] { return held_by_node(rogue.pid()) && node_->stderr_text().find(said) != std::string::npos; },
             10s, "the node holding the bypassing client, and saying so");
  EXPECT_TRUE(production.running()) << "the registered client is left alone";
  production.kill(SIGKILL);
  (void)production.wait();
  wait_until([&] { return !held_by_node(rogue.pid()); }, 10s, "the node continuing it once no production job is there");
  EXPECT_TRUE(rogue.running());
}

// Outside MPS the default stays a report: the stronger action is for MPS GPUs alone.
TEST_F(Mps, WithoutMpsAnUnregisteredProcessIsOnlyReportedByDefault) {
  start_managed_node(1, {"--unregistered-grace-ms", "500", "--mps", "off"});
  process& production = start_recorded("production");
  job_env_ = {"TGS_JOB_NAME=rogue"};
  process& rogue = start_job({"--kernels", "5", "--blocks", "10", "--host-ms", "1"}, "opportunistic", false);
  job_env_.clear();
  wait_until([&] { return node_->stderr_text().find("pid " + std::to_string(rogue.pid()) + " (uid") != std::string::npos; },
             10s, "the node reporting the unregistered process");
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(held_by_node(rogue.pid())) << node_->stderr_text();
  EXPECT_TRUE(rogue.running());
  EXPECT_TRUE(production.running());
}

// --- a first registration that fails: waited for, and a job that starts late is handled --------

// A job started while the node is away (its socket is there, nobody answers: a restart) waits for
// it before CUDA starts, and so becomes the MPS client the node makes it, rather than starting
// outside MPS for good.
TEST_F(Mps, AJobStartedWhileTheNodeRestartsWaitsForItAndBecomesAClient) {
  start_managed_node(1, {"--opportunistic-mechanism", "mps"});
  node_->kill(SIGKILL);
  (void)node_->wait();
  ASSERT_EQ(::access(socket_.c_str(), F_OK), 0) << "the killed node's socket stays";
  process& job = start_recorded("opportunistic");
  std::this_thread::sleep_for(1500ms);
  start_managed_node(1, {"--opportunistic-mechanism", "mps"});
  const record_line r = recorded(job.pid(), "init");
  EXPECT_EQ(r.at("pipe"), pipe_of(0)) << job.stderr_text();
  EXPECT_EQ(r.at("priority"), "1") << "below normal, as the opportunistic class is";
  EXPECT_NE(job.stderr_text().find("waiting up to"), std::string::npos) << job.stderr_text();
  wait_until([&] { return !job_line(job.pid()).empty(); }, 5s, "the job registered");
  EXPECT_FALSE(job_line(job.pid()).value("late", true)) << job_line(job.pid());
}

// A job whose CUDA started outside MPS anyway (it waited less than the node took) is known when
// it registers: an opportunistic one is held beside production until it restarts, a production
// one runs, and both are shown late in the status and the metrics.
TEST_F(Mps, AJobWhoseCudaStartedOutsideMpsIsShownLateAndHeldIfOpportunistic) {
  start_managed_node(1, {"--opportunistic-mechanism", "mps"});
  node_->kill(SIGKILL);
  (void)node_->wait();
  process& production = start_recorded("production", {"TGS_REGISTRATION_WAIT_MS=100"});
  process& opp = start_recorded("opportunistic", {"TGS_REGISTRATION_WAIT_MS=100"});
  EXPECT_EQ(recorded(production.pid(), "init").at("pipe"), "-") << "CUDA started without the node";
  EXPECT_EQ(recorded(opp.pid(), "init").at("pipe"), "-");
  start_managed_node(1, {"--metrics-address", "127.0.0.1:0", "--opportunistic-mechanism", "mps"});
  wait_until([&] { return !job_line(opp.pid()).empty() && !job_line(production.pid()).empty(); }, 10s,
             "both jobs registered again");
  const nlohmann::json o = job_line(opp.pid());
  const nlohmann::json p = job_line(production.pid());
  EXPECT_TRUE(o.value("late", false)) << o;
  EXPECT_TRUE(p.value("late", false)) << p;
  EXPECT_FALSE(o.value("mps_client", true)) << o;
  wait_until([&] { return job_line(opp.pid()).value("held", false); }, 5s, "the late opportunistic job held");
  EXPECT_FALSE(job_line(production.pid()).value("held", true));
  const std::string log = node_->stderr_text();
  EXPECT_NE(log.find("started CUDA before it registered"), std::string::npos) << log;
  std::string text;
  wait_until([&] {
    text = http_get(metrics_url());
    return text.find("tgs_job_late{") != std::string::npos && text.find("} 1") != std::string::npos;
  }, 5s, "tgs_job_late in the metrics");
}

// Under the default (`auto`) the same opportunistic job is not held: a job the node has not
// timed gets a context of its own, which is what its CUDA already has, so it shares time-sliced
// and is not late. Production, outside MPS until it restarts, is still shown late.
TEST_F(Mps, UnderTheDefaultAJobWhoseCudaStartedOutsideMpsSharesTimeSlicedUnheld) {
  start_managed_node(1);
  node_->kill(SIGKILL);
  (void)node_->wait();
  process& production = start_recorded("production", {"TGS_REGISTRATION_WAIT_MS=100"});
  process& opp = start_recorded("opportunistic", {"TGS_REGISTRATION_WAIT_MS=100"});
  EXPECT_EQ(recorded(opp.pid(), "init").at("pipe"), "-") << "CUDA started without the node";
  start_managed_node(1);
  wait_until([&] { return job_line(opp.pid()).contains("mechanism") && !job_line(production.pid()).empty(); }, 10s,
             "both jobs registered again");
  const nlohmann::json o = job_line(opp.pid());
  EXPECT_EQ(o["mechanism"], "time-sliced") << o;
  EXPECT_FALSE(o.value("late", true)) << o;
  EXPECT_TRUE(job_line(production.pid()).value("late", false)) << job_line(production.pid());
  EXPECT_FALSE(o.value("held", true)) << o;
  std::this_thread::sleep_for(2s);  // a late client is held at once (the test above: within 5 s)
  EXPECT_FALSE(job_line(opp.pid()).value("held", true)) << job_line(opp.pid());
  EXPECT_TRUE(opp.running()) << opp.stderr_text();
  EXPECT_EQ(node_->stderr_text().find("held beside production until it restarts"), std::string::npos)
      << node_->stderr_text();
}

TEST_F(Mps, AProgramThatCallsCuInitThroughDlsymGetsItsEnvironmentFirst) {
  start_managed_node(1, {"--opportunistic-mechanism", "mps"});
  process& job = start_recorded("opportunistic", {"CUDA_MPS_CLIENT_PRIORITY=0"}, {"--init-through-dlsym"});
  const record_line r = recorded(job.pid(), "init");
  EXPECT_EQ(r.at("pipe"), pipe_of(0));
  EXPECT_EQ(r.at("priority"), "1");
}

TEST_F(Mps, TheMpsPolicysThreadShareBecomesTheClientsPercentage) {
  start_managed_node(1, {"--policy", "mps", "--mps.production-threads", "1", "--mps.opportunistic-threads", "0.3",
                         "--opportunistic-mechanism", "mps"});
  process& opportunistic = start_recorded("opportunistic");
  process& production = start_recorded("production");
  EXPECT_EQ(recorded(opportunistic.pid(), "context").at("threads"), "30");
  EXPECT_EQ(recorded(opportunistic.pid(), "context").at("priority"), "0");
  EXPECT_EQ(recorded(production.pid(), "context").at("threads"), "-");
}

}  // namespace

// --- a client's end ---------------------------------------------------------------------------------

namespace {
/// The drain time an interposer's log reports ("the GPU's work drained in N ms"); -1: none.
double drained_ms(const std::string& log) {
  const std::string mark = "the GPU's work drained in ";
  const std::size_t at = log.find(mark);
  return at == std::string::npos ? -1.0 : std::strtod(log.c_str() + at + mark.size(), nullptr);
}
}  // namespace

// An MPS client ended with a long kernel on the GPU takes the server's other clients down with it
// (docs/results/mps-faults.md). SIGTERM, how Kubernetes and users end a job, is therefore held
// until the client's work on the GPU is done, and then ends the process as it would have.
TEST_F(Mps, ASigtermedClientEndsOnlyAfterItsWorkOnTheGpu) {
  start_managed_node(1);
  job_env_ = {"TGS_FAKE_MPS_RECORD=" + record_file(), "TGS_FAKE_NS_PER_BLOCK=1000000", "TGS_LOG_LEVEL=info"};
  // A production client: no launch cap holds its next kernel back, so one is on the GPU when the
  // signal comes (the drain is the same for both classes).
  process& job = start_job({"--kernels", "1", "--blocks", "2000", "--host-ms", "0"}, "production", true);  // 2 s kernels
  job_env_.clear();
  (void)recorded(job.pid(), "context");
  // Its first iteration done, its next kernel is launched at once (no host time): one is on the GPU.
  wait_until([&] { return !job.progress_lines().empty() || !job.running(); }, 30s, "the job's first iteration");
  std::this_thread::sleep_for(200ms);
  const auto sent = std::chrono::steady_clock::now();
  job.kill(SIGTERM);
  EXPECT_EQ(job.wait(), -SIGTERM) << "the process ends by the signal it was sent";
  const double took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
  const double ms = drained_ms(job.stderr_text());
  ASSERT_GE(ms, 0.0) << job.stderr_text();
  EXPECT_LE(ms, 2500.0);
  // The signal came about 0.2 s into a 2 s kernel: the process lives until that kernel ends. (The
  // drain's own time can read 0 where a sanitizer defers the handler to the end of the job's
  // blocking wait, which is the kernel's end too.)
  EXPECT_GT(took_ms, 1000.0) << "the process ended before its kernel: " << job.stderr_text();
  EXPECT_GE(took_ms, ms) << "the process outlived the drain";
}

// Outside MPS a client's end harms no one: SIGTERM keeps its default action, at once.
TEST_F(Mps, OutsideMpsSigtermEndsAJobAtOnce) {
  start_managed_node(1, {"--mps", "off"});
  job_env_ = {"TGS_FAKE_NS_PER_BLOCK=1000000", "TGS_LOG_LEVEL=info"};
  process& job = start_job({"--kernels", "1", "--blocks", "2000", "--host-ms", "0"}, "opportunistic", true);
  job_env_.clear();
  wait_until([&] { return !job.stdout_lines().empty() || !job.running(); }, 10s,
             "the job's first progress line");
  std::this_thread::sleep_for(300ms);
  const auto sent = std::chrono::steady_clock::now();
  job.kill(SIGTERM);
  EXPECT_EQ(job.wait(), -SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 1s) << "no drain outside MPS";
  EXPECT_LT(drained_ms(job.stderr_text()), 0.0) << job.stderr_text();
}

// Clients of one MPS server share a fault domain (docs/results/mps-faults.md): the fault policy in
// force says so where the rate policy makes the jobs clients, unless the operator named one.
TEST_F(Mps, UnderMpsTheDefaultFaultPolicyIsTheSharedFaultDomain) {
  start_managed_node(1);
  EXPECT_EQ(node_line().value("fault_policy", ""), "shared-fault-domain") << status();
  EXPECT_NE(node_->stderr_text().find("fault policy shared-fault-domain"), std::string::npos) << node_->stderr_text();
}

TEST_F(Mps, WithoutMpsOrWithANamedFaultPolicyTheFaultPolicyIsAsBefore) {
  start_managed_node(1, {"--mps", "off"});
  EXPECT_EQ(node_line().value("fault_policy", ""), "separate-contexts") << status();
  node_.reset();
  start_managed_node(1, {"--fault-policy", "separate-contexts"});
  EXPECT_EQ(node_line().value("fault_policy", ""), "separate-contexts") << status();
}

// --- the fault table under the default ----------------------------------------------------------

namespace {

// Each way an opportunistic job ends in a cloud, under the default (`auto`), beside a GPU-bound
// production job of the same user, at the job's first start and at its next (the same command
// line, so the same profile). The first start is no MPS client: its kernels were never timed. The
// next, its kernels timed short, is one, and its end is no GPU fault that crosses clients: the
// node ends production in neither. What the GPU itself does on these ends is measured on an H200
// (docs/results/mechanism-choice.md, docs/results/mps-faults.md).
struct fault_case {
  const char* name;
  std::vector<std::string> args;  // the job's: its loop, and how it ends by itself
  int signal;                     // else: sent once its kernels are timed
};
void PrintTo(const fault_case& c, std::ostream* os) { *os << c.name; }

/// A light loop of short kernels, then `end`.
std::vector<std::string> light_loop(std::vector<std::string> end, const char* kernels = "20", const char* host_ms = "1") {
  std::vector<std::string> a{"--kernels", kernels, "--blocks", "20", "--host-ms", host_ms};
  a.insert(a.end(), end.begin(), end.end());
  return a;
}

class DefaultFaultTable : public Mps, public ::testing::WithParamInterface<fault_case> {};

TEST_P(DefaultFaultTable, ProductionSurvivesTheJobsFirstAndNextStart) {
  const fault_case& c = GetParam();
  start_managed_node(1);
  process& production = start_gpu_bound_production();
  for (const char* start : {"first", "next"}) {
    process& opp = start_job(c.args, "opportunistic", true);
    const nlohmann::json j = chosen_line(opp);
    EXPECT_EQ(j.value("mechanism", ""), start == std::string("first") ? "time-sliced" : "mps-client")
        << start << " start: " << j;
    // Enough kernels timed for the profile to count them (the node's least is 100) before its end.
    wait_until([&] { return job_line(opp.pid()).value("kernels_timed", 0) >= 200 || !opp.running(); }, 20s,
               "two hundred of its kernels timed");
    if (c.signal != 0) opp.kill(c.signal);
    (void)opp.wait();
    wait_until([&] { return job_line(opp.pid()).empty(); }, 5s, "the job gone from the status");
    std::this_thread::sleep_for(300ms);  // the node acts on an end at once
    EXPECT_TRUE(production.running()) << start << " start; node log:\n" << node_->stderr_text();
    EXPECT_EQ(gpu_line0().value("co_runners_ended", -1), 0) << start << " start: " << gpu_line0();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ends, DefaultFaultTable,
    ::testing::Values(fault_case{"Sigkill", light_loop({"--seconds", "0"}), SIGKILL},
                      fault_case{"SigkillWithQueuedWork", light_loop({"--seconds", "0"}, "400", "0"), SIGKILL},
                      fault_case{"Sigterm", light_loop({"--seconds", "0"}), SIGTERM},
                      fault_case{"Exit", light_loop({"--seconds", "4"}), 0},
                      fault_case{"OutOfMemory", light_loop({"--fail-at", "4", "--fail", "oom", "--oom-mib", "1048576"}), 0},
                      fault_case{"DeviceSideAssert", light_loop({"--fail-at", "4", "--fail", "device-assert"}), 0}),
    [](const ::testing::TestParamInfo<fault_case>& i) { return std::string(i.param.name); });

}  // namespace
