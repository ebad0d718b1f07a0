// SPDX-License-Identifier: Apache-2.0
// The job's MPS client environment: written once, before the driver's cuInit, from what the node
// said at registration.
#include "mps_env.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "job_link.hpp"

namespace tgs::cuda::intercept {

namespace {

/// Orders every change of the environment before the driver's cuInit: `apply_mps_client` and
/// `gate_init` both take it.
std::mutex env_mutex;
/// The driver's cuInit was called in this process (it has read the MPS variables).
bool driver_initialised = false;  // under env_mutex
/// What this process's environment was given, for the log of a later registration.
abi::mps_client applied{};  // under env_mutex

bool same(const abi::mps_client& a, const abi::mps_client& b) noexcept {
  return a.client == b.client && a.priority == b.priority && a.active_thread_percentage == b.active_thread_percentage &&
         std::strncmp(a.pipe_directory, b.pipe_directory, sizeof(a.pipe_directory)) == 0;
}

/// How many devices CUDA_VISIBLE_DEVICES names (-1: unset).
int visible_device_entries() noexcept {
  const char* s = std::getenv("CUDA_VISIBLE_DEVICES");
  if (s == nullptr) return -1;
  if (*s == '\0') return 0;
  int n = 1;
  for (; *s != '\0'; ++s) n += *s == ',' ? 1 : 0;
  return n;
}

}  // namespace

bool apply_mps_client(const abi::mps_client& settings) noexcept {
  // Why setenv is safe enough here: this runs at the job's first driver call (the runtime's
  // first cuGetProcAddress, or cuInit itself), which registers under the registration mutex, and
  // under `env_mutex`, which the cuInit gate takes before the driver reads the variables; no
  // wrapper of ours reads them. What is left is another thread of the job reading its environment
  // at that very moment, the hazard of any setenv in a threaded program; glibc never frees the
  // strings of a replaced variable, and a job starts CUDA once, from one thread, before the
  // threads that launch its kernels.
  try {
    std::lock_guard lock(env_mutex);
    if (driver_initialised) {
      if (settings.client != 0 && !same(settings, applied)) {
        log(log_level::warn,
            "tgs-node asks this job to be an MPS client of %.*s (priority %u, %u%% of the SMs), but CUDA was "
            "initialised in this process already: its context keeps the settings it started with",
            static_cast<int>(sizeof(settings.pipe_directory)), settings.pipe_directory, settings.priority,
            settings.active_thread_percentage == 0 ? 100U : settings.active_thread_percentage);
      }
      return applied.client != 0;
    }
    if (settings.client == 0) return false;
    // The node's daemon sees only this job's GPU (its CUDA_VISIBLE_DEVICES), which its clients
    // see as device 0: a client must not set CUDA_VISIBLE_DEVICES itself (NVIDIA's MPS guide).
    // A job that asked for several GPUs would lose all but this one: it stays out of MPS.
    if (const int entries = visible_device_entries(); entries == 0 || entries > 1) {
      log(log_level::warn,
          "CUDA_VISIBLE_DEVICES names %s: this job stays out of MPS (a client of the node's daemon sees exactly its "
          "GPU)", entries == 0 ? "no GPU" : "several GPUs");
      return false;
    }
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr && std::getenv("TGS_GPU") == nullptr) {
      // Keep the job's GPU for a registration after a node restart, and for its children.
      char gpu[32] = {};
      std::snprintf(gpu, sizeof(gpu), "%.31s", visible);
      ::setenv("TGS_GPU", gpu, 1);
    }
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::setenv("CUDA_MPS_PIPE_DIRECTORY", settings.pipe_directory, 1);
    ::setenv("CUDA_MPS_CLIENT_PRIORITY", settings.priority != 0 ? "1" : "0", 1);
    if (settings.active_thread_percentage != 0) {
      char percent[8];
      std::snprintf(percent, sizeof(percent), "%u", settings.active_thread_percentage);
      ::setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", percent, 1);
    } else {
      ::unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    }
    applied = settings;
    log(log_level::info, "MPS client of %s, priority %u, %u%% of the SMs", settings.pipe_directory, settings.priority,
        settings.active_thread_percentage == 0 ? 100U : settings.active_thread_percentage);
    return true;
  } catch (...) {
    // A mutex that cannot be locked: leave the environment alone (the job runs as it asked).
  }
  return false;
}

std::uint8_t cuda_register_flags() noexcept {
  try {
    std::lock_guard lock(env_mutex);
    if (!driver_initialised) return 0;
    return abi::register_flag_cuda_started | (applied.client != 0 ? abi::register_flag_mps_client : 0);
  } catch (...) {
    return 0;
  }
}

pass_token gate_init() noexcept {
  (void)ensure_link();  // a program that calls cuInit first registers here, and gets its settings
  try {
    std::lock_guard lock(env_mutex);
    driver_initialised = true;
  } catch (...) {
  }
  return {};
}

}  // namespace tgs::cuda::intercept
