// SPDX-License-Identifier: Apache-2.0
/// @file
/// What tgs-node tells the service manager that started it, through systemd's notification
/// protocol (`sd_notify(3)`, libsystemd): `READY=1` once its sockets listen (the unit is
/// `Type=notify`, so units ordered after tgs-node start only then), `WATCHDOG=1` from its main
/// loop at half the interval `WatchdogSec=` gives (`sd_watchdog_enabled(3)`), so a wedged loop is
/// restarted, and `STOPPING=1` when it begins to stop. Outside systemd (no `NOTIFY_SOCKET`) every
/// call does nothing.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace tgs::cuda::node {

/// The node's side of the notification protocol.
class service_notifier {
 public:
  using clock = std::chrono::steady_clock;

  /// Reads whether the service manager wants watchdog pings, and how often.
  service_notifier();

  /// The node serves: its sockets listen. `status` is shown by `systemctl status`.
  void ready(std::string_view status);
  /// Pings the watchdog if a ping is due; called from every turn of the main loop.
  void tick(clock::time_point now);
  /// When the next ping is due (the main loop wakes for it); empty without a watchdog.
  [[nodiscard]] std::optional<clock::time_point> next_ping() const noexcept;
  /// The node has begun to stop.
  void stopping();

  /// The interval between pings: half of `WatchdogSec=`; empty without a watchdog.
  [[nodiscard]] std::optional<std::chrono::microseconds> ping_interval() const noexcept { return interval_; }

 private:
  std::optional<std::chrono::microseconds> interval_;
  clock::time_point next_ping_{};
};

}  // namespace tgs::cuda::node
