// SPDX-License-Identifier: Apache-2.0
// The API server client on libcurl's easy interface: one handle per request, so requests from
// the gRPC threads and the run loop never share one.
#include "api_client.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

namespace tgs::kubernetes::dra {

namespace {

constexpr const char* service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::size_t append(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

std::string read_token(const std::string& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  std::string token = s.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

struct curl_deleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};
struct slist_deleter {
  void operator()(curl_slist* l) const noexcept { curl_slist_free_all(l); }
};

}  // namespace

api_config in_cluster_config() {
  api_config cfg;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host != nullptr && *host != '\0') {
    const std::string h = host;
    // An IPv6 service address goes in brackets.
    cfg.server = fmt::format("https://{}:{}", h.find(':') != std::string::npos ? "[" + h + "]" : h,
                             port != nullptr && *port != '\0' ? port : "443");
  }
  cfg.token_file = fmt::format("{}/token", service_account_dir);
  cfg.ca_file = fmt::format("{}/ca.crt", service_account_dir);
  return cfg;
}

std::string api_response::describe() const {
  if (status == 0) return "no answer: " + error;
  if (body.is_object() && body.contains("message") && body["message"].is_string()) {
    return fmt::format("HTTP {}: {}", status, body["message"].get<std::string>());
  }
  return fmt::format("HTTP {}", status);
}

api_client::api_client(api_config cfg) : cfg_(std::move(cfg)) { init_curl_once(); }

api_response api_client::call(const char* method, const std::string& path, const nlohmann::json* body) const {
  api_response out;
  const std::unique_ptr<CURL, curl_deleter> curl(curl_easy_init());
  if (!curl) {
    out.error = "curl_easy_init failed";
    return out;
  }
  std::unique_ptr<curl_slist, slist_deleter> headers;
  const auto add_header = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
  add_header("Accept: application/json");
  if (!cfg_.token_file.empty()) {
    const std::string token = read_token(cfg_.token_file);
    if (!token.empty()) add_header("Authorization: Bearer " + token);
  }
  const std::string payload = body != nullptr ? body->dump() : std::string{};
  if (body != nullptr) add_header("Content-Type: application/json");
  const std::string url = cfg_.server + path;
  std::string received;
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &received);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM, safe from any thread
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!cfg_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, cfg_.ca_file.c_str());
  if (body != nullptr) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  }
  if (const CURLcode rc = curl_easy_perform(c); rc != CURLE_OK) {
    out.error = fmt::format("{} {}: {}", method, url, curl_easy_strerror(rc));
    return out;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  out.body = nlohmann::json::parse(received, nullptr, /*allow_exceptions=*/false);
  if (out.body.is_discarded()) {
    out.body = nullptr;
    if (out.ok()) {
      out.error = fmt::format("{} {}: the answer is not JSON", method, url);
      out.status = 0;
    }
  }
  return out;
}

}  // namespace tgs::kubernetes::dra
