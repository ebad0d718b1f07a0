// SPDX-License-Identifier: Apache-2.0
// tgs in real containers: podman with runc runs the fake-driver training job from a root
// filesystem this test makes (no registry), and asks for tgs's devices through the CDI spec the
// host's tgs-node writes. An opportunistic container is throttled as a plain process is; a
// container that asks for no device is not registered; one that claims another class or GPU
// gets its device's; one that drops the interposer is reported and, on request, killed; a device
// that does not exist is refused by podman while the running jobs go on.
//
// Podman runs as root in a private mount namespace where the test's spec folder is mounted over
// /var/run/cdi and an empty one over /etc/cdi, so it reads exactly one CDI spec folder, the test's
// (podman 4.3 has no option naming it); the host's folders are untouched (the test creates
// /var/run/cdi only where it is missing, as a mount point, and removes it again). Podman keeps its
// storage, run and temporary folders in one folder of the test's. The containers share the host's PID and IPC namespaces: the
// fake device lives in the host's /dev/shm and records host pids, as the real driver reports
// host pids through NVML.
#include <sys/resource.h>

#include <filesystem>
#include <set>

#include "e2e_support.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> production_args{"--kernels", "20", "--blocks", "100", "--host-ms", "2"};
const std::vector<std::string> opportunistic_args{"--kernels", "100", "--blocks", "20", "--host-ms", "0"};

/// The standard output of a shell command (empty when it failed).
std::string output_of(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char chunk[4096];
    for (std::size_t n = 0; (n = std::fread(chunk, 1, sizeof(chunk), p)) > 0;) out.append(chunk, n);
    ::pclose(p);
  }
  return out;
}

/// Whether `program` is on the PATH.
bool on_path(const std::string& program) { return !output_of("command -v " + program + " 2>/dev/null").empty(); }

/// The shared libraries `binary` loads, as `ldd` resolves them.
std::set<fs::path> libraries_of(const fs::path& binary) {
  std::set<fs::path> out;
  std::istringstream lines(output_of("ldd '" + binary.string() + "'"));
  for (std::string line; std::getline(lines, line);) {
    const std::size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    out.insert(line.substr(slash, line.find(' ', slash) - slash));
  }
  return out;
}

/// Copies `from` to `root`/`to`, creating folders.
void install(const fs::path& from, const fs::path& root, const fs::path& to) {
  fs::create_directories((root / to.relative_path()).parent_path());
  fs::copy_file(from, root / to.relative_path(), fs::copy_options::overwrite_existing);
}

