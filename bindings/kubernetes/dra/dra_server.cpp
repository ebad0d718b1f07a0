// SPDX-License-Identifier: Apache-2.0
// The DRA kubelet plugin's gRPC services (DRAPlugin v1 and plugin registration), its slice
// publishing and its checkpoint.
#include "dra_server.hpp"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "dra/v1/api.grpc.pb.h"
#include "dra_model.hpp"
#include "gpu_discovery.hpp"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "safe_dir.hpp"
#include "socket_file.hpp"

namespace tgs::kubernetes::dra {

namespace {

using namespace std::chrono_literals;
namespace api = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace reg = ::pluginregistration;
using nlohmann::json;

constexpr std::string_view service_socket_name = "dra.sock";
constexpr std::string_view checkpoint_name = "claims.json";

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The value at a JSON pointer, or null where there is none, whatever the types on the way: what
/// the API server answers is read, never trusted to have a shape.
json at(const json& j, const char* pointer) {
  try {
    return j.at(json::json_pointer(pointer));
  } catch (const json::exception&) {
    return nullptr;
  }
}

std::string claim_path(const std::string& ns, const std::string& name) {
  return fmt::format("/apis/{}/namespaces/{}/resourceclaims/{}", api_group_version, ns, name);
}

/// The prepared claims and their checkpoint file, which every change rewrites (atomically)
/// before kubelet hears of it.
class claim_store {
 public:
  claim_store(const inventory& devices, std::filesystem::path folder) : book_(devices), folder_(std::move(folder)) {}

  /// Reads the checkpoint; none is an empty book. Throws `std::runtime_error` naming the file.
  void load() {
    const std::string path = (folder_ / checkpoint_name).string();
    const std::optional<std::string> text = read_file(path);
    if (!text) return;
    try {
      book_.load(json::parse(*text));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {} (move it away to start without the claims it holds)", path, e.what()));
    }
  }

  std::mutex& lock() { return mutex_; }
  claim_book& book() { return book_; }

  /// Writes the book; an empty string, or why it could not.
  std::string save() const {
    const containers::unique_fd folder(::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (folder.get() < 0) return fmt::format("cannot open {}: {}", folder_.string(), std::strerror(errno));
    return containers::replace_file_at(folder.get(), std::string(checkpoint_name), book_.to_json().dump(1) + "\n",
                                       0600);
  }

 private:
  claim_book book_;
  std::filesystem::path folder_;
  std::mutex mutex_;
};

class dra_service final : public api::DRAPlugin::Service {
 public:
  dra_service(claim_store& claims, const api_client& api, const dra_options& options, const logger& log)
      : claims_(claims), api_(api), options_(options), log_(log) {}

