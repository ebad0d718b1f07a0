// SPDX-License-Identifier: Apache-2.0
// How many GPUs the node has, asked of NVML (libnvidia-ml.so.1) or else of the CUDA driver
// (libcuda.so.1, which in CI is the fake driver), both opened with dlopen so that the plugin
// needs neither to start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tgs::kubernetes {

/// A GPU count and where it came from ("NVML" or "the CUDA driver").
struct gpu_count {
  unsigned count = 0;
  std::string source;
};

/// The node's GPU count: NVML's if `libnvidia-ml.so.1` loads and answers, else the CUDA driver's.
/// Nothing when neither is there or neither sees a GPU; `why` then says what each answered.
[[nodiscard]] std::optional<gpu_count> discover_gpus(std::string& why);

/// A GPU's model name and memory as the CUDA driver reports them.
struct gpu_description {
  std::string model;
  std::uint64_t memory_bytes = 0;
};

/// GPUs 0..count-1 as the CUDA driver describes them; an entry is empty where the driver could not
/// say (and the whole list is, without a driver), since a description is for people and selectors,
/// never needed to share a GPU.
[[nodiscard]] std::vector<gpu_description> describe_gpus(unsigned count);

}  // namespace tgs::kubernetes
