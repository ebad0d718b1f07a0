// SPDX-License-Identifier: Apache-2.0
/// @file
/// Reader of the per-job Philly CSV of the Pollux simulator (`timestamp,duration,num_gpus,
/// gpu_time,cluster`).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

#include "csv.hpp"
#include "text.hpp"
#include "tgs/traces/readers.hpp"

namespace tgs::traces {

trace parse_philly_csv(std::string_view text, std::string_view source,
                       const read_options& options) {
  static constexpr std::array<std::string_view, 5> columns{"timestamp", "duration", "num_gpus",
                                                           "gpu_time", "cluster"};
  text = detail::utf8_text(text, source);
  detail::csv_scanner scan{text, source};
  if (!scan.next_line()) {
    throw trace_error(std::string{source}, 1,
                      "expected the header \"timestamp,duration,num_gpus,gpu_time,cluster\", got "
                      "an empty file");
  }
  const detail::csv_header header{scan, scan.split(), columns, columns};
  const std::size_t c_time = *header.column(0);
  const std::size_t c_duration = *header.column(1);
  const std::size_t c_gpus = *header.column(2);
  const std::size_t c_gpu_time = *header.column(3);
  const std::size_t c_cluster = *header.column(4);

  trace t;
  t.source = source;
  detail::row_accounting rows{options, t.stats};
  // The file has ~42 bytes per row; reserving from the size keeps memory at one allocation.
  t.jobs.reserve(text.size() / 40 + 1);
  std::vector<std::chrono::sys_seconds> submitted;
  submitted.reserve(t.jobs.capacity());
  std::unordered_map<std::string_view, std::size_t> seen;  // row text -> its first line
  seen.reserve(t.jobs.capacity());

  while (scan.next_line()) {
    ++t.stats.rows_read;
    try {
      const auto fields = scan.split();
      const auto bad = [&](std::string_view column, std::string_view expected,
                           std::string_view value) {
        scan.fail(fmt::format("column \"{}\": expected {}, got {}", column, expected,
                              detail::quote(value)));
      };
      if (fields.size() != header.size()) {
        scan.fail(fmt::format("expected {} fields as in the header, got {}", header.size(),
                              fields.size()));
      }
      const auto sub = detail::parse_civil_time(fields[c_time]);
      if (!sub) bad("timestamp", "a time \"YYYY-MM-DD HH:MM:SS\"", fields[c_time]);
      const std::string_view dur_text = fields[c_duration];
      const auto dur = detail::parse_seconds(dur_text);
      if (!dur) {
        bad("duration",
            dur_text.starts_with('-') ? "a non-negative number of seconds"
                                      : "a number of seconds in [0, 1e9] (digits, optional "
                                        "decimals)",
            dur_text);
      }
      const auto gpus = detail::parse_unsigned(fields[c_gpus]);
      if (!gpus || *gpus == 0 || *gpus > 1'000'000) {
        bad("num_gpus", "a positive integer (at most 1000000)", fields[c_gpus]);
      }
      const auto gpu_time = detail::parse_decimal(fields[c_gpu_time]);
      if (!gpu_time || *gpu_time < 0) {
        bad("gpu_time", "a non-negative number of GPU-seconds", fields[c_gpu_time]);
      }
      const double expected_gpu_time = tgs::to_seconds(*dur) * static_cast<double>(*gpus);
      // The column is derived (duration × num_gpus) and holds on every row of the real file; a
      // row where it does not is corrupt.
      if (std::abs(*gpu_time - expected_gpu_time) > 1e-6 * std::max(1.0, expected_gpu_time)) {
        bad("gpu_time", fmt::format("duration x num_gpus = {}", expected_gpu_time),
            fields[c_gpu_time]);
      }
      if (fields[c_cluster].empty()) bad("cluster", "a virtual-cluster name", fields[c_cluster]);

      const auto [it, fresh] = seen.try_emplace(scan.line(), scan.line_number());
      if (!fresh) {
        ++t.stats.duplicates;
        if (options.duplicates == duplicate_rule::drop) {
          rows.dropped(fmt::format("{}:{}: dropped: duplicate of line {}", source,
                                   scan.line_number(), it->second));
          continue;
        }
      }
      job_record r;
      r.run_time = *dur;
      r.gpus = static_cast<std::uint32_t>(*gpus);
      r.vc = fields[c_cluster];
      r.source_line = scan.line_number();
      t.jobs.push_back(std::move(r));
      submitted.push_back(*sub);
    } catch (const trace_error& e) {
      rows.malformed(e);
    }
  }
  if (!t.jobs.empty()) {
    const auto origin = *std::min_element(submitted.begin(), submitted.end());
    for (std::size_t i = 0; i < t.jobs.size(); ++i) {
      t.jobs[i].submit = tgs::epoch + (submitted[i] - origin);
    }
    t.origin = std::chrono::sys_time<tgs::duration>{origin};
  }
  t.stats.rows_kept = t.jobs.size();
  normalise(t);
  return t;
}

}  // namespace tgs::traces
