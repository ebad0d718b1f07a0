// SPDX-License-Identifier: Apache-2.0
/// @file
/// The log-linear empirical quantile function the generator samples from.
#include "tgs/traces/random.hpp"

#include <algorithm>
#include <cmath>

#include "tgs/core/config_error.hpp"

namespace tgs::traces {

log_linear_quantiles::log_linear_quantiles(std::span<const quantile_anchor> anchors, double offset)
    : offset_(offset) {
  tgs::require(anchors.size() >= 2, "log_linear_quantiles: needs at least two anchors");
  tgs::require(anchors.front().p == 0.0 && anchors.back().p == 1.0,
               "log_linear_quantiles: p must run from 0 to 1");
  for (std::size_t i = 0; i < anchors.size(); ++i) {
    const quantile_anchor& a = anchors[i];
    tgs::require(std::isfinite(a.value) && a.value + offset > 0.0,
                 "log_linear_quantiles: every value + offset must be positive and finite");
    if (i > 0) {
      tgs::require(a.p >= anchors[i - 1].p && a.value >= anchors[i - 1].value,
                   "log_linear_quantiles: p and values must not decrease");
    }
    p_.push_back(a.p);
    log_value_.push_back(std::log(a.value + offset));
  }
}

double log_linear_quantiles::operator()(double u) const noexcept {
  u = std::clamp(u, 0.0, 1.0);
  // The first anchor with p > u bounds u's segment from above.
  const auto hi = std::upper_bound(p_.begin(), p_.end(), u);
  if (hi == p_.end()) return std::exp(log_value_.back()) - offset_;
  const auto k = static_cast<std::size_t>(hi - p_.begin());
  const double width = p_[k] - p_[k - 1];
  const double f = (u - p_[k - 1]) / width;
  return std::exp(log_value_[k - 1] + f * (log_value_[k] - log_value_[k - 1])) - offset_;
}

double log_linear_quantiles::mean() const noexcept {
  // Over a segment the value is exp(a + f (b - a)) for f uniform in [0, 1]: its mean is
  // (e^b - e^a) / (b - a), or e^a when a == b.
  double sum = 0;
  for (std::size_t k = 1; k < p_.size(); ++k) {
    const double w = p_[k] - p_[k - 1];
    if (w == 0) continue;
    const double a = log_value_[k - 1];
    const double b = log_value_[k];
    const double m = b - a < 1e-12 ? std::exp(a) : (std::exp(b) - std::exp(a)) / (b - a);
    sum += w * m;
  }
  return sum - offset_;
}

}  // namespace tgs::traces
