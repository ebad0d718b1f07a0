// SPDX-License-Identifier: Apache-2.0
/// @file
/// What tgs-node sees of a GPU without asking the jobs: through NVML, which processes hold a
/// context on it and how much of its memory each uses. The node checks what jobs report against
/// it (docs/trust-model.md): a production job steers the rate controller only once it holds a
/// context on its GPU, and the memory a job claims when it registers is bounded by what NVML
/// says it uses.
///
/// NVML is loaded at run time; without it (no driver, or `--gpu-observer none`) nothing is
/// observed and those checks fall back to the bounds the node keeps itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tgs::cuda::node {

/// One process on a GPU, as NVML lists it.
struct gpu_process {
  pid_t pid = 0;
  /// GPU memory it uses; empty where NVML cannot tell.
  std::optional<std::uint64_t> used_bytes;
};

/// How many GPUs NVML sees (`nvmlDeviceGetCount_v2`), or why it cannot say (no NVML, no driver).
struct nvml_gpu_count {
  std::optional<std::uint32_t> count;
  std::string why;
};
/// Loads NVML for the count alone and lets it go again (whatever `--gpu-observer` says, the node
/// needs to know its GPUs).
[[nodiscard]] nvml_gpu_count count_gpus();

/// NVML, loaded once; an observer that failed to load observes nothing.
class gpu_observer {
 public:
  /// No observation (`--gpu-observer none`).
  gpu_observer() = default;
  /// Loads libnvidia-ml.so.1 and initialises it; `available()` says whether that worked and
  /// `description()` what was loaded or why not.
  static gpu_observer nvml();
  ~gpu_observer();
  gpu_observer(gpu_observer&& other) noexcept;
  gpu_observer& operator=(gpu_observer&& other) noexcept;
  gpu_observer(const gpu_observer&) = delete;
  gpu_observer& operator=(const gpu_observer&) = delete;

  [[nodiscard]] bool available() const noexcept { return library_ != nullptr; }
  [[nodiscard]] const std::string& description() const noexcept { return description_; }

  /// The processes with a context on GPU `index`; empty when NVML cannot say.
  [[nodiscard]] std::optional<std::vector<gpu_process>> processes(std::uint32_t index) const;
  /// The entry of `pid` on GPU `index`: empty optional when NVML cannot say, an entry with
  /// pid 0 when NVML answered and the process is not there.
  [[nodiscard]] std::optional<gpu_process> process(std::uint32_t index, pid_t pid) const;

  /// What NVML says of GPU `index` for MPS: whether it exists, whether it is in MIG mode, its
  /// UUID; each empty where NVML cannot tell (no NVML, or a call it lacks).
  struct gpu_facts {
    std::optional<bool> present;
    std::optional<bool> mig;
    std::optional<std::string> uuid;
  };
  [[nodiscard]] gpu_facts facts(std::uint32_t index) const;

 private:
  void* library_ = nullptr;
  void* handle_by_index_ = nullptr;
  void* running_processes_ = nullptr;
  void* shutdown_ = nullptr;
  void* mig_mode_ = nullptr;  ///< optional: NVML before MIG lacks it
  void* uuid_ = nullptr;
  std::string description_ = "off";
};

}  // namespace tgs::cuda::node
