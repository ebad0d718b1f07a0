// SPDX-License-Identifier: Apache-2.0
// NVML loaded at run time: the processes on a GPU and the memory each uses.
#include "gpu_observer.hpp"

#include <dlfcn.h>

#include <cstring>
#include <utility>

#include "nvml_subset.hpp"

namespace tgs::cuda::node {

nvml_gpu_count count_gpus() {
  nvml_gpu_count out;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    out.why = std::string("NVML not loaded: ") + (why != nullptr ? why : "libnvidia-ml.so.1 not found");
    return out;
  }
  auto init = reinterpret_cast<nvml_init_fn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<nvml_count_fn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<nvml_init_fn>(::dlsym(lib, "nvmlShutdown"));
  if (init == nullptr || count == nullptr || shutdown == nullptr) {
    out.why = "NVML lacks nvmlDeviceGetCount_v2";
  } else if (const nvmlReturn_t r = init(); r != NVML_SUCCESS) {
    out.why = "nvmlInit_v2 failed (" + std::to_string(static_cast<int>(r)) + ")";
  } else {
    unsigned n = 0;
    if (const nvmlReturn_t c = count(&n); c == NVML_SUCCESS) {
      out.count = n;
    } else {
      out.why = "nvmlDeviceGetCount_v2 failed (" + std::to_string(static_cast<int>(c)) + ")";
    }
    shutdown();
  }
  ::dlclose(lib);
  return out;
}

gpu_observer gpu_observer::nvml() {
  gpu_observer o;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    o.description_ = std::string("NVML not loaded (") + (why != nullptr ? why : "libnvidia-ml.so.1 not found") + ")";
    return o;
  }
  auto init = reinterpret_cast<nvml_init_fn>(::dlsym(lib, "nvmlInit_v2"));
  void* by_index = ::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  void* running = ::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  void* shutdown = ::dlsym(lib, "nvmlShutdown");
  if (init == nullptr || by_index == nullptr || running == nullptr || shutdown == nullptr) {
    o.description_ = "NVML lacks nvmlDeviceGetComputeRunningProcesses_v3 (driver older than 510)";
    ::dlclose(lib);
    return o;
  }
  if (const nvmlReturn_t r = init(); r != NVML_SUCCESS) {
    o.description_ = "nvmlInit_v2 failed (" + std::to_string(static_cast<int>(r)) + ")";
    ::dlclose(lib);
    return o;
  }
  o.library_ = lib;
  o.handle_by_index_ = by_index;
  o.running_processes_ = running;
  o.shutdown_ = shutdown;
  o.mig_mode_ = ::dlsym(lib, "nvmlDeviceGetMigMode");
  o.uuid_ = ::dlsym(lib, "nvmlDeviceGetUUID");
  Dl_info info{};
  o.description_ = std::string("NVML (") +
                   (::dladdr(by_index, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "libnvidia-ml.so.1") +
                   ")";
  return o;
}

gpu_observer::~gpu_observer() {
  if (library_ != nullptr) {
    reinterpret_cast<nvml_init_fn>(shutdown_)();
    ::dlclose(library_);
  }
}

gpu_observer::gpu_observer(gpu_observer&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)),
      handle_by_index_(other.handle_by_index_),
      running_processes_(other.running_processes_),
      shutdown_(other.shutdown_),
      mig_mode_(other.mig_mode_),
      uuid_(other.uuid_),
      description_(std::move(other.description_)) {}

gpu_observer& gpu_observer::operator=(gpu_observer&& other) noexcept {
  if (this != &other) {
    std::swap(library_, other.library_);
    std::swap(handle_by_index_, other.handle_by_index_);
    std::swap(running_processes_, other.running_processes_);
    std::swap(shutdown_, other.shutdown_);
    std::swap(mig_mode_, other.mig_mode_);
    std::swap(uuid_, other.uuid_);
    std::swap(description_, other.description_);
  }
  return *this;
}

std::optional<std::vector<gpu_process>> gpu_observer::processes(std::uint32_t index) const {
  if (library_ == nullptr) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (reinterpret_cast<nvml_handle_fn>(handle_by_index_)(index, &device) != NVML_SUCCESS) return std::nullopt;
  const auto running = reinterpret_cast<nvml_processes_fn>(running_processes_);
  // The list may grow between the size query and the fill: retry a few times with room to spare.
  std::vector<nvmlProcessInfo_t> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto count = static_cast<unsigned>(infos.size());
    const nvmlReturn_t r = running(device, &count, infos.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(count + 16);
      continue;
    }
    if (r != NVML_SUCCESS) return std::nullopt;
    std::vector<gpu_process> out;
    out.reserve(count);
    for (unsigned i = 0; i < count && i < infos.size(); ++i) {
      gpu_process p{static_cast<pid_t>(infos[i].pid), std::nullopt};
      if (infos[i].usedGpuMemory != nvml_value_not_available) p.used_bytes = infos[i].usedGpuMemory;
      out.push_back(p);
    }
    return out;
  }
  return std::nullopt;
}

std::optional<gpu_process> gpu_observer::process(std::uint32_t index, pid_t pid) const {
  const std::optional<std::vector<gpu_process>> all = processes(index);
  if (!all) return std::nullopt;
  for (const gpu_process& p : *all) {
    if (p.pid == pid) return p;
  }
  return gpu_process{};
}

gpu_observer::gpu_facts gpu_observer::facts(std::uint32_t index) const {
  gpu_facts f;
  if (library_ == nullptr) return f;
  nvmlDevice_t device = nullptr;
  if (reinterpret_cast<nvml_handle_fn>(handle_by_index_)(index, &device) != NVML_SUCCESS) {
    f.present = false;
    return f;
  }
  f.present = true;
  if (mig_mode_ != nullptr) {
    unsigned current = 0;
    unsigned pending = 0;
    const nvmlReturn_t r = reinterpret_cast<nvml_mig_mode_fn>(mig_mode_)(device, &current, &pending);
    if (r == NVML_SUCCESS) f.mig = current == nvml_device_mig_enable;
    if (r == NVML_ERROR_NOT_SUPPORTED) f.mig = false;  // a GPU without MIG
  }
  if (uuid_ != nullptr) {
    char buffer[nvml_uuid_bytes] = {};
    if (reinterpret_cast<nvml_uuid_fn>(uuid_)(device, buffer, sizeof(buffer)) == NVML_SUCCESS && buffer[0] != '\0') {
      f.uuid = std::string(buffer, strnlen(buffer, sizeof(buffer)));
    }
  }
  return f;
}

}  // namespace tgs::cuda::node
