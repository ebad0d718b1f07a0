// SPDX-License-Identifier: Apache-2.0
/// @file
/// Seeded randomness that gives the same numbers with every standard library: `std::mt19937_64`
/// (its output is fixed by the standard) with distributions written out here, because the
/// `std::` distributions may differ between implementations.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tgs::traces {

/// A `std::mt19937_64` with explicitly implemented draws.
///
/// ```cpp
/// tgs::traces::seeded_random rng{42};
/// double u = rng.uniform();            // in [0, 1)
/// std::uint64_t k = rng.below(6);      // 0..5, unbiased
/// ```
class seeded_random {
 public:
  explicit seeded_random(std::uint64_t seed) noexcept : engine_(seed) {}

  /// The next raw 64-bit output.
  std::uint64_t next() noexcept { return engine_(); }

  /// Uniform in [0, 1): the top 53 bits of one output, scaled exactly.
  double uniform() noexcept { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n), unbiased (rejects the low `2^64 mod n` outputs). `n` must be > 0.
  std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const std::uint64_t x = engine_();
      if (x >= threshold) return x % n;
    }
  }

  /// An index drawn with probability proportional to integer `weights` (exact on every
  /// platform: no floating point). The weights must not all be zero.
  std::size_t pick(std::span<const std::uint64_t> weights) noexcept {
    std::uint64_t total = 0;
    for (const std::uint64_t w : weights) total += w;
    std::uint64_t x = below(total);
    std::size_t i = 0;
    while (x >= weights[i]) x -= weights[i++];
    return i;
  }

 private:
  std::mt19937_64 engine_;
};

/// One point of an empirical quantile function: a fraction `p` of the values are <= `value`.
struct quantile_anchor {
  double p;
  double value;
};

/// An inverse CDF through anchors, interpolated linearly in log(value + offset) between them:
/// heavy-tailed data (run times span 1 s to 50 days) is close to linear on that scale. A zero
/// `offset` needs positive values; `offset = 1` allows a point mass at 0 (inter-arrival gaps).
///
/// ```cpp
/// const tgs::traces::quantile_anchor a[] = {{0.0, 1.0}, {0.5, 100.0}, {1.0, 10000.0}};
/// tgs::traces::log_linear_quantiles q{a, 0.0};
/// double median = q(0.5);  // 100
/// ```
class log_linear_quantiles {
 public:
  /// Throws `tgs::config_error` unless p runs from 0 to 1 without decreasing and the values
  /// do not decrease and are > -offset.
  log_linear_quantiles(std::span<const quantile_anchor> anchors, double offset);

  /// The value at probability `u` in [0, 1].
  [[nodiscard]] double operator()(double u) const noexcept;
  /// The exact mean of the interpolated distribution.
  [[nodiscard]] double mean() const noexcept;

 private:
  std::vector<double> p_;
  std::vector<double> log_value_;
  double offset_;
};

}  // namespace tgs::traces
