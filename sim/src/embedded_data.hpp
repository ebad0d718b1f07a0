// SPDX-License-Identifier: Apache-2.0
/// @file
/// The default tables compiled into tgs-sim, so it runs with no files beside it.
#pragma once

#include <string_view>

namespace tgs::sim::embedded {
extern const std::string_view gpus_csv;
extern const std::string_view models_csv;
extern const std::string_view paper_pairs_csv;
extern const std::string_view measured_pairs_csv;
extern const std::string_view fit_csv;
extern const std::string_view job_facts_csv;
}  // namespace tgs::sim::embedded
