// SPDX-License-Identifier: Apache-2.0
/// @file
/// Vocabulary types shared by every policy and driver: time, byte counts, ids and job classes.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <limits>
#include <string_view>

namespace tgs {

/// A span of time. Nanoseconds are exact for the longest trace (~100 days = 8.6e15 ns < 9.2e18).
using duration = std::chrono::nanoseconds;

/// The clock of policy time. It has no `now()`: a policy never reads a clock, its driver hands it
/// the instant. The simulator counts from the start of a run; tgs-node maps its steady clock here.
struct policy_clock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<policy_clock, duration>;
  static constexpr bool is_steady = true;
};

/// A point in policy time: a strong type over nanoseconds since the driver's epoch.
///
/// ```cpp
/// tgs::instant t = tgs::epoch + std::chrono::seconds{5};
/// ```
using instant = policy_clock::time_point;

/// The first instant of every run.
inline constexpr instant epoch{};

/// The instant that never comes: a policy that needs no revisit answers this.
inline constexpr instant never = instant::max();

/// Converts a duration to floating-point seconds, for reporting and for model arithmetic only.
[[nodiscard]] constexpr double to_seconds(duration d) noexcept {
  return std::chrono::duration<double>(d).count();
}

/// Converts floating-point seconds to a duration, rounding to the nearest nanosecond.
[[nodiscard]] constexpr duration from_seconds(double s) noexcept {
  return std::chrono::round<duration>(std::chrono::duration<double>(s));
}

/// A number of bytes of memory. Its own type so a byte count never mixes with a block count.
///
/// ```cpp
/// using namespace tgs::literals;
/// tgs::bytes budget = 16_GiB;
/// ```
class bytes {
 public:
  constexpr bytes() noexcept = default;
  constexpr explicit bytes(std::uint64_t count) noexcept : count_(count) {}

  [[nodiscard]] constexpr std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] constexpr double gib() const noexcept {
    return static_cast<double>(count_) / static_cast<double>(1ULL << 30);
  }

  constexpr auto operator<=>(const bytes&) const noexcept = default;

  constexpr bytes& operator+=(bytes other) noexcept {
    count_ += other.count_;
    return *this;
  }
  /// Saturates at zero: memory accounting never goes negative.
  constexpr bytes& operator-=(bytes other) noexcept {
    count_ = other.count_ > count_ ? 0 : count_ - other.count_;
    return *this;
  }
  friend constexpr bytes operator+(bytes a, bytes b) noexcept { return a += b; }
  friend constexpr bytes operator-(bytes a, bytes b) noexcept { return a -= b; }

  static constexpr bytes max() noexcept { return bytes{std::numeric_limits<std::uint64_t>::max()}; }

 private:
  std::uint64_t count_ = 0;
};

/// Makes a byte count from a (possibly fractional) number of GiB, rounding down.
[[nodiscard]] constexpr bytes from_gib(double gib) noexcept {
  return bytes{static_cast<std::uint64_t>(gib * static_cast<double>(1ULL << 30))};
}

namespace literals {
constexpr bytes operator""_B(unsigned long long n) noexcept { return bytes{n}; }
constexpr bytes operator""_KiB(unsigned long long n) noexcept { return bytes{n << 10}; }
constexpr bytes operator""_MiB(unsigned long long n) noexcept { return bytes{n << 20}; }
constexpr bytes operator""_GiB(unsigned long long n) noexcept { return bytes{n << 30}; }
}  // namespace literals

/// Identifies a job across drivers (trace row, registered process).
enum class job_id : std::uint32_t {};
/// Identifies a GPU within a cluster or node.
enum class gpu_id : std::uint32_t {};

/// The two classes of TGS (NSDI'23 §2): a production job must keep (almost) its standalone
/// throughput; opportunistic jobs use what the production job leaves.
enum class job_class : std::uint8_t { production, opportunistic };

[[nodiscard]] constexpr std::string_view to_string(job_class c) noexcept {
  return c == job_class::production ? "production" : "opportunistic";
}

}  // namespace tgs
