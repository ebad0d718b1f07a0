// SPDX-License-Identifier: Apache-2.0
/// @file
/// The family-independent checks of the policy conformance suites: a policy replays its
/// decisions exactly, and a copy made mid-run continues exactly as the original.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace tgs::testing {

/// Two fresh policies from `make` step through `observations` and decide identically.
template <typename Make, typename Observation>
void expect_replay_gives_the_same_decisions(Make make, const std::vector<Observation>& observations) {
  auto first = make();
  std::vector<decltype(first.step(observations.front()))> recorded;
  recorded.reserve(observations.size());
  for (const auto& obs : observations) recorded.push_back(first.step(obs));
  auto second = make();
  for (std::size_t i = 0; i < observations.size(); ++i) {
    ASSERT_EQ(second.step(observations[i]), recorded[i]) << "step " << i;
  }
}

/// A copy of a policy taken halfway through `observations` decides as the original does.
template <typename Make, typename Observation>
void expect_mid_run_copy_continues_identically(Make make,
                                               const std::vector<Observation>& observations) {
  auto original = make();
  const std::size_t half = observations.size() / 2;
  for (std::size_t i = 0; i < half; ++i) (void)original.step(observations[i]);
  auto copy = original;
  for (std::size_t i = half; i < observations.size(); ++i) {
    ASSERT_EQ(copy.step(observations[i]), original.step(observations[i])) << "step " << i;
  }
}

}  // namespace tgs::testing
