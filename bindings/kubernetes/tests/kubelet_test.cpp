// SPDX-License-Identifier: Apache-2.0
// tgs-device-plugin against a kubelet stand-in: the test serves kubelet's Registration service on
// kubelet.sock in a scratch folder, runs the plugin binary there, and talks to the plugin's
// DevicePlugin endpoints as kubelet does: registration, ListAndWatch and health, Allocate,
// options, a kubelet restart, garbage on the socket, and SIGTERM.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;
namespace api = ::v1beta1;
namespace fs = std::filesystem;

/// kubelet's side of registration: records each RegisterRequest.
class registration_service final : public api::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const api::RegisterRequest* request, api::Empty*) override {
    {
      const std::lock_guard lock(m_);
      requests_.push_back(*request);
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  /// The requests received, once there are at least `n` (fewer after `timeout`).
  std::vector<api::RegisterRequest> wait_for(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_);
    cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
    return requests_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<api::RegisterRequest> requests_;
};

/// A kubelet stand-in serving Registration on `<dir>/kubelet.sock`.
class kubelet_stand_in {
 public:
  explicit kubelet_stand_in(const fs::path& dir) : socket_(dir / "kubelet.sock") {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (!server_) throw std::runtime_error("cannot serve " + socket_.string());
  }
  kubelet_stand_in(const kubelet_stand_in&) = delete;
  kubelet_stand_in& operator=(const kubelet_stand_in&) = delete;
  ~kubelet_stand_in() {
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Wait();
    fs::remove(socket_);
  }
  registration_service& registrations() { return service_; }

 private:
  fs::path socket_;
  registration_service service_;
  std::unique_ptr<grpc::Server> server_;
};

/// The plugin binary as a child process, its stdout and stderr in a log file.
class plugin_process {
 public:
  plugin_process(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, const fs::path& log)
      : log_(log) {
    std::vector<std::string> argv{TGS_DEVICE_PLUGIN_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    // This environment without LD_PRELOAD, `extra_env` replacing what it names.
    std::vector<std::string> env = extra_env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view var(*e);
      const std::string_view name = var.substr(0, var.find('=') + 1);
      bool replaced = name == "LD_PRELOAD=";
      for (const std::string& x : extra_env) replaced = replaced || x.starts_with(name);
      if (!replaced) env.emplace_back(var);
    }
    std::vector<char*> cargv;
    std::vector<char*> cenv;
    for (std::string& a : argv) cargv.push_back(a.data());
    for (std::string& e : env) cenv.push_back(e.data());
    cargv.push_back(nullptr);
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  }
  plugin_process(const plugin_process&) = delete;
  plugin_process& operator=(const plugin_process&) = delete;
  ~plugin_process() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      (void)wait_exit(5s);
    }
  }

  void signal(int s) { ::kill(pid_, s); }
  [[nodiscard]] bool running() {
    if (exited_) return false;
    int s = 0;
    if (::waitpid(pid_, &s, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(s) ? WEXITSTATUS(s) : -WTERMSIG(s);
    }
    return !exited_;
  }
  /// The exit status (or -signal) once it exits within `timeout`; -1000 if it does not.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (running() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    return exited_ ? status_ : -1000;
  }
  [[nodiscard]] std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

/// Waits until `done()` or `timeout`; returns `done()`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

/// Makes a Unix socket file at `path`, as tgs-node's per-class socket would be.
void make_socket_file(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << path;
  ::close(fd);
}

/// Device ID -> health from one ListAndWatch response.
std::map<std::string, std::string> health_of(const api::ListAndWatchResponse& r) {
  std::map<std::string, std::string> out;
  for (const api::Device& d : r.devices()) out[d.id()] = d.health();
  return out;
}

class DevicePlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    root_ = fs::path("/tmp") / ("tgs-kp-" + std::to_string(::getpid()) + "-" + name.substr(0, 20));
    fs::remove_all(root_);
    fs::create_directories(kubelet_dir());
    fs::create_directories(socket_dir());
    std::ofstream(interposer()) << "stands for libtgs-intercept.so";
  }
  void TearDown() override {
    // A sanitizer's report in the plugin fails the test (its exit status is often not looked at).
    if (plugin_) {
      const std::string log = plugin_->log();
      for (const char* report : {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:"}) {
        if (log.find(report) != std::string::npos) ADD_FAILURE() << "the plugin reports " << report;
      }
    }
    if (HasFailure() && plugin_) std::cerr << "--- plugin log ---\n" << plugin_->log();
    plugin_.reset();
    kubelet_.reset();
    fs::remove_all(root_);
  }

  [[nodiscard]] fs::path kubelet_dir() const { return root_ / "device-plugins"; }
  [[nodiscard]] fs::path socket_dir() const { return root_ / "run-tgs"; }
  [[nodiscard]] fs::path interposer() const { return root_ / "libtgs-intercept.so"; }
  [[nodiscard]] fs::path endpoint(const std::string& cls) const { return kubelet_dir() / ("tgs-gpu-" + cls + ".sock"); }

  void start_kubelet() { kubelet_ = std::make_unique<kubelet_stand_in>(kubelet_dir()); }

  void start_plugin(std::vector<std::string> extra = {"--gpus", "2"}, std::vector<std::string> env = {}) {
    std::vector<std::string> args{"--kubelet-dir", kubelet_dir().string(), "--socket-dir", socket_dir().string(),
                                  "--interposer", interposer().string(), "--check-period-ms", "50"};
    args.insert(args.end(), extra.begin(), extra.end());
    // Under ThreadSanitizer the harness reports nothing of its own (it is gRPC scaffolding) and
    // the plugin gets the settings meant for it.
    if (const char* tsan = std::getenv("TGS_PLUGIN_TSAN_OPTIONS")) env.push_back(std::string("TSAN_OPTIONS=") + tsan);
    plugin_ = std::make_unique<plugin_process>(args, env, root_ / "plugin.log");
  }

  /// Both registrations (production and opportunistic), waiting up to 10 s.
  std::vector<api::RegisterRequest> registered(std::size_t n = 2) {
    std::vector<api::RegisterRequest> r = kubelet_->registrations().wait_for(n, 10s);
    EXPECT_GE(r.size(), n) << "registrations";
    return r;
  }

  std::unique_ptr<api::DevicePlugin::Stub> client(const std::string& cls) {
    return api::DevicePlugin::NewStub(
        grpc::CreateChannel("unix:" + endpoint(cls).string(), grpc::InsecureChannelCredentials()));
  }

  /// An open ListAndWatch stream on a class's endpoint, as kubelet keeps one.
  struct watch_stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<api::ListAndWatchResponse>> reader;
    api::ListAndWatchResponse response;
    /// Reads the next device list into `response`; false once the stream has ended.
    bool next() { return reader->Read(&response); }
    [[nodiscard]] std::map<std::string, std::string> health() const { return health_of(response); }
    ~watch_stream() { context.TryCancel(); }
  };
  std::unique_ptr<watch_stream> watch(const std::string& cls) {
    auto w = std::make_unique<watch_stream>();
    w->context.set_deadline(std::chrono::system_clock::now() + 20s);
    w->reader = client(cls)->ListAndWatch(&w->context, api::Empty{});
    return w;
  }

  fs::path root_;
  std::unique_ptr<kubelet_stand_in> kubelet_;
  std::unique_ptr<plugin_process> plugin_;
};

TEST_F(DevicePlugin, RegistersOneEndpointPerResource) {
  start_kubelet();
  start_plugin();
  std::map<std::string, api::RegisterRequest> by_resource;
  for (const api::RegisterRequest& r : registered()) by_resource[r.resource_name()] = r;
  ASSERT_EQ(by_resource.size(), 2U);
  const api::RegisterRequest& production = by_resource.at("tgs.io/gpu-production");
  const api::RegisterRequest& opportunistic = by_resource.at("tgs.io/gpu-opportunistic");
  EXPECT_EQ(production.version(), "v1beta1");
  EXPECT_EQ(opportunistic.version(), "v1beta1");
  EXPECT_EQ(production.endpoint(), "tgs-gpu-production.sock");
  EXPECT_EQ(opportunistic.endpoint(), "tgs-gpu-opportunistic.sock");
  for (const api::RegisterRequest* r : {&production, &opportunistic}) {
    EXPECT_FALSE(r->options().pre_start_required());
    EXPECT_TRUE(r->options().get_preferred_allocation_available());
    // kubelet dials path.Join(its folder, endpoint): the socket must be there.
    struct stat st{};
    ASSERT_EQ(::stat((kubelet_dir() / r->endpoint()).c_str(), &st), 0) << r->endpoint();
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
  }
}

