// SPDX-License-Identifier: Apache-2.0
// The device plugin's gRPC services (one per class), its registration with kubelet, the watch on
// kubelet's folder that brings registration back after a kubelet restart, and device health.
#include "plugin_server.hpp"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "socket_file.hpp"

namespace tgs::kubernetes {

namespace {

using namespace std::chrono_literals;
namespace api = ::v1beta1;

constexpr std::array<job_class, 2> classes{job_class::production, job_class::opportunistic};
constexpr std::string_view kubelet_socket_name = "kubelet.sock";

/// The health of every (GPU, class), with a generation that moves on each change, so that each
/// ListAndWatch stream sends the list again exactly when something changed.
class health_board {
 public:
  explicit health_board(unsigned gpus) : healthy_(std::size_t{gpus} * classes.size(), false) {}

  struct snapshot {
    std::uint64_t generation;
    std::vector<bool> healthy;
  };

  /// Replaces the health of every slot (`slot(gpu, cls)`); wakes the streams if it changed.
  void update(const std::vector<bool>& healthy) {
    {
      const std::lock_guard lock(m_);
      if (healthy == healthy_) return;
      healthy_ = healthy;
      ++generation_;
    }
    cv_.notify_all();
  }

  [[nodiscard]] snapshot current() const {
    const std::lock_guard lock(m_);
    return {generation_, healthy_};
  }

  /// Waits until the generation is no longer `seen`, `timeout` passes, or `wake_all`.
  void wait(std::uint64_t seen, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(m_);
    const std::uint64_t wakes = wakes_;
    cv_.wait_for(lock, timeout, [&] { return generation_ != seen || wakes_ != wakes; });
  }

  /// Wakes every waiting stream (an endpoint is closing).
  void wake_all() {
    {
      const std::lock_guard lock(m_);
      ++wakes_;
    }
    cv_.notify_all();
  }

  [[nodiscard]] static std::size_t slot(unsigned gpu, job_class cls) {
    return std::size_t{gpu} * classes.size() + (cls == job_class::production ? 0 : 1);
  }

 private:
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  std::vector<bool> healthy_;
  std::uint64_t generation_ = 1;
  std::uint64_t wakes_ = 0;
};

/// kubelet's DevicePlugin service for one class's resource.
class class_service final : public api::DevicePlugin::Service {
 public:
  class_service(const inventory& devices, job_class cls, const health_board& board, const logger& log)
      : devices_(devices), cls_(cls), board_(board), log_(log) {}

