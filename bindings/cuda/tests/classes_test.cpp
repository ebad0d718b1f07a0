// SPDX-License-Identifier: Apache-2.0
// Classes no job can forge, on the fake driver: a job's class and GPU are its class socket's; on
// the main socket only a trusted user chooses its class; socket modes and peer credentials decide
// who reaches what; processes that use a GPU without registering are reported, held or killed;
// the metrics endpoint passes promtool and never holds up the node; the CDI spec the node writes.
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "e2e_support.hpp"
#include "http_get.hpp"
#include "node_client.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;
namespace cabi = tgs::cuda::abi;

namespace {

const std::vector<std::string> production_args{"--kernels", "20", "--blocks", "100", "--host-ms", "2"};
const std::vector<std::string> opportunistic_args{"--kernels", "100", "--blocks", "20", "--host-ms", "0"};

class Classes : public EndToEnd {
 protected:
  void TearDown() override {
    release_second_user();
    EndToEnd::TearDown();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);  // the class sockets' folder and lock files
    if (two_devices_) {
      ::unsetenv("TGS_FAKE_DEVICE_COUNT");
      ::shm_unlink(("/" + device_ + "-1").c_str());
    }
  }

  /// The fake driver and NVML of every process started from now on see two devices.
  void use_two_devices() {
    ::setenv("TGS_FAKE_DEVICE_COUNT", "2", 1);
    two_devices_ = true;
  }

  [[nodiscard]] std::string class_dir() const { return dir_ + "/gpus"; }
  [[nodiscard]] std::string class_socket(unsigned gpu, const std::string& cls) const {
    return class_dir() + "/gpu" + std::to_string(gpu) + "-" + cls + ".sock";
  }

  /// A node serving class sockets for `gpus` GPUs, waited for until its last class socket is there.
  void start_class_node(unsigned gpus, std::vector<std::string> extra = {}) {
    if (gpus > 1) use_two_devices();  // NVML must see every GPU --gpus names
    // The operator's folder, open to the other users these tests run (a folder tgs-node makes is
    // closed to them): the operator says it means the open production sockets.
    ::mkdir(class_dir().c_str(), 0755);
    ::chmod(class_dir().c_str(), 0755);
    extra.insert(extra.begin(), {"--class-sockets", class_dir(), "--gpus", std::to_string(gpus),
                                 "--allow-open-production-socket"});
    start_node(extra);
    wait_until([&] { return ::access(class_socket(gpus - 1, "opportunistic").c_str(), F_OK) == 0; }, 5s,
               "the class sockets");
  }

  /// Runs `body` in a child process as user and group 65534 (nobody, nogroup), which reports an
  /// int through a pipe and then stays until `release_second_user`, so its registration stands
  /// while the test looks. Empty when the child reported nothing.
  template <typename Body>
  std::optional<int> as_second_user(Body body) {
    ::chmod(dir_.c_str(), 0711);  // the second user reaches the sockets
    int report[2];
    if (::pipe(report) != 0) return std::nullopt;
    second_user_ = ::fork();
    if (second_user_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(report[0]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(1);
      const int result = body();
      (void)::write(report[1], &result, sizeof(result));
      ::pause();
      ::_exit(0);
    }
    ::close(report[1]);
    int result = 0;
    const bool got = ::read(report[0], &result, sizeof(result)) == static_cast<ssize_t>(sizeof(result));
    ::close(report[0]);
    return got ? std::optional<int>(result) : std::nullopt;
  }
  void release_second_user() {
    if (second_user_ > 0) {
      ::kill(second_user_, SIGKILL);
      ::waitpid(second_user_, nullptr, 0);
    }
    second_user_ = -1;
  }

  pid_t second_user_ = -1;
  bool two_devices_ = false;
};

/// What a second user's registration came to: -errno when it could not connect, 0 when the node
/// refused it, else 1 + the class code the node gave it (1 production, 2 opportunistic).
/// The connection stays open (in the child, until it is killed), so the job stays registered.
int register_outcome(const std::string& socket, cabi::class_code asked) {
  auto client = node_client::connect(socket);
  if (!client) return -errno;
  static std::unique_ptr<node_client> kept;
  kept = std::make_unique<node_client>(std::move(*client));
  if (!kept->register_as(asked, 0, "second-user")) return 0;
  return 1 + static_cast<int>(kept->segment()->job_class);
}

// --- the class is the socket's -------------------------------------------------------------------

TEST_F(Classes, ARegistrationHasItsSocketsClassAndGpuWhateverItAsks) {
  start_class_node(2);
  auto opp = node_client::connect(class_socket(1, "opportunistic"));
  ASSERT_TRUE(opp);
  ASSERT_TRUE(opp->register_as(cabi::class_code::production, 0, "claims-production-on-gpu0"));
  EXPECT_EQ(opp->segment()->job_class, cabi::class_code::opportunistic);
  EXPECT_EQ(opp->segment()->gpu, 1U);
  // An index past the node's GPUs (a container's own numbering) does not matter on a class socket.
  auto prod = node_client::connect(class_socket(0, "production"));
  ASSERT_TRUE(prod);
  ASSERT_TRUE(prod->register_as(cabi::class_code::opportunistic, 7, "asks-opportunistic-on-gpu7"));
  EXPECT_EQ(prod->segment()->job_class, cabi::class_code::production);
  EXPECT_EQ(prod->segment()->gpu, 0U);

  const nlohmann::json o = job_named("claims-production-on-gpu0");
  EXPECT_EQ(o.value("class", ""), "opportunistic") << o;
  EXPECT_EQ(o.value("gpu", 99), 1) << o;
  EXPECT_EQ(o.value("class_from", ""), "gpu1-opportunistic.sock") << o;
  const nlohmann::json p = job_named("asks-opportunistic-on-gpu7");
  EXPECT_EQ(p.value("class", ""), "production") << p;
  EXPECT_EQ(p.value("class_from", ""), "gpu0-production.sock") << p;
  EXPECT_NE(node_->stderr_text().find("asked to be production; it is opportunistic (the class of the socket"),
            std::string::npos)
      << node_->stderr_text();
}

TEST_F(Classes, AJobThatSetsTheOtherClassIsThrottledAsItsSocketSays) {
  // The interposer's own path: TGS_JOB_CLASS=production on the opportunistic socket.
  start_class_node(1);
  process& prod = start_on(class_socket(0, "production"), production_args, "opportunistic", "prod");
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 2s);
  process& opp = start_on(class_socket(0, "opportunistic"), opportunistic_args, "production", "opp");
  std::this_thread::sleep_for(4s);  // profiling and the first control windows
  const double shared = measure_rate(prod, 3s);
  const nlohmann::json o = job_named("opp");
  std::printf("production alone %.1f it/s, shared %.1f (%.3f); the forger: %s\n", alone, shared, shared / alone,
              o.dump().c_str());
  EXPECT_EQ(o.value("class", ""), "opportunistic") << o;
  EXPECT_GT(o.value("throttled_s", 0.0), 0.0) << "the forger was never throttled: " << o;
  EXPECT_GE(shared, 0.95 * alone);
  EXPECT_EQ(job_named("prod").value("class", ""), "production");
  // Throttled, one iteration of the forger's can take longer than a second: 3 s see two reports.
  EXPECT_GT(measure_rate(opp, 3s), 0.0) << "the opportunistic job should still make progress";
}

