// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's Prometheus endpoint (`--metrics-address`): the node's loop builds a snapshot of its
/// metrics and publishes it; an HTTP server (prometheus-cpp's, over civetweb) serves the latest
/// snapshot in Prometheus text format from its own threads. A scrape copies one pointer under a
/// mutex and reads nothing of the node's state, so no scraper, however slow or many, can hold up the
/// control loop.
///
/// The snapshot types are plain values, independent of prometheus-cpp: the node builds them (and
/// the tests check them) in builds without it; only the server needs the library.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tgs::cuda::node {

/// One sample: its labels (name, value) and its value.
struct metric_sample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

enum class metric_type : std::uint8_t { gauge, counter };

/// One metric: its name, help text, type and samples.
struct metric_family {
  std::string name;
  std::string help;
  metric_type type = metric_type::gauge;
  std::vector<metric_sample> samples;
};

using metric_snapshot = std::vector<metric_family>;

/// An IPv4 address and port to listen on.
struct listen_address {
  std::string host;  ///< dotted IPv4
  std::uint16_t port = 0;
};

/// Parses `HOST:PORT`: HOST an IPv4 address, `localhost` or empty (every interface, `0.0.0.0`),
/// PORT 0 to 65535 (0: any free port, which the node logs). Returns the address, or the reason it
/// is not one.
///
/// ```
/// parse_listen_address("127.0.0.1:9400")  // {"127.0.0.1", 9400}
/// parse_listen_address(":9400")           // {"0.0.0.0", 9400}
/// ```
[[nodiscard]] std::pair<std::optional<listen_address>, std::string> parse_listen_address(std::string_view text);

/// Whether this build can serve metrics (it was built with prometheus-cpp).
[[nodiscard]] bool metrics_supported() noexcept;

/// The metrics server's limits. Any local user can connect to it: a request begun and never
/// finished holds one of `metrics_threads` for up to twice `metrics_request_timeout` (civetweb
/// gives up at its first wait for more bytes that ends past the timeout), so clients that stall
/// fewer requests at once than there are threads never delay a scrape, and more delay it by
/// about 2 s for each round of that many.
inline constexpr unsigned metrics_threads = 64;
inline constexpr std::chrono::milliseconds metrics_request_timeout{1000};

/// The HTTP server of `/metrics`.
class metrics_endpoint {
 public:
  /// Listens on `address` (`parse_listen_address`'s format). Throws `std::runtime_error` saying
  /// what is wrong with the address, or why nothing could listen there (the port is taken, the
  /// address is not this host's), or that this build has no metrics.
  explicit metrics_endpoint(const std::string& address);
  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  /// Makes `snapshot` what the next scrapes see. Never waits for a scrape in progress.
  void publish(metric_snapshot snapshot);
  /// Where it serves, with the port it got: `http://127.0.0.1:9400/metrics`.
  [[nodiscard]] const std::string& url() const noexcept { return url_; }

 private:
  struct server;
  std::unique_ptr<server> server_;
  std::string url_;
};

}  // namespace tgs::cuda::node