TEST_F(DevicePlugin, AnswersItsOptions) {
  start_kubelet();
  start_plugin();
  registered();
  for (const char* cls : {"production", "opportunistic"}) {
    grpc::ClientContext context;
    api::DevicePluginOptions options;
    ASSERT_TRUE(client(cls)->GetDevicePluginOptions(&context, api::Empty{}, &options).ok()) << cls;
    EXPECT_FALSE(options.pre_start_required());
    EXPECT_TRUE(options.get_preferred_allocation_available());
  }
}

TEST_F(DevicePlugin, ListsDevicesWithTheHealthOfTheirNodeSockets) {
  start_kubelet();
  start_plugin({"--gpus", "2", "--opportunistic-replicas", "3"});
  registered();
  const std::unique_ptr<watch_stream> stream = watch("opportunistic");
  ASSERT_TRUE(stream->next());
  std::map<std::string, std::string> health = stream->health();
  const std::map<std::string, std::string> all_unhealthy{
      {"gpu0-opportunistic-0", "Unhealthy"}, {"gpu0-opportunistic-1", "Unhealthy"},
      {"gpu0-opportunistic-2", "Unhealthy"}, {"gpu1-opportunistic-0", "Unhealthy"},
      {"gpu1-opportunistic-1", "Unhealthy"}, {"gpu1-opportunistic-2", "Unhealthy"}};
  EXPECT_EQ(health, all_unhealthy) << "no tgs-node socket yet";

  // tgs-node starts serving GPU 1's opportunistic socket: that GPU's replicas become healthy, in
  // an update on the open stream.
  make_socket_file(socket_dir() / "gpu1-opportunistic.sock");
  ASSERT_TRUE(stream->next());
  health = stream->health();
  EXPECT_EQ(health.at("gpu1-opportunistic-0"), "Healthy");
  EXPECT_EQ(health.at("gpu1-opportunistic-2"), "Healthy");
  EXPECT_EQ(health.at("gpu0-opportunistic-0"), "Unhealthy");
  // A production socket does not make opportunistic devices healthy, and sends no update here.
  make_socket_file(socket_dir() / "gpu0-production.sock");
  std::this_thread::sleep_for(300ms);  // several checks: an update now would be the next one read
  // The socket goes away again.
  fs::remove(socket_dir() / "gpu1-opportunistic.sock");
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health(), all_unhealthy);
  // Without the interposer nothing is healthy, whatever the sockets.
  make_socket_file(socket_dir() / "gpu1-opportunistic.sock");
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health().at("gpu1-opportunistic-1"), "Healthy");
  fs::remove(interposer());
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health(), all_unhealthy);
}

TEST_F(DevicePlugin, AlwaysHealthyIgnoresTheSockets) {
  start_kubelet();
  start_plugin({"--gpus", "1", "--always-healthy"});
  registered();
  const std::unique_ptr<watch_stream> stream = watch("production");
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health(), (std::map<std::string, std::string>{{"gpu0-production", "Healthy"}}));
}