// --- who reaches which socket -----------------------------------------------------------------------

TEST_F(Classes, SocketFilesHaveTheirClassesModesAndGroup) {
  const group* nogroup = ::getgrgid(65534);
  if (::geteuid() != 0 || nogroup == nullptr) GTEST_SKIP() << "needs root and group 65534 to give the sockets away";
  start_class_node(2, {"--production-socket-mode", "432", "--opportunistic-socket-mode", "438", "--socket-group",
                       "65534"});
  for (unsigned gpu = 0; gpu < 2; ++gpu) {
    for (const char* cls : {"production", "opportunistic"}) {
      struct stat st{};
      ASSERT_EQ(::stat(class_socket(gpu, cls).c_str(), &st), 0) << class_socket(gpu, cls);
      EXPECT_TRUE(S_ISSOCK(st.st_mode));
      EXPECT_EQ(st.st_mode & 07777, std::string(cls) == "production" ? 0660U : 0666U) << class_socket(gpu, cls);
      EXPECT_EQ(st.st_gid, 65534U) << class_socket(gpu, cls);
    }
  }
  EXPECT_EQ(::access(class_socket(2, "production").c_str(), F_OK), -1) << "a socket for a GPU the node does not have";
}

TEST_F(Classes, AUserWhoCannotReachTheProductionSocketCannotBeProduction) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the check is a second user's";
  start_class_node(1, {"--production-socket-mode", "384"});  // 0600: the node's own user only
  EXPECT_EQ(as_second_user([&] { return register_outcome(class_socket(0, "production"), cabi::class_code::production); }),
            -EACCES);
  release_second_user();
  // The opportunistic socket is open to all: the same user registers there, as opportunistic.
  EXPECT_EQ(as_second_user([&] {
              return register_outcome(class_socket(0, "opportunistic"), cabi::class_code::production);
            }),
            2);
  EXPECT_EQ(job_named("second-user").value("class", ""), "opportunistic");
  release_second_user();
}

TEST_F(Classes, OnTheMainSocketOnlyATrustedUserChoosesItsClass) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the untrusted user is a second one";
  start_class_node(1, {"--socket-mode", "438"});
  EXPECT_EQ(as_second_user([&] { return register_outcome(socket_, cabi::class_code::production); }), 2)
      << "an untrusted user's TGS_JOB_CLASS=production must give it the default class";
  EXPECT_EQ(job_named("second-user").value("class_from", ""), "default");
  release_second_user();
  // The node's own user is trusted.
  auto own = node_client::connect(socket_);
  ASSERT_TRUE(own);
  ASSERT_TRUE(own->register_as(cabi::class_code::production, 0, "own-user"));
  EXPECT_EQ(own->segment()->job_class, cabi::class_code::production);
  EXPECT_EQ(job_named("own-user").value("class_from", ""), "request");
}

TEST_F(Classes, ATrustedUidChoosesItsClassOnTheMainSocket) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the trusted user is a second one";
  start_class_node(1, {"--socket-mode", "438", "--trust-uid", "65534"});
  EXPECT_EQ(as_second_user([&] { return register_outcome(socket_, cabi::class_code::production); }), 1);
  EXPECT_EQ(job_named("second-user").value("class_from", ""), "request");
  release_second_user();
}

TEST_F(Classes, AllowedUsersStillApplyOnClassSockets) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the refused user is a second one";
  start_class_node(1, {"--allow-uid", "0"});
  EXPECT_EQ(as_second_user([&] {
              return register_outcome(class_socket(0, "opportunistic"), cabi::class_code::opportunistic);
            }),
            0)
      << "a user outside --allow-uid registered through a class socket";
  release_second_user();
  EXPECT_NE(node_->stderr_text().find("uid 65534 is not allowed to register"), std::string::npos)
      << node_->stderr_text();
}

// --- bad input on a class socket ---------------------------------------------------------------

