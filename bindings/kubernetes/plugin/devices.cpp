// SPDX-License-Identifier: Apache-2.0
// Device IDs, allocation and preferred allocation of the tgs device plugin.
#include "devices.hpp"

#include <algorithm>
#include <charconv>
#include <map>

namespace tgs::kubernetes {

namespace {

/// Parses the whole of `text` as a decimal number without sign or leading zeros.
std::optional<unsigned> parse_index(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text.front() == '0')) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string resource_name(job_class cls) { return "tgs.io/gpu-" + std::string(to_string(cls)); }

std::string to_string(const device_id& id) {
  std::string s = "gpu" + std::to_string(id.gpu) + "-" + std::string(to_string(id.cls));
  if (id.cls == job_class::opportunistic) s += "-" + std::to_string(id.replica);
  return s;
}

std::optional<device_id> parse_device_id(std::string_view id) {
  if (!id.starts_with("gpu")) return std::nullopt;
  id.remove_prefix(3);
  const std::size_t dash = id.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const std::optional<unsigned> gpu = parse_index(id.substr(0, dash));
  if (!gpu) return std::nullopt;
  const std::string_view rest = id.substr(dash + 1);
  if (rest == "production") return device_id{*gpu, job_class::production, 0};
  constexpr std::string_view opportunistic = "opportunistic-";
  if (!rest.starts_with(opportunistic)) return std::nullopt;
  const std::optional<unsigned> replica = parse_index(rest.substr(opportunistic.size()));
  if (!replica) return std::nullopt;
  return device_id{*gpu, job_class::opportunistic, *replica};
}

inventory::inventory(config cfg) : cfg_(std::move(cfg)) {
  if (cfg_.gpus == 0) throw std::invalid_argument("no GPUs to advertise");
  if (cfg_.opportunistic_replicas == 0) throw std::invalid_argument("opportunistic replicas must be at least 1");
}

std::vector<device_id> inventory::devices(job_class cls) const {
  std::vector<device_id> out;
  const unsigned per_gpu = cls == job_class::production ? 1 : cfg_.opportunistic_replicas;
  for (unsigned g = 0; g < cfg_.gpus; ++g) {
    for (unsigned r = 0; r < per_gpu; ++r) out.push_back({g, cls, r});
  }
  return out;
}

bool inventory::contains(const device_id& id) const noexcept {
  if (id.gpu >= cfg_.gpus) return false;
  return id.cls == job_class::production ? id.replica == 0 : id.replica < cfg_.opportunistic_replicas;
}

device_id inventory::checked(job_class cls, const std::string& id) const {
  const std::optional<device_id> d = parse_device_id(id);
  if (!d || !contains(*d)) throw allocation_error("unknown device \"" + id + "\"");
  if (d->cls != cls) {
    throw allocation_error("device \"" + id + "\" is not a " + resource_name(cls) + " device");
  }
  return *d;
}

container_allocation inventory::allocate(job_class cls, const std::vector<std::string>& ids) const {
  if (ids.empty()) throw allocation_error("no devices in the request");
  const device_id first = checked(cls, ids.front());
  for (const std::string& id : ids) {
    const device_id d = checked(cls, id);
    if (d.gpu != first.gpu) {
      throw allocation_error("devices \"" + ids.front() + "\" and \"" + id +
                             "\" are on different GPUs; a container shares one GPU");
    }
  }
  containers::container_edits edits = containers::edits_for(first.gpu, cls, cfg_.paths);
  container_allocation a;
  a.cdi_devices = {containers::qualified_cdi_device(first.gpu, cls), containers::nvidia_cdi_device(first.gpu)};
  a.env = std::move(edits.env);
  a.env.push_back({"NVIDIA_VISIBLE_DEVICES", std::to_string(first.gpu)});
  a.mounts = std::move(edits.mounts);
  return a;
}

std::vector<std::string> inventory::preferred(job_class cls, const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              std::size_t size) const {
  std::vector<std::string> out;
  auto taken = [&](const std::string& id) { return std::find(out.begin(), out.end(), id) != out.end(); };
  for (const std::string& id : must_include) {
    (void)checked(cls, id);
    if (!taken(id)) out.push_back(id);
  }
  // Available devices per GPU, in the order kubelet listed them.
  std::map<unsigned, std::vector<std::string>> free_by_gpu;
  for (const std::string& id : available) free_by_gpu[checked(cls, id).gpu].push_back(id);

  std::vector<unsigned> order;
  for (const auto& [gpu, ids] : free_by_gpu) order.push_back(gpu);
  // Most available first (ties: lower index), so single-device requests spread over the GPUs.
  std::stable_sort(order.begin(), order.end(),
                   [&](unsigned a, unsigned b) { return free_by_gpu[a].size() > free_by_gpu[b].size(); });
  if (!must_include.empty()) {
    // The GPU the must-include devices name comes first: a container shares one GPU.
    const unsigned gpu = checked(cls, must_include.front()).gpu;
    std::erase(order, gpu);
    order.insert(order.begin(), gpu);
  }
  for (unsigned gpu : order) {
    for (const std::string& id : free_by_gpu[gpu]) {
      if (out.size() >= size) return out;
      if (!taken(id)) out.push_back(id);
    }
  }
  return out;
}

}  // namespace tgs::kubernetes
