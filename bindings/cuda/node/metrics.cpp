// SPDX-License-Identifier: Apache-2.0
// tgs-node's metrics endpoint: the latest published snapshot in Prometheus text format
// (prometheus-cpp's serializer), served by libmicrohttpd from one event-driven thread, with each
// peer's connections counted and capped.
#include "metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#ifdef TGS_HAVE_METRICS_SERVER
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <microhttpd.h>
#include <netinet/tcp.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>

#include <atomic>
#include <compare>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
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

metrics_connection_limits metrics_connection_limits_for(std::uint64_t descriptors) noexcept {
  // tgs-node sizes its jobs' connections to all but 64 of its descriptors (node_server.cpp). A
  // sixteenth of the usual 1024 is 64, about what civetweb's 64 threads held; a node whose limit
  // is raised (systemd's hard limit is 524288, which tgs-node takes) gets 4096.
  const auto total = static_cast<unsigned>(std::clamp<std::uint64_t>(descriptors / 16, 16, 4096));
  // A scraper needs one connection at a time; at most a quarter of the total means that four
  // users or hosts at least, never one, must stall requests to fill the server.
  return {total, std::clamp(total / 4, 1U, 256U)};
}

#ifdef TGS_HAVE_METRICS_SERVER

bool metrics_supported() noexcept { return true; }

namespace {

/// Binds a TCP socket to `a` and lets it go, to learn why the server could not listen there
/// (libmicrohttpd says only that it could not start): the bind's error, or else `server_said`.
std::string why_no_listen(const listen_address& a, const std::string& server_said) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  ::inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
  std::string why = "the HTTP server could not start";
  if (!server_said.empty()) why += ": " + server_said;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) why = std::strerror(errno);
  ::close(fd);
  return why;
}

using families = std::vector<prometheus::MetricFamily>;

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

/// Who a connection counts against: the local user that owns the socket at its other end, or the
/// IPv4 address of a peer the kernel does not know here.
struct peer {
  enum class kind : std::uint8_t { local_user, address };
  kind by = kind::address;
  std::uint32_t id = 0;  ///< the uid, or the address in network order
  auto operator<=>(const peer&) const = default;
};

/// Asks the kernel (NETLINK_SOCK_DIAG, an inet_diag lookup of one exact address pair, as `ss`
/// does) which user owns the TCP socket at the other end of a connection from this host. The
/// answer is the owner of a socket the peer holds, so a local user cannot pass for another. Where
/// the kernel has no inet_diag to ask, nothing is found: every peer counts by its address, and
/// the local users share one share.
class socket_owner_lookup {
 public:
  socket_owner_lookup() : fd_(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) {}
  ~socket_owner_lookup() {
    if (fd_ >= 0) ::close(fd_);
  }
  socket_owner_lookup(const socket_owner_lookup&) = delete;
  socket_owner_lookup& operator=(const socket_owner_lookup&) = delete;

  /// The owner of the socket at the other end of a TCP connection from `ours` to `theirs`, where
  /// this network namespace has it connected; nothing for a remote peer, or one gone already.
  std::optional<std::uint32_t> peer_owner(const sockaddr_in& ours, const sockaddr_in& theirs) {
    struct {
      nlmsghdr header;
      inet_diag_req_v2 request;
    } message{};
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, no dump
    message.header.nlmsg_seq = ++sequence_;
    message.request.sdiag_family = AF_INET;
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0U;
    // The socket looked up is the peer's: its source is their end, its destination ours.
    message.request.id.idiag_src[0] = theirs.sin_addr.s_addr;
    message.request.id.idiag_sport = theirs.sin_port;
    message.request.id.idiag_dst[0] = ours.sin_addr.s_addr;
    message.request.id.idiag_dport = ours.sin_port;
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd_, &message, sizeof(message), 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof(kernel)) !=
        static_cast<ssize_t>(sizeof(message))) {
      return std::nullopt;
    }
    // The kernel answers a lookup before sendto returns: nothing to wait for. An answer to an
    // earlier lookup that was not read (its sequence number) is skipped.
    alignas(nlmsghdr) char reply[512];
    constexpr auto header_size = static_cast<ssize_t>(sizeof(nlmsghdr));
    for (ssize_t n = 0; (n = ::recv(fd_, reply, sizeof(reply), MSG_DONTWAIT)) >= header_size;) {
      nlmsghdr header{};
      std::memcpy(&header, reply, sizeof(header));
      if (header.nlmsg_seq != sequence_) continue;
      inet_diag_msg found{};
      if (header.nlmsg_type != SOCK_DIAG_BY_FAMILY || static_cast<std::size_t>(n) < sizeof(header) + sizeof(found)) {
        return std::nullopt;  // NLMSG_ERROR: no such socket here
      }
      std::memcpy(&found, reply + sizeof(header), sizeof(found));
      // The lookup falls back to a listener on the port alone, and a socket in TIME_WAIT carries
      // no owner (it reads as root): neither is the peer's connected socket.
      const bool same_pair = found.id.idiag_src[0] == theirs.sin_addr.s_addr &&
                             found.id.idiag_sport == theirs.sin_port &&
                             found.id.idiag_dst[0] == ours.sin_addr.s_addr && found.id.idiag_dport == ours.sin_port;
      const bool connected = found.idiag_state == TCP_ESTABLISHED || found.idiag_state == TCP_FIN_WAIT1 ||
                             found.idiag_state == TCP_FIN_WAIT2 || found.idiag_state == TCP_CLOSE_WAIT;
      if (!same_pair || !connected) return std::nullopt;
      return found.idiag_uid;
    }
    return std::nullopt;
  }

 private:
  int fd_;
  std::uint32_t sequence_ = 0;
};

