// SPDX-License-Identifier: Apache-2.0
// A stand-in libnvidia-ml.so.1 for the fake device: the few NVML calls tgs-node makes to see
// which processes hold a context on a GPU and how much of its memory each uses, answered from the
// fake device's process table (fake_device.hpp), as the real NVML answers from the driver's.
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fake_device.hpp"
#include "nvml_subset.hpp"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

/// The fake's device handle: the ordinal plus one, so no handle is null.
nvmlDevice_t handle_of(unsigned index) {
  return reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(index) + 1);
}
int ordinal_of(nvmlDevice_t device) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(device)) - 1; }

int device_count() {
  const char* s = std::getenv("TGS_FAKE_DEVICE_COUNT");
  const long n = s != nullptr ? std::strtol(s, nullptr, 10) : 1;
  return n < 1 ? 1 : (n > tgs_fake::max_devices ? tgs_fake::max_devices : static_cast<int>(n));
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }
FAKE_EXPORT nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

/// The GPUs of the fake node: TGS_FAKE_DEVICE_COUNT (1 unless set), as the real one counts the
/// driver's.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(device_count());
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (static_cast<int>(index) >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = handle_of(index);
  return NVML_SUCCESS;
}

/// The live processes with a slot on the device, as NVML lists the processes with a context.
/// With too small a buffer it says how many there are (NVML_ERROR_INSUFFICIENT_SIZE), as NVML does.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count,
                                                                 nvmlProcessInfo_t* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  tgs_fake::device_state* d = tgs_fake::device(ordinal_of(device));
  if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned found = 0;
  for (tgs_fake::process_slot& s : d->slots) {
    const std::int32_t pid = s.pid.load();
    if (pid <= 0 || !tgs_fake::process_alive(pid, s.start_time.load())) continue;
    if (infos != nullptr && found < *count) {
      infos[found] = nvmlProcessInfo_t{static_cast<unsigned>(pid), s.device_bytes.load(), UINT_MAX, UINT_MAX};
    }
    ++found;
  }
  const bool fits = infos != nullptr && found <= *count;
  *count = found;
  return fits || found == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

/// MIG mode: on for the GPUs listed in TGS_FAKE_MIG_GPUS (comma-separated indexes), so tests see
/// a node keep MPS off a GPU in MIG mode. Elsewhere NVML_ERROR_NOT_SUPPORTED, as on a GPU without
/// MIG.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current, unsigned* pending) {
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int ordinal = ordinal_of(device);
  if (ordinal < 0 || ordinal >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  const char* list = std::getenv("TGS_FAKE_MIG_GPUS");
  for (const char* p = list; p != nullptr && *p != '\0';) {
    char* end = nullptr;
    const long n = std::strtol(p, &end, 10);
    if (end == p) break;
    if (n == ordinal) {
      *current = *pending = nvml_device_mig_enable;
      return NVML_SUCCESS;
    }
    p = *end == ',' ? end + 1 : end;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

/// "GPU-fake-<user or TGS_FAKE_DEVICE>-<index>": a name an MPS daemon is given its GPU by.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  if (uuid == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  const int ordinal = ordinal_of(device);
  if (ordinal < 0 || ordinal >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  const int n = std::snprintf(uuid, length, "GPU-fake-%d", ordinal);
  return n > 0 && static_cast<unsigned>(n) < length ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}