TEST_F(Classes, GarbageOnAClassSocketClosesOnlyThatConnection) {
  start_class_node(1);
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return !job_named("prod").empty(); }, 5s, "the production job registering");
  const double before = measure_rate(prod, 1s);
  for (const std::string& garbage : {std::string("GET / HTTP/1.1\r\n\r\n"), std::string(3, '\0'),
                                     std::string(4096, '\xff'), std::string("TGSN\x02\x00\x00\x00", 8)}) {
    auto client = node_client::connect(class_socket(0, "opportunistic"));
    ASSERT_TRUE(client);
    ASSERT_TRUE(client->send_bytes(garbage.data(), garbage.size()));
    char reply[512];
    ssize_t n = 0;
    while ((n = ::recv(client->fd(), reply, sizeof(reply), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "the node did not close a connection that sent garbage";
  }
  EXPECT_NE(node_->stderr_text().find("socket gpu0-opportunistic"), std::string::npos) << node_->stderr_text();
  EXPECT_GE(measure_rate(prod, 1s), 0.9 * before);
  EXPECT_EQ(job_named("prod").value("class", ""), "production") << "the running job lost its registration";
}

// --- processes that never registered ---------------------------------------------------------------

TEST_F(Classes, AProcessThatNeverRegisteredIsReportedWithItsCgroup) {
  start_class_node(1, {"--unregistered-grace-ms", "500"});
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  std::vector<nlohmann::json> seen;
  wait_until(
      [&] {
        seen = unregistered_lines();
        return !seen.empty() && seen.front().value("state", "") == "reported";
      },
      5s, "the unregistered process in the status");
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen.front().value("pid", 0), rogue.pid());
  EXPECT_EQ(seen.front().value("gpu", 99), 0);
  EXPECT_FALSE(seen.front().value("cgroup", "").empty()) << seen.front();
  EXPECT_NE(node_->stderr_text().find("pid " + std::to_string(rogue.pid())), std::string::npos);
  EXPECT_NE(status(false).find("unregistered pid " + std::to_string(rogue.pid())), std::string::npos);
  EXPECT_TRUE(rogue.running()) << "report only must leave it running";
  EXPECT_TRUE(prod.running());
  // The registered jobs are never listed.
  for (const nlohmann::json& u : unregistered_lines()) EXPECT_NE(u.value("pid", 0), prod.pid()) << u;
}

TEST_F(Classes, KillEndsAnUnregisteredProcessAndNothingElse) {
  start_class_node(1, {"--unregistered-action", "kill", "--unregistered-grace-ms", "500"});
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  process& opp = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "opp");
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  const std::optional<int> status_of_rogue = rogue.wait_for(5s);
  ASSERT_TRUE(status_of_rogue) << "the unregistered process still runs\n" << status();
  EXPECT_EQ(*status_of_rogue, -SIGKILL);
  EXPECT_NE(node_->stderr_text().find("killed pid " + std::to_string(rogue.pid())), std::string::npos);
  EXPECT_TRUE(prod.running());
  EXPECT_TRUE(opp.running());
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
}

TEST_F(Classes, PauseHoldsAnUnregisteredProcessWhileProductionRuns) {
  start_class_node(1, {"--unregistered-action", "pause", "--unregistered-grace-ms", "500"});
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  std::this_thread::sleep_for(1500ms);
  EXPECT_GT(measure_rate(rogue, 1s), 5.0) << "with no production job on its GPU it runs";
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return node_->stderr_text().find("holding pid") != std::string::npos; }, 5s, "the node holding it");
  std::this_thread::sleep_for(300ms);  // progress lines written before the stop
  rogue.drain();
  const std::size_t lines = rogue.progress_lines().size();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(rogue.progress_lines().size(), lines) << "a held process made progress";
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  prod.kill(SIGKILL);
  prod.wait();
  wait_until([&] { return node_->stderr_text().find("continuing pid") != std::string::npos; }, 5s,
             "the node continuing it");
  std::this_thread::sleep_for(500ms);
  EXPECT_GT(measure_rate(rogue, 1s), 5.0) << "it should run again once production left";
}

TEST_F(Classes, AStoppingNodeContinuesWhatItHeld) {
  start_class_node(1, {"--unregistered-action", "pause", "--unregistered-grace-ms", "500"});
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return node_->stderr_text().find("holding pid") != std::string::npos; }, 5s, "the node holding it");
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(5s)) << "the node did not stop";
  std::this_thread::sleep_for(500ms);
  EXPECT_GT(measure_rate(rogue, 1s), 0.0) << "the node left a process stopped behind it";
  (void)prod;
}

// --- holds the held cannot lift, and users who slip between processes -------------------------

/// Why this test process could not make and freeze a cgroup v2 (so neither can a node it starts),
/// or empty when it can.
std::string why_no_cgroups() {
  if (::geteuid() != 0) return "not root";
  const std::string mount = cgroup2_mount();
  if (mount.empty()) return "no cgroup v2 hierarchy mounted at its root";
  const std::string probe = mount + "/tgs-test-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return "cannot make " + probe + ": " + std::strerror(errno);
  const bool freezer = ::access((probe + "/cgroup.freeze").c_str(), W_OK) == 0;
  ::rmdir(probe.c_str());
  return freezer ? std::string() : "no cgroup freezer";
}

/// The status line of unregistered process `pid`; empty while it has none.
nlohmann::json unregistered_line_of(const std::vector<nlohmann::json>& lines, pid_t pid) {
  for (const nlohmann::json& u : lines) {
    if (u.value("pid", 0) == pid) return u;
  }
  return nlohmann::json::object();
}

