// SPDX-License-Identifier: Apache-2.0
/// @file
/// tgs-node's choice of how a pair's opportunistic job shares its GPU, predicted: the facts the
/// node would read, taken from the simulator's profiles, handed to the node's own
/// `tgs::mechanism_choice`.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tgs/sharing/mechanism_choice.hpp"
#include "tgs/sim/profiles.hpp"

namespace tgs::sim {

/// The operator's preferences (`tgs-node --opportunistic-mechanism`) the node's choice is
/// predicted under: `auto`, the node's default, which applies every rule, and `mps`, which
/// decides on the hard rules alone. `time-sliced` decides nothing worth predicting.
inline constexpr std::array node_preferences{mechanism_preference::automatic,
                                             mechanism_preference::mps};

/// The policy whose opportunistic jobs the node chooses a mechanism for: the node chooses where its
/// policy shares through MPS, and priority-share is its policy wherever MPS runs. Under either
/// mechanism the opportunistic job runs under that policy's launch cap.
inline constexpr std::string_view node_choice_policy = "priority-share";

/// The two facts a profile may lack, named as sim/data/job_facts.csv's columns.
inline constexpr std::string_view production_gpu_wait_fact = "production_gpu_wait";
inline constexpr std::string_view longest_span_fact = "opportunistic_longest_span_ms";

/// What the node chooses for a pair's opportunistic job under one preference, and the cell that
/// follows: both jobs' throughputs, normalized to alone, under the chosen mechanism.
struct node_choice {
  mechanism_preference preference = mechanism_preference::automatic;
  mechanism_verdict verdict{};
  double production = 0;
  double opportunistic = 0;
  /// Each throughput's standard error from the fitted parameters' covariance, where computed.
  std::optional<double> production_se{};
  std::optional<double> opportunistic_se{};
  /// Why the cell rests on a parameter never measured on its GPU type (`extrapolation_of`); empty
  /// when it does not.
  std::string extrapolated{};
};

/// The node's choices for one pair under each of `node_preferences`, from the same facts.
struct pair_choices {
  /// What the node would know at the opportunistic job's registration (its preference aside).
  choice_facts facts{};
  /// The facts passed empty because they were never measured for these jobs on this GPU type
  /// (`production_gpu_wait_fact`, `longest_span_fact`): the choice takes its safe side for them.
  std::vector<std::string_view> unmeasured{};
  /// One per `node_preferences`, in its order.
  std::vector<node_choice> choices{};

  /// The choice under `p`, or null when it was not predicted.
  [[nodiscard]] const node_choice* under(mechanism_preference p) const noexcept;
};

/// The facts tgs-node would read when `opportunistic` registers beside `production` on a GPU whose
/// memory budget is `capacity`, and `chooser`'s verdict under each of `node_preferences`; the
/// cells are left for the caller to run.
///
/// The facts, as `node_server::facts_for` fills them:
/// - MPS available, and the two jobs one tenant's: the measured pairs ran both as one user on one
///   host, and priority-share runs only where MPS does.
/// - The production job's host wait (`model_profile::production_gpu_wait`) and the opportunistic
///   job's longest kernel span (`model_profile::opportunistic_longest_span`) where measured; empty
///   otherwise, as the node has them before it measured them.
/// - The production job's bytes and the opportunistic job's peak: their footprints. The capacity:
///   the memory budget the pair runs under, as the node's `--memory-budget-mib`.
/// - No correction on record (neither job hurt production before): a first meeting of the two.
[[nodiscard]] pair_choices choices_for(const mechanism_choice& chooser,
                                       const model_profile& production,
                                       const model_profile& opportunistic, bytes capacity);

}  // namespace tgs::sim