  grpc::Status NodePrepareResources(grpc::ServerContext* /*context*/, const api::NodePrepareResourcesRequest* request,
                                    api::NodePrepareResourcesResponse* response) override {
    for (const api::Claim& claim : request->claims()) {
      api::NodePrepareResourceResponse& out = (*response->mutable_claims())[claim.uid()];
      try {
        const prepared_claim& c = prepare(claim);
        api::Device* d = out.add_devices();
        if (!c.device.request.empty()) d->add_request_names(c.device.request);
        d->set_pool_name(c.device.pool);
        d->set_device_name(c.device.device);
        for (const std::string& cdi : c.cdi_devices) d->add_cdi_device_ids(cdi);
      } catch (const std::exception& e) {
        out.Clear();
        out.set_error(e.what());
        log_.log(log_level::warn, "prepare refused: {}", e.what());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext* /*context*/,
                                      const api::NodeUnprepareResourcesRequest* request,
                                      api::NodeUnprepareResourcesResponse* response) override {
    const std::scoped_lock guard(claims_.lock());
    for (const api::Claim& claim : request->claims()) {
      api::NodeUnprepareResourceResponse& out = (*response->mutable_claims())[claim.uid()];
      if (!claims_.book().unprepare(claim.uid())) continue;  // never prepared, or done before: done
      if (const std::string why = claims_.save(); !why.empty()) {
        out.set_error("cannot write the checkpoint: " + why);
        log_.log(log_level::error, "unprepare of claim {}/{}: cannot write the checkpoint: {}", claim.namespace_(),
                 claim.name(), why);
        continue;
      }
      log_.log(log_level::info, "claim {}/{} ({}) unprepared", claim.namespace_(), claim.name(), claim.uid());
    }
    return grpc::Status::OK;
  }

 private:
  const prepared_claim& prepare(const api::Claim& claim) {
    {
      const std::scoped_lock guard(claims_.lock());
      if (const prepared_claim* done = claims_.book().find(claim.uid())) return *done;
    }
    if (claim.namespace_().empty() || claim.name().empty() || claim.uid().empty()) {
      throw claim_error("a claim without a namespace, name or UID");
    }
    // The allocation is read from the API server outside the lock: it is the slow part.
    const api_response got = api_.get(claim_path(claim.namespace_(), claim.name()));
    if (!got.ok()) {
      throw claim_error(fmt::format("claim {}/{}: cannot read it from the API server: {}", claim.namespace_(),
                                    claim.name(), got.describe()));
    }
    const std::vector<allocated_device> devices = allocated_here(got.body, claim.uid(), options_.node_name);
    const std::scoped_lock guard(claims_.lock());
    const prepared_claim& c = claims_.book().prepare(claim.uid(), claim.namespace_(), claim.name(), devices);
    if (const std::string why = claims_.save(); !why.empty()) {
      const std::string message = "cannot write the checkpoint: " + why;
      claims_.book().unprepare(claim.uid());
      throw std::runtime_error(message);
    }
    log_.log(log_level::info, "claim {}/{} ({}) prepared: {} -> {}", c.ns, c.name, c.uid, c.device.device,
             fmt::join(c.cdi_devices, ", "));
    return c;
  }

  claim_store& claims_;
  const api_client& api_;
  const dra_options& options_;
  const logger& log_;
};

class registration_service final : public reg::Registration::Service {
 public:
  registration_service(std::string endpoint, const logger& log) : endpoint_(std::move(endpoint)), log_(log) {}

  grpc::Status GetInfo(grpc::ServerContext* /*context*/, const reg::InfoRequest* /*request*/,
                       reg::PluginInfo* info) override {
    info->set_type("DRAPlugin");
    info->set_name(std::string(driver_name));
    info->set_endpoint(endpoint_);
    info->add_supported_versions(std::string(service_version));
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext* /*context*/, const reg::RegistrationStatus* status,
                                        reg::RegistrationStatusResponse* /*response*/) override {
    if (status->plugin_registered()) {
      log_.log(log_level::info, "registered with kubelet");
    } else {
      log_.log(log_level::error, "kubelet refused the registration: {}", status->error());
    }
    return grpc::Status::OK;
  }

 private:
  std::string endpoint_;
  const logger& log_;
};

/// A gRPC server on one socket, with the identity of the socket file it made, to see it replaced.
class socket_server {
 public:
  explicit socket_server(std::filesystem::path path) : path_(std::move(path)) {}
  socket_server(const socket_server&) = delete;
  socket_server& operator=(const socket_server&) = delete;
  ~socket_server() { stop(); }

  void start(grpc::Service& service) {
    stop();
    ::unlink(path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    server_ = builder.BuildAndStart();
    if (!server_) throw std::runtime_error("cannot serve on " + path_.string());
    identity_ = identity_of(path_);
  }

  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
    server_.reset();
    if (identity_ && identity_of(path_) == identity_) ::unlink(path_.c_str());
    identity_.reset();
  }

  /// Serving, and the socket file is still the one it made.
  [[nodiscard]] bool intact() const { return server_ && identity_ && identity_of(path_) == identity_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<grpc::Server> server_;
  std::optional<file_identity> identity_;
};

/// The node's slice as the API server holds it, kept equal to what the node offers.
class slice_publisher {
 public:
  slice_publisher(const inventory& devices, const dra_options& options, const api_client& api, const logger& log)
      : devices_(devices), options_(options), api_(api), log_(log), described_(describe_gpus(devices.settings().gpus)) {}

  /// Publishes the slice if what it offers changed or the API server lost it; logs a failure
  /// once per reason and tries again at the next call.
  void sync() {
    // Between resyncs the API server is asked only when what the node offers changed.
    json wanted = offered(current_slice(devices_, options_, described_, node_uid_, 1));
    const auto now = std::chrono::steady_clock::now();
    if (trouble_.empty() && wanted == published_ && now - verified_ < resync_period) return;
    if (node_uid_.empty()) learn_node_uid();
    const std::string path = fmt::format("/apis/{}/resourceslices/{}", api_group_version, slice_name(options_.node_name));
    const api_response existing = api_.get(path);
    if (existing.status != 404 && !existing.ok()) return trouble("cannot read the ResourceSlice: " + existing.describe());
    std::int64_t generation = 1;
    if (const json held = at(existing.body, "/spec/pool/generation"); existing.ok() && held.is_number_integer()) {
      generation = held.get<std::int64_t>() + 1;
    }
    json slice = current_slice(devices_, options_, described_, node_uid_, generation);
    verified_ = now;
    if (existing.ok() && offered(existing.body) == offered(slice) &&
        at(existing.body, "/metadata/ownerReferences") == at(slice, "/metadata/ownerReferences")) {
      trouble_.clear();
      published_ = offered(slice);
      return;
    }
    api_response done;
    if (existing.ok()) {
      const json version = at(existing.body, "/metadata/resourceVersion");
      slice["metadata"]["resourceVersion"] = version.is_string() ? version.get<std::string>() : std::string{};
      done = api_.put(path, slice);
    } else {
      done = api_.post(fmt::format("/apis/{}/resourceslices", api_group_version), slice);
    }
    // A conflict (someone else wrote it between our read and write) is settled at the next call.
    if (!done.ok()) return trouble("cannot publish the ResourceSlice: " + done.describe());
    trouble_.clear();
    published_ = offered(slice);
    log_.log(log_level::info, "ResourceSlice {} published: generation {}, {} devices", slice_name(options_.node_name),
             generation, slice["spec"]["devices"].size());
  }

 private:
  void learn_node_uid() {
    const api_response node = api_.get(fmt::format("/api/v1/nodes/{}", options_.node_name));
    if (node.ok()) {
      const json uid = at(node.body, "/metadata/uid");
      node_uid_ = uid.is_string() ? uid.get<std::string>() : std::string{};
    } else if (!node_warned_) {
      node_warned_ = true;
      log_.log(log_level::warn, "cannot read node {} ({}); its ResourceSlice has no owner and outlives it",
               options_.node_name, node.describe());
    }
  }

  void trouble(const std::string& why) {
    if (why != trouble_) log_.log(log_level::error, "{}", why);
    trouble_ = why;
  }

  const inventory& devices_;
  const dra_options& options_;
  const api_client& api_;
  const logger& log_;
  /// The GPUs' models and memory, asked of the driver once.
  std::vector<gpu_description> described_;
  std::string node_uid_;
  bool node_warned_ = false;
  std::string trouble_;
  /// What the API server held or was given last, and when it was last read.
  json published_;
  std::chrono::steady_clock::time_point verified_{};
  /// A slice someone deleted or changed comes back within this period.
  static constexpr std::chrono::seconds resync_period{60};
};

}  // namespace

std::string registration_socket_name() { return fmt::format("{}-reg.sock", driver_name); }

json current_slice(const inventory& devices, const dra_options& options,
                   const std::vector<gpu_description>& described, const std::string& node_uid,
                   std::int64_t generation) {
  const inventory::config& cfg = devices.settings();
  slice_facts facts{.node_name = options.node_name,
                    .node_uid = node_uid,
                    .gpus = {},
                    .features = {},
                    .opportunistic_replicas = cfg.opportunistic_replicas,
                    .generation = generation};
  if (!options.node_features.empty()) {
    if (const std::optional<std::string> text = read_file(options.node_features)) {
      facts.features = parse_node_features(*text);
    }
  }
  for (unsigned gpu = 0; gpu < cfg.gpus; ++gpu) {
    const std::filesystem::path dir = cfg.paths.socket_dir;
    const bool served = kubernetes::is_socket(dir / containers::node_socket_name(gpu, job_class::production)) &&
                        kubernetes::is_socket(dir / containers::node_socket_name(gpu, job_class::opportunistic));
    if (!served && !options.always_healthy) continue;
    const gpu_description about = gpu < described.size() ? described[gpu] : gpu_description{};
    facts.gpus.push_back({gpu, about.model, about.memory_bytes});
  }
  return resource_slice(facts);
}

int run_dra_plugin(const inventory& devices, const dra_options& options, const api_client& api, const logger& log,
                   int stop_fd) {
  claim_store claims(devices, options.plugin_dir);
  try {
    claims.load();
  } catch (const std::exception& e) {
    log.log(log_level::error, "cannot read the checkpoint {}", e.what());
    return 1;
  }
  log.log(log_level::info, "{} prepared claim(s) from the checkpoint", claims.book().size());

  const std::filesystem::path service_path = options.plugin_dir / service_socket_name;
  dra_service service(claims, api, options, log);
  registration_service registration(service_path.string(), log);
  socket_server service_server(service_path);
  socket_server registration_server(options.registry_dir / registration_socket_name());
  slice_publisher slices(devices, options, api, log);
  try {
    // The service first: kubelet dials it as soon as it sees the registration socket.
    service_server.start(service);
    registration_server.start(registration);
  } catch (const std::exception& e) {
    log.log(log_level::error, "{}", e.what());
    return 1;
  }
  log.log(log_level::info, "serving {} on {}, registration on {}", driver_name, service_path.string(),
          registration_server.path().string());

  for (;;) {
    slices.sync();
    pollfd p{stop_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(options.check_period.count())) > 0) break;
    try {
      if (!service_server.intact()) {
        log.log(log_level::warn, "the service socket {} was removed; serving it again", service_path.string());
        service_server.start(service);
      }
      if (!registration_server.intact()) {
        // kubelet's plugin watcher registers a plugin when its socket appears.
        log.log(log_level::warn, "the registration socket {} was removed; serving it again",
                registration_server.path().string());
        registration_server.start(registration);
      }
    } catch (const std::exception& e) {
      log.log(log_level::error, "{}", e.what());
      return 1;
    }
  }
  log.log(log_level::info, "stopping");
  registration_server.stop();
  service_server.stop();
  return 0;
}

}  // namespace tgs::kubernetes::dra
