// SPDX-License-Identifier: Apache-2.0
/// @file
/// The node server's private parts, shared by its source files (node_server.cpp: connections;
/// node_jobs.cpp: registration and the job table; node_status.cpp: the status answer): the job
/// and connection records, the log, and small system functions.
#pragma once

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <fmt/format.h>
#include <optional>
#include <string>

#include "node_server.hpp"

namespace tgs::cuda::node {

/// A registered job: its process, its class and GPU, and the node's mapping of its segment.
struct node_server::job {
  std::uint32_t id = 0;
  int fd = -1;
  /// Its process as the node accepted its connection (`pinned_process::peer_of`): every signal
  /// the node sends it goes through this; `pid` and `uid` are its, kept beside it for the many
  /// places that read them.
  pinned_process process;
  pid_t pid = 0;
  uid_t uid = 0;
  job_class cls = job_class::production;
  std::uint32_t gpu = 0;
  std::string name;
  /// Where its class came from: the class socket it registered on, its own request (a trusted
  /// user on the main socket), or the node's default.
  std::string class_from;
  /// Its cgroup and container, read when it registered.
  process_origin origin;
  abi::job_segment* segment = nullptr;
  clock::time_point since;
  /// In its GPU's control loop. A production job enters once the node sees it hold a context on
  /// its GPU (with an observer), so a registration that does no GPU work steers nothing.
  bool in_control = false;
  bool said_unseen = false;  ///< the node warned that NVML does not list it
  /// How it shares its GPU (an opportunistic job), and why: `tgs::mechanism_choice` at
  /// registration.
  std::optional<mechanism_verdict> mechanism;
  /// Whether its registration made it a client of the GPU's MPS server (both classes).
  bool mps_client = false;
  /// Its CUDA started outside the MPS server the node would make it a client of (its first
  /// registration failed, or it waited less than its interposer's bound): an opportunistic job is
  /// held beside production for as long as it runs, a production job is shown and logged.
  bool late = false;
  /// Its interposer's synchronisation marks carry its wait (`abi::register_flag_marks_wait`).
  bool marks_wait = false;
  /// Which profile is its (an opportunistic job whose process /proc could say).
  std::optional<profile_key> profile;
  /// The node holds it: its production co-runner stayed below its target at the cap's floor
  /// (since `corrected_at`); `confirmed` once production recovered while it was held (then its
  /// profile says so); `released` when production did not, so the loss was not its doing and it
  /// is not held again in this run.
  bool corrected = false;
  bool confirmed = false;
  bool released = false;
  clock::time_point corrected_at;

  job() = default;
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  ~job() {
    if (segment != nullptr) ::munmap(segment, abi::segment_bytes);
  }
};

/// One GPU's shared page (`abi::gpu_page`): a sealed memfd the node maps read-write, and whose
/// descriptor it sends with every registration on the GPU, read-write to the page's writer (its
/// production job) and read-only to everyone else.
struct node_server::gpu_page_file {
  int fd = -1;
  abi::gpu_page* page = nullptr;

  gpu_page_file() = default;
  gpu_page_file(const gpu_page_file&) = delete;
  gpu_page_file& operator=(const gpu_page_file&) = delete;
  ~gpu_page_file() {
    if (page != nullptr) ::munmap(page, abi::gpu_page_bytes);
    if (fd >= 0) ::close(fd);
  }
  /// Clears the activity line: no production job's samples stand in it any more.
  void clear_activity() noexcept {
    page->pending.store(0, std::memory_order_relaxed);
    page->last_pending_ns.store(0, std::memory_order_relaxed);
    page->sample_ns.store(0, std::memory_order_release);
  }
};

/// A client connection: a job (after registration), a status query, or one that has said nothing
/// yet. Answers wait in `outbox` until the client reads them.
struct node_server::connection {
  int fd = -1;
  /// The process that connected, pinned at accept; handed to its job when it registers.
  pinned_process peer;
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  std::uint32_t job_id = 0;  ///< 0 until it registers
  /// The class and GPU of the class socket it came through; empty on the main socket.
  std::optional<grant> granted;
  clock::time_point opened;
  std::deque<std::string> outbox;
  clock::time_point send_deadline;
  bool close_when_sent = false;
};

/// What the status and the metrics show of a job: its loop's report and the memory it holds.
struct node_server::job_numbers {
  /// Rates and budget (zero rates, no budget, before the job enters its GPU's loop).
  job_report report;
  /// Device and managed bytes: what the node counts (bounded by its grants) where a memory policy
  /// runs, else the job's own figures.
  abi::job_holdings held;
  /// Managed bytes on the GPU (never more than the managed bytes held).
  std::uint64_t managed_resident = 0;
  /// Bytes on the GPU: device plus managed resident.
  [[nodiscard]] std::uint64_t resident() const noexcept { return held.device_bytes + managed_resident; }
  /// Managed bytes evicted to host memory.
  [[nodiscard]] std::uint64_t evicted() const noexcept { return held.managed_bytes - managed_resident; }
};

[[nodiscard]] const char* level_name(log_level l) noexcept;

template <typename... Args>
void node_server::log(log_level level, const char* format, const Args&... args) const {
  if (level > options_.verbosity) return;
  const double t = std::chrono::duration<double>(clock::now() - start_).count();
  fmt::print(stderr, "tgs-node [{:9.3f}] {:5} {}\n", t, level_name(level), fmt::format(fmt::runtime(format), args...));
}

/// Sends one whole message without blocking; false if it did not go (full buffer, closed peer).
[[nodiscard]] bool send_message(int fd, const void* data, std::size_t size) noexcept;

/// A printable form of bytes a client sent (a job's name): control characters and bytes outside
/// printable ASCII become `\xNN`, so a name cannot break a log or status line.
[[nodiscard]] std::string printable(std::string_view raw);

}  // namespace tgs::cuda::node
