// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's Prometheus endpoint (`--metrics-address`): the node's loop builds a snapshot of its
/// metrics and publishes it; an HTTP server (libmicrohttpd, one event-driven thread of its own)
/// serves the latest snapshot in Prometheus text format (prometheus-cpp's serializer). A scrape
/// copies one pointer under a mutex and reads nothing of the node's state, so no scraper, however
/// slow or many, can hold up the control loop.
///
/// The snapshot types are plain values, independent of both libraries: the node builds them (and
/// the tests check them) in builds without them; only the server needs them.
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

/// Whether this build can serve metrics (it was built with prometheus-cpp and libmicrohttpd).
[[nodiscard]] bool metrics_supported() noexcept;

/// The metrics server's limits. Any local user can connect to it and begin requests it never
/// finishes. One thread serves every connection as its bytes arrive, so such a request holds no
/// thread, only a connection, and delays no other; the limits bound the connections:
/// - a connection on which nothing arrives or leaves for `metrics_idle_timeout` is closed;
/// - at most `total` connections are open at once, and at most `per_peer` of one peer: the local
///   user that owns the socket at the other end (the kernel says which), or the address of a
///   peer not on this host (or in another network namespace, as a container with its own). A
///   connection beyond a peer's share is closed as soon as it is accepted.
/// So a user stalling requests, however many, holds `per_peer` connections and keeps no other
/// user's scrape out; only `total / per_peer` users or hosts doing it at once fill the server.
inline constexpr std::chrono::seconds metrics_idle_timeout{2};

/// How many connections the server holds at most (above).
struct metrics_connection_limits {
  unsigned total = 0;
  unsigned per_peer = 0;
};

/// The limits of a server in a process that may have `descriptors` files open (its
/// RLIMIT_NOFILE): a sixteenth of them, 16 to 4096 connections, a quarter of those (at most 256)
/// for one peer.
///
/// ```
/// metrics_connection_limits_for(1024)   // {64, 16}
/// metrics_connection_limits_for(65536)  // {4096, 256}
/// ```
[[nodiscard]] metrics_connection_limits metrics_connection_limits_for(std::uint64_t descriptors) noexcept;

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
