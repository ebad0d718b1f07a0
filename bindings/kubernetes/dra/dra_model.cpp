// SPDX-License-Identifier: Apache-2.0
// The DRA driver's slice, allocation reading, refusals and checkpoint.
#include "dra_model.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "tgs/version.hpp"

namespace tgs::kubernetes::dra {

namespace {

using nlohmann::json;

std::string trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return std::string(s.substr(first, last - first + 1));
}

/// The attributes of one device: what a DeviceClass or a claim's selector can test.
json attributes(const gpu_facts& gpu, job_class cls, const std::map<std::string, std::string>& features) {
  json a = {{"class", {{"string", std::string(to_string(cls))}}},
            {"index", {{"int", gpu.index}}},
            {"tgsVersion", {{"version", TGS_VERSION}}}};
  if (!gpu.model.empty()) a["model"] = {{"string", gpu.model}};
  // What tgs-node offers, from its feature file; without it the driver does not guess.
  if (const auto it = features.find("tgs.mps"); it != features.end()) a["mps"] = {{"bool", it->second == "true"}};
  if (const auto it = features.find("tgs.memory-policy"); it != features.end()) {
    a["memoryPolicy"] = {{"string", it->second}};
  }
  if (const auto it = features.find("tgs.policy"); it != features.end()) a["policy"] = {{"string", it->second}};
  if (const auto it = features.find("tgs.opportunistic-mechanism"); it != features.end()) {
    a["opportunisticMechanism"] = {{"string", it->second}};
  }
  return a;
}

json device(const gpu_facts& gpu, const device_id& id, const std::map<std::string, std::string>& features) {
  json d = {{"name", to_string(id)}, {"attributes", attributes(gpu, id.cls, features)}};
  // A Quantity in bytes; every device of a GPU shows the GPU's memory (tgs's memory policy, not
  // the scheduler, divides it).
  if (gpu.memory_bytes > 0) d["capacity"] = {{"memory", {{"value", std::to_string(gpu.memory_bytes)}}}};
  return d;
}

const json* member(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const json& object, std::string_view key) {
  const json* v = member(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string{};
}

std::string claim_label(const prepared_claim& c) { return fmt::format("{}/{} ({})", c.ns, c.name, c.uid); }

}  // namespace

std::map<std::string, std::string> parse_node_features(std::string_view text) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string line = trimmed(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;  // NFD itself ignores such a line
    out[trimmed(std::string_view(line).substr(0, eq))] = trimmed(std::string_view(line).substr(eq + 1));
  }
  return out;
}

std::string slice_name(std::string_view node_name) { return fmt::format("{}-{}", node_name, driver_name); }