/// A root filesystem with the fake training job, the fake driver and the libraries they and the
/// interposer (which the CDI spec mounts in) need; `env` to drop a variable.
void make_rootfs(const fs::path& root) {
  const fs::path train = fake_train_bin();
  const fs::path driver = fs::path(TGS_FAKE_DRIVER_DIR) / "libcuda.so.1";
  const fs::path interposer = TGS_INTERPOSER;
  const fs::path env = output_of("command -v env | tr -d '\\n'");
  install(train, root, "/usr/bin/tgs-fake-train");
  install(env, root, "/usr/bin/env");
  install(driver, root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  for (const fs::path& binary : {train, driver, interposer, env}) {
    for (const fs::path& lib : libraries_of(binary)) {
      if (lib.filename() != "libcuda.so.1") install(lib, root, lib);
    }
  }
  for (const char* folder : {"etc", "tmp", "run", "proc", "dev", "sys"}) fs::create_directories(root / folder);
  std::ofstream(root / "etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(root / "etc/group") << "root:x:0:\n";
}

/// The processes whose command line contains `text`.
std::vector<pid_t> processes_naming(const std::string& text) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(text) != std::string::npos) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

class Podman : public EndToEnd {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root: the test runs rootful podman";
    } else if (!on_path("podman") || !on_path("runc") || !on_path("unshare")) {
      skip_ = "podman, runc or unshare is not installed (Debian packages podman, runc, util-linux)";
    } else {
      // Short: podman refuses a run folder path longer than 50 characters.
      state_ = "/tmp/tgs-pm-" + std::to_string(::getpid());
      root_ = state_ / "rootfs";
      make_rootfs(root_);
      for (const char* folder : {"/var/run/cdi", "/etc/cdi"}) {
        std::error_code ec;
        if (fs::create_directory(folder, ec)) created_.emplace_back(folder);
      }
    }
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    if (!state_.empty()) {
      // conmon runs `podman ... container cleanup` once a container has exited, in its own time:
      // wait for every process naming the state folder before removing it.
      const auto end = clock_type::now() + 15s;
      while (clock_type::now() < end && !processes_naming(state_.string()).empty()) std::this_thread::sleep_for(100ms);
      fs::remove_all(state_, ignored);
    }
    for (const fs::path& folder : created_) fs::remove(folder, ignored);  // only while still empty
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    EndToEnd::SetUp();
    fs::create_directories(dir_ + "/cdi");
    // The probe: a container that only prints its help. If podman cannot run one here (no
    // permission for namespaces or cgroups in CI's own container), every test says why and skips.
    std::vector<std::string> run = run_options("probe");
    run.insert(run.end(), {"--rootfs", root_.string(), "/usr/bin/tgs-fake-train", "--help"});
    process probe(podman(run), {});
    const std::optional<int> status = probe.wait_for(60s);
    if (!status || *status != 0) {
      GTEST_SKIP() << "podman cannot run a container here (" << (status ? "exit " + std::to_string(*status) : "timeout")
                   << "): " << probe.stderr_text();
    }
  }
  void TearDown() override {
    // A killed podman client leaves its container to conmon: remove them by name.
    for (const std::string& name : containers_) {
      process rm(podman({"rm", "--force", "--time", "0", name}), {});
      (void)rm.wait_for(30s);
    }
    EndToEnd::TearDown();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  [[nodiscard]] std::string class_dir() const { return dir_ + "/gpus"; }
  [[nodiscard]] std::string class_socket(const std::string& cls) const { return class_dir() + "/gpu0-" + cls + ".sock"; }

  /// tgs-node with class sockets for one GPU and the CDI spec in the test's spec folder.
  void start_class_node(std::vector<std::string> extra = {}) {
    const std::string interposer = TGS_INTERPOSER;
    extra.insert(extra.begin(), {"--class-sockets", class_dir(), "--gpus", "1", "--cdi-spec", dir_ + "/cdi/tgs.json",
                                 "--interposer", interposer});
    start_node(extra);
    wait_until([&] { return ::access((dir_ + "/cdi/tgs.json").c_str(), F_OK) == 0; }, 5s, "the CDI spec");
  }

  /// The command that runs podman with `args` in its private mount namespace and folders.
  [[nodiscard]] std::vector<std::string> podman(const std::vector<std::string>& args) const {
    const std::string script =
        "mount --bind \"$0\" /var/run/cdi && mount -t tmpfs -o mode=0755 tmpfs /etc/cdi && exec podman \"$@\"";
    const std::string state = state_.string();
    std::vector<std::string> argv{"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script,
                                  dir_ + "/cdi", "--root", state + "/storage", "--runroot", state + "/run",
                                  "--tmpdir", state + "/tmp", "--storage-driver", "vfs", "--cgroup-manager",
                                  "cgroupfs", "--events-backend", "file", "--runtime", "runc"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  /// `podman run` and the options every container here gets: its name, removal at exit, no
  /// network, the host's PID and IPC namespaces (the fake device's), and modest limits: podman's
  /// defaults may lie above the hard limits runc runs under, and raising a hard limit needs
  /// CAP_SYS_RESOURCE, which root in CI's own container may lack.
  std::vector<std::string> run_options(const std::string& name) {
    const std::string container = "tgs-test-" + std::to_string(::getpid()) + "-" + name;
    containers_.push_back(container);
    const auto limit = [](int resource, rlim_t at_most) {
      rlimit r{};
      ::getrlimit(resource, &r);
      const std::string v = std::to_string(std::min(r.rlim_max, at_most));
      return v + ":" + v;
    };
    return {"run", "--rm", "--name", container, "--network", "none", "--pid", "host", "--ipc", "host", "--log-driver",
            "none", "--ulimit", "nofile=" + limit(RLIMIT_NOFILE, 1024), "--ulimit", "nproc=" + limit(RLIMIT_NPROC, 4096)};
  }

  /// A fake training job in a container named `name` (also its job name), with the extra podman
  /// arguments `options` (devices, environment) before the image, and `command` as the command.
  process& start_container(const std::string& name, const std::vector<std::string>& options,
                           const std::vector<std::string>& args, std::vector<std::string> command = {}) {
    std::vector<std::string> run = run_options(name);
    run.insert(run.end(), {"--env", "TGS_FAKE_DEVICE=" + device_, "--env", "TGS_JOB_NAME=" + name, "--env",
                           "TGS_LOG_LEVEL=warn"});
    run.insert(run.end(), options.begin(), options.end());
    run.insert(run.end(), {"--rootfs", root_.string()});
    if (command.empty()) command = {"/usr/bin/tgs-fake-train"};
    run.insert(run.end(), command.begin(), command.end());
    run.insert(run.end(), {"--seconds", "0", "--report", "0.25"});
    run.insert(run.end(), args.begin(), args.end());
    jobs_.push_back(std::make_unique<process>(podman(run), std::vector<std::string>{}));
    return *jobs_.back();
  }

  /// Waits for job `name` to be registered and returns its status line.
  nlohmann::json registered(const std::string& name, std::chrono::milliseconds limit = 20s) {
    nlohmann::json j;
    const auto end = clock_type::now() + limit;
    while ((j = job_named(name)).empty() && clock_type::now() < end) std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(j.empty()) << "job " << name << " did not register\n" << node_->stderr_text();
    return j;
  }

  static inline std::string skip_;
  static inline fs::path state_;
  static inline fs::path root_;
  /// The CDI folders the suite created as mount points.
  static inline std::vector<fs::path> created_;
  std::vector<std::string> containers_;
};

TEST_F(Podman, AnOpportunisticContainerIsThrottledAsAPlainProcessIs) {
  // A fixed share makes "as" exact: 2000 blocks per 50 ms is 20 iterations per second of a job
  // launching 100 kernels of 20 blocks, a tenth of what it runs alone.
  start_class_node({"--policy", "token-bucket", "--token-bucket.budget-blocks", "2000"});
  constexpr double share = 2000 / 0.050 / (100 * 20);
  process& plain = start_on(class_socket("opportunistic"), opportunistic_args, "opportunistic", "plain");
  std::this_thread::sleep_for(1s);
  const double outside = measure_rate(plain, 3s);
  plain.kill(SIGKILL);
  plain.wait();
  process& boxed = start_container("boxed", {"--device", "tgs.io/gpu=0-opportunistic"}, opportunistic_args);
  const nlohmann::json line = registered("boxed");
  std::this_thread::sleep_for(1s);
  const double inside = measure_rate(boxed, 3s);
  std::printf("share %.1f it/s: a plain process ran %.1f, the container %.1f\n%s\n%s\n", share, outside, inside,
              job_named("boxed").dump().c_str(), boxed.stderr_text().c_str());
  EXPECT_EQ(line.value("class", ""), "opportunistic");
  EXPECT_EQ(line.value("class_from", ""), "gpu0-opportunistic.sock");
  EXPECT_EQ(line.value("container", "").size(), 64U) << "the job's container, from its cgroup: " << line;
  EXPECT_NEAR(outside / share, 1.0, 0.2);
  EXPECT_NEAR(inside / share, 1.0, 0.2);
  EXPECT_NEAR(inside / outside, 1.0, 0.2);
}

TEST_F(Podman, ProductionKeepsItsThroughputBesideAnOpportunisticContainer) {
  start_class_node();
  process& prod = start_on(class_socket("production"), production_args, "production", "prod");
  std::this_thread::sleep_for(1s);
  const double alone = measure_rate(prod, 3s);
  ASSERT_GT(alone, 50.0) << prod.stderr_text();
  process& boxed = start_container("boxed", {"--device", "tgs.io/gpu=0-opportunistic"}, opportunistic_args);
  registered("boxed");
  std::this_thread::sleep_for(4s);  // profiling and the first control windows
  const double shared = measure_rate(prod, 3s);
  const double opp = measure_rate(boxed, 2s);
  const nlohmann::json line = job_named("boxed");
  std::printf("production alone %.1f it/s, beside the container %.1f (%.3f); the container ran %.1f it/s\n", alone,
              shared, shared / alone, opp);
  EXPECT_GE(shared, 0.95 * alone);
  EXPECT_GT(line.value("throttled_s", 0.0), 0.0) << line;
  EXPECT_GT(opp, 0.0) << "the container made no progress: " << boxed.stderr_text();
}

TEST_F(Podman, AProductionContainerIsProduction) {
  start_class_node();
  process& prod = start_container("prod", {"--device", "tgs.io/gpu=0-production"}, production_args);
  const nlohmann::json p = registered("prod");
  EXPECT_EQ(p.value("class", ""), "production") << p;
  EXPECT_EQ(p.value("class_from", ""), "gpu0-production.sock") << p;
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
}

TEST_F(Podman, AContainerThatAsksForNoDeviceIsNotRegisteredNorThrottled) {
  start_class_node({"--unregistered-grace-ms", "500"});
  process& prod = start_on(class_socket("production"), production_args, "production", "prod");
  registered("prod");
  process& plain = start_container("plain", {}, opportunistic_args);
  std::vector<nlohmann::json> seen;
  wait_until([&] { return !(seen = unregistered_lines()).empty() && seen.front().value("state", "") == "reported"; },
             20s, "the container's process reported");
  EXPECT_EQ(count(status(), R"("job":)"), 1) << "only the production job registered\n" << status();
  EXPECT_EQ(seen.front().value("container", "").size(), 64U) << seen.front();
  EXPECT_GT(measure_rate(plain, 1s), 5.0) << "it runs, unthrottled: " << plain.stderr_text();
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
}

TEST_F(Podman, AContainerThatClaimsProductionOrAnotherGpuGetsItsDevices) {
  start_class_node();
  process& prod = start_on(class_socket("production"), production_args, "production", "prod");
  registered("prod");
  process& forger = start_container(
      "forger", {"--device", "tgs.io/gpu=0-opportunistic", "--env", "TGS_JOB_CLASS=production", "--env", "TGS_GPU=3"},
      opportunistic_args);
  const nlohmann::json first = registered("forger");
  EXPECT_EQ(first.value("class", ""), "opportunistic") << first;
  EXPECT_EQ(first.value("gpu", 99), 0) << first;
  std::this_thread::sleep_for(4s);
  const nlohmann::json later = job_named("forger");
  EXPECT_GT(later.value("throttled_s", 0.0), 0.0) << later;
  EXPECT_EQ(job_named("prod").value("class", ""), "production");
  EXPECT_GT(measure_rate(forger, 1s), 0.0);
  (void)prod;
}

TEST_F(Podman, AContainerThatDropsTheInterposerIsReportedAndKilledOnRequest) {
  start_class_node({"--unregistered-action", "kill", "--unregistered-grace-ms", "1000"});
  process& prod = start_on(class_socket("production"), production_args, "production", "prod");
  registered("prod");
  // The job's own code runs the training without LD_PRELOAD.
  process& dropper = start_container("dropper", {"--device", "tgs.io/gpu=0-opportunistic"}, opportunistic_args,
                                     {"/usr/bin/env", "-u", "LD_PRELOAD", "/usr/bin/tgs-fake-train"});
  const std::optional<int> exit = dropper.wait_for(30s);
  ASSERT_TRUE(exit) << "the container still runs\n" << status() << node_->stderr_text();
  EXPECT_NE(*exit, 0);
  const std::string log = node_->stderr_text();
  EXPECT_NE(log.find("never registered there; ending it"), std::string::npos) << log;
  EXPECT_NE(log.find(", container "), std::string::npos) << "the report names the container\n" << log;
  EXPECT_NE(log.find("killed pid"), std::string::npos) << log;
  EXPECT_EQ(job_named("dropper"), nlohmann::json::object());
  EXPECT_GT(measure_rate(prod, 1s), 50.0);
}

TEST_F(Podman, AnUnknownDeviceIsRefusedByPodmanAndRunningJobsGoOn) {
  start_class_node();
  process& prod = start_on(class_socket("production"), production_args, "production", "prod");
  process& opp = start_container("opp", {"--device", "tgs.io/gpu=0-opportunistic"}, opportunistic_args);
  registered("prod");
  registered("opp");
  const double before = measure_rate(prod, 1s);
  for (const std::string device : {"tgs.io/gpu=7-opportunistic", "tgs.io/gpu=0-bogus", "tgs.io/gpu"}) {
    process& bad = start_container("bad" + std::to_string(containers_.size()), {"--device", device}, opportunistic_args);
    const std::optional<int> exit = bad.wait_for(30s);
    ASSERT_TRUE(exit) << device;
    EXPECT_NE(*exit, 0) << device;
    EXPECT_NE(bad.stderr_text().find(device), std::string::npos) << device << ": " << bad.stderr_text();
  }
  EXPECT_GE(measure_rate(prod, 1s), 0.8 * before);
  EXPECT_GT(measure_rate(opp, 1s), 0.0);
  EXPECT_EQ(count(status(), R"("job":)"), 2) << status();
}

}  // namespace
