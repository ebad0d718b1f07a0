// SPDX-License-Identifier: Apache-2.0
// tgs-node's MPS control daemons: started per GPU, supervised, stopped with `quit`.
#include "mps_daemons.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "node_abi.hpp"
#include "pinned_process.hpp"
#include "safe_dir.hpp"

extern char** environ;

namespace tgs::cuda::node {

namespace {

using clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds tick_period{200};
constexpr std::chrono::milliseconds first_delay{1000};
constexpr std::chrono::milliseconds longest_delay{60000};
/// A daemon that ran this long has its restart delay reset.
constexpr std::chrono::milliseconds settled_after{60000};
constexpr const char* pid_file_name = "nvidia-cuda-mps-control.pid";

std::string fmt_seconds(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", std::chrono::duration<double>(d).count());
  return text;
}

bool executable(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

/// `name` itself when it holds a slash, else its first executable match on PATH; empty if none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return executable(name) ? name : std::string();
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return {};
}

/// The folders of one GPU's daemon, `<runtime>/gpu<N>/{pipe,log}`, made in the runtime folder
/// open as `runtime` as the node makes its other folders (safe_dir.hpp): each made with `mkdirat`
/// in its opened parent and opened without following a symlink, and refused if another user than
/// the node's (or root) owns it or, unless `allow_shared`, others may write to it. So no other
/// user can plant a control pipe where the node's jobs look for their daemon, or make the node's
/// daemon write elsewhere. Mode 0755: clients of every user reach `control` in the pipe folder,
/// and no one but the node's user changes either folder. Empty, or why not.
std::string make_gpu_folders(int runtime, const std::string& base, const std::string& name, bool allow_shared) {
  try {
    const containers::unique_fd gpu = containers::make_checked_folder_at(runtime, name, base, 0755, allow_shared);
    (void)containers::make_checked_folder_at(gpu.get(), "pipe", base + "/pipe", 0755, allow_shared);
    (void)containers::make_checked_folder_at(gpu.get(), "log", base + "/log", 0755, allow_shared);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

bool alive(pid_t pid, std::uint64_t start) {
  const std::optional<process_stat> f = read_process_stat(pid);
  return f && f->state != 'Z' && f->state != 'X' && (start == 0 || f->start == start);
}

/// The pid a control daemon wrote into its pipe folder, if that process runs a control program
/// (its name, against a pid file left behind and a pid used again since).
pid_t daemon_of(const std::string& pipe_dir) {
  std::ifstream in(pipe_dir + "/" + pid_file_name);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return 0;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.rfind("nvidia-cuda-mps", 0) == 0 && alive(static_cast<pid_t>(pid), 0) ? static_cast<pid_t>(pid) : 0;
}

bool has_control(const std::string& pipe_dir) {
  struct stat st{};
  return ::stat((pipe_dir + "/control").c_str(), &st) == 0;
}

/// Starts `program` with `args`, the node's environment with `overrides` replacing their
/// variables, stdout to /dev/null, stdin from `stdin_fd` (or /dev/null), and no other descriptor
/// of the node's (its sockets and lock must not outlive it in a daemon). Returns the pid, or -1.
pid_t spawn(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::pair<std::string, std::string>>& overrides, int stdin_fd = -1) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) {
      return entry.size() > o.first.size() && entry.compare(0, o.first.size(), o.first) == 0 &&
             entry[o.first.size()] == '=';
    });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_text{program};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return -1;
  const long max_fd = std::clamp<long>(::sysconf(_SC_OPEN_MAX), 256, 65536);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a threaded process: async-signal-safe calls only.
    ::dup2(stdin_fd >= 0 ? stdin_fd : devnull, 0);
    ::dup2(devnull, 1);
    // stderr stays the node's: what the program says there lands in the node's log.
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
      for (long fd = 3; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
    ::sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(program.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(devnull);
  return pid;
}

/// Waits for child `pid` until `deadline`; its exit status, or empty if it still runs.
std::optional<int> wait_child(pid_t pid, clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return -1;
    if (clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

}  // namespace

std::string_view to_string(mps_mode m) noexcept {
  switch (m) {
    case mps_mode::managed: return "managed";
    case mps_mode::external: return "external";
    case mps_mode::off: return "off";
  }
  return "?";
}

std::optional<mps_mode> parse_mps_mode(std::string_view s) noexcept {
  for (const mps_mode m : {mps_mode::managed, mps_mode::external, mps_mode::off}) {
    if (s == to_string(m)) return m;
  }
  return std::nullopt;
}

mps_daemons::mps_daemons(mps_options options, std::uint32_t gpus, logger log)
    : options_(std::move(options)), gpus_(gpus), log_(std::move(log)) {}

mps_daemons::~mps_daemons() {
  try {
    stop();
  } catch (...) {
  }
}

std::string_view mps_daemons::name(phase p) noexcept {
  switch (p) {
    case phase::off: return "off";
    case phase::absent: return "absent";
    case phase::mig: return "mig";
    case phase::starting: return "starting";
    case phase::running: return "running";
    case phase::waiting: return "restarting";
    case phase::failed: return "failed";
    case phase::ready: return "ready";
    case phase::missing: return "missing";
    case phase::stopped: return "stopped";
  }
  return "?";
}

void mps_daemons::start(const facts_of& facts) {
  started_ = true;
  states_.resize(gpus_);
  for (std::uint32_t gpu = 0; gpu < gpus_; ++gpu) states_[gpu].gpu = gpu;
  if (options_.mode == mps_mode::off) {
    for (gpu_state& g : states_) g.why = "--mps off";
    return;
  }
  if (options_.mode == mps_mode::managed) {
    control_ = find_program(options_.control);
    if (control_.empty()) {
      const std::string why = "no MPS control program (" + options_.control +
                              (options_.control.find('/') == std::string::npos ? " is not on PATH)" : " is not executable)");
      for (gpu_state& g : states_) {
        g.at = phase::failed;
        g.why = why;
      }
      return;
    }
  }
  // The managed daemons' folders live in the runtime folder, opened once (made if missing, in the
  // socket's folder, which the listener checked).
  containers::unique_fd runtime;
  std::string runtime_why;
  if (options_.mode == mps_mode::managed) {
    try {
      runtime = containers::make_checked_folder(options_.runtime_dir, 0755, options_.allow_shared_folders);
    } catch (const std::exception& e) {
      runtime_why = e.what();
    }
  }
  for (gpu_state& g : states_) {
    const mps_gpu_facts f = facts ? facts(g.gpu) : mps_gpu_facts{};
    if (f.present == false) {
      g.at = phase::absent;
      g.why = "NVML has no GPU " + std::to_string(g.gpu);
      continue;
    }
    if (f.mig == true) {
      g.at = phase::mig;
      g.why = "GPU " + std::to_string(g.gpu) + " is in MIG mode";
      continue;
    }
    if (options_.mode == mps_mode::external) {
      std::string dir = options_.pipe_dir;
      if (const std::size_t at = dir.find("%u"); at != std::string::npos) dir.replace(at, 2, std::to_string(g.gpu));
      g.pipe_dir = dir;
      if (dir.size() + 1 > abi::mps_pipe_directory_bytes) {
        g.at = phase::failed;
        g.why = "the pipe folder " + dir + " is longer than a job can be told (" +
                std::to_string(abi::mps_pipe_directory_bytes - 1) + " bytes)";
        continue;
      }
      g.at = has_control(dir) ? phase::ready : phase::missing;
      if (g.at == phase::missing) g.why = "no MPS control daemon in " + dir + " (no control pipe)";
      continue;
    }
    const std::string base = options_.runtime_dir + "/gpu" + std::to_string(g.gpu);
    g.pipe_dir = base + "/pipe";
    g.log_dir = base + "/log";
    g.visible = f.uuid.value_or(std::to_string(g.gpu));
    std::string why;
    if (g.pipe_dir.size() + 1 > abi::mps_pipe_directory_bytes) {
      why = "the pipe folder " + g.pipe_dir + " is longer than a job can be told (" +
            std::to_string(abi::mps_pipe_directory_bytes - 1) + " bytes)";
    } else if (runtime.get() < 0) {
      why = runtime_why;
    } else if ((why = make_gpu_folders(runtime.get(), base, "gpu" + std::to_string(g.gpu),
                                       options_.allow_shared_folders))
                   .empty()) {
      if (adopt(g)) continue;
      launch(g);
      continue;
    }
    g.at = phase::failed;
    g.why = why;
    log_(log_kind::warn, "MPS on GPU " + std::to_string(g.gpu) + ": " + why);
  }
  // Wait (bounded) for the daemons to come up: the policy in force depends on them.
  const clock::time_point deadline = clock::now() + options_.start_timeout + std::chrono::milliseconds{100};
  while (clock::now() < deadline &&
         std::any_of(states_.begin(), states_.end(), [](const gpu_state& g) { return g.at == phase::starting; })) {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    for (gpu_state& g : states_) {
      if (g.at == phase::starting) check_starting(g);
    }
  }
  // A daemon that did not start at all is not retried: the node runs without MPS there.
  for (gpu_state& g : states_) {
    if (g.at == phase::waiting) g.at = phase::failed;
  }
  supervising_ = true;
}

void mps_daemons::mark_running(gpu_state& g, pid_t pid) {
  // The daemon's start time with its pid: a recycled pid is never taken for it later.
  const std::optional<process_stat> f = read_process_stat(pid);
  g.daemon = pid;
  g.daemon_start = f ? f->start : 0;
  g.at = phase::running;
  g.up_since = clock::now();
  g.why.clear();
}

bool mps_daemons::adopt(gpu_state& g) {
  const pid_t pid = daemon_of(g.pipe_dir);
  if (pid == 0 || !has_control(g.pipe_dir)) return false;
  mark_running(g, pid);
  log_(log_kind::info, "MPS on GPU " + std::to_string(g.gpu) + ": adopted the control daemon already running in " +
                           g.pipe_dir + " (pid " + std::to_string(pid) + ")");
  return true;
}

void mps_daemons::launch(gpu_state& g) {
  // A pid file of a daemon that is gone would be taken for the new one's until it rewrites it.
  ::unlink((g.pipe_dir + "/" + pid_file_name).c_str());
  g.launcher = spawn(control_, {"-d"},
                     {{"CUDA_MPS_PIPE_DIRECTORY", g.pipe_dir},
                      {"CUDA_MPS_LOG_DIRECTORY", g.log_dir},
                      {"CUDA_VISIBLE_DEVICES", g.visible},
                      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}});
  g.launcher_status = -1;
  g.daemon = 0;
  g.at = phase::starting;
  g.deadline = clock::now() + options_.start_timeout;
  if (g.launcher < 0) {
    g.launcher = 0;
    retry_later(g, std::string("cannot start ") + control_ + ": " + std::strerror(errno));
  }
}

void mps_daemons::retry_later(gpu_state& g, const std::string& why) {
  g.at = phase::waiting;
  g.why = why;
  g.retry_at = clock::now() + g.delay;
  if (!supervising_) {
    log_(log_kind::warn, "MPS on GPU " + std::to_string(g.gpu) + ": " + why);
    return;  // `start` gives up on it
  }
  log_(log_kind::warn, "MPS on GPU " + std::to_string(g.gpu) + ": " + why + "; starting it again in " +
                           fmt_seconds(g.delay) + " s");
  g.delay = std::min(g.delay * 2, longest_delay);
}

void mps_daemons::check_starting(gpu_state& g) {
  if (g.launcher > 0) {
    int status = 0;
    const pid_t r = ::waitpid(g.launcher, &status, WNOHANG);
    if (r == g.launcher) {
      g.launcher_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      g.launcher = 0;
    } else if (r < 0 && errno == ECHILD) {
      g.launcher = 0;  // reaped elsewhere: the pid file tells
    }
  }
  if (g.launcher == 0 && g.launcher_status != 0 && g.launcher_status != -1) {
    return retry_later(g, control_ + " -d exited with status " + std::to_string(g.launcher_status));
  }
  if (const pid_t pid = daemon_of(g.pipe_dir); pid != 0 && has_control(g.pipe_dir)) {
    mark_running(g, pid);
    log_(log_kind::info, "MPS on GPU " + std::to_string(g.gpu) + ": control daemon running (pid " + std::to_string(pid) +
                             ", pipe folder " + g.pipe_dir + ", log folder " + g.log_dir + ", CUDA_VISIBLE_DEVICES " +
                             g.visible + ")");
    return;
  }
  if (clock::now() >= g.deadline) {
    if (g.launcher > 0) {
      ::kill(g.launcher, SIGKILL);  // our own child, which should have returned long ago
      (void)wait_child(g.launcher, clock::now() + std::chrono::milliseconds{500});
      g.launcher = 0;
    }
    retry_later(g, "the control daemon did not come up within " +
                       std::to_string(options_.start_timeout.count()) + " ms");
  }
}

void mps_daemons::check_running(gpu_state& g) {
  if (alive(g.daemon, g.daemon_start) && has_control(g.pipe_dir)) {
    if (clock::now() - g.up_since >= settled_after) g.delay = first_delay;
    return;
  }
  ++g.restarts;
  g.daemon = 0;
  retry_later(g, "the control daemon is gone");
}

void mps_daemons::tick() {
  if (!started_ || clock::now() < next_tick_) return;
  next_tick_ = clock::now() + tick_period;
  for (gpu_state& g : states_) {
    if (g.launcher > 0 && g.at != phase::starting) {
      // The `-d` process returns once its daemon is up, possibly after the daemon was seen: reap it.
      int status = 0;
      if (const pid_t r = ::waitpid(g.launcher, &status, WNOHANG); r == g.launcher || (r < 0 && errno == ECHILD)) {
        g.launcher = 0;
      }
    }
    switch (g.at) {
      case phase::starting: check_starting(g); break;
      case phase::running: check_running(g); break;
      case phase::waiting:
        if (clock::now() >= g.retry_at) {
          if (!adopt(g)) launch(g);
        }
        break;
      case phase::ready:
      case phase::missing: {
        const bool there = has_control(g.pipe_dir);
        if (there != (g.at == phase::ready)) {
          log_(there ? log_kind::info : log_kind::warn,
               "MPS on GPU " + std::to_string(g.gpu) + ": the operator's daemon in " + g.pipe_dir +
                   (there ? " is there" : " is gone (no control pipe)"));
        }
        g.at = there ? phase::ready : phase::missing;
        g.why = there ? std::string() : "no MPS control daemon in " + g.pipe_dir + " (no control pipe)";
        break;
      }
      default: break;
    }
  }
}

void mps_daemons::stop() {
  if (!started_ || options_.mode != mps_mode::managed) return;
  started_ = false;
  const clock::time_point deadline = clock::now() + options_.stop_timeout;
  std::vector<gpu_state*> quitting;
  for (gpu_state& g : states_) {
    if (g.launcher > 0) {
      (void)wait_child(g.launcher, clock::now() + std::chrono::milliseconds{200});
      g.launcher = 0;
    }
    if (g.daemon == 0 && g.at == phase::starting) g.daemon = daemon_of(g.pipe_dir);  // it came up just now
    if (g.daemon == 0 || !alive(g.daemon, g.daemon_start)) {
      g.at = g.at == phase::absent || g.at == phase::mig ? g.at : phase::stopped;
      continue;
    }
    // `echo quit | nvidia-cuda-mps-control` with this daemon's pipe folder.
    int in[2];
    if (::pipe2(in, O_CLOEXEC) != 0) continue;
    const pid_t helper = spawn(control_, {}, {{"CUDA_MPS_PIPE_DIRECTORY", g.pipe_dir}, {"CUDA_MPS_LOG_DIRECTORY", g.log_dir}},
                               in[0]);
    ::close(in[0]);
    static constexpr char quit[] = "quit\n";
    (void)!::write(in[1], quit, sizeof(quit) - 1);
    ::close(in[1]);
    if (helper > 0 && !wait_child(helper, deadline)) {
      ::kill(helper, SIGKILL);
      (void)wait_child(helper, clock::now() + std::chrono::milliseconds{200});
    }
    quitting.push_back(&g);
  }
  for (gpu_state* g : quitting) {
    while (alive(g->daemon, g->daemon_start) && clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    if (alive(g->daemon, g->daemon_start)) {
      log_(log_kind::warn, "MPS on GPU " + std::to_string(g->gpu) + ": the control daemon (pid " +
                               std::to_string(g->daemon) + ") did not exit within " +
                               std::to_string(options_.stop_timeout.count()) +
                               " ms of quit (it waits for its clients); left running");
    } else {
      log_(log_kind::info, "MPS on GPU " + std::to_string(g->gpu) + ": control daemon stopped");
    }
    g->at = phase::stopped;
    g->daemon = 0;
  }
}

bool mps_daemons::available(std::uint32_t gpu) const noexcept {
  if (gpu >= states_.size()) return false;
  return states_[gpu].at == phase::running || states_[gpu].at == phase::ready;
}

bool mps_daemons::available_everywhere() const noexcept {
  if (options_.mode == mps_mode::off || states_.empty()) return false;
  bool any = false;
  for (const gpu_state& g : states_) {
    if (g.at == phase::absent) continue;
    if (g.at != phase::running && g.at != phase::ready) return false;
    any = true;
  }
  return any;
}

std::string mps_daemons::why_unavailable() const {
  if (options_.mode == mps_mode::off) return "--mps off";
  std::string out;
  for (const gpu_state& g : states_) {
    if (g.at == phase::absent || g.at == phase::running || g.at == phase::ready || g.why.empty()) continue;
    if (out.find(g.why) != std::string::npos) continue;  // one reason for all GPUs is said once
    if (!out.empty()) out += "; ";
    out += g.why;
  }
  if (out.empty() && !available_everywhere()) out = "no GPU with MPS";
  return out;
}

std::string mps_daemons::pipe_dir(std::uint32_t gpu) const {
  return gpu < states_.size() ? states_[gpu].pipe_dir : std::string();
}

std::string mps_daemons::pipe_dir_pattern() const {
  switch (options_.mode) {
    case mps_mode::managed: return options_.runtime_dir + "/gpu%u/pipe";
    case mps_mode::external: return options_.pipe_dir;
    case mps_mode::off: break;
  }
  return {};
}

bool mps_daemons::is_server(pid_t pid) const {
  const std::optional<process_stat> f = read_process_stat(pid);
  if (!f) return false;
  return std::any_of(states_.begin(), states_.end(), [&](const gpu_state& g) {
    if (g.pipe_dir.empty()) return false;
    const pid_t daemon = g.daemon != 0 ? g.daemon : daemon_of(g.pipe_dir);
    return daemon != 0 && f->parent == daemon;
  });
}

std::vector<mps_daemons::gpu_view> mps_daemons::view() const {
  std::vector<gpu_view> out;
  for (const gpu_state& g : states_) {
    out.push_back({.gpu = g.gpu, .state = std::string(name(g.at)), .available = available(g.gpu),
                   .pipe_dir = g.pipe_dir, .log_dir = g.log_dir, .daemon = g.daemon, .restarts = g.restarts,
                   .why = g.why});
  }
  return out;
}

}  // namespace tgs::cuda::node
