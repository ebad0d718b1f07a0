// SPDX-License-Identifier: Apache-2.0
/// @file
/// Readers for the Philly JSON logs, the Pollux per-job Philly CSV and tgs's own job-stream CSV,
/// and the writer of the job-stream CSV. The formats and their rules are in traces/README.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tgs/traces/trace.hpp"

namespace tgs::traces {

/// Every trace format tgs reads, one line each: the registry that the library, the command line
/// (`tgs-sim replay --trace-format`) and traces/README.md take their names from.
///
/// `X(enumerator, name, description, reader, aliases...)`: `name` is the canonical
/// command-line name (`<source>-<encoding>`), `aliases` are further names accepted for it,
/// `reader` the function that parses the format. Adding a format is one reader and one line
/// here; the enum, `trace_formats()` and the name lookup follow from it, and a line whose reader
/// does not exist does not compile.
#define TGS_TRACE_FORMATS(X)                                                                      \
  X(philly_json, "philly-json",                                                                   \
    "Philly cluster_job_log, or its pass-attempts subset (JSON; the shape is detected)",          \
    parse_philly_json)                                                                            \
  X(philly_csv, "philly-csv", "the per-job Philly CSV of the Pollux simulator", parse_philly_csv, \
    "pollux-csv")                                                                                 \
  X(tgs_csv, "tgs-csv", "tgs's own job-stream CSV", parse_tgs_csv, "job-stream")

/// The trace formats tgs reads (see `TGS_TRACE_FORMATS`).
enum class trace_format : std::uint8_t {
#define TGS_TRACE_FORMAT_ENUMERATOR(enumerator, ...) enumerator,
  TGS_TRACE_FORMATS(TGS_TRACE_FORMAT_ENUMERATOR)
#undef TGS_TRACE_FORMAT_ENUMERATOR
};

/// A reader: parses `text`, naming `source` in its messages. Throws `trace_error`.
using trace_reader = trace (*)(std::string_view text, std::string_view source,
                               const read_options& options);

/// One line of the registry.
struct trace_format_info {
  trace_format format;
  /// The canonical name, e.g. `philly-csv`.
  std::string_view name;
  /// One line saying what the format is.
  std::string_view description;
  trace_reader read;
  /// Other names accepted for the format (older names), e.g. `pollux-csv`.
  std::span<const std::string_view> aliases;
};

/// The registry, in enum order: `trace_formats()[i].format == trace_format{i}`.
///
/// ```cpp
/// for (const auto& f : tgs::traces::trace_formats()) {
///   fmt::print("{}: {}\n", f.name, f.description);
/// }
/// ```
[[nodiscard]] std::span<const trace_format_info> trace_formats() noexcept;

/// The registry line of `f`.
[[nodiscard]] const trace_format_info& format_info(trace_format f) noexcept;

/// The format's canonical name: `philly-json`, `philly-csv` or `tgs-csv`.
[[nodiscard]] std::string_view to_string(trace_format f) noexcept;

/// The format a canonical name or an alias names; empty when it names none.
///
/// ```cpp
/// auto f = tgs::traces::parse_trace_format("pollux-csv");  // trace_format::philly_csv
/// ```
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
/// auto t = tgs::traces::parse_philly_csv(
///     "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n",
///     "inline.csv");
/// // t.jobs.size() == 1, t.jobs[0].vc == "11cb48"
/// ```
[[nodiscard]] trace parse_philly_csv(std::string_view text, std::string_view source,
                                     const read_options& options = {});

/// Parses a tgs job-stream CSV (see traces/README.md for its header). Throws `trace_error`.
///
/// ```cpp
/// auto t = tgs::traces::parse_tgs_csv(
///     "submit_s,gpus,duration_s,class,model\n0,1,3600,production,resnet50\n", "inline.csv");
/// // t.jobs[0].priority == tgs::job_class::production
/// ```
[[nodiscard]] trace parse_tgs_csv(std::string_view text, std::string_view source,
                                  const read_options& options = {});

/// Parses `text` in `format`.
[[nodiscard]] trace parse_trace(std::string_view text, trace_format format, std::string_view source,
                                const read_options& options = {});

/// Reads the file at `path` in `format`; messages name the file as given. Throws `trace_error`
/// when the file cannot be read or is malformed.
///
/// ```cpp
/// auto t = tgs::traces::read_trace("philly.csv", tgs::traces::trace_format::philly_csv);
/// fmt::print("{} jobs, {} duplicates\n", t.jobs.size(), t.stats.duplicates);
/// ```
[[nodiscard]] trace read_trace(const std::filesystem::path& path, trace_format format,
                               const read_options& options = {});

/// Writes `t` as a tgs job-stream CSV that `parse_tgs_csv` reads back to the same jobs
/// (times at nanosecond precision, the origin in a leading `# origin:` comment). Throws
/// `std::invalid_argument` when a name, model or vc holds a line break, which the format
/// cannot carry.
///
/// ```cpp
/// std::ofstream out{"jobs.csv"};
/// tgs::traces::write_tgs_csv(out, t);
/// ```
void write_tgs_csv(std::ostream& out, const trace& t);

}  // namespace tgs::traces
