// SPDX-License-Identifier: Apache-2.0
// A small client of the Kubernetes API server over libcurl: JSON in and out, the service
// account's bearer token read again for every request (kubelet rotates projected tokens), the
// cluster's CA for TLS. What the DRA driver needs: get a claim and a node, and keep its slice.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace tgs::kubernetes::dra {

struct api_config {
  /// `https://host:port` (or `http://` for a stand-in), without a trailing slash.
  std::string server;
  /// The bearer token's file; empty: no token.
  std::string token_file;
  /// The CA bundle that signed the server's certificate; empty: the system's.
  std::string ca_file;
  std::chrono::milliseconds timeout{10000};
};

/// The in-cluster configuration: `KUBERNETES_SERVICE_HOST` and `_PORT`, and the service account's
/// token and CA where a pod finds them. `server` is empty outside a cluster.
[[nodiscard]] api_config in_cluster_config();

struct api_response {
  /// The HTTP status, or 0 when no answer came (then `error` says why).
  long status = 0;
  nlohmann::json body;
  std::string error;

  [[nodiscard]] bool ok() const noexcept { return status >= 200 && status < 300; }
  /// One line for a log: the status and the API server's message, or the transport's error.
  [[nodiscard]] std::string describe() const;
};

class api_client {
 public:
  explicit api_client(api_config cfg);

  [[nodiscard]] api_response get(const std::string& path) const { return call("GET", path, nullptr); }
  [[nodiscard]] api_response post(const std::string& path, const nlohmann::json& body) const {
    return call("POST", path, &body);
  }
  [[nodiscard]] api_response put(const std::string& path, const nlohmann::json& body) const {
    return call("PUT", path, &body);
  }

  [[nodiscard]] const api_config& settings() const noexcept { return cfg_; }

 private:
  api_response call(const char* method, const std::string& path, const nlohmann::json* body) const;

  api_config cfg_;
};

}  // namespace tgs::kubernetes::dra
