// SPDX-License-Identifier: Apache-2.0
// A job's process is the process that connected, fixed when tgs-node accepts the connection, on the
// fake driver: a registration sent on the connection of a process that has ended is refused,
// whoever holds its pid by then, and no signal of the node reaches a process that was given a pid
// later; the node keeps no descriptor of a connection or a job after it is gone. Issue 46, item 3;
// docs/trust-model.md, "Signals".
#include <linux/sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "e2e_support.hpp"
#include "fd_message.hpp"
#include "node_client.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;
namespace cabi = tgs::cuda::abi;

namespace {

/// A child of the test that sleeps, given the pid `pid` (clone3's `set_tid`: needs CAP_SYS_ADMIN),
/// as the kernel gives a free pid to any process once pid_max wraps. -errno when it could not be.
pid_t sleeper_with_pid(pid_t pid) {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<std::uintptr_t>(&pid);
  args.set_tid_size = 1;
  const long child = ::syscall(SYS_clone3, &args, sizeof(args));
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execl("/bin/sleep", "sleep", "60", nullptr);
    ::_exit(127);
  }
  return child < 0 ? -errno : static_cast<pid_t>(child);
}

/// A child of the test, reaped (killed first) when the test ends.
class child_guard {
 public:
  explicit child_guard(pid_t pid) : pid_(pid) {}
  child_guard(const child_guard&) = delete;
  child_guard& operator=(const child_guard&) = delete;
  ~child_guard() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  /// Whether it still runs; its end status (-signal) is kept once it has ended.
  bool running() {
    if (pid_ <= 0) return false;
    int s = 0;
    if (::waitpid(pid_, &s, WNOHANG) == 0) return true;
    status_ = WIFSIGNALED(s) ? -WTERMSIG(s) : WEXITSTATUS(s);
    pid_ = -1;
    return false;
  }
  [[nodiscard]] int status() const { return status_; }

 private:
  pid_t pid_;
  int status_ = 0;
};

/// The descriptors process `pid` holds open.
std::size_t open_descriptors(pid_t pid) {
  std::error_code ignored;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ignored);
       it != std::filesystem::directory_iterator(); it.increment(ignored)) {
    ++n;
  }
  return n;
}

class Identity : public EndToEnd {
 protected:
  /// A socket connected to the node by a child process that then ends (and is reaped): the test
  /// holds the connection the child made, as a process the child forked or sent it to would. The
  /// child waits until the node has surely accepted it. -1 when the child could not connect.
  int connection_of_an_ended_process(pid_t& connector) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
    connector = ::fork();
    if (connector == 0) {
      const bool connected = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
      std::this_thread::sleep_for(500ms);  // well within the node's 2 s handshake timeout
      ::_exit(connected ? 0 : 1);
    }
    int s = 0;
    ::waitpid(connector, &s, 0);
    if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) {
      ::close(fd);
      return -1;
    }
    timeval timeout{3, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
  }
};

// The issue's attack, with the pid reused at once instead of after a wrap: a process connects and
// ends, an unrelated process (here a sleeper) is given its pid, and the connection registers a
// production job. Before, the node read the pid's start time at registration and so took the
// sleeper for the job; a claimed GPU fault of an opportunistic job of the same user then made the
// shared fault domain SIGKILL the sleeper. Now the registrant is the process that connected: it
// has ended, the registration is refused, and the sleeper is never signalled.
TEST_F(Identity, ARegistrationOnTheConnectionOfAnEndedProcessIsRefusedAndSignalsNobody) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the pid is reused through clone3's set_tid (CAP_SYS_ADMIN)";
  start_node({"--fault-policy", "shared-fault-domain"});
  pid_t connector = 0;
  const int fd = connection_of_an_ended_process(connector);
  ASSERT_GE(fd, 0) << "the child could not connect";
  const pid_t reused = sleeper_with_pid(connector);
  if (reused == -EPERM) GTEST_SKIP() << "clone3 set_tid is not permitted here (no CAP_SYS_ADMIN)";
  ASSERT_EQ(reused, connector) << "the sleeper did not get the ended process's pid: " << std::strerror(-reused);
  child_guard sleeper(reused);

  cabi::register_request req;
  req.job_class = cabi::class_code::production;
  std::strncpy(req.name, "borrowed-pid", sizeof(req.name) - 1);
  ASSERT_EQ(::send(fd, &req, sizeof(req), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(req))) << std::strerror(errno);
  alignas(8) char reply[cabi::max_message_bytes] = {};
  int memfd = -1;
  const ssize_t n = tgs::cuda::receive_with_fd(fd, reply, sizeof(reply), memfd);
  if (memfd >= 0) ::close(memfd);
  cabi::message_header header{};
  if (n >= static_cast<ssize_t>(sizeof(header))) std::memcpy(&header, reply, sizeof(header));
  EXPECT_NE(header.type, cabi::message_type::registered)
      << "the node registered pid " << reused << " (the sleeper) for a process that had ended\n" << status();
  EXPECT_EQ(count(status(), R"("name":"borrowed-pid")"), 0);

  // An opportunistic job of the same user claims a GPU fault and ends: the shared fault domain
  // ends its co-runners, the production jobs of its user on its GPU.
  {
    std::optional<node_client> claimant = node_client::connect(socket_);
    ASSERT_TRUE(claimant && claimant->register_as(cabi::class_code::opportunistic, 0, "claims-a-fault"));
    claimant->segment()->gpu_error.store(700);  // CUDA_ERROR_ILLEGAL_ADDRESS
  }
  wait_until([&] { return gpu0_line(status()).value("faults_handled", 0) >= 1; }, 3s, "the claimed fault handled");
  std::this_thread::sleep_for(300ms);
  ::close(fd);  // a job the node took for the sleeper stood until now
  EXPECT_TRUE(sleeper.running()) << "the sleeper that was given the pid ended (" << sleeper.status()
                                 << "); node log:\n" << node_->stderr_text();
  EXPECT_EQ(gpu0_line(status()).value("co_runners_ended", -1), 0);
  EXPECT_NE(node_->stderr_text().find("the process that connected has ended"), std::string::npos)
      << node_->stderr_text();
}

