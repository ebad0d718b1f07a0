// SPDX-License-Identifier: Apache-2.0
// Uses the installed headers the way a runtime that embeds tgs would.
#include <tgs/rate/any_rate_controller.hpp>
#include <tgs/rate/tgs_rate_control.hpp>

int main() {
  tgs::tgs_rate_control controller{{}};
  const tgs::rate_decision d = controller.step({});
  auto any = tgs::make_rate_controller("mps");
  return d.opportunistic_budget.has_value() || !any ? 1 : 0;
}
