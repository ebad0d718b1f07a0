// SPDX-License-Identifier: Apache-2.0
// tgs-node's readiness, watchdog and stop notifications to systemd, through libsystemd. A build
// without libsystemd (TGS_HAVE_LIBSYSTEMD unset) refuses to start under a notify unit instead.
#include "service_notify.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#if TGS_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#else
namespace {
// Nothing to notify: every call below reaches a manager that is not there.
int sd_notify(int, const char*) { return 0; }
}  // namespace
#endif

namespace tgs::cuda::node {

service_notifier::service_notifier() {
#if !TGS_HAVE_LIBSYSTEMD
  // A notify unit waits for READY=1 that this build cannot send: say so now, not at its timeout.
  if (const char* socket = std::getenv("NOTIFY_SOCKET"); socket != nullptr && *socket != '\0')
    throw std::runtime_error(
        "started as a systemd Type=notify service (NOTIFY_SOCKET is set), but this build has no "
        "libsystemd: rebuild it with libsystemd-dev installed, or run it as Type=simple");
#else
  std::uint64_t usec = 0;
  // > 0: WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is this process). systemd's advice is to
  // ping at half the interval, so one late turn of the loop is not a restart.
  if (::sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    interval_ = std::chrono::microseconds{static_cast<std::int64_t>(usec / 2)};
    next_ping_ = clock::now();
  }
#endif
}

void service_notifier::ready(std::string_view status) {
  const std::string message = "READY=1\nSTATUS=" + std::string(status);
  (void)sd_notify(0, message.c_str());
}

void service_notifier::tick(clock::time_point now) {
  if (!interval_ || now < next_ping_) return;
  (void)sd_notify(0, "WATCHDOG=1");
  next_ping_ = now + *interval_;
}

std::optional<service_notifier::clock::time_point> service_notifier::next_ping() const noexcept {
  if (!interval_) return std::nullopt;
  return next_ping_;
}

void service_notifier::stopping() { (void)sd_notify(0, "STOPPING=1\nSTATUS=stopping"); }

}  // namespace tgs::cuda::node
