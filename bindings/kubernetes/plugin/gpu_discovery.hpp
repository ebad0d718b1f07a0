// SPDX-License-Identifier: Apache-2.0
// How many GPUs the node has, asked of NVML (libnvidia-ml.so.1) or else of the CUDA driver
// (libcuda.so.1, which in CI is the fake driver), both opened with dlopen so that the plugin
// needs neither to start.
#pragma once

#include <optional>
#include <string>

namespace tgs::kubernetes {

/// A GPU count and where it came from ("NVML" or "the CUDA driver").
struct gpu_count {
  unsigned count = 0;
  std::string source;
};

/// The node's GPU count: NVML's if `libnvidia-ml.so.1` loads and answers, else the CUDA driver's.
/// Nothing when neither is there or neither sees a GPU; `why` then says what each answered.
[[nodiscard]] std::optional<gpu_count> discover_gpus(std::string& why);

}  // namespace tgs::kubernetes
