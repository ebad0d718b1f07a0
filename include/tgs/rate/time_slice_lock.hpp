// SPDX-License-Identifier: Apache-2.0
/// @file
/// `time_slice_lock`: nvshare's exclusive GPU lock, held for a time quantum and released early
/// when idle.
#pragma once

#include <array>
#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>

#include "tgs/core/units.hpp"
#include "tgs/rate/concepts.hpp"
#include "tgs/rate/detail/arithmetic.hpp"
#include "tgs/rate/detail/validate.hpp"

namespace tgs {

/// An exclusive time-slice lock as nvshare implements it (grgalex/nvshare): one job at a time owns
/// the whole GPU for up to a time quantum; at the end of the quantum the lock passes to the other
/// job if it wants the GPU, and a holder that has been idle gives it up early. The lock ignores
/// job classes (nvshare serves requests first-come first-served), which is exactly why it cannot
/// protect a production job: an opportunistic job that got the lock first keeps it for a quantum.
///
/// Precisely, at each step:
/// - The **holder is active** in a window if it launched at least one thread block in it. It
///   **releases early** when it has not been active for `idle_release` (nvshare's client checks
///   every `release_early_check_interval` = 5 s whether it submitted work).
/// - The **other job wants the GPU** whenever it is present: it is either held off by the lock
///   (nvshare blocks its launches on an outstanding lock request, so the interposer sees none) or
///   it just arrived to compute. A held-off job that has no work cannot be told apart from one
///   that has; training jobs always have work.
/// - The lock passes at the end of the quantum or on an early release if the other job is
///   present; when the holder leaves it passes at once. A free lock goes to the only present job,
///   or to the production job when both arrive in the same step (nvshare's FCFS has no order for
///   simultaneous requests; we pick the class TGS protects).
///
/// Decision: `exclusive_turn{holder}`; the opportunistic budget is 0 while the production job
/// holds the lock and unthrottled while the opportunistic job does. `revisit_at` is the earlier of
/// the quantum's end and the holder's idle deadline while the other job waits, `never` otherwise.
///
/// ```cpp
/// tgs::time_slice_lock c{{}};
/// auto d = c.step({.production = tgs::job_activity{}, .opportunistic = tgs::job_activity{}});
/// assert(std::get<tgs::exclusive_turn>(d.share).holder == tgs::job_class::production);
/// ```
class time_slice_lock {
 public:
  struct config {
    /// How long one job may hold the lock while the other waits. nvshare: the scheduler's time
    /// quantum (TQ), 30 s by default (README, "The Scheduler's Time Quantum").
    duration quantum = std::chrono::seconds{30};
    /// Idle time after which the holder gives the lock up. nvshare: `client.c`,
    /// `release_early_check_interval = 5` seconds.
    duration idle_release = std::chrono::seconds{5};
  };

  static constexpr std::string_view name = "time-slice-lock";
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "unified-memory";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr std::array setting_table{
      setting<config>{"quantum-ms", "how long one job holds the GPU lock", &config::quantum},
      setting<config>{"idle-release-ms", "a holder that launches nothing this long releases the lock",
                      &config::idle_release},
  };

  /// Validates `cfg`; throws `tgs::config_error` naming the field.
  explicit time_slice_lock(const config& cfg) : cfg_(validated(cfg)) {}

  [[nodiscard]] const config& settings() const noexcept { return cfg_; }

  [[nodiscard]] rate_decision step(const rate_observation& obs) noexcept {
    const bool production = obs.production.has_value();
    const bool opportunistic = obs.opportunistic.has_value();
    if (!production && !opportunistic) {
      holder_.reset();
      return free_decision();
    }
    if (holder_ && !present(obs, *holder_)) holder_.reset();
    if (!holder_) {
      grant(production ? job_class::production : job_class::opportunistic, obs.now);
    } else {
      const auto& activity = *holder_ == job_class::production ? obs.production : obs.opportunistic;
      if (obs.window > duration::zero() && activity->blocks_launched > 0) last_active_ = obs.now;
      const job_class other = other_class(*holder_);
      if (present(obs, other)) {
        const bool quantum_over = obs.now - turn_start_ >= cfg_.quantum;
        const bool idle = obs.now - last_active_ >= cfg_.idle_release;
        if (quantum_over || idle) grant(other, obs.now);
      }
    }
    return held_decision(obs);
  }

  /// The job holding the lock, or empty when no job is present.
  [[nodiscard]] std::optional<job_class> holder() const noexcept { return holder_; }

  /// When the current holder got the lock.
  [[nodiscard]] instant turn_start() const noexcept { return turn_start_; }

  /// Who holds the lock and since when.
  [[nodiscard]] state_report describe() const noexcept {
    state_report r;
    r.add("holder", holder_ ? to_string(*holder_) : std::string_view{"none"});
    if (holder_) r.add("turn_start_s", to_seconds(turn_start_ - epoch));
    return r;
  }

 private:
  static config validated(const config& c) {
    using rate_detail::check;
    check(c.quantum > duration::zero(), "time_slice_lock", "quantum", "positive", c.quantum);
    check(c.idle_release > duration::zero(), "time_slice_lock", "idle_release", "positive",
          c.idle_release);
    return c;
  }

  static bool present(const rate_observation& obs, job_class c) noexcept {
    return c == job_class::production ? obs.production.has_value() : obs.opportunistic.has_value();
  }

  static job_class other_class(job_class c) noexcept {
    return c == job_class::production ? job_class::opportunistic : job_class::production;
  }

  void grant(job_class c, instant now) noexcept {
    holder_ = c;
    turn_start_ = now;
    // nvshare restarts the early-release timer when the lock is granted (`LOCK_OK`).
    last_active_ = now;
  }

  static rate_decision free_decision() noexcept {
    rate_decision d;
    d.share = time_sliced{};
    d.opportunistic_budget = std::nullopt;
    d.revisit_at = never;
    return d;
  }

  [[nodiscard]] rate_decision held_decision(const rate_observation& obs) const noexcept {
    rate_decision d;
    d.share = exclusive_turn{*holder_};
    if (*holder_ == job_class::production) {
      d.opportunistic_budget = 0;
    } else {
      d.opportunistic_budget = std::nullopt;
    }
    if (present(obs, other_class(*holder_))) {
      d.revisit_at = std::min(rate_detail::later(turn_start_, cfg_.quantum),
                              rate_detail::later(last_active_, cfg_.idle_release));
    } else {
      d.revisit_at = never;
    }
    return d;
  }

  config cfg_;
  std::optional<job_class> holder_;
  instant turn_start_ = epoch;
  instant last_active_ = epoch;
};

static_assert(RegisteredRateController<time_slice_lock>);

}  // namespace tgs
