// SPDX-License-Identifier: Apache-2.0
// Tests of the global fit: its cache is what a fresh fit gives, it is checked against its inputs,
// it fits no parameter of a pair, and the prediction errors are those docs/simulator/predictions.md
// states (in sample and leave-one-pair-out).
#include "tgs/sim/fit.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "sim_test_support.hpp"
#include "tgs/sim/pairs.hpp"

namespace tgs::sim {
namespace {

using ::testing::HasSubstr;
using testing::default_model;

TEST(GlobalFit, TheCacheIsWhatAFreshFitGives) {
  const auto& m = default_model();
  ASSERT_TRUE(m.fit_from_cache) << "sim/data/fit.csv is stale: run tgs-sim fit --write sim/data/fit.csv";
  const fit_result fresh = fit_catalog(m.unfitted);
  ASSERT_EQ(fresh.parameters.size(), m.fit.parameters.size());
  for (std::size_t i = 0; i < fresh.parameters.size(); ++i) {
    const auto& a = fresh.parameters[i];
    const auto& b = m.fit.parameters[i];
    EXPECT_EQ(a.gpu + "/" + a.model + "/" + a.name, b.gpu + "/" + b.model + "/" + b.name);
    EXPECT_NEAR(a.value, b.value, 1e-6 * std::max(1.0, std::abs(a.value))) << a.gpu << " " << a.model << " " << a.name;
  }
  EXPECT_EQ(fresh.cells, m.fit.cells);
}

TEST(GlobalFit, ItsParametersBelongToGpuTypesAndModelsNeverToPairs) {
  // Every fitted number is a GPU type's mechanism parameter or a profile field marked f.
  const auto& m = default_model();
  for (const auto& p : m.fit.parameters) {
    if (p.model.empty()) continue;
    const model_profile* profile = m.unfitted.find_model(p.model, p.gpu);
    ASSERT_NE(profile, nullptr) << p.model;
    const bool fitted_field = std::any_of(profile->origin.begin(), profile->origin.end(),
                                          [](provenance o) { return o == provenance::fitted; });
    EXPECT_TRUE(fitted_field) << p.gpu << " " << p.model << " " << p.name;
  }
}

TEST(GlobalFit, ACacheFileRoundTrips) {
  fit_result f;
  f.inputs_hash = 0x0123456789abcdefULL;
  f.cells = 7;
  f.rms_error = 0.125;
  f.parameters = {{"h100-80gb", "", "switch_loss", 0.5}, {"h100-80gb", "dlrm", "busy_fraction", 0.25}};
  const fit_result back = parse_fit_csv(render_fit_csv(f), "fit.csv");
  EXPECT_EQ(back.inputs_hash, f.inputs_hash);
  EXPECT_EQ(back.cells, 7U);
  ASSERT_EQ(back.parameters.size(), 2U);
  EXPECT_EQ(back.parameters[1].model, "dlrm");
  EXPECT_DOUBLE_EQ(back.parameters[1].value, 0.25);
}

TEST(GlobalFit, ABadCacheLineIsNamed) {
  auto error = [](std::string_view text) {
    try {
      (void)parse_fit_csv(text, "fit.csv");
    } catch (const input_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(error("gpu,model,parameter,value\na,,no_such,1\n"), HasSubstr("fit.csv:2: unknown parameter"));
  EXPECT_THAT(error("gpu,model,parameter,value\na,,switch_loss,x\n"), HasSubstr("fit.csv:2: expected a number"));
  EXPECT_THAT(error("oops\n"), HasSubstr("fit.csv:1: expected the header"));
}

/// Cells within ±0.10 on each measured throughput.
std::size_t within(const std::vector<prediction>& ps) {
  return static_cast<std::size_t>(std::count_if(ps.begin(), ps.end(), [](const prediction& p) {
    auto ok = [](const std::optional<double>& measured, const std::optional<double>& predicted) {
      return !measured || !predicted || std::abs(*measured - *predicted) <= 0.10 + 1e-12;
    };
    return ok(p.cell.production, p.production) && ok(p.cell.opportunistic, p.opportunistic);
  }));
}

TEST(GlobalFit, PredictionErrorsAreWhatTheDocsSay) {
  // docs/simulator/predictions.md: cells within ±0.10, in sample and leave-one-pair-out.
  const auto& m = default_model();
  struct expected {
    const char* gpu;
    std::size_t cells;
    std::size_t in_sample;
    std::size_t left_out;
  };
  for (const expected e : {expected{"a100-40gb", 16, 10, 3}, expected{"h100-80gb", 105, 69, 63},
                           expected{"h200-141gb", 19, 13, 10}}) {
    const auto in = predict_measured(m, e.gpu, false);
    const auto out = predict_measured(m, e.gpu, true);
    EXPECT_EQ(in.size(), e.cells) << e.gpu;
    EXPECT_EQ(within(in), e.in_sample) << e.gpu;
    EXPECT_EQ(within(out), e.left_out) << e.gpu;
  }
}

}  // namespace
}  // namespace tgs::sim
