// SPDX-License-Identifier: Apache-2.0
// mechanism_choice: each measured fact leads to its mechanism, and the first fact that decides is
// the reason given.
#include "tgs/sharing/mechanism_choice.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;
using tgs::choice_reason;
using tgs::opportunistic_mechanism;

/// The facts of a GPU-bound pair of one tenant with short kernels, room in memory and MPS: the
/// one case the rules make an MPS client whatever the operator's thresholds. Each test below
/// changes one fact.
tgs::choice_facts safe_pair() {
  return {.mps_available = true,
          .same_tenant = true,
          .production_gpu_wait = 0.8,
          .longest_kernel = std::chrono::duration_cast<tgs::duration>(3ms),
          .production_bytes = tgs::bytes{20ull << 30},
          .opportunistic_peak_bytes = tgs::bytes{10ull << 30},
          .capacity = tgs::bytes{80ull << 30}};
}

tgs::mechanism_verdict choose(const tgs::choice_facts& f) { return tgs::mechanism_choice{{}}.step(f); }
/// The choice with rule 7 on, as an operator sets it (`--mechanism-choice.gpu-bound-wait 0.25`).
tgs::mechanism_verdict choose_gpu_bound_only(const tgs::choice_facts& f) {
  return tgs::mechanism_choice{{.gpu_bound_wait = 0.25}}.step(f);
}

TEST(MechanismChoice, AGpuBoundPairOfOneTenantWithShortKernelsIsAnMpsClient) {
  EXPECT_EQ(choose(safe_pair()), (tgs::mechanism_verdict{opportunistic_mechanism::mps_client,
                                                              choice_reason::measured_safe}));
}

TEST(MechanismChoice, WithoutMpsTheJobIsTimeSliced) {
  auto f = safe_pair();
  f.mps_available = false;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::no_mps}));
}

TEST(MechanismChoice, AnotherTenantsProductionJobIsNeverJoinedEvenWhenTheOperatorAsksForMps) {
  auto f = safe_pair();
  f.same_tenant = false;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::other_tenant}));
  f.preference = tgs::mechanism_preference::mps;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::other_tenant}));
}

TEST(MechanismChoice, WithNoProductionJobOnTheGpuTheJobIsTimeSliced) {
  auto f = safe_pair();
  f.same_tenant.reset();
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::no_production}));
}

TEST(MechanismChoice, MemoryBeyondTheCapacityIsTimeSlicedSoItCanBeEvicted) {
  auto f = safe_pair();
  f.opportunistic_peak_bytes = tgs::bytes{61ull << 30};
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced,
                                               choice_reason::memory_oversubscribed}));
  f.opportunistic_peak_bytes = tgs::bytes{60ull << 30};  // exactly full still fits
  EXPECT_EQ(choose(f).mechanism, opportunistic_mechanism::mps_client);
}

TEST(MechanismChoice, KernelsNotYetMeasuredOrLongAreTimeSliced) {
  auto f = safe_pair();
  f.longest_kernel.reset();
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced,
                                               choice_reason::kernels_unmeasured}));
  f.longest_kernel = std::chrono::duration_cast<tgs::duration>(100ms);
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::long_kernels}));
  f.longest_kernel = std::chrono::duration_cast<tgs::duration>(99ms);
  EXPECT_EQ(choose(f).mechanism, opportunistic_mechanism::mps_client);
}

// By default how GPU-bound production is decides nothing: under the GPU-wait signal an MPS client
// beside a host-bound production job did better than a time-sliced one (docs/results/mechanism-choice.md).
TEST(MechanismChoice, ByDefaultAHostBoundOrUnmeasuredProductionJobGetsAnMpsCoRunner) {
  auto f = safe_pair();
  f.production_gpu_wait = 0.001;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::mps_client, choice_reason::measured_safe}));
  f.production_gpu_wait.reset();
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::mps_client, choice_reason::measured_safe}));
}

TEST(MechanismChoice, WhereTheOperatorAsksAHostBoundOrUnmeasuredProductionJobIsSharedByTimeSlicing) {
  auto f = safe_pair();
  f.production_gpu_wait = 0.2;
  EXPECT_EQ(choose_gpu_bound_only(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced,
                                                              choice_reason::production_host_bound}));
  f.production_gpu_wait.reset();
  EXPECT_EQ(choose_gpu_bound_only(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced,
                                                              choice_reason::production_unmeasured}));
  f.production_gpu_wait = 0.25;
  EXPECT_EQ(choose_gpu_bound_only(f).mechanism, opportunistic_mechanism::mps_client);
}

TEST(MechanismChoice, TheOperatorDecidesWithinOneTenant) {
  auto f = safe_pair();
  f.preference = tgs::mechanism_preference::time_sliced;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced,
                                               choice_reason::operator_time_sliced}));
  f = safe_pair();
  f.preference = tgs::mechanism_preference::mps;
  f.longest_kernel.reset();  // the operator takes the risk of the unmeasured kernels
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::mps_client, choice_reason::operator_mps}));
  f.same_tenant.reset();  // and of a production job of another tenant arriving later
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::mps_client, choice_reason::operator_mps}));
  f.mps_available = false;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::no_mps}));
}

TEST(MechanismChoice, AJobThatHurtProductionIsMovedThenHeld) {
  auto f = safe_pair();
  f.hurt_as_mps_client = true;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::time_sliced, choice_reason::hurt_under_mps}));
  f.hurt_time_sliced = true;
  EXPECT_EQ(choose(f), (tgs::mechanism_verdict{opportunistic_mechanism::held, choice_reason::hurt_under_both}));
  f.hurt_as_mps_client = false;  // hurt time-sliced only: MPS is still open to it
  EXPECT_EQ(choose(f).mechanism, opportunistic_mechanism::mps_client);
  f.production_gpu_wait = 0.1;  // but not where the operator keeps MPS from host-bound production jobs
  EXPECT_EQ(choose_gpu_bound_only(f),
            (tgs::mechanism_verdict{opportunistic_mechanism::held, choice_reason::hurt_time_sliced}));
}

TEST(MechanismChoice, ABadConfigurationNamesItsField) {
  EXPECT_THROW(tgs::mechanism_choice({.long_kernel = tgs::duration::zero()}), tgs::config_error);
  try {
    tgs::mechanism_choice({.gpu_bound_wait = 1.5});
    FAIL() << "no error";
  } catch (const tgs::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_bound_wait"), std::string::npos);
  }
}

TEST(MechanismChoice, PreferencesParseAndPrintTheirFlagWords) {
  for (auto p : {tgs::mechanism_preference::automatic, tgs::mechanism_preference::mps,
                 tgs::mechanism_preference::time_sliced}) {
    EXPECT_EQ(tgs::parse_mechanism_preference(tgs::to_string(p)), p);
  }
  EXPECT_FALSE(tgs::parse_mechanism_preference("MPS"));
}

}  // namespace