// Where the node can make cgroups, a held process is frozen in one of its own: its owner's
// SIGCONT every 0.2 s does not make it run, the status says what the node finds, and when
// production leaves it goes back to the cgroup it came from and runs again.
TEST_F(Classes, AHeldProcessStaysHeldWhileItsOwnerSendsSigcontEveryFifthOfASecond) {
  if (const std::string why = why_no_cgroups(); !why.empty()) GTEST_SKIP() << "cannot freeze cgroups here: " << why;
  start_class_node(1, {"--unregistered-action", "pause", "--unregistered-grace-ms", "500"});
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  wait_until([&] { return !cgroup_path_of(rogue.pid()).empty(); }, 2s, "the rogue's cgroup");
  const std::string origin = cgroup_path_of(rogue.pid());
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return frozen(rogue.pid()); }, 8s, "the node freezing the unregistered process");
  std::this_thread::sleep_for(300ms);  // progress lines written before the freeze
  rogue.drain();
  const std::size_t lines = rogue.progress_lines().size();
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(::kill(rogue.pid(), SIGCONT), 0);
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(frozen(rogue.pid())) << "after SIGCONT " << i + 1;
  }
  rogue.drain();
  EXPECT_EQ(rogue.progress_lines().size(), lines) << "a held process made progress after its owner's SIGCONTs";
  const nlohmann::json u = unregistered_line_of(unregistered_lines(), rogue.pid());
  EXPECT_EQ(u.value("state", ""), "held") << u;
  EXPECT_EQ(u.value("hold", ""), "cgroup-freeze") << u;
  EXPECT_EQ(u.value("observed", ""), "frozen") << u;
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  prod.kill(SIGKILL);
  prod.wait();
  wait_until([&] { return !frozen(rogue.pid()) && cgroup_path_of(rogue.pid()) == origin; }, 5s,
             "the node releasing it, back in the cgroup it came from, once production left");
  std::this_thread::sleep_for(500ms);
  EXPECT_GT(measure_rate(rogue, 1s), 5.0) << "it should run again once production left";
}

// A process in a cgroup of its own (a container's, say) is frozen in a child of that cgroup: it
// stays under its container's limits, and the container's cgroup never empties (a container
// manager would take that for the container's end: systemd stops and removes such a scope).
TEST_F(Classes, AProcessInItsOwnCgroupIsFrozenInsideItAndItsCgroupNeverEmpties) {
  if (const std::string why = why_no_cgroups(); !why.empty()) GTEST_SKIP() << "cannot freeze cgroups here: " << why;
  start_class_node(1, {"--unregistered-action", "pause", "--unregistered-grace-ms", "500"});
  // The container's cgroup: root's, no controllers for children, as a runtime makes one.
  const std::string mount = cgroup2_mount();
  const std::string container = "/tgs-test-container-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir((mount + container).c_str(), 0755), 0) << std::strerror(errno);
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  std::ofstream(mount + container + "/cgroup.procs") << rogue.pid() << std::flush;
  ASSERT_EQ(cgroup_path_of(rogue.pid()), container);
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return frozen(rogue.pid()); }, 8s, "the node freezing the unregistered process");
  EXPECT_EQ(cgroup_path_of(rogue.pid()), container + "/tgs-held." + std::to_string(rogue.pid()));
  EXPECT_TRUE(cgroup_event(mount + container, "populated")) << "the container's cgroup emptied while its process was held";
  prod.kill(SIGKILL);
  prod.wait();
  wait_until([&] { return !frozen(rogue.pid()) && cgroup_path_of(rogue.pid()) == container; }, 5s,
             "the node releasing it, back in its own cgroup, once production left");
  const std::string leaf = mount + container + "/tgs-held." + std::to_string(rogue.pid());
  wait_until([&] { return ::access(leaf.c_str(), F_OK) != 0; }, 2s, "the frozen cgroup removed");
  rogue.kill(SIGKILL);
  rogue.wait();
  for (int i = 0; i < 100 && ::rmdir((mount + container).c_str()) != 0; ++i) std::this_thread::sleep_for(10ms);
}

// Where holds are by SIGSTOP (--hold-with signal, the fallback without cgroups), a process its
// owner continues is stopped again at the node's next look, and the status counts it.
TEST_F(Classes, UnderSignalHoldsAProcessItsOwnerContinuesIsStoppedAgain) {
  start_class_node(1, {"--unregistered-action", "pause", "--unregistered-grace-ms", "500", "--hold-with", "signal"});
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return stopped(rogue.pid()); }, 8s, "the node stopping the unregistered process");
  int stopped_samples = 0;
  int samples = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(::kill(rogue.pid(), SIGCONT), 0);
    for (int k = 0; k < 20; ++k, ++samples) {
      std::this_thread::sleep_for(10ms);
      stopped_samples += stopped(rogue.pid()) ? 1 : 0;
    }
  }
  const std::optional<double> again = time_until([&] { return stopped(rogue.pid()); }, 1s);
  EXPECT_TRUE(again) << "the node did not stop it again\n" << node_->stderr_text();
  std::printf("under SIGCONT every 0.2 s the held process was stopped in %d of %d samples\n", stopped_samples, samples);
  const nlohmann::json u = unregistered_line_of(unregistered_lines(), rogue.pid());
  EXPECT_EQ(u.value("hold", ""), "sigstop") << u;
  EXPECT_GE(u.value("held_again", 0), 1) << u;
  EXPECT_NE(node_->stderr_text().find("was continued by another process"), std::string::npos) << node_->stderr_text();
  (void)prod;
}