TEST_F(DevicePlugin, AllocatesCdiDevicesEnvAndMountsForEachClass) {
  start_kubelet();
  start_plugin();
  registered();
  struct expectation {
    const char* cls;
    const char* device;
    int gpu;
  };
  for (const expectation& x : {expectation{"production", "gpu1-production", 1},
                               expectation{"opportunistic", "gpu0-opportunistic-3", 0}}) {
    SCOPED_TRACE(x.cls);
    api::AllocateRequest request;
    request.add_container_requests()->add_devices_ids(x.device);
    api::AllocateResponse response;
    grpc::ClientContext context;
    const grpc::Status s = client(x.cls)->Allocate(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.container_responses_size(), 1);
    const api::ContainerAllocateResponse& c = response.container_responses(0);
    const std::string g = std::to_string(x.gpu);
    ASSERT_EQ(c.cdi_devices_size(), 2);
    EXPECT_EQ(c.cdi_devices(0).name(), "tgs.io/gpu=" + g + "-" + x.cls);
    EXPECT_EQ(c.cdi_devices(1).name(), "nvidia.com/gpu=" + g);
    EXPECT_EQ(c.envs().at("LD_PRELOAD"), "/usr/lib/tgs/libtgs-intercept.so");
    EXPECT_EQ(c.envs().at("TGS_NODE_SOCKET"), "/run/tgs/tgs.sock");
    EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), g);
    EXPECT_EQ(c.envs().size(), 3U);
    ASSERT_EQ(c.mounts_size(), 2);
    EXPECT_EQ(c.mounts(0).host_path(), interposer().string());
    EXPECT_EQ(c.mounts(0).container_path(), "/usr/lib/tgs/libtgs-intercept.so");
    EXPECT_TRUE(c.mounts(0).read_only());
    EXPECT_EQ(c.mounts(1).host_path(), (socket_dir() / ("gpu" + g + "-" + x.cls + ".sock")).string());
    EXPECT_EQ(c.mounts(1).container_path(), "/run/tgs/tgs.sock");
    EXPECT_FALSE(c.mounts(1).read_only());
    EXPECT_EQ(c.devices_size(), 0) << "GPU device nodes come from NVIDIA's CDI device or runtime";
  }
}