/// The two ends of a connection's socket: this host's, then the peer's.
std::optional<std::pair<sockaddr_in, sockaddr_in>> ends_of(int fd) {
  sockaddr_in ours{};
  sockaddr_in theirs{};
  socklen_t ours_length = sizeof(ours);
  socklen_t theirs_length = sizeof(theirs);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &ours_length) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_length) != 0 || ours.sin_family != AF_INET ||
      theirs.sin_family != AF_INET) {
    return std::nullopt;
  }
  return std::pair{ours, theirs};
}

/// What prometheus-cpp's exposer sent.
constexpr std::string_view text_content_type = "text/plain; charset=utf-8";

/// A response whose body MHD copies, with the content type of every answer here.
MHD_Response* text_response(std::string_view body) {
  // MHD takes a non-const pointer, and copies from it.
  MHD_Response* r =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (r != nullptr) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, text_content_type.data());
  return r;
}

}  // namespace

struct metrics_endpoint::server {
  server() = default;
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server() {
    // The daemon's thread goes first: it is the one that uses everything below.
    if (daemon != nullptr) MHD_stop_daemon(daemon);
    for (MHD_Response* r : {latest_response, not_found, not_allowed}) {
      if (r != nullptr) MHD_destroy_response(r);
    }
  }

  // Published by the node's loop, read by the daemon's thread: the lock covers one pointer copy.
  std::mutex snapshot_mutex;
  std::shared_ptr<const families> snapshot = std::make_shared<const families>();

  // Everything below is set before the daemon starts, then its thread's alone (it accepts, answers
  // and closes every connection, and MHD_stop_daemon joins it), so none of it is locked.
  MHD_Daemon* daemon = nullptr;
  metrics_connection_limits limits;
  socket_owner_lookup owners;
  /// Open connections per peer; a connection's context points at its peer's entry.
  std::map<peer, unsigned> open;
  /// The snapshot `latest_response` was serialized from: serialized once, however many scrape it.
  std::shared_ptr<const families> served;
  /// MHD counts the uses of a response: one replaced here lives on until the answers sending it end.
  MHD_Response* latest_response = nullptr;
  MHD_Response* not_found = text_response("Not Found: tgs-node serves /metrics only\n");
  MHD_Response* not_allowed = text_response("Method Not Allowed: GET or HEAD\n");

  // What libmicrohttpd logs while it starts, to say why it did not (afterwards, what it logs is
  // about clients, and any client could fill the node's log with it).
  std::atomic<bool> starting{true};
  std::mutex start_log_mutex;
  std::string start_log;

  /// The response to a scrape: the latest snapshot, serialized by prometheus-cpp.
  MHD_Response* scrape_response() {
    std::shared_ptr<const families> now;
    {
      const std::lock_guard lock(snapshot_mutex);
      now = snapshot;
    }
    if (now != served || latest_response == nullptr) {
      MHD_Response* fresh = text_response(prometheus::TextSerializer().Serialize(*now));
      if (fresh == nullptr) return nullptr;
      if (latest_response != nullptr) MHD_destroy_response(latest_response);
      latest_response = fresh;
      served = std::move(now);
    }
    return latest_response;
  }

  /// Counts a new connection against its peer, or closes it if the peer has its share already.
  void on_connection_started(MHD_Connection* connection, void** context) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int fd = info != nullptr ? info->connect_fd : -1;
    const auto ends = fd >= 0 ? ends_of(fd) : std::nullopt;
    if (!ends) {
      // Reset before it could be looked at: nothing to answer.
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
      return;
    }
    const auto& [ours, theirs] = *ends;
    peer who{peer::kind::address, theirs.sin_addr.s_addr};
    if (const std::optional<std::uint32_t> uid = owners.peer_owner(ours, theirs)) {
      who = {peer::kind::local_user, *uid};
    }
    const auto entry = open.try_emplace(who, 0U).first;
    if (entry->second >= limits.per_peer) {
      // MHD has no call to refuse a connection once it is accepted (its accept policy sees the
      // peer's address only, not the local one the lookup needs). Shut down, the socket reads as
      // closed and MHD closes it at its next turn, answering nothing.
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
    ++entry->second;
    *context = &*entry;
  }