  /// Ends the ListAndWatch streams at their next wake.
  void close() { closing_.store(true); }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const api::Empty*,
                                      api::DevicePluginOptions* out) override {
    *out = options();
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const api::Empty*,
                            grpc::ServerWriter<api::ListAndWatchResponse>* writer) override {
    log_.log(log_level::info, "{}: kubelet is watching the devices", resource_name(cls_));
    std::uint64_t seen = 0;
    std::optional<std::vector<bool>> sent;  // this class's health as last sent
    while (!closing_.load() && !context->IsCancelled()) {
      const health_board::snapshot now = board_.current();
      if (now.generation != seen) {
        seen = now.generation;
        const std::vector<device_id> ids = devices_.devices(cls_);
        std::vector<bool> health;
        for (const device_id& id : ids) health.push_back(now.healthy[health_board::slot(id.gpu, cls_)]);
        // The other class's changes move the generation too; kubelet hears only of this one's.
        if (health != sent) {
          api::ListAndWatchResponse response;
          for (std::size_t i = 0; i < ids.size(); ++i) {
            api::Device* d = response.add_devices();
            d->set_id(to_string(ids[i]));
            d->set_health(std::string(health[i] ? healthy : unhealthy));
          }
          if (!writer->Write(response)) break;
          sent = std::move(health);
        }
      }
      // The timeout bounds how long a stream kubelet has dropped keeps a server thread.
      board_.wait(seen, 1s);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const api::PreferredAllocationRequest* request,
                                      api::PreferredAllocationResponse* out) override {
    try {
      for (const api::ContainerPreferredAllocationRequest& r : request->container_requests()) {
        if (r.allocation_size() < 0) throw allocation_error("negative allocation size");
        const std::vector<std::string> picked =
            devices_.preferred(cls_, {r.available_deviceids().begin(), r.available_deviceids().end()},
                               {r.must_include_deviceids().begin(), r.must_include_deviceids().end()},
                               static_cast<std::size_t>(r.allocation_size()));
        api::ContainerPreferredAllocationResponse* c = out->add_container_responses();
        for (const std::string& id : picked) c->add_deviceids(id);
      }
    } catch (const allocation_error& e) {
      log_.log(log_level::warn, "{}: GetPreferredAllocation refused: {}", resource_name(cls_), e.what());
      return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const api::AllocateRequest* request,
                        api::AllocateResponse* out) override {
    try {
      for (const api::ContainerAllocateRequest& r : request->container_requests()) {
        const std::vector<std::string> ids(r.devices_ids().begin(), r.devices_ids().end());
        const container_allocation a = devices_.allocate(cls_, ids);
        api::ContainerAllocateResponse* c = out->add_container_responses();
        for (const std::string& name : a.cdi_devices) c->add_cdi_devices()->set_name(name);
        for (const containers::env_var& v : a.env) (*c->mutable_envs())[v.name] = v.value;
        for (const containers::mount& m : a.mounts) {
          api::Mount* mount = c->add_mounts();
          mount->set_host_path(m.host_path);
          mount->set_container_path(m.container_path);
          mount->set_read_only(m.read_only);
        }
        log_.log(log_level::info, "{}: allocated {} -> {}", resource_name(cls_), fmt::join(ids, ","),
                 fmt::join(a.cdi_devices, ","));
      }
    } catch (const allocation_error& e) {
      log_.log(log_level::warn, "{}: Allocate refused: {}", resource_name(cls_), e.what());
      return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const api::PreStartContainerRequest*,
                                 api::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // not asked for in the options: nothing to prepare before a start
  }

  [[nodiscard]] static api::DevicePluginOptions options() {
    api::DevicePluginOptions o;
    o.set_pre_start_required(false);
    o.set_get_preferred_allocation_available(true);
    return o;
  }

 private:
  const inventory& devices_;
  job_class cls_;
  const health_board& board_;
  const logger& log_;
  std::atomic<bool> closing_{false};
};

/// One class's gRPC server on its socket in kubelet's folder.
class endpoint {
 public:
  endpoint(job_class cls, const std::filesystem::path& dir)
      : cls_(cls), name_(endpoint_socket_name(cls)), path_(dir / name_) {}
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;
  ~endpoint() { stop(nullptr); }

  /// Serves on a fresh socket (removing a stale file at the path first). Throws
  /// `std::runtime_error` when gRPC cannot listen there.
  void start(const inventory& devices, const health_board& board, const logger& log) {
    ::unlink(path_.c_str());
    service_ = std::make_unique<class_service>(devices, cls_, board, log);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (!server_) {
      service_.reset();
      throw std::runtime_error("cannot serve " + resource_name(cls_) + " on " + path_.string());
    }
    identity_ = identity_of(path_);
  }

  /// Ends the streams, stops the server, and removes the socket if it is still ours.
  void stop(health_board* board) {
    if (!server_) return;
    service_->close();
    if (board != nullptr) board->wake_all();
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
    server_.reset();
    service_.reset();
    if (identity_ && identity_of(path_) == identity_) ::unlink(path_.c_str());
    identity_.reset();
  }

  /// Serving, and the socket at the path is still the one this server listens on.
  [[nodiscard]] bool intact() const { return server_ && identity_ && identity_of(path_) == identity_; }

  [[nodiscard]] grpc::Status register_with(const std::filesystem::path& kubelet_socket) const {
    const std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel("unix:" + kubelet_socket.string(), grpc::InsecureChannelCredentials());
    const std::unique_ptr<api::Registration::Stub> stub = api::Registration::NewStub(channel);
    api::RegisterRequest request;
    request.set_version(std::string(api_version));
    request.set_endpoint(name_);
    request.set_resource_name(resource_name(cls_));
    *request.mutable_options() = class_service::options();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    api::Empty reply;
    return stub->Register(&context, request, &reply);
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] job_class cls() const noexcept { return cls_; }

 private:
  job_class cls_;
  std::string name_;
  std::filesystem::path path_;
  std::unique_ptr<class_service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::optional<file_identity> identity_;
};

/// inotify on kubelet's folder: tells when kubelet's socket is made anew (kubelet restarted).
/// The periodic checks catch the rest, so a failed watch costs only reaction time.
class folder_watch {
 public:
  explicit folder_watch(std::filesystem::path dir) : dir_(std::move(dir)), fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    rearm();
  }
  folder_watch(const folder_watch&) = delete;
  folder_watch& operator=(const folder_watch&) = delete;
  ~folder_watch() {
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] int fd() const noexcept { return fd_; }

  /// Watches the folder again if it was removed and is back.
  void rearm() {
    if (fd_ < 0 || watching_) return;
    watching_ = ::inotify_add_watch(fd_, dir_.c_str(),
                                    IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF |
                                        IN_MOVE_SELF) >= 0;
  }

  /// Reads the pending events; true if one of them made `name` in the folder.
  bool made(std::string_view name) {
    bool seen = false;
    alignas(inotify_event) char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buffer + at);
        if ((e->mask & (IN_CREATE | IN_MOVED_TO)) != 0 && e->len > 0 && std::string_view(e->name) == name) seen = true;
        if ((e->mask & IN_IGNORED) != 0) watching_ = false;  // the folder went away
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    }
    return seen;
  }