TEST_F(DevicePlugin, RefusesAnUnknownDeviceAndKeepsServing) {
  start_kubelet();
  start_plugin();
  registered();
  for (const char* id : {"gpu9-production", "gpu0-opportunistic-0", "", "gpu0-production-0"}) {
    api::AllocateRequest request;
    request.add_container_requests()->add_devices_ids(id);
    api::AllocateResponse response;
    grpc::ClientContext context;
    const grpc::Status s = client("production")->Allocate(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
  }
  {
    // Not UTF-8: protobuf refuses to parse the request before the plugin sees it.
    api::AllocateRequest request;
    request.add_container_requests()->add_devices_ids("gpu0-production\xff");
    api::AllocateResponse response;
    grpc::ClientContext context;
    EXPECT_FALSE(client("production")->Allocate(&context, request, &response).ok());
  }
  api::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("gpu9-production");
  api::AllocateResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(client("production")->Allocate(&context, request, &response).error_message(),
            "unknown device \"gpu9-production\"");
  EXPECT_TRUE(plugin_->running());
  grpc::ClientContext again;
  request.mutable_container_requests(0)->set_devices_ids(0, "gpu0-production");
  EXPECT_TRUE(client("production")->Allocate(&again, request, &response).ok());
}

TEST_F(DevicePlugin, PrefersTheLeastUsedGpu) {
  start_kubelet();
  start_plugin();
  registered();
  api::PreferredAllocationRequest request;
  api::ContainerPreferredAllocationRequest* c = request.add_container_requests();
  for (const char* id : {"gpu0-opportunistic-3", "gpu1-opportunistic-0", "gpu1-opportunistic-1"}) {
    c->add_available_deviceids(id);
  }
  c->set_allocation_size(1);
  api::PreferredAllocationResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(client("opportunistic")->GetPreferredAllocation(&context, request, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 1);
  ASSERT_EQ(response.container_responses(0).deviceids_size(), 1);
  EXPECT_EQ(response.container_responses(0).deviceids(0), "gpu1-opportunistic-0");
}

TEST_F(DevicePlugin, RegistersAgainWhenKubeletRestarts) {
  start_kubelet();
  start_plugin();
  registered();
  // A kubelet restart: the old kubelet goes, the new one removes every socket in its folder
  // (the plugin's too) and serves kubelet.sock anew.
  kubelet_.reset();
  for (const auto& entry : fs::directory_iterator(kubelet_dir())) fs::remove(entry.path());
  start_kubelet();
  std::map<std::string, api::RegisterRequest> by_resource;
  for (const api::RegisterRequest& r : registered()) by_resource[r.resource_name()] = r;
  EXPECT_EQ(by_resource.size(), 2U);
  ASSERT_TRUE(eventually([&] { return fs::exists(endpoint("production")) && fs::exists(endpoint("opportunistic")); },
                         5s));
  grpc::ClientContext context;
  api::DevicePluginOptions options;
  EXPECT_TRUE(client("opportunistic")->GetDevicePluginOptions(&context, api::Empty{}, &options).ok());
  EXPECT_TRUE(plugin_->running());
}

TEST_F(DevicePlugin, WaitsForKubeletToStart) {
  start_plugin();
  ASSERT_TRUE(eventually([&] { return fs::exists(endpoint("production")); }, 10s));
  start_kubelet();
  EXPECT_EQ(registered().size(), 2U);
}

TEST_F(DevicePlugin, ServesAgainWhenItsSocketIsRemoved) {
  start_kubelet();
  start_plugin();
  registered();
  fs::remove(endpoint("production"));
  // The endpoint comes back and registers again, so kubelet dials the new socket.
  EXPECT_GE(kubelet_->registrations().wait_for(4, 10s).size(), 4U);
  EXPECT_TRUE(fs::exists(endpoint("production")));
}

TEST_F(DevicePlugin, GarbageOnItsSocketDoesNotCrashIt) {
  start_kubelet();
  start_plugin();
  registered();
  const std::vector<std::string> payloads{
      std::string("\x00\x01\x02\x03\xff\xfe garbage \r\n\r\n", 20), std::string(70000, '\xAA'),
      // The HTTP/2 preface, then a frame header promising more than follows.
      std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string("\x00\xff\xff\x01\x04\x00\x00\x00\x01", 9),
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n"};
  for (const std::string& bytes : payloads) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, endpoint("production").c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(50ms);
    ::close(fd);
  }
  EXPECT_TRUE(plugin_->running());
  grpc::ClientContext context;
  api::DevicePluginOptions options;
  EXPECT_TRUE(client("production")->GetDevicePluginOptions(&context, api::Empty{}, &options).ok());
}

TEST_F(DevicePlugin, StopsCleanlyOnSigterm) {
  start_kubelet();
  start_plugin();
  registered();
  const std::unique_ptr<watch_stream> stream = watch("production");
  ASSERT_TRUE(stream->next());
  plugin_->signal(SIGTERM);
  EXPECT_EQ(plugin_->wait_exit(10s), 0);
  EXPECT_FALSE(stream->next()) << "the stream ends with the plugin";
  EXPECT_FALSE(fs::exists(endpoint("production")));
  EXPECT_FALSE(fs::exists(endpoint("opportunistic")));
}

#ifdef TGS_FAKE_DRIVER_DIR
TEST_F(DevicePlugin, CountsGpusThroughNvml) {
  start_kubelet();
  start_plugin({}, {std::string("LD_LIBRARY_PATH=") + TGS_FAKE_DRIVER_DIR, "TGS_FAKE_DEVICE_COUNT=3"});
  registered();
  const std::unique_ptr<watch_stream> stream = watch("production");
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health().size(), 3U);
  EXPECT_TRUE(stream->health().contains("gpu2-production"));
  EXPECT_NE(plugin_->log().find("3 GPUs (from NVML)"), std::string::npos) << plugin_->log();
}

TEST_F(DevicePlugin, CountsGpusThroughTheDriverWhereNvmlIsMissing) {
  // A library folder with the (fake) CUDA driver and no NVML.
  const fs::path driver_only = root_ / "driver-only";
  fs::create_directories(driver_only);
  fs::create_symlink(fs::path(TGS_FAKE_DRIVER_DIR) / "libcuda.so.1", driver_only / "libcuda.so.1");
  start_kubelet();
  start_plugin({}, {"LD_LIBRARY_PATH=" + driver_only.string(), "TGS_FAKE_DEVICE_COUNT=3"});
  registered();
  const std::unique_ptr<watch_stream> stream = watch("production");
  ASSERT_TRUE(stream->next());
  EXPECT_EQ(stream->health().size(), 3U);
  EXPECT_NE(plugin_->log().find("3 GPUs (from the CUDA driver)"), std::string::npos) << plugin_->log();
}
#endif

}  // namespace
