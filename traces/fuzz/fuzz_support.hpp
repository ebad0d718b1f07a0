// SPDX-License-Identifier: Apache-2.0
/// @file
/// Shared body of the reader fuzzers: parse in both malformed-row modes, accept only
/// `trace_error` as a failure, and check the invariants every successful parse must keep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "tgs/traces/readers.hpp"

namespace tgs::traces::fuzz {

/// Aborts (a finding for libFuzzer) unless `t` keeps the readers' invariants.
inline void check_invariants(const trace& t) {
  for (std::size_t i = 0; i < t.jobs.size(); ++i) {
    const job_record& j = t.jobs[i];
    if (j.id != tgs::job_id(static_cast<std::uint32_t>(i)) || j.gpus == 0 ||
        (!j.run_time && !j.iterations) || (i > 0 && t.jobs[i - 1].submit > j.submit) ||
        (j.run_time && *j.run_time < tgs::duration::zero())) {
      std::abort();
    }
  }
  if (!t.jobs.empty() && t.jobs.front().submit != tgs::epoch) std::abort();
  if (t.stats.rows_kept != t.jobs.size() ||
      t.stats.rows_read != t.stats.rows_kept + t.stats.rows_dropped + t.stats.rows_skipped) {
    std::abort();
  }
}

/// Parses `data` as `format` both ways; returns the strict parse's trace when there is one.
inline void run(const std::uint8_t* data, std::size_t size, trace_format format) {
  const std::string_view text{reinterpret_cast<const char*>(data), size};
  for (const on_malformed mode : {on_malformed::fail, on_malformed::skip}) {
    try {
      const trace t = parse_trace(text, format, "fuzz",
                                  {.malformed = mode, .duplicates = {}, .max_reasons = 3});
      check_invariants(t);
      if (format == trace_format::tgs_csv) {
        // The writer and the reader must agree: what we write reads back to the same jobs.
        std::ostringstream out;
        write_tgs_csv(out, t);
        const trace back = parse_tgs_csv(out.str(), "fuzz-round-trip");
        if (back.jobs.size() != t.jobs.size() || back.origin != t.origin) std::abort();
        for (std::size_t i = 0; i < t.jobs.size(); ++i) {
          const job_record& a = t.jobs[i];
          const job_record& b = back.jobs[i];
          if (a.submit != b.submit || a.run_time != b.run_time || a.gpus != b.gpus ||
              a.priority != b.priority || a.model != b.model || a.batch_size != b.batch_size ||
              a.iterations != b.iterations || a.vc != b.vc || a.name != b.name) {
            std::abort();
          }
        }
      }
    } catch (const trace_error&) {
      // Malformed input must end here, with a message, and nowhere else.
    }
  }
}

}  // namespace tgs::traces::fuzz
