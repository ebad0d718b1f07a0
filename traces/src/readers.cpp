// SPDX-License-Identifier: Apache-2.0
/// @file
/// Format names and the file-reading entry point that dispatches to each reader.
#include "tgs/traces/readers.hpp"

#include "text.hpp"

namespace tgs::traces {

std::string_view to_string(trace_format f) noexcept {
  switch (f) {
    case trace_format::philly_json:
      return "philly-json";
    case trace_format::pollux_csv:
      return "pollux-csv";
    case trace_format::job_stream:
      return "job-stream";
  }
  return "unknown";
}

std::optional<trace_format> parse_trace_format(std::string_view name) noexcept {
  for (const trace_format f :
       {trace_format::philly_json, trace_format::pollux_csv, trace_format::job_stream}) {
    if (to_string(f) == name) return f;
  }
  return std::nullopt;
}

trace parse_trace(std::string_view text, trace_format format, std::string_view source,
                  const read_options& options) {
  switch (format) {
    case trace_format::philly_json:
      return parse_philly_json(text, source, options);
    case trace_format::pollux_csv:
      return parse_pollux_csv(text, source, options);
    case trace_format::job_stream:
      return parse_job_stream_csv(text, source, options);
  }
  throw trace_error(std::string{source}, 0, "unknown trace format");
}

trace read_trace(const std::filesystem::path& path, trace_format format,
                 const read_options& options) {
  const std::string text = detail::read_file(path);
  return parse_trace(text, format, path.string(), options);
}

}  // namespace tgs::traces
