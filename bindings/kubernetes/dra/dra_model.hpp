// SPDX-License-Identifier: Apache-2.0
// What the DRA driver `gpu.tgs.io` says and decides, without gRPC or HTTP: the ResourceSlice a
// node publishes (a production device and opportunistic devices per GPU, with what tgs-node
// offers there), the devices a ResourceClaim's allocation gives this node, the claims prepared
// on the node (the refusals included), and their checkpoint. dra_server.cpp does the talking.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "devices.hpp"

namespace tgs::kubernetes::dra {

/// The driver's name: device attributes, DeviceClass selectors and allocation results carry it.
inline constexpr std::string_view driver_name = "gpu.tgs.io";
/// The service kubelet's plugin API offers at registration (kubelet 1.34 and later).
inline constexpr std::string_view service_version = "v1.DRAPlugin";
inline constexpr std::string_view api_group_version = "resource.k8s.io/v1";

/// One GPU as the node's driver describes it (model and memory may be unknown).
struct gpu_facts {
  unsigned index = 0;
  std::string model;
  std::uint64_t memory_bytes = 0;
};

/// What tgs-node's Node Feature Discovery file says (`--node-features-file`): key=value lines,
/// `#` comments. Keys this driver uses: tgs.mps, tgs.memory-policy, tgs.policy,
/// tgs.opportunistic-mechanism.
[[nodiscard]] std::map<std::string, std::string> parse_node_features(std::string_view text);

/// What a node's ResourceSlice holds.
struct slice_facts {
  std::string node_name;
  /// The Node object's UID: the slice is owned by the Node, so it goes when the node goes.
  /// Empty: no owner (the API server did not tell it).
  std::string node_uid;
  /// The GPUs tgs-node serves now (both class sockets there), with their facts.
  std::vector<gpu_facts> gpus;
  /// tgs-node's feature file, or empty where there is none.
  std::map<std::string, std::string> features;
  unsigned opportunistic_replicas = 4;
  std::int64_t generation = 1;
};

/// The slice's name: `<node>-gpu.tgs.io`, a DNS subdomain as node names are.
[[nodiscard]] std::string slice_name(std::string_view node_name);

/// The node's ResourceSlice (resource.k8s.io/v1): one pool named after the node, one slice, and
/// per GPU the devices `gpu<i>-production` and `gpu<i>-opportunistic-<r>` with the attributes
/// class, index, model, mps, memoryPolicy, policy and tgsVersion and the capacity memory.
[[nodiscard]] nlohmann::json resource_slice(const slice_facts& facts);

/// The same slice's spec without its pool generation: two slices that differ only there offer
/// the same, and the driver publishes only a change.
[[nodiscard]] nlohmann::json offered(const nlohmann::json& slice);

/// One device a claim's allocation gives this driver on this node.
struct allocated_device {
  std::string request;
  std::string pool;
  std::string device;
};

/// A claim this driver must not prepare; `what()` says why.
class claim_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The devices of this driver in the claim's allocation (`status.allocation.devices.results`),
/// checked to be this claim (its UID) and of this node's pool. Throws `claim_error` naming what
/// is wrong: not allocated, replaced by another claim of the same name, another node's pool.
[[nodiscard]] std::vector<allocated_device> allocated_here(const nlohmann::json& claim, std::string_view uid,
                                                           std::string_view node_name);

/// A claim prepared on this node: what kubelet hands the container runtime for it.
struct prepared_claim {
  std::string uid;
  std::string ns;
  std::string name;
  allocated_device device;
  job_class cls = job_class::production;
  unsigned gpu = 0;
  std::vector<std::string> cdi_devices;
};

/// The claims prepared on this node, with the rules that keep one production job per GPU and
/// a job to one socket.
class claim_book {
 public:
  explicit claim_book(const inventory& devices) : devices_(&devices) {}

  /// Prepares a claim (again: the same answer, so kubelet may repeat itself across restarts).
  /// Throws `claim_error` for a claim of more than one device (a job reaches tgs-node through one
  /// socket), a device that is not this node's, or the production device of a GPU whose
  /// production device another prepared claim holds.
  const prepared_claim& prepare(const std::string& uid, const std::string& ns, const std::string& name,
                                const std::vector<allocated_device>& devices);

  /// The claim prepared under `uid`, or null.
  [[nodiscard]] const prepared_claim* find(const std::string& uid) const;

  /// Forgets a claim; false when it was not prepared (which is no error: kubelet may repeat).
  bool unprepare(const std::string& uid);

  [[nodiscard]] std::size_t size() const noexcept { return claims_.size(); }

  /// The checkpoint: every prepared claim.
  [[nodiscard]] nlohmann::json to_json() const;
  /// Reads a checkpoint back. Throws `std::runtime_error` saying what is wrong with it.
  void load(const nlohmann::json& checkpoint);

 private:
  const inventory* devices_;
  std::map<std::string, prepared_claim> claims_;
};

}  // namespace tgs::kubernetes::dra
