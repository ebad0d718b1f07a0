// SPDX-License-Identifier: Apache-2.0
// tgs-sim's JSON writing, on nlohmann::json.
#include "json_output.hpp"

#include <fmt/format.h>

#include <string>

namespace tgs::sim {

double json_number(double v) {
  // Through the same text as the CSV ("{:.4f}"), so the two formats never differ in the last
  // digit.
  return std::stod(fmt::format("{:.4f}", v));
}

json json_number(const std::optional<double>& v) { return v ? json(json_number(*v)) : json(nullptr); }

std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string json_records(const std::vector<json>& records) {
  std::string out = "[\n";
  for (std::size_t i = 0; i < records.size(); ++i) {
    out += "  " + json_text(records[i]) + (i + 1 < records.size() ? ",\n" : "\n");
  }
  return out + "]\n";
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace tgs::sim
