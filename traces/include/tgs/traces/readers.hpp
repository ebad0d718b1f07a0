// SPDX-License-Identifier: Apache-2.0
/// @file
/// Readers for the Philly JSON logs, the Pollux per-job Philly CSV and tgs's own job-stream CSV,
/// and the writer of the job-stream CSV. The formats and their rules are in traces/README.md.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "tgs/traces/trace.hpp"

namespace tgs::traces {

/// The trace formats tgs reads.
enum class trace_format : std::uint8_t {
  philly_json,  ///< Philly `cluster_job_log`, or the pass-attempts subset (auto-detected)
  pollux_csv,   ///< `timestamp,duration,num_gpus,gpu_time,cluster` (Pollux's philly.csv)
  job_stream,   ///< tgs's own job-stream CSV
};

/// The format's command-line name: `philly-json`, `pollux-csv` or `job-stream`.
[[nodiscard]] std::string_view to_string(trace_format f) noexcept;
/// Parses a command-line name; empty when it names no format.
[[nodiscard]] std::optional<trace_format> parse_trace_format(std::string_view name) noexcept;

/// Parses a Philly JSON document: an array of jobs, either the raw `cluster_job_log` schema
/// (objects with `jobid`) or the pass-attempts subset (objects with `id` and `runtime`); the
/// first job decides which, and every job must then follow it.
///
/// `source` names the input in messages. Throws `trace_error`.
///
/// ```cpp
/// auto t = tgs::traces::parse_philly_json(R"([{"id":"a","num_gpus":4,"runtime":1.0,
///   "attempts":[{"start_time":"2017-10-07 01:12:09","end_time":"2017-10-07 01:13:09"}],
///   "submitted_time":"2017-10-07 01:11:39"}])", "inline.json");
/// // t.jobs[0].run_time == 60 s, t.jobs[0].gpus == 4
/// ```
[[nodiscard]] trace parse_philly_json(std::string_view text, std::string_view source,
                                      const read_options& options = {});

/// Parses the Pollux per-job Philly CSV (header `timestamp,duration,num_gpus,gpu_time,cluster`,
/// columns in any order). Throws `trace_error`.
///
/// ```cpp
/// auto t = tgs::traces::parse_pollux_csv(
///     "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n",
///     "inline.csv");
/// // t.jobs.size() == 1, t.jobs[0].vc == "11cb48"
/// ```
[[nodiscard]] trace parse_pollux_csv(std::string_view text, std::string_view source,
                                     const read_options& options = {});

/// Parses a tgs job-stream CSV (see traces/README.md for its header). Throws `trace_error`.
///
/// ```cpp
/// auto t = tgs::traces::parse_job_stream_csv(
///     "submit_s,gpus,duration_s,class,model\n0,1,3600,production,resnet50\n", "inline.csv");
/// // t.jobs[0].priority == tgs::job_class::production
/// ```
[[nodiscard]] trace parse_job_stream_csv(std::string_view text, std::string_view source,
                                         const read_options& options = {});

/// Parses `text` in `format`.
[[nodiscard]] trace parse_trace(std::string_view text, trace_format format, std::string_view source,
                                const read_options& options = {});

/// Reads the file at `path` in `format`; messages name the file as given. Throws `trace_error`
/// when the file cannot be read or is malformed.
///
/// ```cpp
/// auto t = tgs::traces::read_trace("philly.csv", tgs::traces::trace_format::pollux_csv);
/// fmt::print("{} jobs, {} duplicates\n", t.jobs.size(), t.stats.duplicates);
/// ```
[[nodiscard]] trace read_trace(const std::filesystem::path& path, trace_format format,
                               const read_options& options = {});

/// Writes `t` as a tgs job-stream CSV that `parse_job_stream_csv` reads back to the same jobs
/// (times at nanosecond precision, the origin in a leading `# origin:` comment). Throws
/// `std::invalid_argument` when a name, model or vc holds a line break, which the format
/// cannot carry.
///
/// ```cpp
/// std::ofstream out{"jobs.csv"};
/// tgs::traces::write_job_stream_csv(out, t);
/// ```
void write_job_stream_csv(std::ostream& out, const trace& t);

}  // namespace tgs::traces
