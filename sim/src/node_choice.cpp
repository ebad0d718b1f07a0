// SPDX-License-Identifier: Apache-2.0
// tgs-node's choice of mechanism for a pair, from the facts the simulator's profiles give.
#include "tgs/sim/node_choice.hpp"

#include <algorithm>

namespace tgs::sim {

const node_choice* pair_choices::under(mechanism_preference p) const noexcept {
  const auto it = std::find_if(choices.begin(), choices.end(),
                               [p](const node_choice& c) { return c.preference == p; });
  return it == choices.end() ? nullptr : &*it;
}

pair_choices choices_for(const mechanism_choice& chooser, const model_profile& production,
                         const model_profile& opportunistic, bytes capacity) {
  pair_choices out;
  choice_facts& f = out.facts;
  f.mps_available = true;
  f.same_tenant = true;
  f.production_gpu_wait = production.production_gpu_wait;
  f.longest_kernel = opportunistic.opportunistic_longest_span;
  f.production_bytes = production.footprint;
  f.opportunistic_peak_bytes = opportunistic.footprint;
  f.capacity = capacity;
  if (!f.production_gpu_wait) out.unmeasured.push_back(production_gpu_wait_fact);
  if (!f.longest_kernel) out.unmeasured.push_back(longest_span_fact);
  for (const mechanism_preference p : node_preferences) {
    choice_facts asked = f;
    asked.preference = p;
    out.choices.push_back({p, chooser.step(asked)});
  }
  return out;
}

}  // namespace tgs::sim
