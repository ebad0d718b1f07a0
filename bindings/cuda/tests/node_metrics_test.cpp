// SPDX-License-Identifier: Apache-2.0
// Tests of what tgs-node says about where a process runs (its cgroup and container) and of its
// metrics endpoint: the address it takes, what a scrape gets, and its errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "http_get.hpp"
#include "metrics.hpp"
#include "process_origin.hpp"

namespace node = tgs::cuda::node;
using tgs_e2e::http_get;

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

#ifdef TGS_HAVE_PROMETHEUS

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

#endif