// A registration from the process that connected is the job, as always: its pid and start time.
TEST_F(Identity, TheRegistrantIsTheProcessThatConnected) {
  start_node();
  std::optional<node_client> c = node_client::connect(socket_);
  ASSERT_TRUE(c && c->register_as(cabi::class_code::opportunistic, 0, "itself"));
  const nlohmann::json line = job_named("itself");
  EXPECT_EQ(line.value("pid", 0), ::getpid()) << line;
}

// Every connection holds its socket and its peer's pidfd, and every job its segment's mapping:
// once they are gone, the node holds as many descriptors as before them.
TEST_F(Identity, NoDescriptorOutlivesItsConnectionOrJob) {
  start_node({"--max-jobs-per-process", "100"});
  {
    // The first job on GPU 0 makes what the node keeps for the GPU (its shared page): made before
    // the count.
    std::optional<node_client> first = node_client::connect(socket_);
    ASSERT_TRUE(first && first->register_as(cabi::class_code::opportunistic, 0, "first"));
  }
  wait_until([&] { return count(status(), R"("job":)") == 0; }, 5s, "the first job gone");
  std::this_thread::sleep_for(300ms);
  const std::size_t before = open_descriptors(node_->pid());
  ASSERT_GT(before, 0U);
  for (int round = 0; round < 5; ++round) {
    std::vector<node_client> clients;
    for (int i = 0; i < 8; ++i) {
      std::optional<node_client> c = node_client::connect(socket_);
      ASSERT_TRUE(c);
      if (i % 2 == 0) {
        ASSERT_TRUE(c->register_as(cabi::class_code::opportunistic, 0, "cycle"));
      }
      clients.push_back(std::move(*c));
    }
    EXPECT_EQ(count(status(), R"("name":"cycle")"), 4);
    EXPECT_GT(open_descriptors(node_->pid()), before + 8) << "each connection holds a socket and a pidfd";
    clients.clear();
    wait_until([&] { return count(status(), R"("job":)") == 0; }, 5s, "the jobs gone");
  }
  // The connections that never registered are closed by the handshake timeout (2 s) at the latest.
  wait_until([&] { return open_descriptors(node_->pid()) <= before; }, 5s, "the node's descriptors back where they were");
  EXPECT_EQ(open_descriptors(node_->pid()), before);
}

// A node out of descriptors drops a connection whose peer it cannot pin, says why, and serves on
// once descriptors are free again.
TEST_F(Identity, OutOfDescriptorsAConnectionIsDroppedSayingWhyAndTheNodeServesOn) {
  start_node();
  {
    std::optional<node_client> first = node_client::connect(socket_);  // the GPU's page, made now
    ASSERT_TRUE(first && first->register_as(cabi::class_code::opportunistic, 0, "first"));
  }
  wait_until([&] { return count(status(), R"("job":)") == 0; }, 5s, "the first job gone");
  std::this_thread::sleep_for(300ms);
  // An odd number free: connections take two each (socket, pidfd) until one is left, which the
  // next accept takes, and its pidfd cannot be had.
  const rlim_t limit = open_descriptors(node_->pid()) + 7;
  const rlimit narrow{limit, limit};
  ASSERT_EQ(::prlimit(node_->pid(), RLIMIT_NOFILE, &narrow, nullptr), 0) << std::strerror(errno);
  std::vector<node_client> clients;
  for (int i = 0; i < 8; ++i) {
    if (std::optional<node_client> c = node_client::connect(socket_)) clients.push_back(std::move(*c));
    std::this_thread::sleep_for(20ms);
  }
  wait_until([&] { return node_->stderr_text().find("could not be pinned") != std::string::npos; }, 3s,
             "the node saying why it dropped connections");
  EXPECT_NE(node_->stderr_text().find("Too many open files"), std::string::npos) << node_->stderr_text();
  EXPECT_TRUE(node_->running());
  clients.clear();
  std::this_thread::sleep_for(300ms);
  std::optional<node_client> again = node_client::connect(socket_);
  ASSERT_TRUE(again && again->register_as(cabi::class_code::opportunistic, 0, "after"))
      << node_->stderr_text();
  EXPECT_EQ(count(status(), R"("name":"after")"), 1);
}

}  // namespace