// The same unregistered GPU work split into processes that each end before the grace: the node
// counts the user's unregistered time on the GPU, not each process's, and acts within two graces.
TEST_F(Classes, ShortProcessesUnderTheGraceAreActedOnWithinTwoGraces) {
  start_class_node(1, {"--unregistered-action", "kill", "--unregistered-grace-ms", "3000"});
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  std::vector<std::string> args = opportunistic_args;
  args.insert(args.end(), {"--seconds", "2.5"});
  const auto started = std::chrono::steady_clock::now();
  std::optional<double> acted_after;
  for (int i = 0; i < 6 && !acted_after; ++i) {
    process& rogue = start_on(class_socket(0, "opportunistic"), args, "opportunistic", "short", false);
    const std::optional<int> status = rogue.wait_for(10s);
    ASSERT_TRUE(status) << "a 2.5 s process still runs";
    if (*status == -SIGKILL) {
      acted_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    } else {
      ASSERT_EQ(*status, 0) << rogue.stderr_text();
    }
  }
  ASSERT_TRUE(acted_after) << "six 2.5 s processes, none acted on\n" << node_->stderr_text();
  std::printf("the user's short processes were acted on %.1f s after the first started\n", *acted_after);
  EXPECT_LE(*acted_after, 6.0) << node_->stderr_text();
  EXPECT_TRUE(prod.running());
}

// A process that keeps a connection to the node open without ever registering is unregistered
// from the start: acted on one grace after the node first sees it (within one look), not after
// ten.
TEST_F(Classes, AProcessWhoseConnectionNeverRegistersIsActedOnWithinOneGrace) {
  start_class_node(1, {"--unregistered-action", "kill", "--unregistered-grace-ms", "2000"});
  std::vector<std::string> args = opportunistic_args;
  args.insert(args.end(), {"--idle-connection", socket_});
  const auto started = std::chrono::steady_clock::now();
  process& rogue = start_on(class_socket(0, "opportunistic"), args, "opportunistic", "silent", false);
  const std::optional<int> status = rogue.wait_for(25s);
  ASSERT_TRUE(status) << "still running\n" << node_->stderr_text();
  EXPECT_EQ(*status, -SIGKILL);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("a process holding a silent connection was acted on %.1f s after it started (grace 2 s)\n", after);
  EXPECT_LE(after, 3.5) << node_->stderr_text();
}

/// The start time of process `pid` (field 22 of /proc/<pid>/stat), or 0.
std::uint64_t start_ticks_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && (fields >> field); ++i) {
  }
  std::uint64_t start = 0;
  fields >> start;
  return start;
}

class HeldAcrossRestarts : public Classes {
 protected:
  const std::vector<std::string> pause_args{"--unregistered-action", "pause", "--unregistered-grace-ms", "500"};

  /// A node that holds an unregistered process while a production job runs, killed with SIGKILL
  /// while it holds it: nothing of it is left to continue the process.
  void hold_then_kill_the_node() {
    start_class_node(1, pause_args);
    rogue_ = &start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
    prod_ = &start_on(class_socket(0, "production"), production_args, "production", "prod");
    wait_until([&] { return held_by_node(rogue_->pid()); }, 8s, "the node holding the unregistered process");
    node_->kill(SIGKILL);
    node_->wait();
    ASSERT_TRUE(held_by_node(rogue_->pid()));
  }
  /// A node started on the killed node's sockets (its socket files are still there: waited for
  /// until the new node says it listens).
  void start_successor(std::vector<std::string> extra) {
    start_class_node(1, std::move(extra));
    wait_until([&] { return node_->stderr_text().find("listening on") != std::string::npos; }, 15s,
               "the successor listening");
  }

  process* rogue_ = nullptr;
  process* prod_ = nullptr;
};

TEST_F(HeldAcrossRestarts, AProcessHeldByAKilledNodeIsContinuedByTheNext) {
  hold_then_kill_the_node();
  prod_->kill(SIGKILL);  // the production job ends while no node runs
  prod_->wait();
  start_successor(pause_args);
  const std::optional<double> after = time_until([&] { return !held_by_node(rogue_->pid()); }, 5s);
  ASSERT_TRUE(after) << "the process the killed node held is still stopped\n" << node_->stderr_text();
  EXPECT_NE(node_->stderr_text().find("continuing pid " + std::to_string(rogue_->pid())), std::string::npos)
      << node_->stderr_text();
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(measure_rate(*rogue_, 1s), 0.0) << "it should run again";
  // The successor holds nothing: it left no record behind.
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(10s));
  EXPECT_NE(::access((socket_ + ".paused").c_str(), F_OK), 0);
}

TEST_F(HeldAcrossRestarts, NothingStaysStoppedWhenTheKilledNodesSuccessorStops) {
  hold_then_kill_the_node();
  // The successor starts while the production job still runs, and stops before it has looked at
  // the unregistered process again (its grace is long): what the killed node held runs again.
  start_successor({"--unregistered-action", "pause", "--unregistered-grace-ms", "30000"});
  node_->kill(SIGTERM);
  ASSERT_TRUE(node_->wait_for(10s)) << "the node did not stop";
  prod_->kill(SIGKILL);
  prod_->wait();
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(held_by_node(rogue_->pid())) << "the node left a process held behind it\n" << node_->stderr_text();
  EXPECT_GT(measure_rate(*rogue_, 1s), 0.0);
}

