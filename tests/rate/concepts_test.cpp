// SPDX-License-Identifier: Apache-2.0
/// @file
/// Compile-time checks of the `RateController` concept: every model satisfies it, and types that
/// break one requirement each do not.
#include <chrono>

#include <gtest/gtest.h>

#include "tgs/rate.hpp"

namespace tgs::test {
namespace {

static_assert(RateController<tgs_rate_control>);
static_assert(RateController<exclusive>);
static_assert(RateController<co_execution>);
static_assert(RateController<mps>);
static_assert(RateController<mig>);
static_assert(RateController<antman>);
static_assert(RateController<token_bucket>);
static_assert(RateController<time_slice_lock>);
static_assert(RateController<idle_harvest>);
static_assert(RateController<priority_share>);
static_assert(RateController<any_rate_controller>);

// Counter-example from the concept's documentation: a controller that reads a clock in `step`
// can only be caught by review, but such controllers are typically written without `noexcept`
// (clock reads and logging throw), which the concept does reject.
struct reads_clock_and_may_throw {
  struct config {};
  static constexpr std::string_view name = "clock";
  explicit reads_clock_and_may_throw(config) {}
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) {
    rate_decision d;
    d.revisit_at = instant{std::chrono::steady_clock::now().time_since_epoch()};
    return d;
  }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<reads_clock_and_may_throw>);

// Each of these differs from a valid model in exactly one requirement.
struct valid_model {
  struct config {};
  static constexpr std::string_view name = "valid";
  explicit valid_model(config) {}
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(RateController<valid_model>);

struct no_name {
  struct config {};
  explicit no_name(config) {}
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<no_name>);

struct settings_by_value {
  struct config {};
  static constexpr std::string_view name = "by-value";
  explicit settings_by_value(config) {}
  config settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<settings_by_value>);

struct not_copyable {
  struct config {};
  static constexpr std::string_view name = "unique";
  explicit not_copyable(config) {}
  not_copyable(const not_copyable&) = delete;
  not_copyable& operator=(const not_copyable&) = delete;
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<not_copyable>);

struct no_config_constructor {
  struct config {};
  static constexpr std::string_view name = "default-only";
  no_config_constructor() = default;
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<no_config_constructor>);

struct wrong_decision_type {
  struct config {};
  static constexpr std::string_view name = "bool";
  explicit wrong_decision_type(config) {}
  const config& settings() const noexcept { return cfg_; }
  bool step(const rate_observation&) noexcept { return true; }
  state_report describe() const noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<wrong_decision_type>);

struct no_describe {
  struct config {};
  static constexpr std::string_view name = "silent";
  explicit no_describe(config) {}
  const config& settings() const noexcept { return cfg_; }
  rate_decision step(const rate_observation&) noexcept { return {}; }
  config cfg_;
};
static_assert(!RateController<no_describe>);

// A registered controller also states its traits and its settings table; the erased wrapper
// cannot (its traits depend on what it holds) and is the concept's counter-example.
static_assert(RegisteredRateController<tgs_rate_control>);
static_assert(RegisteredRateController<token_bucket>);
static_assert(!RegisteredRateController<any_rate_controller>);
static_assert(!RegisteredRateController<valid_model>);

struct registered_model : valid_model {
  using valid_model::valid_model;
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr auto setting_table = no_settings<config>;
};
static_assert(RegisteredRateController<registered_model>);

// Each missing trait is caught.
struct no_mechanism : valid_model {
  using valid_model::valid_model;
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
  static constexpr auto setting_table = no_settings<config>;
};
static_assert(!RegisteredRateController<no_mechanism>);

struct no_setting_table : valid_model {
  using valid_model::valid_model;
  static constexpr enforcement enforced_by = enforcement::interposer;
  static constexpr sharing_mechanism mechanism = sharing_mechanism::time_slicing;
  static constexpr bool co_locates = true;
  static constexpr std::string_view default_memory_policy = "tgs";
  static constexpr bool adaptive = false;
  static constexpr bool fixed_block_budget = false;
};
static_assert(!RegisteredRateController<no_setting_table>);

TEST(RateControllerConcept, RegistryNamesMatchTheModelsNames) {
  // Run-time twin of the static checks: the names a CLI prints are the models' own names.
  const auto names = rate_controller_names();
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names[0], tgs_rate_control::name);
  EXPECT_EQ(names[1], idle_harvest::name);
  EXPECT_EQ(names[2], priority_share::name);
  EXPECT_EQ(names[3], exclusive::name);
  EXPECT_EQ(names[4], co_execution::name);
  EXPECT_EQ(names[5], mps::name);
  EXPECT_EQ(names[6], mig::name);
  EXPECT_EQ(names[7], antman::name);
  EXPECT_EQ(names[8], token_bucket::name);
  EXPECT_EQ(names[9], time_slice_lock::name);
}

}  // namespace
}  // namespace tgs::test
