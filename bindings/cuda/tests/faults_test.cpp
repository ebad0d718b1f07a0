// SPDX-License-Identifier: Apache-2.0
// Faults and hostile local users, on the fake driver: a second tgs-node, a node that hands out a
// bad segment or stops answering, a node killed and restarted under a memory policy, a user who
// opens connections or registrations without end, jobs that forge what they report, and names
// that try to rewrite the status. Each test is the regression test of one finding of
// docs/results/faults-and-attacks.md.
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include "e2e_support.hpp"
#include "node_client.hpp"

using namespace tgs_e2e;
using namespace std::chrono_literals;

namespace {

class Faults : public EndToEnd {
 protected:
  /// A tgs-node process on `socket` (not waited for).
  std::unique_ptr<process> spawn_node(const std::string& socket, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{TGS_NODE_BIN, "--socket", socket, "--log-level", "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<process>(argv, node_env());
  }
  /// A socket file no process listens on, as a node killed with SIGKILL leaves behind.
  void make_stale_socket(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);
  }
};

// --- 1. a second tgs-node -----------------------------------------------------------------------

TEST_F(Faults, ARefusedSecondNodeLeavesTheFirstOneServing) {
  start_node();
  ASSERT_NE(status().find("\"node\":"), std::string::npos);
  auto second = spawn_node(socket_);
  EXPECT_NE(second->wait_for(5s).value_or(0), 0) << "the second node should exit with an error";
  EXPECT_NE(second->stderr_text().find("another tgs-node"), std::string::npos) << second->stderr_text();
  EXPECT_EQ(::access(socket_.c_str(), F_OK), 0) << "the refused node removed the live node's socket";
  EXPECT_NE(status().find("\"node\":"), std::string::npos) << "the first node no longer answers";
  process& job = start_production();
  wait_until([&] { return count(status(), R"("job":)") == 1; }, 5s, "a new job registering with the first node");
  (void)job;
}

TEST_F(Faults, ASocketPathNamingARegularFileIsRefusedAndTheFileKept) {
  const std::string file = dir_ + "/precious.txt";
  std::ofstream(file) << "keep me\n";
  auto node = spawn_node(file);
  EXPECT_NE(node->wait_for(5s).value_or(0), 0) << "the node should refuse the path";
  EXPECT_NE(node->stderr_text().find("not a socket"), std::string::npos) << node->stderr_text();
  std::ifstream in(file);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
  ::unlink(file.c_str());
  ::unlink((file + ".lock").c_str());
}

TEST_F(Faults, TwoNodesStartedAtOnceOnAStaleSocketLeaveExactlyOneServing) {
  for (int round = 0; round < 10; ++round) {
    ::unlink(socket_.c_str());
    make_stale_socket(socket_);
    auto a = spawn_node(socket_);
    auto b = spawn_node(socket_);
    std::this_thread::sleep_for(700ms);
    const bool a_up = a->running();
    const bool b_up = b->running();
    EXPECT_NE(a_up, b_up) << "round " << round << ": " << a->stderr_text() << "\n---\n" << b->stderr_text();
    EXPECT_NE(status().find("\"node\":"), std::string::npos) << "round " << round;
    a.reset();
    b.reset();
  }
}

}  // namespace
