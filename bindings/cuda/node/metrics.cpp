// SPDX-License-Identifier: Apache-2.0
// tgs-node's metrics endpoint: the latest published snapshot, served by prometheus-cpp's exposer
// (civetweb) in Prometheus text format.
#include "metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <stdexcept>

#ifdef TGS_HAVE_PROMETHEUS
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#endif

namespace tgs::cuda::node {

std::pair<std::optional<listen_address>, std::string> parse_listen_address(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    // Appended piece by piece: GCC 12's -Wrestrict misreads "'" + std::string&& at -O3 (the
    // harness's Release build), and warnings are errors.
    std::string message = "'";
    message.append(text).append("': ").append(why).append(" (expected HOST:PORT, e.g. 127.0.0.1:9400 or :9400)");
    return std::pair<std::optional<listen_address>, std::string>{std::nullopt, std::move(message)};
  };
  if (!text.empty() && text.front() == '[') return fail("IPv6 addresses are not supported (the HTTP server is IPv4 only)");
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return fail("no port");
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc{} || end != port_text.data() + port_text.size() || port > 65535) {
    return fail("the port must be a number from 0 to 65535");
  }
  listen_address out;
  out.port = static_cast<std::uint16_t>(port);
  if (host.empty()) {
    out.host = "0.0.0.0";
  } else if (host == "localhost") {
    out.host = "127.0.0.1";
  } else {
    in_addr a{};
    const std::string h(host);
    if (h.find(':') != std::string::npos) return fail("IPv6 addresses are not supported (the HTTP server is IPv4 only)");
    if (::inet_pton(AF_INET, h.c_str(), &a) != 1) return fail("'" + h + "' is not an IPv4 address or localhost");
    out.host = h;
  }
  return {out, ""};
}

#ifdef TGS_HAVE_PROMETHEUS

namespace {

/// Binds a TCP socket to `a` and lets it go, to learn why the server could not listen there (the
/// server library says only that it could not).
std::string why_no_listen(const listen_address& a) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  ::inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
  std::string why = "the HTTP server could not start";
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) why = std::strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace

bool metrics_supported() noexcept { return true; }

namespace {

using families = std::vector<prometheus::MetricFamily>;

/// What a scrape collects: the latest published families. The lock covers one pointer copy.
class latest_snapshot final : public prometheus::Collectable {
 public:
  void set(std::shared_ptr<const families> f) {
    const std::lock_guard lock(mutex_);
    latest_ = std::move(f);
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::shared_ptr<const families> now;
    {
      const std::lock_guard lock(mutex_);
      now = latest_;
    }
    return *now;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const families> latest_ = std::make_shared<const families>();
};

prometheus::MetricFamily converted(metric_family&& f) {
  prometheus::MetricFamily out;
  out.name = std::move(f.name);
  out.help = std::move(f.help);
  out.type = f.type == metric_type::counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
  out.metric.reserve(f.samples.size());
  for (metric_sample& s : f.samples) {
    prometheus::ClientMetric m;
    m.label.reserve(s.labels.size());
    for (auto& [name, value] : s.labels) m.label.push_back({std::move(name), std::move(value)});
    if (f.type == metric_type::counter) {
      m.counter.value = s.value;
    } else {
      m.gauge.value = s.value;
    }
    out.metric.push_back(std::move(m));
  }
  return out;
}

}  // namespace

struct metrics_endpoint::server {
  std::shared_ptr<latest_snapshot> snapshot = std::make_shared<latest_snapshot>();
  std::unique_ptr<prometheus::Exposer> exposer;
};

metrics_endpoint::metrics_endpoint(const std::string& address) : server_(std::make_unique<server>()) {
  const auto [parsed, why] = parse_listen_address(address);
  if (!parsed) throw std::runtime_error("--metrics-address " + why);
  const std::string port = parsed->host + ":" + std::to_string(parsed->port);
  try {
    // civetweb gives each connection a thread until its request is read and answered, and any
    // local user can connect: a request begun and never finished holds a thread until the
    // request timeout. Many threads and a short timeout keep scrapes answered while such clients
    // come and go (docs/operator-guide.md, "Metrics": the limits); connections beyond the threads
    // wait in civetweb's queue, then in the listen backlog. No keep-alive: a scraper that keeps
    // its connection open between scrapes holds no thread.
    server_->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", port, "num_threads", std::to_string(metrics_threads), "request_timeout_ms",
        std::to_string(metrics_request_timeout.count()), "enable_keep_alive", "no"});
  } catch (const std::exception&) {
    throw std::runtime_error("--metrics-address " + address + ": cannot listen there (" + why_no_listen(*parsed) + ")");
  }
  server_->exposer->RegisterCollectable(server_->snapshot);
  const std::vector<int> ports = server_->exposer->GetListeningPorts();
  url_ = "http://" + parsed->host + ":" + std::to_string(ports.empty() ? parsed->port : ports.front()) + "/metrics";
}

void metrics_endpoint::publish(metric_snapshot snapshot) {
  auto f = std::make_shared<families>();
  f->reserve(snapshot.size());
  for (metric_family& m : snapshot) f->push_back(converted(std::move(m)));
  server_->snapshot->set(std::move(f));
}

#else

bool metrics_supported() noexcept { return false; }

struct metrics_endpoint::server {};

metrics_endpoint::metrics_endpoint(const std::string& address) {
  (void)address;
  throw std::runtime_error("--metrics-address: this tgs-node was built without prometheus-cpp (install "
                           "prometheus-cpp-dev and build again)");
}

void metrics_endpoint::publish(metric_snapshot) {}

#endif

metrics_endpoint::~metrics_endpoint() = default;

}  // namespace tgs::cuda::node
