// SPDX-License-Identifier: Apache-2.0
// An MPS client's GPU work drained before SIGTERM or SIGINT ends it (exit_drain.hpp says why).
#include "exit_drain.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "job_link.hpp"
#include "resolve.hpp"

namespace tgs::cuda::intercept {

std::atomic<bool> exit_draining{false};

namespace {

int wake_pipe[2] = {-1, -1};
/// The process that installed the handler: a forked child inherits the handler but not the
/// drain thread, so there it ends at once as the default action would.
pid_t installer = 0;
/// The first terminating signal; a second one while the drain runs changes nothing.
std::atomic<int> pending{0};

/// Ends the process by `sig` with its default action, as if no handler had been there.
[[noreturn]] void end_by(int sig) noexcept {
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)::sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  (void)::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  (void)::kill(::getpid(), sig);
  for (;;) ::pause();  // the signal ends the process, from whichever thread takes it
}

/// Async-signal-safe: a flag, a byte down the pipe.
void on_terminate(int sig) {
  if (::getpid() != installer) end_by(sig);  // sigaction, sigprocmask, kill: all signal-safe
  int expected = 0;
  if (!pending.compare_exchange_strong(expected, sig)) return;
  exit_draining.store(true, std::memory_order_release);
  const int saved = errno;
  const char byte = 1;
  (void)!::write(wake_pipe[1], &byte, 1);
  errno = saved;
}

/// Waits for the work of every device's primary context this process holds (the one the CUDA
/// runtime and PyTorch use); a device whose primary context is not active is left alone, since
/// retaining it would create a context (under MPS, a new client) on the way out.
void synchronize_primary_contexts() noexcept {
  using count_fn = CUresult (*)(int*);
  using get_fn = CUresult (*)(CUdevice*, int);
  using state_fn = CUresult (*)(CUdevice, unsigned*, int*);
  using retain_fn = CUresult (*)(CUcontext*, CUdevice);
  using release_fn = CUresult (*)(CUdevice);
  using set_fn = CUresult (*)(CUcontext);
  using sync_fn = CUresult (*)();
  count_fn count{};
  get_fn get{};
  state_fn state{};
  retain_fn retain{};
  release_fn release{};
  set_fn set_current{};
  sync_fn sync{};
  if (!lookup(count, "cuDeviceGetCount") || !lookup(get, "cuDeviceGet") || !lookup(state, "cuDevicePrimaryCtxGetState") ||
      !lookup(retain, "cuDevicePrimaryCtxRetain") || !lookup(release, "cuDevicePrimaryCtxRelease_v2") ||
      !lookup(set_current, "cuCtxSetCurrent") || !lookup(sync, "cuCtxSynchronize")) {
    log(log_level::warn, "the driver lacks a call the drain needs: ending without waiting for the GPU");
    return;
  }
  int devices = 0;
  if (count(&devices) != CUDA_SUCCESS) return;
  for (int i = 0; i < devices; ++i) {
    CUdevice dev{};
    unsigned flags = 0;
    int active = 0;
    CUcontext ctx{};
    if (get(&dev, i) != CUDA_SUCCESS || state(dev, &flags, &active) != CUDA_SUCCESS || active == 0) continue;
    if (retain(&ctx, dev) != CUDA_SUCCESS) continue;
    if (set_current(ctx) == CUDA_SUCCESS) (void)sync();  // an error (a faulted context) ends the wait too
    (void)set_current(nullptr);
    (void)release(dev);
  }
}

void drain_thread() noexcept {
  // The job's own handlers of other signals never run on this thread.
  sigset_t all;
  sigfillset(&all);
  (void)::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  char byte = 0;
  while (::read(wake_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  const int sig = pending.load(std::memory_order_acquire);
  try {
    std::thread([sig] {
      std::this_thread::sleep_for(drain_limit);
      log(log_level::warn, "signal %d: the GPU's work did not finish within %lld s; ending anyway", sig,
          static_cast<long long>(drain_limit.count()));
      end_by(sig);
    }).detach();
  } catch (...) {
    // No deadline thread: the drain still ends when the GPU's work does.
  }
  const auto started = std::chrono::steady_clock::now();
  synchronize_primary_contexts();
  log(log_level::info, "signal %d: the GPU's work drained in %.0f ms; ending", sig,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  end_by(sig);
}

}  // namespace

void install_exit_drain() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      if (::pipe2(wake_pipe, O_CLOEXEC) != 0) return;
      installer = ::getpid();
      std::thread(drain_thread).detach();
      for (const int sig : {SIGTERM, SIGINT}) {
        struct sigaction now{};
        if (::sigaction(sig, nullptr, &now) != 0 || now.sa_handler != SIG_DFL || (now.sa_flags & SA_SIGINFO) != 0) {
          continue;  // the job handles it (or ignores it) itself
        }
        struct sigaction sa{};
        sa.sa_handler = on_terminate;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        (void)::sigaction(sig, &sa, nullptr);
      }
    });
  } catch (...) {
    // No thread: the job keeps the default actions.
  }
}

void hold_for_exit() noexcept {
  for (;;) ::pause();
}

}  // namespace tgs::cuda::intercept