json resource_slice(const slice_facts& facts) {
  json devices = json::array();
  for (const gpu_facts& gpu : facts.gpus) {
    devices.push_back(device(gpu, {gpu.index, job_class::production, 0}, facts.features));
    for (unsigned r = 0; r < facts.opportunistic_replicas; ++r) {
      devices.push_back(device(gpu, {gpu.index, job_class::opportunistic, r}, facts.features));
    }
  }
  json metadata = {{"name", slice_name(facts.node_name)}};
  if (!facts.node_uid.empty()) {
    metadata["ownerReferences"] = json::array(
        {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", facts.node_name}, {"uid", facts.node_uid},
          {"controller", true}}});
  }
  return {{"apiVersion", api_group_version},
          {"kind", "ResourceSlice"},
          {"metadata", metadata},
          {"spec",
           {{"driver", driver_name},
            {"nodeName", facts.node_name},
            {"pool", {{"name", facts.node_name}, {"generation", facts.generation}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

json offered(const json& slice) {
  json spec = slice.is_object() && slice.contains("spec") ? slice["spec"] : json::object();
  if (spec.is_object() && spec.contains("pool") && spec["pool"].is_object()) spec["pool"].erase("generation");
  return spec;
}

std::vector<allocated_device> allocated_here(const json& claim, std::string_view uid, std::string_view node_name) {
  const json* metadata = member(claim, "metadata");
  const std::string ns = metadata != nullptr ? string_member(*metadata, "namespace") : std::string{};
  const std::string name = metadata != nullptr ? string_member(*metadata, "name") : std::string{};
  const std::string label = fmt::format("claim {}/{}", ns, name);
  if (metadata == nullptr || string_member(*metadata, "uid") != uid) {
    throw claim_error(fmt::format("{}: the API server holds another claim of that name (UID {}, kubelet asked for {})",
                                  label, metadata != nullptr ? string_member(*metadata, "uid") : "none", uid));
  }
  const json* status = member(claim, "status");
  const json* allocation = status != nullptr ? member(*status, "allocation") : nullptr;
  const json* devices = allocation != nullptr ? member(*allocation, "devices") : nullptr;
  const json* results = devices != nullptr ? member(*devices, "results") : nullptr;
  if (results == nullptr || !results->is_array()) throw claim_error(label + ": not allocated");
  std::vector<allocated_device> out;
  for (const json& r : *results) {
    if (string_member(r, "driver") != driver_name) continue;
    allocated_device d{string_member(r, "request"), string_member(r, "pool"), string_member(r, "device")};
    if (d.pool != node_name) {
      throw claim_error(fmt::format("{}: device {} is allocated from pool {}, not this node's ({})", label, d.device,
                                    d.pool, node_name));
    }
    out.push_back(std::move(d));
  }
  if (out.empty()) throw claim_error(fmt::format("{}: no device of {} in its allocation", label, driver_name));
  return out;
}

const prepared_claim& claim_book::prepare(const std::string& uid, const std::string& ns, const std::string& name,
                                          const std::vector<allocated_device>& devices) {
  if (const prepared_claim* done = find(uid)) return *done;
  const std::string label = fmt::format("claim {}/{}", ns, name);
  if (devices.size() != 1) {
    throw claim_error(fmt::format("{}: {} devices of {}; a claim takes one, since a job reaches tgs-node through "
                                  "one socket (one GPU, one class)",
                                  label, devices.size(), driver_name));
  }
  const allocated_device& d = devices.front();
  const std::optional<device_id> id = parse_device_id(d.device);
  if (!id || !devices_->contains(*id)) {
    throw claim_error(fmt::format("{}: {} is not one of this node's devices", label, d.device));
  }
  if (id->cls == job_class::production) {
    for (const auto& [other_uid, other] : claims_) {
      if (other.cls == job_class::production && other.gpu == id->gpu) {
        throw claim_error(fmt::format("{}: GPU {}'s production device is prepared for claim {}; a GPU runs one "
                                      "production job",
                                      label, id->gpu, claim_label(other)));
      }
    }
  }
  prepared_claim c{uid, ns, name, d, id->cls, id->gpu, devices_->allocate(id->cls, {d.device}).cdi_devices};
  return claims_.emplace(uid, std::move(c)).first->second;
}

const prepared_claim* claim_book::find(const std::string& uid) const {
  const auto it = claims_.find(uid);
  return it == claims_.end() ? nullptr : &it->second;
}

bool claim_book::unprepare(const std::string& uid) { return claims_.erase(uid) > 0; }

json claim_book::to_json() const {
  json claims = json::array();
  for (const auto& [uid, c] : claims_) {
    claims.push_back({{"uid", c.uid},
                      {"namespace", c.ns},
                      {"name", c.name},
                      {"request", c.device.request},
                      {"pool", c.device.pool},
                      {"device", c.device.device},
                      {"cdiDevices", c.cdi_devices}});
  }
  return {{"driver", driver_name}, {"version", 1}, {"claims", claims}};
}

void claim_book::load(const json& checkpoint) {
  const json* driver = member(checkpoint, "driver");
  const json* version = member(checkpoint, "version");
  const json* claims = member(checkpoint, "claims");
  if (driver == nullptr || *driver != json(std::string(driver_name)) || version == nullptr || *version != json(1) ||
      claims == nullptr || !claims->is_array()) {
    throw std::runtime_error(fmt::format("not a version 1 checkpoint of {}", driver_name));
  }
  std::map<std::string, prepared_claim> loaded;
  std::size_t n = 0;
  for (const json& entry : *claims) {
    ++n;
    prepared_claim c;
    c.uid = string_member(entry, "uid");
    c.ns = string_member(entry, "namespace");
    c.name = string_member(entry, "name");
    c.device = {string_member(entry, "request"), string_member(entry, "pool"), string_member(entry, "device")};
    const std::optional<device_id> id = parse_device_id(c.device.device);
    const json* cdi = member(entry, "cdiDevices");
    if (c.uid.empty() || !id || cdi == nullptr || !cdi->is_array()) {
      throw std::runtime_error(fmt::format("claim {} of the checkpoint lacks a UID, a device of this driver or its "
                                           "CDI devices",
                                           n));
    }
    for (const json& name : *cdi) {
      if (!name.is_string()) throw std::runtime_error(fmt::format("claim {}: a CDI device that is not a string", n));
      c.cdi_devices.push_back(name.get<std::string>());
    }
    c.cls = id->cls;
    c.gpu = id->gpu;
    // Kept even when the device is gone now (fewer GPUs or replicas): kubelet still unprepares it.
    loaded.emplace(c.uid, std::move(c));
  }
  claims_ = std::move(loaded);
}

}  // namespace tgs::kubernetes::dra
