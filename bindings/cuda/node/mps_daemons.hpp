// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's MPS control daemons (`--mps managed|external|off`): where MPS is available on each
/// GPU the node serves, and for `managed`, the daemons themselves.
///
/// `managed`: per GPU, the node starts `nvidia-cuda-mps-control -d` with its own pipe and log
/// folders (`<runtime>/mps/gpu<N>/{pipe,log}`, the runtime folder being the socket's; each made
/// through its opened parent and refused, that GPU then without MPS, where it is a symlink, another
/// user's, or writable by others) and
/// `CUDA_VISIBLE_DEVICES` naming that GPU alone (its UUID where NVML gives it, else its index in
/// PCI bus order, which is NVML's), so the daemon's clients see it as their device 0. A daemon
/// that dies is started again after a delay that doubles from 1 s to 60 s (back to 1 s once one
/// ran for a minute), and each death is logged. At shutdown each daemon is sent `quit` (the
/// control program with that pipe folder, `echo quit | nvidia-cuda-mps-control`), and waited for
/// a bounded time; one that does not exit (it waits for its clients) is left running, never
/// killed. A daemon found running in its folder at start (the node restarted) is adopted.
/// Nothing here touches the GPU's settings (compute mode, clocks, MIG, reset).
///
/// `external`: the operator runs the daemons; `--mps-pipe-dir` names their pipe folder (`%u` in
/// it stands for the GPU index). MPS is available on a GPU while its folder holds `control`.
///
/// A GPU in MIG mode (NVML) has no MPS here. Every call is made from the node's loop thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tgs::cuda::node {

enum class mps_mode : std::uint8_t { managed, external, off };

[[nodiscard]] std::string_view to_string(mps_mode m) noexcept;
[[nodiscard]] std::optional<mps_mode> parse_mps_mode(std::string_view s) noexcept;

/// What the operator configures.
struct mps_options {
  mps_mode mode = mps_mode::managed;
  /// The control program: a path, or a name looked up on PATH.
  std::string control = "nvidia-cuda-mps-control";
  /// `external`: the daemons' pipe folder; `%u` stands for the GPU index.
  std::string pipe_dir;
  /// `managed`: the folder under which each GPU gets `gpu<N>/pipe` and `gpu<N>/log`, all made
  /// and checked as the node's other folders are (safe_dir.hpp).
  std::string runtime_dir;
  /// Accept managed folders that users other than their owner may write to
  /// (`--allow-shared-folders`); one owned by another user is refused always.
  bool allow_shared_folders = false;
  /// How long a daemon may take to start, and to stop after `quit`.
  std::chrono::milliseconds start_timeout{10000};
  std::chrono::milliseconds stop_timeout{3000};
};

/// What the node knows of a GPU, from NVML (empty: cannot tell).
struct mps_gpu_facts {
  std::optional<bool> present;  ///< NVML has a GPU of this index
  std::optional<bool> mig;      ///< in MIG mode
  std::optional<std::string> uuid;
};

/// The daemons of the GPUs a node serves, and where MPS is available.
class mps_daemons {
 public:
  enum class log_kind : std::uint8_t { info, warn };
  using logger = std::function<void(log_kind, const std::string&)>;
  using facts_of = std::function<mps_gpu_facts(std::uint32_t gpu)>;

  mps_daemons(mps_options options, std::uint32_t gpus, logger log);
  ~mps_daemons();  ///< stops what is still running (`stop`)
  mps_daemons(const mps_daemons&) = delete;
  mps_daemons& operator=(const mps_daemons&) = delete;

  /// Finds the control program, looks at each GPU, starts (or adopts) the managed daemons and
  /// waits for them, at most `start_timeout`. Never throws for a daemon that fails: that GPU has
  /// no MPS, and `why_unavailable` says why.
  void start(const facts_of& facts);
  /// Supervision, from the node's loop: reaps the processes it started, notices a daemon that
  /// died and starts it again when its delay has passed, watches external pipe folders. Cheap;
  /// looks at most every 200 ms.
  void tick();
  /// Sends every running managed daemon `quit` and waits (bounded) for them to exit.
  void stop();

  [[nodiscard]] mps_mode mode() const noexcept { return options_.mode; }
  /// Whether a job on `gpu` can be an MPS client now.
  [[nodiscard]] bool available(std::uint32_t gpu) const noexcept;
  /// Whether MPS is available on every GPU the node serves (that NVML does not say is absent).
  [[nodiscard]] bool available_everywhere() const noexcept;
  /// Why MPS is not available everywhere (empty when it is).
  [[nodiscard]] std::string why_unavailable() const;
  /// The pipe folder of `gpu`'s daemon (empty when none).
  [[nodiscard]] std::string pipe_dir(std::uint32_t gpu) const;
  /// Every GPU's pipe folder, `%u` standing for the GPU index (empty with `--mps off`).
  [[nodiscard]] std::string pipe_dir_pattern() const;
  /// Whether `pid` is a daemon's MPS server (a child of a control daemon the node knows): it
  /// holds the GPU for its clients and must never be taken for an unregistered process.
  [[nodiscard]] bool is_server(pid_t pid) const;

  /// One GPU's state, for status and metrics.
  struct gpu_view {
    std::uint32_t gpu = 0;
    std::string state;  ///< running, starting, restarting, failed, absent, mig, ready, missing, off, stopped
    bool available = false;
    std::string pipe_dir;
    std::string log_dir;
    pid_t daemon = 0;
    std::uint64_t restarts = 0;
    std::string why;  ///< why not available
  };
  [[nodiscard]] std::vector<gpu_view> view() const;

 private:
  enum class phase : std::uint8_t { off, absent, mig, starting, running, waiting, failed, ready, missing, stopped };
  struct gpu_state {
    std::uint32_t gpu = 0;
    phase at = phase::off;
    std::string pipe_dir;
    std::string log_dir;
    std::string visible;  ///< the daemon's CUDA_VISIBLE_DEVICES
    pid_t launcher = 0;   ///< the `-d` process the node started, until reaped
    int launcher_status = -1;
    pid_t daemon = 0;     ///< from the pid file
    std::uint64_t daemon_start = 0;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::steady_clock::time_point retry_at;
    std::chrono::steady_clock::time_point up_since;
    std::chrono::milliseconds delay{1000};
    std::uint64_t restarts = 0;
    std::string why;
  };

  void launch(gpu_state& g);
  void check_starting(gpu_state& g);
  void check_running(gpu_state& g);
  void retry_later(gpu_state& g, const std::string& why);
  /// Records `pid` as `g`'s running daemon.
  void mark_running(gpu_state& g, pid_t pid);
  [[nodiscard]] bool adopt(gpu_state& g);
  [[nodiscard]] static std::string_view name(phase p) noexcept;

  mps_options options_;
  std::uint32_t gpus_;
  logger log_;
  std::string control_;  ///< the control program found, empty when none
  std::vector<gpu_state> states_;
  std::chrono::steady_clock::time_point next_tick_;
  bool started_ = false;
  /// `start` is over: a daemon that dies is started again.
  bool supervising_ = false;
};

}  // namespace tgs::cuda::node
