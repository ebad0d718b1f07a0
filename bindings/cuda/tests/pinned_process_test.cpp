// SPDX-License-Identifier: Apache-2.0
// pinned_process: a connection's peer is the process that connected, a process opened by pid is the
// one with the start time seen, and a signal reaches that process or nobody, also after its pid
// was given to another process (clone3's set_tid, as root).
#include "pinned_process.hpp"

#include <gtest/gtest.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace {

using tgs::cuda::node::pin_result;
using tgs::cuda::node::pinned_process;
using tgs::cuda::node::pinning;
using tgs::cuda::node::process_start;
using tgs::cuda::node::signal_outcome;

/// A child that pauses until killed; `pid` 0: any pid, else that one (clone3's set_tid). -errno
/// when it could not be made.
pid_t pausing_child(pid_t pid = 0) {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  if (pid != 0) {
    args.set_tid = reinterpret_cast<std::uintptr_t>(&pid);
    args.set_tid_size = 1;
  }
  const long child = ::syscall(SYS_clone3, &args, sizeof(args));
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) ::pause();
  }
  return child < 0 ? -errno : static_cast<pid_t>(child);
}

/// Kills and reaps `pid`; its end status as waitpid gives it.
int end_child(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

/// Whether child `pid` still runs (not reaped).
bool child_running(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == 0; }

TEST(PinnedProcess, ADefaultOneHasEndedAndSignalsNobody) {
  const pinned_process none;
  EXPECT_TRUE(none.exited());
  EXPECT_EQ(none.signal(0), signal_outcome::gone);
}

TEST(PinnedProcess, APeerIsTheProcessThatConnected) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  pin_result r = pinned_process::peer_of(pair[0]);
  ASSERT_TRUE(r.process) << r.why;
  EXPECT_EQ(r.process->pid(), ::getpid());
  EXPECT_EQ(r.process->uid(), ::geteuid());
  EXPECT_EQ(r.process->start_ticks(), process_start(::getpid()).value_or(0));
  EXPECT_TRUE(r.process->in_group(::getegid()));
  EXPECT_EQ(r.process->by_pidfd(), tgs::cuda::node::kernel_pinning() != pinning::start_time);
  EXPECT_FALSE(r.process->exited());
  EXPECT_EQ(r.process->signal(0), signal_outcome::sent);
  ::close(pair[0]);
  ::close(pair[1]);
}

TEST(PinnedProcess, APeerThatEndsIsGoneAndSignalsReachNobody) {
  const int listener = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "tgs-pinned-" + std::to_string(::getpid());
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // abstract: nothing to remove
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(::bind(listener, reinterpret_cast<const sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) ::_exit(1);
    char byte = 0;
    (void)::read(fd, &byte, 1);  // until the test says
    ::_exit(0);
  }
  const int accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(accepted, 0);
  pin_result r = pinned_process::peer_of(accepted);
  ASSERT_TRUE(r.process) << r.why;
  EXPECT_EQ(r.process->pid(), child);
  EXPECT_FALSE(r.process->exited());
  ASSERT_EQ(::write(accepted, "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(r.process->exited());
  EXPECT_EQ(r.process->signal(SIGKILL), signal_outcome::gone);
  // Its connection, accepted again now, pins nothing.
  EXPECT_FALSE(pinned_process::peer_of(accepted).process);
  ::close(accepted);
  ::close(listener);
}

TEST(PinnedProcess, AStartTimeThatDoesNotMatchPinsNothing) {
  const pid_t child = pausing_child();
  ASSERT_GT(child, 0);
  const std::uint64_t start = process_start(child).value_or(0);
  EXPECT_FALSE(pinned_process::open(child, start + 1).process);
  pin_result r = pinned_process::open(child, start);
  ASSERT_TRUE(r.process) << r.why;
  EXPECT_EQ(r.process->signal(SIGSTOP), signal_outcome::sent);
  EXPECT_EQ(r.process->signal(SIGCONT), signal_outcome::sent);
  end_child(child);
}

// The pid reuse, at once: a process is pinned, ends, and its pid is given to another.
// The signal meant for the first reaches nobody; before, a kill by pid hit the second.
TEST(PinnedProcess, ASignalAfterItsPidWasReusedReachesNobody) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the pid is reused through clone3's set_tid";
  if (tgs::cuda::node::kernel_pinning() == pinning::start_time) GTEST_SKIP() << "no pidfds on this kernel";
  const pid_t first = pausing_child();
  ASSERT_GT(first, 0);
  pin_result r = pinned_process::open(first, process_start(first).value_or(0));
  ASSERT_TRUE(r.process) << r.why;
  const int status = end_child(first);
  ASSERT_TRUE(WIFSIGNALED(status));
  const pid_t second = pausing_child(first);
  if (second == -EPERM) GTEST_SKIP() << "clone3 set_tid is not permitted here";
  ASSERT_EQ(second, first) << std::strerror(-second);
  EXPECT_TRUE(r.process->exited());
  EXPECT_EQ(r.process->signal(SIGKILL), signal_outcome::gone);
  EXPECT_TRUE(child_running(second)) << "the signal reached the process that was given the pid";
  end_child(second);
}

}  // namespace
