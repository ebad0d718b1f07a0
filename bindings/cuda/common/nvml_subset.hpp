// SPDX-License-Identifier: Apache-2.0
/// @file
/// The few NVML types and calls tgs-node uses, declared without `nvml.h` (as `cuda_subset.hpp`
/// does for the driver): which processes hold a context on a GPU and how much of its memory each
/// uses. Values and layouts are those of `nvml.h` (CUDA 12 and 13); NVML is loaded at run time
/// (`dlopen("libnvidia-ml.so.1")`), so nothing links against it.
#pragma once

#include <cstddef>

extern "C" {

/// NVML's status (`nvmlReturn_t`); the values tgs-node tells apart.
typedef enum nvmlReturn_enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
} nvmlReturn_t;

typedef struct nvmlDevice_st* nvmlDevice_t;

/// One process with a context on a device (`nvmlProcessInfo_t`, the layout the `_v3` call fills).
/// `usedGpuMemory` is `NVML_VALUE_NOT_AVAILABLE` where NVML cannot tell.
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

}  // extern "C"

/// `usedGpuMemory` when NVML cannot tell (`NVML_VALUE_NOT_AVAILABLE`).
inline constexpr unsigned long long nvml_value_not_available = ~0ULL;

static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8);

/// `nvmlDeviceGetMigMode`'s current mode when MIG is on (`NVML_DEVICE_MIG_ENABLE`).
inline constexpr unsigned nvml_device_mig_enable = 1;
/// Room for a GPU's UUID (`NVML_DEVICE_UUID_V2_BUFFER_SIZE`).
inline constexpr unsigned nvml_uuid_bytes = 96;

/// The signatures tgs-node looks up.
using nvml_init_fn = nvmlReturn_t (*)();
using nvml_count_fn = nvmlReturn_t (*)(unsigned int*);
using nvml_handle_fn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using nvml_processes_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
/// `nvmlDeviceGetMigMode(device, &current, &pending)` and `nvmlDeviceGetUUID(device, buffer, size)`:
/// whether MPS can run on a GPU, and the name its MPS daemon is given it by.
using nvml_mig_mode_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using nvml_uuid_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