// A node killed while it holds a process frozen inside the process's own cgroup: the next node
// finds where it came from in the record, thaws it and moves it back.
TEST_F(HeldAcrossRestarts, AProcessFrozenInsideItsCgroupByAKilledNodeIsReleasedByTheNext) {
  if (const std::string why = why_no_cgroups(); !why.empty()) GTEST_SKIP() << "cannot freeze cgroups here: " << why;
  start_class_node(1, pause_args);
  const std::string mount = cgroup2_mount();
  const std::string container = "/tgs-test-container-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir((mount + container).c_str(), 0755), 0) << std::strerror(errno);
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  std::ofstream(mount + container + "/cgroup.procs") << rogue.pid() << std::flush;
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return frozen(rogue.pid()); }, 8s, "the node freezing the unregistered process");
  node_->kill(SIGKILL);
  node_->wait();
  prod.kill(SIGKILL);
  prod.wait();
  ASSERT_TRUE(frozen(rogue.pid())) << "nothing thaws it while no node runs";
  start_successor(pause_args);
  wait_until([&] { return !frozen(rogue.pid()) && cgroup_path_of(rogue.pid()) == container; }, 5s,
             "the next node releasing it, back in its own cgroup");
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(measure_rate(rogue, 1s), 0.0) << "it should run again";
  rogue.kill(SIGKILL);
  rogue.wait();
  for (int i = 0; i < 100 && ::rmdir((mount + container).c_str()) != 0; ++i) std::this_thread::sleep_for(10ms);
}