 private:
  std::filesystem::path dir_;
  int fd_;
  bool watching_ = false;
};

/// Health of every (GPU, class): tgs-node serves the class's socket for that GPU and the
/// interposer is installed; otherwise a container given the device could not start (its mounts
/// would have no source). Logs each change.
std::vector<bool> check_health(const inventory& devices, const plugin_options& options, const logger& log,
                               std::vector<bool>& last, bool first) {
  const inventory::config& cfg = devices.settings();
  std::vector<bool> healthy(std::size_t{cfg.gpus} * classes.size(), true);
  if (options.always_healthy) return healthy;
  const bool interposer = is_file(cfg.paths.interposer);
  for (unsigned g = 0; g < cfg.gpus; ++g) {
    for (job_class cls : classes) {
      const std::string socket = containers::node_socket_path(cfg.paths, g, cls);
      const std::size_t s = health_board::slot(g, cls);
      healthy[s] = interposer && is_socket(socket);
      if (!first && healthy[s] == last[s]) continue;
      if (healthy[s]) {
        log.log(log_level::info, "gpu{} {}: healthy", g, to_string(cls));
      } else if (!interposer) {
        log.log(log_level::warn, "gpu{} {}: unhealthy: no interposer at {}", g, to_string(cls), cfg.paths.interposer);
      } else {
        log.log(log_level::warn, "gpu{} {}: unhealthy: tgs-node does not serve {}", g, to_string(cls), socket);
      }
    }
  }
  last = healthy;
  return healthy;
}

}  // namespace

std::string endpoint_socket_name(job_class cls) { return "tgs-gpu-" + std::string(to_string(cls)) + ".sock"; }

int run_device_plugin(const inventory& devices, const plugin_options& options, const logger& log, int stop_fd) {
  health_board board(devices.settings().gpus);
  std::vector<bool> last_health;
  board.update(check_health(devices, options, log, last_health, true));

  const std::filesystem::path kubelet_socket = options.kubelet_dir / kubelet_socket_name;
  std::array<std::unique_ptr<endpoint>, classes.size()> endpoints;
  for (std::size_t i = 0; i < classes.size(); ++i) endpoints[i] = std::make_unique<endpoint>(classes[i], options.kubelet_dir);
  folder_watch watch(options.kubelet_dir);

  bool kubelet_made_anew = false;
  bool registered = false;
  bool waiting_logged = false;
  std::optional<file_identity> registered_kubelet;
  std::string last_error;
  auto next_attempt = std::chrono::steady_clock::now();
  int status = 0;

  for (;;) {
    board.update(check_health(devices, options, log, last_health, false));

    // A kubelet restart removes every socket in its folder and makes its own anew; either sign
    // (or ours gone for another reason) means: serve again, then register again.
    const std::optional<file_identity> kubelet = identity_of(kubelet_socket);
    bool restart = kubelet_made_anew || (registered && kubelet && kubelet != registered_kubelet);
    for (const std::unique_ptr<endpoint>& e : endpoints) restart = restart || !e->intact();
    if (restart) {
      try {
        for (const std::unique_ptr<endpoint>& e : endpoints) {
          e->stop(&board);
          e->start(devices, board, log);
          log.log(log_level::info, "serving {} on {}", resource_name(e->cls()), e->path().string());
        }
      } catch (const std::exception& e) {
        log.log(log_level::error, "{}", e.what());
        status = 1;
        break;
      }
      kubelet_made_anew = false;
      registered = false;
      next_attempt = std::chrono::steady_clock::now();
    }

    if (!registered && !kubelet && !waiting_logged) {
      log.log(log_level::info, "waiting for kubelet's socket {}", kubelet_socket.string());
      waiting_logged = true;
    }
    if (!registered && kubelet && std::chrono::steady_clock::now() >= next_attempt) {
      std::string error;
      for (const std::unique_ptr<endpoint>& e : endpoints) {
        const grpc::Status s = e->register_with(kubelet_socket);
        if (!s.ok()) {
          error = "registering " + resource_name(e->cls()) + " with kubelet at " + kubelet_socket.string() +
                  " failed: " + s.error_message();
          break;
        }
      }
      if (error.empty()) {
        registered = true;
        registered_kubelet = kubelet;
        waiting_logged = false;
        last_error.clear();
        log.log(log_level::info, "registered {} and {} with kubelet ({} GPUs, {} opportunistic per GPU)",
                resource_name(job_class::production), resource_name(job_class::opportunistic),
                devices.settings().gpus, devices.settings().opportunistic_replicas);
      } else {
        if (error != last_error) log.log(log_level::warn, "{}; trying again", error);
        last_error = error;
        next_attempt = std::chrono::steady_clock::now() + std::max<std::chrono::milliseconds>(options.check_period, 1s);
      }
    }

    watch.rearm();
    std::array<pollfd, 2> fds{pollfd{stop_fd, POLLIN, 0}, pollfd{watch.fd(), POLLIN, 0}};
    const int ready = ::poll(fds.data(), fds[1].fd >= 0 ? 2 : 1, static_cast<int>(options.check_period.count()));
    if (ready < 0 && errno != EINTR) {
      log.log(log_level::error, "poll: {}", std::strerror(errno));
      status = 1;
      break;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      log.log(log_level::info, "stopping");
      break;
    }
    if ((fds[1].revents & POLLIN) != 0 && watch.made(kubelet_socket_name)) {
      log.log(log_level::info, "kubelet's socket was made anew: registering again");
      kubelet_made_anew = true;
    }
  }
  for (const std::unique_ptr<endpoint>& e : endpoints) e->stop(&board);
  return status;
}

}  // namespace tgs::kubernetes
