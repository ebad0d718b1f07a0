// SPDX-License-Identifier: Apache-2.0
// GPU discovery through NVML or the CUDA driver, loaded at run time.
#include "gpu_discovery.hpp"

#include <dlfcn.h>

#include <array>

namespace tgs::kubernetes {

namespace {

/// A library opened for one question and closed after it.
class library {
 public:
  explicit library(const char* name) : handle_(::dlopen(name, RTLD_NOW | RTLD_LOCAL)) {}
  library(const library&) = delete;
  library& operator=(const library&) = delete;
  ~library() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  [[nodiscard]] bool loaded() const noexcept { return handle_ != nullptr; }
  /// The function `name` as `F`, or null.
  template <class F>
  [[nodiscard]] F function(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<F>(::dlsym(handle_, name));
  }

 private:
  void* handle_;
};

// NVML and the driver API return 0 for success; their other codes are only reported.
std::optional<unsigned> nvml_count(std::string& why) {
  const library nvml("libnvidia-ml.so.1");
  if (!nvml.loaded()) {
    why += "NVML: libnvidia-ml.so.1 not found; ";
    return std::nullopt;
  }
  const auto init = nvml.function<int (*)()>("nvmlInit_v2");
  const auto count = nvml.function<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  const auto shutdown = nvml.function<int (*)()>("nvmlShutdown");
  if (init == nullptr || count == nullptr || shutdown == nullptr) {
    why += "NVML: libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetCount_v2; ";
    return std::nullopt;
  }
  if (const int rc = init(); rc != 0) {
    why += "NVML: nvmlInit_v2 returned " + std::to_string(rc) + "; ";
    return std::nullopt;
  }
  unsigned n = 0;
  const int rc = count(&n);
  shutdown();
  if (rc != 0) {
    why += "NVML: nvmlDeviceGetCount_v2 returned " + std::to_string(rc) + "; ";
    return std::nullopt;
  }
  return n;
}

std::optional<unsigned> driver_count(std::string& why) {
  const library cuda("libcuda.so.1");
  if (!cuda.loaded()) {
    why += "CUDA driver: libcuda.so.1 not found";
    return std::nullopt;
  }
  const auto init = cuda.function<int (*)(unsigned)>("cuInit");
  const auto count = cuda.function<int (*)(int*)>("cuDeviceGetCount");
  if (init == nullptr || count == nullptr) {
    why += "CUDA driver: libcuda.so.1 lacks cuInit or cuDeviceGetCount";
    return std::nullopt;
  }
  int n = 0;
  if (const int rc = init(0); rc != 0) {
    why += "CUDA driver: cuInit returned " + std::to_string(rc);
    return std::nullopt;
  }
  if (const int rc = count(&n); rc != 0 || n < 0) {
    why += "CUDA driver: cuDeviceGetCount returned " + std::to_string(rc);
    return std::nullopt;
  }
  return static_cast<unsigned>(n);
}

}  // namespace

std::vector<gpu_description> describe_gpus(unsigned count) {
  std::vector<gpu_description> out(count);
  const library cuda("libcuda.so.1");
  const auto init = cuda.function<int (*)(unsigned)>("cuInit");
  const auto name = cuda.function<int (*)(char*, int, int)>("cuDeviceGetName");
  const auto memory = cuda.function<int (*)(std::size_t*, int)>("cuDeviceTotalMem_v2");
  if (init == nullptr || name == nullptr || memory == nullptr || init(0) != 0) return out;
  for (unsigned i = 0; i < count; ++i) {
    std::array<char, 256> text{};
    if (name(text.data(), static_cast<int>(text.size()), static_cast<int>(i)) == 0) out[i].model = text.data();
    std::size_t bytes = 0;
    if (memory(&bytes, static_cast<int>(i)) == 0) out[i].memory_bytes = bytes;
  }
  return out;
}

std::optional<gpu_count> discover_gpus(std::string& why) {
  if (const std::optional<unsigned> n = nvml_count(why)) {
    if (*n > 0) return gpu_count{*n, "NVML"};
    why += "NVML: no GPUs; ";
  }
  if (const std::optional<unsigned> n = driver_count(why)) {
    if (*n > 0) return gpu_count{*n, "the CUDA driver"};
    why += "CUDA driver: no GPUs";
  }
  return std::nullopt;
}

}  // namespace tgs::kubernetes