// Another user of a shared socket folder pre-creates every temporary name the node used to write
// its record under (`<record>.<node pid>.0..7`): the record's temporary name is random now, so
// the record is written and the process held all the same.
TEST_F(HeldAcrossRestarts, NamesPreCreatedBesideTheRecordLeaveItWritten) {
  start_class_node(1, pause_args);
  const std::string record = socket_ + ".paused";
  for (int i = 0; i < 8; ++i) {
    const std::string name = record + "." + std::to_string(node_->pid()) + "." + std::to_string(i);
    std::ofstream(name) << "planted\n";
    ASSERT_EQ(::chown(name.c_str(), 65534, 65534), 0);
  }
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return held_by_node(rogue.pid()); }, 8s, "the node holding the unregistered process");
  std::ifstream in(record);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("tgs-node paused v2\n" + std::to_string(rogue.pid()) + " ", 0), 0U) << text;
  struct stat st{};
  ASSERT_EQ(::stat(record.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_EQ(node_->stderr_text().find("cannot write the record"), std::string::npos) << node_->stderr_text();
  (void)prod;
}

TEST_F(HeldAcrossRestarts, ARecordTheNodeCannotTrustIsIgnored) {
  // A process someone else stopped: only a record this node's user wrote, well formed, may
  // continue it.
  process sleeper({"/bin/sleep", "60"}, {});
  ::kill(sleeper.pid(), SIGSTOP);
  wait_until([&] { return stopped(sleeper.pid()); }, 2s, "the sleeper stopping");
  const std::string record = socket_ + ".paused";
  const std::string entry = std::to_string(sleeper.pid()) + " " + std::to_string(start_ticks_of(sleeper.pid())) + "\n";
  for (const auto& [text, owner, why] : std::vector<std::tuple<std::string, uid_t, std::string>>{
           {"tgs-node paused v1\n" + entry, 65534, "owned by uid 65534"},
           {"tgs-node paused v1\n" + entry + "12 x\n", ::geteuid(), "malformed"},
           {"tgs-node paused v3\n" + entry, ::geteuid(), "malformed"},
           {"tgs-node paused v2\n" + std::to_string(sleeper.pid()) + " 1 relative/cgroup\n", ::geteuid(), "malformed"},
           {"tgs-node paused v1\n" + std::string(70000, '1'), ::geteuid(), "larger than"}}) {
    SCOPED_TRACE(why);
    ::unlink(record.c_str());
    std::ofstream(record) << text;
    ::chmod(record.c_str(), 0600);
    ASSERT_EQ(::chown(record.c_str(), owner, static_cast<gid_t>(-1)), 0);
    start_successor(pause_args);
    std::this_thread::sleep_for(500ms);
    EXPECT_TRUE(stopped(sleeper.pid())) << node_->stderr_text();
    EXPECT_NE(node_->stderr_text().find(why), std::string::npos) << node_->stderr_text();
    EXPECT_NE(node_->stderr_text().find("ignored"), std::string::npos) << node_->stderr_text();
  }
  ::unlink(record.c_str());
  ::kill(sleeper.pid(), SIGCONT);
}

TEST_F(Classes, AJobRegisteredForAnotherGpuIsUnregisteredOnItsOwn) {
  // The main socket trusts this user's GPU index: it names GPU 1 and uses GPU 0.
  use_two_devices();
  start_class_node(2, {"--unregistered-grace-ms", "500"});
  job_env_ = {"TGS_GPU=1", "TGS_JOB_NAME=elsewhere"};
  process& liar = start_job(opportunistic_args, "opportunistic", true);
  job_env_.clear();
  std::vector<nlohmann::json> seen;
  wait_until([&] { return !(seen = unregistered_lines()).empty(); }, 5s, "the liar on GPU 0");
  EXPECT_EQ(seen.front().value("pid", 0), liar.pid());
  EXPECT_EQ(seen.front().value("gpu", 99), 0);
  EXPECT_EQ(job_named("elsewhere").value("gpu", 99), 1);
}

// --- metrics ----------------------------------------------------------------------------------------

class Metrics : public Classes {
 protected:
  /// The URL the node logged for its metrics.
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

TEST_F(Metrics, AScrapeHasEveryFamilyAndPassesPromtool) {
  start_class_node(1, {"--metrics-address", "127.0.0.1:0", "--unregistered-grace-ms", "500"});
  const std::string url = metrics_url();
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  process& opp = start_on(class_socket(0, "opportunistic"), opportunistic_args, "production", "opp \"quoted\"\n");
  process& rogue = start_on(class_socket(0, "opportunistic"), opportunistic_args, "opportunistic", "rogue", false);
  std::this_thread::sleep_for(4s);  // profiling and control; the metrics refresh every second
  const std::string text = http_get(url);
  ASSERT_FALSE(text.empty()) << "no answer from " << url;
  const auto has = [&](const std::string& what) { return text.find(what) != std::string::npos; };
  const std::string p = std::to_string(prod.pid());
  const std::string o = std::to_string(opp.pid());
  EXPECT_TRUE(has(R"(tgs_gpu_controller_info{gpu="0",policy="tgs",phase=")")) << text;
  EXPECT_TRUE(has(R"(tgs_gpu_controller_state{gpu="0",key="max_rate_blocks_per_s"})")) << text;
  EXPECT_TRUE(has(R"(tgs_gpu_opportunistic_budget_blocks{gpu="0"})")) << text;
  EXPECT_TRUE(has(R"(tgs_gpu_production_blocks_per_second{gpu="0"})")) << text;
  EXPECT_TRUE(has(R"(class="production",pid=")" + p + R"(",container="",pod="",namespace="",name="prod"})")) << text;
  EXPECT_TRUE(has(R"(class="opportunistic",pid=")" + o +
                  R"(",container="",pod="",namespace="",name="opp \"quoted\"\\x0a"})"))
      << text;
  for (const char* family : {"tgs_job_throttled_seconds_total", "tgs_job_memory_resident_bytes",
                             "tgs_job_memory_evicted_bytes", "tgs_job_evictions_total", "tgs_job_restores_total",
                             "tgs_job_denied_allocations_total", "tgs_job_gap_launches_total",
                             "tgs_gpu_faults_handled_total", "tgs_gpu_co_runners_ended_total", "tgs_node_jobs",
                             "tgs_node_info"}) {
    EXPECT_TRUE(has(std::string("# TYPE ") + family + " ")) << family << "\n" << text;
  }
  EXPECT_TRUE(has(R"(tgs_unregistered_process{gpu="0",pid=")" + std::to_string(rogue.pid()))) << text;
  EXPECT_TRUE(has(R"(tgs_gpu_faults_handled_total{gpu="0",fault_policy="separate-contexts"} 0)")) << text;
  // The opportunistic job waited for budget, and the counter says so.
  const std::size_t line = text.find("tgs_job_throttled_seconds_total{");
  const std::size_t at = text.find(R"(pid=")" + o + '"', line);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_GT(std::stod(text.substr(text.find("} ", at) + 2)), 0.0) << text.substr(at, 200);

  if (std::string(TGS_PROMTOOL).empty()) GTEST_SKIP() << "promtool not found (Debian package prometheus)";
  const std::string file = dir_ + "/metrics.txt";
  std::ofstream(file) << text;
  process promtool({"/bin/sh", "-c", std::string(TGS_PROMTOOL) + " check metrics < " + file}, {});
  EXPECT_EQ(promtool.wait(), 0) << promtool.stdout_lines().size() << " lines\n" << promtool.stderr_text() << text;
}

TEST_F(Metrics, StatusAndScrapeDescribeEveryPolicyAfterAJobLeft) {
  // The controller's state report must outlive the loop over its fields: read after it was
  // destroyed, a fixed-share policy's report ended the node at its first status.
  for (const char* policy : {"tgs", "idle-harvest", "exclusive", "co-execution", "token-bucket", "time-slice-lock"}) {
    SCOPED_TRACE(policy);
    start_class_node(1, {"--policy", policy, "--metrics-address", "127.0.0.1:0"});
    const std::string url = metrics_url();
    {
      auto client = node_client::connect(class_socket(0, "opportunistic"));
      ASSERT_TRUE(client);
      ASSERT_TRUE(client->register_as(cabi::class_code::opportunistic, 0, "leaves"));
    }
    wait_until([&] { return job_named("leaves").empty(); }, 5s, "the job leaving");
    for (int i = 0; i < 3; ++i) {
      EXPECT_NE(status().find(R"("gpu":0)"), std::string::npos) << node_->stderr_text();
      EXPECT_NE(status(false).find("GPU 0:"), std::string::npos);
    }
    std::this_thread::sleep_for(1100ms);  // a fresh snapshot
    EXPECT_NE(http_get(url).find(R"(tgs_gpu_controller_info{gpu="0",policy=")"), std::string::npos);
    EXPECT_TRUE(node_->running()) << node_->stderr_text();
  }
}

TEST_F(Metrics, StalledScrapersDoNotHoldUpTheNode) {
  start_class_node(1, {"--metrics-address", "127.0.0.1:0"});
  const std::string url = metrics_url();
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 2s);
  // Forty clients connect to the metrics port and say nothing, or half a request.
  const std::size_t colon = url.rfind(':');
  const int port = std::stoi(url.substr(colon + 1));
  std::vector<int> stalled;
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0 && i % 2 == 1) {
      (void)::send(fd, "GET /met", 8, MSG_NOSIGNAL);
    }
    stalled.push_back(fd);
  }
  // The node's own work goes on: the status answers at once and the production job is unaffected.
  const auto t0 = clock_type::now();
  EXPECT_NE(status().find(R"("node":)"), std::string::npos);
  EXPECT_LT(clock_type::now() - t0, 1s) << "the status waited for the scrapers";
  const double during = measure_rate(prod, 2s);
  std::printf("production %.1f it/s alone, %.1f with 40 stalled scrapers\n", alone, during);
  EXPECT_GE(during, 0.9 * alone);
  for (const int fd : stalled) ::close(fd);
  // Once they are gone, scraping works again.
  std::string text;
  wait_until([&] { return !(text = http_get(url)).empty(); }, 10s, "a scrape after the stalled clients left");
  EXPECT_NE(text.find("tgs_node_jobs"), std::string::npos);
}

TEST_F(Metrics, UnfinishedRequestsDoNotMakeScrapesTimeOut) {
  // Any local user can open connections to the metrics port and begin requests it never
  // finishes. When each held a server thread until a timeout, eight of them made three of four
  // scrapes time out; now one thread serves them all (node_metrics_test.cpp stalls a thousand).
  start_class_node(1, {"--metrics-address", "127.0.0.1:0"});
  const std::string url = metrics_url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  wait_until([&] { return !http_get(url).empty(); }, 5s, "a first scrape");
  for (const int slow_clients : {16, 64}) {
    SCOPED_TRACE(std::to_string(slow_clients) + " unfinished requests");
    std::vector<int> slow;
    for (int i = 0; i < slow_clients; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(static_cast<std::uint16_t>(port));
      ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
      ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)), 0);
      (void)::send(fd, "GET /metrics HTTP/1.1\r\nHost: 127", 32, MSG_NOSIGNAL);
      slow.push_back(fd);
    }
    std::this_thread::sleep_for(100ms);  // the server has taken them up
    for (int scrape = 0; scrape < 4; ++scrape) {
      const auto t0 = clock_type::now();
      const std::string text = http_get(url);
      const double took = std::chrono::duration<double>(clock_type::now() - t0).count();
      std::printf("%d unfinished requests: scrape %d took %.2f s\n", slow_clients, scrape, took);
      EXPECT_NE(text.find("tgs_node_jobs"), std::string::npos) << "scrape " << scrape << " got no answer";
      EXPECT_LT(took, 5.0) << "scrape " << scrape;
    }
    for (const int fd : slow) ::close(fd);
  }
  EXPECT_TRUE(node_->running()) << node_->stderr_text();
}

