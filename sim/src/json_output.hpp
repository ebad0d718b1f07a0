// SPDX-License-Identifier: Apache-2.0
/// @file
/// How tgs-sim's JSON outputs are written: records built with nlohmann::json, numbers at the
/// precision the tables and CSV show, one record per line; and its CSV fields, quoted as needed.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tgs::sim {

using json = nlohmann::ordered_json;

/// `v` rounded to the 4 decimals of the CSV and table outputs, so every format carries the same
/// value.
double json_number(double v);

/// `v` rounded so, or null.
json json_number(const std::optional<double>& v);

/// One JSON value as text. Strings that are not valid UTF-8 (a trace path, say) are written with
/// U+FFFD in place of the bad bytes instead of failing the run.
std::string json_text(const json& value);

/// Records as a JSON array with one record per line, which `grep` and `jq` read alike.
std::string json_records(const std::vector<json>& records);

/// A CSV field, quoted (RFC 4180) when it holds a comma, a quote or a line break.
std::string csv_field(std::string_view text);

}  // namespace tgs::sim
