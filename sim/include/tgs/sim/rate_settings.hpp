// SPDX-License-Identifier: Apache-2.0
/// @file
/// The rate policies' settings a simulation starts from.
#pragma once

#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/rate/priority_share.hpp"

namespace tgs::sim {

/// Every rate policy at its defaults, except that `priority-share` reads the production job's
/// speed, not the GPU time it waits for (tgs-node's default). Why: that signal reads the busy
/// time and the wait between a job's synchronisations, which the simulated windows do not carry
/// (`run_pair` reports launches, busy time and iteration time, with no synchronisation marks),
/// so the controller would take no sample and never cap; and the measured cells the fit reads
/// under `priority-share` ran under the speed signal (docs/results/dominance.md).
[[nodiscard]] inline any_rate_controller::configs simulated_rate_settings() {
  any_rate_controller::configs c;
  c.of<priority_share>().gpu_wait_signal = false;
  return c;
}

}  // namespace tgs::sim
