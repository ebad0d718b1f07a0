// SPDX-License-Identifier: Apache-2.0
// A minimal HTTP/1.0 GET over IPv4, enough to scrape tgs-node's metrics in tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tgs_e2e {

/// The body of a GET of `url` (`http://HOST:PORT/PATH`, HOST an IPv4 address), or empty when
/// nothing answered within 5 s.
inline std::string http_get(const std::string& url) {
  const std::size_t host_at = url.find("//") + 2;
  const std::size_t colon = url.find(':', host_at);
  const std::size_t slash = url.find('/', colon);
  if (host_at < 2 || colon == std::string::npos || slash == std::string::npos) return "";
  const std::string host = url.substr(host_at, colon - host_at);
  const int port = std::stoi(url.substr(colon + 1, slash - colon - 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + url.substr(slash) + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char chunk[4096];
  for (ssize_t n = 0; (n = ::recv(fd, chunk, sizeof(chunk), 0)) > 0;) response.append(chunk, static_cast<std::size_t>(n));
  ::close(fd);
  const std::size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

}  // namespace tgs_e2e
