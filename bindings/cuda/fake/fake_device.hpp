// SPDX-License-Identifier: Apache-2.0
/// @file
/// The fake device's shared segment, which every process of a fake GPU maps: one kernel timeline
/// (and one more for below-normal-priority MPS clients, with their recent device time) and one
/// table of per-process slots (pid, start time, resident device bytes) per device. The
/// fake driver (libcuda.so.1) writes it; the fake NVML (libnvidia-ml.so.1) reads it, as the
/// real NVML reads what the real driver knows about each process.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tgs_fake {

inline constexpr std::uint64_t device_magic = 0x4b414654554447ULL;  // "GDUTFAK"
inline constexpr int max_devices = 8;
inline constexpr int max_processes = 256;  // room for the 200 jobs of the issue counts (faults_test.cpp)
/// Buckets of recently issued below-normal-priority MPS kernel time, each 2^mps_bucket_shift ns
/// (8.4 ms): 12 of them span about 100 ms.
inline constexpr int mps_buckets = 12;
inline constexpr int mps_bucket_shift = 23;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free,
              "the shared segment relies on lock-free atomics: no lock a SIGKILL could leave held");

/// One process's share of a device. `pid` is 0 when free and `-pid` while that process claims
/// it (so a claimer killed half-way leaves a slot others can still reclaim).
struct process_slot {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> start_time;    ///< the owner's start time (/proc/<pid>/stat), against pid reuse
  std::atomic<std::uint64_t> device_bytes;  ///< resident on this device: plain and device-resident managed
};

/// The shared device: one timeline and one process table per simulated GPU, shared by every
/// process of the same user (or of the same TGS_FAKE_DEVICE name). Fields are only ever
/// appended, so a segment left by an older build is extended with zeros, a valid state.
struct device_state {
  std::uint64_t magic;
  std::atomic<std::uint64_t> busy_until_ns;     ///< end of the last reserved kernel
  std::atomic<std::uint64_t> kernels;           ///< kernels run, for tests
  std::atomic<std::uint64_t> kernel_ns;         ///< device time reserved by kernels, for tests
  std::atomic<std::uint64_t> prefetches;        ///< cuMemPrefetchAsync calls, for tests
  std::atomic<std::uint64_t> prefetched_bytes;  ///< bytes they moved, either way, for tests
  process_slot slots[max_processes];
  // MPS (see fake_driver.cpp, "MPS clients"): below-normal-priority clients' kernels run on a
  // timeline of their own, and the device time they issued recently is kept per time bucket, each
  // bucket one word: its bucket number (high bits) and the nanoseconds issued in it (low bits).
  std::atomic<std::uint64_t> mps_low_busy_until_ns;  ///< end of the last below-normal-priority kernel
  std::atomic<std::uint64_t> mps_low_kernels;        ///< below-normal-priority kernels run, for tests
  std::atomic<std::uint64_t> mps_low_issued[mps_buckets];
};

/// Maps (creating on first use) the shared segment of device `ordinal`. A zero-filled new
/// segment is a valid idle device with no processes, so creation needs no initialisation race
/// handling.
inline device_state* device(int ordinal) {
  static std::atomic<device_state*> devices[max_devices];
  if (ordinal < 0 || ordinal >= max_devices) return nullptr;
  device_state* d = devices[ordinal].load(std::memory_order_acquire);
  if (d != nullptr) return d;
  char name[128];
  const char* base = std::getenv("TGS_FAKE_DEVICE");
  if (base != nullptr && *base != '\0') {
    std::snprintf(name, sizeof(name), "/%.100s-%d", base, ordinal);
  } else {
    std::snprintf(name, sizeof(name), "/tgs-fake-gpu-%u-%d", static_cast<unsigned>(::getuid()), ordinal);
  }
  const int fd = ::shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  // Grow only: shrinking would cut the table from under a process of a newer build.
  struct stat st{};
  if (::fstat(fd, &st) != 0 ||
      (static_cast<std::size_t>(st.st_size) < sizeof(device_state) && ::ftruncate(fd, sizeof(device_state)) != 0)) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(device_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  d = static_cast<device_state*>(p);
  device_state* expected = nullptr;
  if (!devices[ordinal].compare_exchange_strong(expected, d)) {
    ::munmap(p, sizeof(device_state));
    return expected;
  }
  return d;
}

// --- processes: who is alive, so a dead process's memory is free again ---------------------------

/// The state letter and start time (clock ticks after boot) of a process, from /proc/<pid>/stat.
struct proc_stat {
  char state = '?';
  std::uint64_t start_time = 0;
};

inline bool read_proc_stat(std::int32_t pid, proc_stat& out) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  out.state = *p;
  // After the state (field 3), skip to field 22, starttime.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  out.start_time = std::strtoull(p, nullptr, 10);
  return true;
}

inline bool no_such_process(std::int32_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// Whether `pid` is a live process started at `start` (0: any start). A zombie counts as dead:
/// the driver frees a context when its process dies, not when its parent reaps it.
inline bool process_alive(std::int32_t pid, std::uint64_t start) {
  if (no_such_process(pid)) return false;
  proc_stat st;
  if (!read_proc_stat(pid, st)) return !no_such_process(pid);  // no /proc: kill(2) decides
  if (st.state == 'Z' || st.state == 'X') return false;
  return start == 0 || st.start_time == start;
}


}  // namespace tgs_fake