  void on_connection_closed(void* context) {
    if (context == nullptr) return;  // never counted
    auto& entry = *static_cast<std::pair<const peer, unsigned>*>(context);
    if (--entry.second == 0) open.erase(entry.first);
  }

  // libmicrohttpd's callbacks; `cls` is the server.

  static MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/, std::size_t* /*upload_data_size*/,
                           void** /*request_context*/) {
    server& s = *static_cast<server*>(cls);
    // prometheus-cpp's exposer answered its one path and no other.
    if (std::string_view(url) != "/metrics") return MHD_queue_response(connection, MHD_HTTP_NOT_FOUND, s.not_found);
    const std::string_view m(method);
    if (m != MHD_HTTP_METHOD_GET && m != MHD_HTTP_METHOD_HEAD) {
      return MHD_queue_response(connection, MHD_HTTP_METHOD_NOT_ALLOWED, s.not_allowed);
    }
    MHD_Response* response = s.scrape_response();
    return response != nullptr ? MHD_queue_response(connection, MHD_HTTP_OK, response) : MHD_NO;
  }

  static void notify_connection(void* cls, MHD_Connection* connection, void** context,
                                MHD_ConnectionNotificationCode code) {
    server& s = *static_cast<server*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      s.on_connection_started(connection, context);
    } else {
      s.on_connection_closed(*context);
    }
  }

  static void log_while_starting(void* cls, const char* format, va_list arguments) {
    server& s = *static_cast<server*>(cls);
    if (!s.starting.load()) return;
    char line[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"  // libmicrohttpd's own format
    std::vsnprintf(line, sizeof(line), format, arguments);
#pragma GCC diagnostic pop
    std::string_view said(line);
    while (!said.empty() && (said.back() == '\n' || said.back() == '.')) said.remove_suffix(1);
    const std::lock_guard lock(s.start_log_mutex);
    s.start_log = said;
  }
};

metrics_endpoint::metrics_endpoint(const std::string& address) : server_(std::make_unique<server>()) {
  const auto [parsed, why] = parse_listen_address(address);
  if (!parsed) throw std::runtime_error("--metrics-address " + why);
  rlimit files{};
  server_->limits =
      metrics_connection_limits_for(::getrlimit(RLIMIT_NOFILE, &files) == 0 ? files.rlim_cur : std::uint64_t{1024});
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(parsed->port);
  ::inet_pton(AF_INET, parsed->host.c_str(), &sa.sin_addr);
  // One internal thread waits on epoll for every connection and answers each as its request
  // completes: a request begun and never finished costs a connection, never a thread, and delays
  // no other. Keep-alive is HTTP/1.1's default and harmless here, as an idle connection is closed
  // after the idle timeout. ITC: MHD_stop_daemon wakes the thread at once even when it has stopped
  // accepting at the connection limit.
  constexpr unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  server_->daemon = MHD_start_daemon(
      flags, parsed->port, nullptr, nullptr, &server::answer, server_.get(),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&sa),
      MHD_OPTION_CONNECTION_LIMIT, server_->limits.total,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(metrics_idle_timeout.count()),
      MHD_OPTION_NOTIFY_CONNECTION, &server::notify_connection, server_.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &server::log_while_starting, server_.get(),
      MHD_OPTION_END);
  server_->starting = false;
  if (server_->daemon == nullptr || server_->not_found == nullptr || server_->not_allowed == nullptr) {
    const std::lock_guard lock(server_->start_log_mutex);
    throw std::runtime_error("--metrics-address " + address + ": cannot listen there (" +
                             why_no_listen(*parsed, server_->start_log) + ")");
  }
  const MHD_DaemonInfo* bound = MHD_get_daemon_info(server_->daemon, MHD_DAEMON_INFO_BIND_PORT);
  url_ = "http://" + parsed->host + ":" + std::to_string(bound != nullptr ? bound->port : parsed->port) + "/metrics";
}

void metrics_endpoint::publish(metric_snapshot snapshot) {
  auto f = std::make_shared<families>();
  f->reserve(snapshot.size());
  for (metric_family& m : snapshot) f->push_back(converted(std::move(m)));
  std::shared_ptr<const families> previous;  // freed after the lock, if no scrape holds it
  const std::lock_guard lock(server_->snapshot_mutex);
  previous = std::exchange(server_->snapshot, std::move(f));
}

#else

bool metrics_supported() noexcept { return false; }

struct metrics_endpoint::server {};

metrics_endpoint::metrics_endpoint(const std::string& address) {
  (void)address;
  throw std::runtime_error("--metrics-address: this tgs-node was built without prometheus-cpp or libmicrohttpd "
                           "(install prometheus-cpp-dev and libmicrohttpd-dev and build again)");
}

void metrics_endpoint::publish(metric_snapshot) {}

#endif

metrics_endpoint::~metrics_endpoint() = default;

}  // namespace tgs::cuda::node