TEST_F(Metrics, ABadAddressFailsAtStartAndLeavesARunningNodeAlone) {
  start_class_node(1, {"--metrics-address", "127.0.0.1:0"});
  const std::string url = metrics_url();
  process& prod = start_on(class_socket(0, "production"), production_args, "production", "prod");
  wait_until([&] { return !job_named("prod").empty(); }, 5s, "the production job registering");
  const std::string taken = url.substr(7, url.rfind('/') - 7);  // 127.0.0.1:PORT
  for (const auto& [address, message] : std::vector<std::pair<std::string, std::string>>{
           {"localhost:http", "the port must be a number from 0 to 65535"},
           {"10.0.0.1.2:9400", "'10.0.0.1.2' is not an IPv4 address or localhost"},
           {taken, "cannot listen there (Address already in use)"}}) {
    process second({node_bin(), "--socket", dir_ + "/second.sock", "--metrics-address", address}, node_env());
    const std::optional<int> exit = second.wait_for(10s);
    ASSERT_TRUE(exit) << address;
    EXPECT_NE(*exit, 0) << address;
    EXPECT_NE(second.stderr_text().find(message), std::string::npos) << address << ": " << second.stderr_text();
  }
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
  EXPECT_EQ(job_named("prod").value("class", ""), "production");
  EXPECT_FALSE(http_get(url).empty()) << "the running node's metrics stopped";
}

// --- the CDI spec --------------------------------------------------------------------------------------

TEST_F(Classes, TheNodeWritesTheCdiSpecOfItsGpusAndSockets) {
  const std::string spec_file = dir_ + "/cdi/tgs.json";
  std::filesystem::create_directories(dir_ + "/cdi");
  const std::string interposer = intercept_preload().substr(intercept_preload().rfind(':') + 1);
  start_class_node(2, {"--cdi-spec", spec_file, "--interposer", interposer});
  // The spec is written after the sockets are bound (and the GPUs' MPS daemons looked at).
  wait_until([&] { return node_->stderr_text().find("wrote the CDI spec") != std::string::npos; }, 5s, "the CDI spec");
  std::ifstream in(spec_file);
  const nlohmann::json spec = nlohmann::json::parse(in);
  EXPECT_EQ(spec.at("kind"), "tgs.io/gpu");
  std::vector<std::string> names;
  for (const nlohmann::json& d : spec.at("devices")) {
    names.push_back(d.at("name"));
    const std::string cls = names.back().substr(2);
    const unsigned gpu = static_cast<unsigned>(names.back()[0] - '0');
    const nlohmann::json& mounts = d.at("containerEdits").at("mounts");
    EXPECT_EQ(mounts.at(0).at("hostPath"), interposer);
    EXPECT_EQ(mounts.at(1).at("hostPath"), class_socket(gpu, cls));
    EXPECT_EQ(::access(mounts.at(1).at("hostPath").get<std::string>().c_str(), F_OK), 0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0-production", "0-opportunistic", "1-production", "1-opportunistic"}));
}

TEST_F(Classes, ACdiSpecThatCannotBeWrittenFailsAtStart) {
  process missing_folder({node_bin(), "--socket", socket_, "--class-sockets", class_dir(), "--cdi-spec",
                          dir_ + "/no-such-folder/tgs.json", "--interposer", "/bin/sh"},
                         node_env());
  ASSERT_TRUE(missing_folder.wait_for(10s));
  EXPECT_NE(missing_folder.stderr_text().find("no-such-folder/tgs.json: cannot write the CDI spec (No such file or "
                                              "directory)"),
            std::string::npos)
      << missing_folder.stderr_text();
  process no_interposer({node_bin(), "--socket", socket_, "--class-sockets", class_dir(), "--cdi-spec",
                         dir_ + "/tgs.json", "--interposer", dir_ + "/nothing.so"},
                        node_env());
  ASSERT_TRUE(no_interposer.wait_for(10s));
  EXPECT_NE(no_interposer.stderr_text().find("nothing.so is not a file"), std::string::npos)
      << no_interposer.stderr_text();
  EXPECT_EQ(::access((dir_ + "/tgs.json").c_str(), F_OK), -1) << "a spec naming a missing interposer was written";
}

}  // namespace
