// SPDX-License-Identifier: Apache-2.0
/// @file
/// The common result of every trace reader and of the generator: `job_record`, `trace`, its
/// reading statistics, the reader options and the `trace_error` a malformed input raises.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tgs/core/units.hpp"

namespace tgs::traces {

/// How a job ended, where the trace says (only the raw Philly `cluster_job_log` does).
enum class job_outcome : std::uint8_t { passed, killed, failed };

/// One job as a cluster simulator needs it, whatever format it came from.
///
/// Invariants kept by every reader: `gpus >= 1`; at least one of `run_time` and `iterations`
/// is set; `submit` is relative to the trace's `origin`, so the first job submits at `tgs::epoch`.
struct job_record {
  /// Position in the trace after sorting (0, 1, 2, ...): what a simulator keys its state by.
  tgs::job_id id{};
  /// The job's name in the source (Philly `jobid` / `id`); empty where the format has none.
  std::string name;
  /// Submission instant, relative to the trace's first submission.
  tgs::instant submit = tgs::epoch;
  /// Time the job ran on its GPUs: the sum of its attempts' durations for Philly sources.
  std::optional<tgs::duration> run_time;
  /// GPUs the job holds while it runs.
  std::uint32_t gpus = 1;
  /// Production or opportunistic (TGS §2). Philly has no such label: see `assign_labels`.
  std::optional<tgs::job_class> priority;
  /// Model name (e.g. `resnet50`). Philly has none: see `assign_labels`.
  std::optional<std::string> model;
  /// Global batch size, where known.
  std::optional<std::uint32_t> batch_size;
  /// Training iterations, where known (given by tgs job streams or derived by `assign_labels`).
  std::optional<std::uint64_t> iterations;
  /// Virtual cluster (Philly VC hash) or another source tag; empty where the format has none.
  std::string vc;
  /// Scheduling attempts in the source (1 where the format does not record attempts).
  std::uint32_t attempts = 1;
  /// First attempt start minus submission, where the source records attempt times.
  std::optional<tgs::duration> queueing_delay;
  /// How the job ended, where the source says.
  std::optional<job_outcome> outcome;
  /// Line of the source file where the job's row or JSON object starts (0 for generated jobs).
  std::size_t source_line = 0;
};

/// What a reader did with its input: every row is either kept, dropped by the format's stated
/// rule, or skipped as malformed (only when `read_options::on_malformed` is `skip`).
struct trace_stats {
  /// Data rows (CSV) or job objects (JSON) seen.
  std::size_t rows_read = 0;
  /// Rows that became a `job_record`.
  std::size_t rows_kept = 0;
  /// Well-formed rows the format's rule leaves out (a Philly job that never ran, a job on no
  /// GPU, a duplicate under `duplicate_rule::drop`).
  std::size_t rows_dropped = 0;
  /// Malformed rows left out because the reader was asked to skip them.
  std::size_t rows_skipped = 0;
  /// Rows identical to an earlier row (kept or dropped per `read_options::duplicates`).
  std::size_t duplicates = 0;
  /// The first few reasons for skipped rows, each a full `trace_error` message.
  std::vector<std::string> skip_reasons;
  /// The first few reasons for dropped rows.
  std::vector<std::string> drop_reasons;
};

/// A job stream: records sorted by submission time, ties kept in input order.
struct trace {
  /// The jobs, sorted; `jobs[i].id == job_id{i}`.
  std::vector<job_record> jobs;
  /// Absolute time of `tgs::epoch` (the first submission), when the source has absolute times.
  /// Philly timestamps carry no zone; they are read as civil times on the UTC calendar.
  std::optional<std::chrono::sys_time<tgs::duration>> origin;
  /// The file name (or source label) the trace came from; used in messages.
  std::string source;
  /// What the reader did.
  trace_stats stats;
};

/// What a reader does with a malformed row.
enum class on_malformed : std::uint8_t {
  fail,  ///< throw `trace_error` (the default: nothing is skipped silently)
  skip,  ///< leave the row out, count it and keep the first reasons in `trace_stats`
};

/// What a reader does with a row identical to an earlier one.
enum class duplicate_rule : std::uint8_t {
  keep,  ///< keep it as its own job (the default: two identical Philly rows are two jobs)
  drop,  ///< keep only the first
};

/// Options every reader takes.
struct read_options {
  on_malformed malformed = on_malformed::fail;
  duplicate_rule duplicates = duplicate_rule::keep;
  /// How many skip and drop reasons `trace_stats` keeps.
  std::size_t max_reasons = 5;
};

/// A malformed trace: the message names the file, the line, the field (CSV column or JSON path
/// such as `[12].attempts[0].start_time`) and what was expected.
///
/// ```text
/// jobs.csv:17: column "duration": expected a non-negative number of seconds, got "-5"
/// ```
class trace_error : public std::runtime_error {
 public:
  trace_error(std::string file, std::size_t line, const std::string& message);

  /// The file (or source label) being read.
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The 1-based line of the problem; 0 when it concerns the whole file (cannot open it).
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

 private:
  std::string file_;
  std::size_t line_;
};

/// Sorts `jobs` by submission (stable), makes submissions relative to the first one and numbers
/// the jobs. Readers and the generator call it last; callers that build traces by hand may too.
///
/// ```cpp
/// tgs::traces::trace t;
/// t.jobs = std::move(records);  // submit times relative to any common reference
/// tgs::traces::normalise(t);    // now sorted, first submit == tgs::epoch, ids 0..n-1
/// ```
void normalise(trace& t);

}  // namespace tgs::traces
