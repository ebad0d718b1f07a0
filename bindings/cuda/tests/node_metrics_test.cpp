// SPDX-License-Identifier: Apache-2.0
// Tests of what tgs-node says about where a process runs (its cgroup and container) and of its
// metrics endpoint: the address it takes, what a scrape gets, and its errors.
#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http_get.hpp"
#include "metrics.hpp"
#include "process_origin.hpp"

namespace node = tgs::cuda::node;
using tgs_e2e::http_get;
using namespace std::chrono_literals;

namespace {

const std::string podman_id = "667caf56de5804e76b7915dd6fc46a153d63d42eb7264aa0dc6434d44c514d9c";

std::string message_of(const std::string& address) {
  try {
    node::metrics_endpoint endpoint(address);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

/// The port of a metrics URL (`http://127.0.0.1:PORT/metrics`).
std::uint16_t port_of(const std::string& url) {
  return static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

/// A TCP connection to 127.0.0.1:`port`, or -1.
int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

/// What the server at 127.0.0.1:`port` answers to `request` (sent whole), up to its closing the
/// connection or 5 s.
std::string http_exchange(std::uint16_t port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char chunk[4096];
  for (ssize_t n = 0; (n = ::recv(fd, chunk, sizeof(chunk), 0)) > 0;) {
    response.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return response;
}

/// Whether the server has closed (or reset) `fd`, a connection it never answers while its request
/// is unfinished.
bool closed_by_server(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}

/// The file descriptor soft limit raised to the hard one for the test's life (the stalling user
/// inherits it), then put back.
class descriptors_raised {
 public:
  descriptors_raised() {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit raised = saved_;
    raised.rlim_cur = raised.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  ~descriptors_raised() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  descriptors_raised(const descriptors_raised&) = delete;
  descriptors_raised& operator=(const descriptors_raised&) = delete;
  [[nodiscard]] rlim_t hard() const { return saved_.rlim_max; }

 private:
  rlimit saved_{};
};

/// A process of user and group 65534 (nobody), as any unprivileged local user, that keeps
/// `requests` requests begun and never finished open on the metrics port: every half second it
/// sends one more byte of a header on each connection the server still holds, so that none is
/// ever idle long enough to time out, and opens a new one for each the server closed.
/// `close_and_scrape` makes it close them all and scrape once itself.
class stalling_user {
 public:
  stalling_user(const std::string& url, int requests) {
    if (::pipe(report_) != 0 || ::pipe(command_) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(1);
      run(url, requests);
    }
    ::close(report_[1]);
    ::close(command_[0]);
    if (pid_ > 0 && ::read(report_[0], &held_, sizeof(held_)) != static_cast<ssize_t>(sizeof(held_))) held_ = -1;
  }
  ~stalling_user() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(report_[0]);
    ::close(command_[1]);
  }
  stalling_user(const stalling_user&) = delete;
  stalling_user& operator=(const stalling_user&) = delete;

  /// How many of its first `requests` connections the server still held once it had made them
  /// all; -1 when it could not run.
  [[nodiscard]] int held() const { return held_; }

  /// Closes its connections, then scrapes (trying for up to a second, while the server notices
  /// the connections closed): whether a scrape got the metrics.
  bool close_and_scrape() {
    const char go = 1;
    int answered = 0;
    return ::write(command_[1], &go, 1) == 1 &&
           ::read(report_[0], &answered, sizeof(answered)) == static_cast<ssize_t>(sizeof(answered)) && answered == 1;
  }

 private:
  [[noreturn]] void run(const std::string& url, int requests) {
    std::vector<int> connections(static_cast<std::size_t>(requests), -1);
    const auto open_closed_ones = [&] {
      for (int& fd : connections) {
        if (fd >= 0) continue;
        fd = connect_to(port_of(url));
        static constexpr std::string_view begun = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: ";
        if (fd >= 0) (void)::send(fd, begun.data(), begun.size(), MSG_NOSIGNAL);
      }
    };
    const auto drop_closed_ones = [&] {
      for (int& fd : connections) {
        if (fd >= 0 && closed_by_server(fd)) {
          ::close(fd);
          fd = -1;
        }
      }
    };
    open_closed_ones();
    std::this_thread::sleep_for(300ms);  // the server has taken them up, and closed what it will not hold
    drop_closed_ones();
    const int held = static_cast<int>(std::ranges::count_if(connections, [](int fd) { return fd >= 0; }));
    (void)::write(report_[1], &held, sizeof(held));
    for (pollfd command{command_[0], POLLIN, 0}; ::poll(&command, 1, 500) == 0;) {
      drop_closed_ones();
      for (const int fd : connections) {
        if (fd >= 0) (void)::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      open_closed_ones();
    }
    for (const int fd : connections) {
      if (fd >= 0) ::close(fd);
    }
    int answered = 0;
    for (int attempt = 0; attempt < 10 && answered == 0; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(100ms);
      answered = http_get(url).find("tgs_test_jobs") != std::string::npos ? 1 : 0;
    }
    (void)::write(report_[1], &answered, sizeof(answered));
    ::_exit(0);
  }

  int report_[2] = {-1, -1};
  int command_[2] = {-1, -1};
  pid_t pid_ = -1;
  int held_ = -1;
};

}  // namespace

TEST(ProcessOrigin, TheUnifiedCgroupWinsUnlessItIsTheRoot) {
  EXPECT_EQ(node::cgroup_of_proc_text("0::/system.slice/docker-" + podman_id + ".scope\n"),
            "/system.slice/docker-" + podman_id + ".scope");
  // A hybrid host: the unified line says "/", the v1 lines hold the container's path.
  EXPECT_EQ(node::cgroup_of_proc_text("9:name=systemd:/libpod_parent/libpod-" + podman_id + "\n4:memory:/x\n0::/\n"),
            "/libpod_parent/libpod-" + podman_id);
  EXPECT_EQ(node::cgroup_of_proc_text("4:memory:/kubepods/pod1/abc\n0::/\n"), "/kubepods/pod1/abc");
  EXPECT_EQ(node::cgroup_of_proc_text("0::/\n"), "/");
  EXPECT_EQ(node::cgroup_of_proc_text(""), "");
  EXPECT_EQ(node::cgroup_of_proc_text("garbage\n::\n"), "");
}

TEST(ProcessOrigin, AContainerIsTheLastSixtyFourHexDigitRun) {
  EXPECT_EQ(node::container_of_cgroup("/libpod_parent/libpod-" + podman_id), podman_id);
  EXPECT_EQ(node::container_of_cgroup("/system.slice/docker-" + podman_id + ".scope"), podman_id);
  EXPECT_EQ(node::container_of_cgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123.slice/"
                                      "cri-containerd-" + podman_id + ".scope"),
            podman_id);
  EXPECT_EQ(node::container_of_cgroup("/user.slice/user-1000.slice/session-2.scope"), "");
  // 63 or 65 digits are not an ID.
  EXPECT_EQ(node::container_of_cgroup("/docker/" + podman_id.substr(1)), "");
  EXPECT_EQ(node::container_of_cgroup("/docker/" + podman_id + "0"), "");
  EXPECT_EQ(node::short_container_id(podman_id), "667caf56de58");
}

TEST(ProcessOrigin, APodUidComesFromEitherCgroupDriversPath) {
  // The systemd driver escapes the UID's dashes as underscores; cgroupfs keeps them.
  EXPECT_EQ(node::pod_uid_of_cgroup("/kubepods.slice/kubepods-burstable.slice/"
                                    "kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/"
                                    "cri-containerd-" + podman_id + ".scope"),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  EXPECT_EQ(node::pod_uid_of_cgroup("/kubepods/besteffort/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/" + podman_id),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  EXPECT_EQ(node::pod_uid_of_cgroup("/kubepods/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/" + podman_id),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  EXPECT_EQ(node::pod_uid_of_cgroup("/user.slice/user-1000.slice/session-2.scope"), "");
  EXPECT_EQ(node::pod_uid_of_cgroup("/machine.slice/libpod-" + podman_id + ".scope"), "") << "a container, no pod";
  EXPECT_EQ(node::pod_uid_of_cgroup("/kubepods/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0ff/x"), "") << "not a UUID";
}

TEST(ProcessOrigin, APodsNameAndNamespaceComeFromItsEnvironmentOnlyInAPod) {
  const std::string in_pod = "0::/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/" + podman_id + "\n";
  using namespace std::string_literals;
  const std::string env = "PATH=/bin\0TGS_POD_NAME=trainer-7\0TGS_POD_NAMESPACE=research\0"s;
  const node::process_origin pod = node::origin_of_texts(in_pod, env);
  EXPECT_EQ(pod.pod_uid, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  EXPECT_EQ(pod.container, podman_id);
  EXPECT_EQ(pod.pod, "trainer-7");
  EXPECT_EQ(pod.pod_namespace, "research");
  // A host process says what it likes in its environment: no pod, no labels.
  const node::process_origin host = node::origin_of_texts("0::/user.slice/session-2.scope\n", env);
  EXPECT_EQ(host.pod, "");
  EXPECT_EQ(host.pod_namespace, "");
  // What cannot be a Kubernetes name is not taken.
  const node::process_origin odd =
      node::origin_of_texts(in_pod, "TGS_POD_NAME=a\\\"b\0TGS_POD_NAMESPACE=Upper\0"s);
  EXPECT_EQ(odd.pod, "");
  EXPECT_EQ(odd.pod_namespace, "");
  EXPECT_EQ(node::environment_value("A=1\0AB=2\0B=\0"s, "B"), "");
  EXPECT_EQ(node::environment_value("A=1\0AB=2\0"s, "AB"), "2");
}

TEST(ProcessOrigin, ThisProcessHasACgroupAndAGoneOneNothing) {
  EXPECT_FALSE(node::origin_of(::getpid()).cgroup.empty());
  const node::process_origin gone = node::origin_of(0x3fffffff);
  EXPECT_EQ(gone.cgroup, "");
  EXPECT_EQ(gone.container, "");
}

TEST(MetricsAddress, TakesHostAndPort) {
  const auto parsed = [](const char* text) {
    const auto [address, why] = node::parse_listen_address(text);
    return address ? address->host + " " + std::to_string(address->port) : "error: " + why;
  };
  EXPECT_EQ(parsed("127.0.0.1:9400"), "127.0.0.1 9400");
  EXPECT_EQ(parsed(":9400"), "0.0.0.0 9400");
  EXPECT_EQ(parsed("localhost:0"), "127.0.0.1 0");
  EXPECT_EQ(parsed("9400"), "error: '9400': no port (expected HOST:PORT, e.g. 127.0.0.1:9400 or :9400)");
  EXPECT_EQ(parsed("127.0.0.1:65536"),
            "error: '127.0.0.1:65536': the port must be a number from 0 to 65535 (expected HOST:PORT, e.g. "
            "127.0.0.1:9400 or :9400)");
  EXPECT_EQ(parsed("127.0.0.1:94x"),
            "error: '127.0.0.1:94x': the port must be a number from 0 to 65535 (expected HOST:PORT, e.g. "
            "127.0.0.1:9400 or :9400)");
  EXPECT_EQ(parsed("metrics.example:9400"),
            "error: 'metrics.example:9400': 'metrics.example' is not an IPv4 address or localhost (expected "
            "HOST:PORT, e.g. 127.0.0.1:9400 or :9400)");
  EXPECT_EQ(parsed("[::1]:9400"),
            "error: '[::1]:9400': IPv6 addresses are not supported (the HTTP server is IPv4 only) (expected "
            "HOST:PORT, e.g. 127.0.0.1:9400 or :9400)");
  EXPECT_EQ(parsed("256.0.0.1:1"),
            "error: '256.0.0.1:1': '256.0.0.1' is not an IPv4 address or localhost (expected HOST:PORT, e.g. "
            "127.0.0.1:9400 or :9400)");
}

TEST(MetricsConnectionLimits, ASixteenthOfTheDescriptorsAQuarterOfThoseForOnePeer) {
  const auto limits = [](std::uint64_t descriptors) {
    const node::metrics_connection_limits l = node::metrics_connection_limits_for(descriptors);
    return std::to_string(l.total) + " " + std::to_string(l.per_peer);
  };
  EXPECT_EQ(limits(1024), "64 16");  // a service's usual soft limit
  EXPECT_EQ(limits(20000), "1250 256");
  EXPECT_EQ(limits(524288), "4096 256");  // systemd's hard limit, which tgs-node takes
  EXPECT_EQ(limits(RLIM_INFINITY), "4096 256");
  EXPECT_EQ(limits(64), "16 4");
}

#ifdef TGS_HAVE_METRICS_SERVER

TEST(MetricsEndpoint, ServesTheLatestPublishedSnapshot) {
  node::metrics_endpoint endpoint("127.0.0.1:0");
  ASSERT_EQ(endpoint.url().rfind("http://127.0.0.1:", 0), 0U) << endpoint.url();
  EXPECT_EQ(endpoint.url().find(":0/"), std::string::npos) << "the log must name the port it got: " << endpoint.url();
  endpoint.publish({node::metric_family{"tgs_test_jobs", "jobs", node::metric_type::gauge,
                                        {{{{"class", "production"}}, 1}, {{{"class", "opportunistic"}}, 2}}}});
  std::string text = http_get(endpoint.url());
  EXPECT_NE(text.find("# TYPE tgs_test_jobs gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("tgs_test_jobs{class=\"opportunistic\"} 2"), std::string::npos) << text;
  endpoint.publish({node::metric_family{"tgs_test_total", "a counter", node::metric_type::counter,
                                        {{{{"name", "a \"quoted\"\nname\\"}}, 7}}}});
  text = http_get(endpoint.url());
  EXPECT_EQ(text.find("tgs_test_jobs"), std::string::npos) << "an older snapshot still served:\n" << text;
  // A label value is escaped as the text format requires.
  EXPECT_NE(text.find(R"(tgs_test_total{name="a \"quoted\"\nname\\"} 7)"), std::string::npos) << text;
}

TEST(MetricsEndpoint, ATakenPortIsNamed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  EXPECT_EQ(message_of(address), "--metrics-address " + address + ": cannot listen there (Address already in use)");
  ::close(fd);
}

TEST(MetricsEndpoint, AnAddressNotOfThisHostIsNamed) {
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this host.
  EXPECT_EQ(message_of("192.0.2.1:9400"),
            "--metrics-address 192.0.2.1:9400: cannot listen there (Cannot assign requested address)");
  EXPECT_EQ(message_of("nowhere:1"),
            "--metrics-address 'nowhere:1': 'nowhere' is not an IPv4 address or localhost (expected HOST:PORT, e.g. "
            "127.0.0.1:9400 or :9400)");
}

TEST(MetricsEndpoint, ScrapesAreAnsweredWithinASecondWhileOneUserStallsAThousandRequests) {
  // Any local user can connect to the metrics port. With civetweb's 64 threads, 256 requests
  // begun and never finished delayed scrapes to 3 s, and 512 made two of three time out.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the stalled requests come from a second user (65534)";
  const descriptors_raised descriptors;
  if (descriptors.hard() < 1100) {
    GTEST_SKIP() << "the stalling user needs 1100 descriptors; the hard limit is " << descriptors.hard();
  }
  node::metrics_endpoint endpoint("127.0.0.1:0");
  endpoint.publish({node::metric_family{"tgs_test_jobs", "jobs", node::metric_type::gauge, {{{}, 3}}}});
  const stalling_user flood(endpoint.url(), 1000);
  ASSERT_GE(flood.held(), 0) << "the stalling user could not run";
  std::printf("the stalling user holds %d of its 1000 requests\n", flood.held());
  // Five scrapes over 3.2 s: past the server's timeout of idle connections (the stalling user's
  // are never idle).
  for (int scrape = 0; scrape < 5; ++scrape) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text = http_get(endpoint.url());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    std::printf("scrape %d took %.3f s\n", scrape, took.count());
    EXPECT_NE(text.find("tgs_test_jobs 3"), std::string::npos) << "scrape " << scrape << " got: " << text;
    EXPECT_LE(took.count(), 1.0) << "scrape " << scrape;
    std::this_thread::sleep_until(t0 + 800ms);
  }
}

TEST(MetricsEndpoint, AnswersAGetOfMetricsInPrometheusCppsTextAndNothingElse) {
  node::metrics_endpoint endpoint("127.0.0.1:0");
  endpoint.publish({node::metric_family{"tgs_test_jobs", "jobs", node::metric_type::gauge,
                                        {{{{"class", "a\"b"}}, 1}, {{}, 2.5}}},
                    node::metric_family{"tgs_test_total", "a counter", node::metric_type::counter, {{{}, 7}}}});
  const std::uint16_t port = port_of(endpoint.url());
  const auto status_line = [&](const std::string& request) {
    const std::string response = http_exchange(port, request + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    return response.substr(0, response.find("\r\n"));
  };
  // What prometheus-cpp's exposer (civetweb) sent for this snapshot, byte for byte, less its own
  // exposer_* families.
  const std::string response = http_exchange(port, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(response.substr(0, response.find("\r\n")), "HTTP/1.1 200 OK");
  EXPECT_NE(response.find("\r\nContent-Type: text/plain; charset=utf-8\r\n"), std::string::npos) << response;
  EXPECT_EQ(response.substr(response.find("\r\n\r\n") + 4),
            "# HELP tgs_test_jobs jobs\n"
            "# TYPE tgs_test_jobs gauge\n"
            "tgs_test_jobs{class=\"a\\\"b\"} 1\n"
            "tgs_test_jobs 2.5\n"
            "# HELP tgs_test_total a counter\n"
            "# TYPE tgs_test_total counter\n"
            "tgs_test_total 7\n");
  EXPECT_EQ(status_line("GET /metrics?name[]=tgs_test_jobs"), "HTTP/1.1 200 OK") << "a query is ignored";
  const std::string head = http_exchange(port, "HEAD /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(head.substr(0, head.find("\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "") << "a HEAD gets no body";
  for (const char* path : {"/", "/metrics/", "/metricsx", "/Metrics", "/favicon.ico"}) {
    EXPECT_EQ(status_line(std::string("GET ") + path), "HTTP/1.1 404 Not Found") << path;
  }
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    EXPECT_EQ(status_line(std::string(method) + " /metrics"), "HTTP/1.1 405 Method Not Allowed") << method;
  }
}

TEST(MetricsEndpoint, AConnectionIdleForTheTimeoutIsClosed) {
  node::metrics_endpoint endpoint("127.0.0.1:0");
  const int fd = connect_to(port_of(endpoint.url()));
  ASSERT_GE(fd, 0);
  constexpr std::string_view begun = "GET /metrics HTTP/1.1\r\n";
  (void)::send(fd, begun.data(), begun.size(), MSG_NOSIGNAL);
  const auto t0 = std::chrono::steady_clock::now();
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "still open after 10 s";
  const std::chrono::duration<double> open_for = std::chrono::steady_clock::now() - t0;
  char byte = 0;
  EXPECT_LE(::recv(fd, &byte, 1, 0), 0) << "the server answered an unfinished request";
  EXPECT_GE(open_for, node::metrics_idle_timeout - 100ms);
  EXPECT_LE(open_for, node::metrics_idle_timeout + 1500ms);
  ::close(fd);
}

TEST(MetricsEndpoint, OneUserHoldsItsShareOfConnectionsAndGetsThemBackOnClosing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the connections come from a second user (65534)";
  const descriptors_raised descriptors;
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const node::metrics_connection_limits limits = node::metrics_connection_limits_for(files.rlim_cur);
  if (files.rlim_cur < limits.per_peer + 100) GTEST_SKIP() << "the hard descriptor limit is " << files.rlim_cur;
  node::metrics_endpoint endpoint("127.0.0.1:0");
  endpoint.publish({node::metric_family{"tgs_test_jobs", "jobs", node::metric_type::gauge, {{{}, 1}}}});
  stalling_user user(endpoint.url(), static_cast<int>(limits.per_peer) + 50);
  EXPECT_EQ(user.held(), static_cast<int>(limits.per_peer)) << "the connections beyond its share are closed";
  EXPECT_NE(http_get(endpoint.url()).find("tgs_test_jobs"), std::string::npos) << "another user's scrape";
  EXPECT_TRUE(user.close_and_scrape()) << "the user's own scrape once its connections are closed";
}

#endif
