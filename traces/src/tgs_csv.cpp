// SPDX-License-Identifier: Apache-2.0
/// @file
/// Reader and writer of tgs's own job-stream CSV, the format tgs tools exchange job streams in.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <array>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <unordered_map>

#include "csv.hpp"
#include "text.hpp"
#include "tgs/traces/readers.hpp"

namespace tgs::traces {
namespace {

enum column : std::size_t {
  c_submit,
  c_gpus,
  c_duration,
  c_iterations,
  c_name,
  c_class,
  c_model,
  c_batch,
  c_vc,
  column_count
};
constexpr std::array<std::string_view, column_count> columns{
    "submit_s", "gpus", "duration_s", "iterations", "name", "class", "model", "batch_size", "vc"};
constexpr std::array<std::string_view, 2> required{"submit_s", "gpus"};
constexpr std::string_view origin_prefix = "# origin: ";

/// Quotes a field when reading it back unquoted would change it (RFC 4180): a comma or a quote
/// inside, or a carriage return, which the reader strips from the end of a line.
std::string csv_field(std::string_view v) {
  if (v.find('\n') != std::string_view::npos) {
    // The format keeps one job per line; a reader could not tell the break from a row end.
    throw std::invalid_argument(
        fmt::format("write_tgs_csv: a field cannot hold a line break: {}", detail::quote(v)));
  }
  if (v.find_first_of(",\"\r") == std::string_view::npos) return std::string{v};
  std::string out = "\"";
  for (const char c : v) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace

trace parse_tgs_csv(std::string_view text, std::string_view source, const read_options& options) {
  text = detail::utf8_text(text, source);
  detail::csv_scanner scan{text, source};
  trace t;
  t.source = source;
  // Leading comment lines; the one starting "# origin: " carries the absolute start time.
  bool have_header = false;
  while (scan.next_line()) {
    const std::string_view l = scan.line();
    if (!l.starts_with('#')) {
      have_header = true;
      break;
    }
    if (l.starts_with(origin_prefix)) {
      const auto o = detail::parse_civil_time(l.substr(origin_prefix.size()));
      if (!o) {
        scan.fail(fmt::format("origin comment: expected \"# origin: YYYY-MM-DD HH:MM:SS\", got {}",
                              detail::quote(l)));
      }
      t.origin = std::chrono::sys_time<tgs::duration>{*o};
    }
  }
  if (!have_header) {
    throw trace_error(std::string{source}, scan.line_number() + (text.empty() ? 1 : 0),
                      "expected a header naming the columns (at least \"submit_s,gpus\"), got "
                      "none");
  }
  const detail::csv_header header{scan, scan.split(), columns, required};
  if (!header.column(c_duration) && !header.column(c_iterations)) {
    scan.fail(
        "header: expected a column \"duration_s\" or \"iterations\" (a job needs one), got "
        "neither");
  }

  detail::row_accounting rows{options, t.stats};
  std::unordered_map<std::string_view, std::size_t> seen;
  while (scan.next_line()) {
    if (scan.line().starts_with('#')) continue;  // a comment is not a row
    ++t.stats.rows_read;
    try {
      const auto fields = scan.split();
      if (fields.size() != header.size()) {
        scan.fail(fmt::format("expected {} fields as in the header, got {}", header.size(),
                              fields.size()));
      }
      const auto cell = [&](column c) -> std::string_view {
        const auto p = header.column(c);
        return p ? fields[*p] : std::string_view{};
      };
      const auto bad = [&](column c, std::string_view expected) {
        scan.fail(fmt::format("column \"{}\": expected {}, got {}", columns[c], expected,
                              detail::quote(cell(c))));
      };
      job_record r;
      r.source_line = scan.line_number();
      const auto sub = detail::parse_seconds(cell(c_submit));
      if (!sub) bad(c_submit, "non-negative seconds since the trace start (at most 1e9)");
      r.submit = tgs::epoch + *sub;
      const auto gpus = detail::parse_unsigned(cell(c_gpus));
      if (!gpus || *gpus == 0 || *gpus > 1'000'000) {
        bad(c_gpus, "a positive integer (at most 1000000)");
      }
      r.gpus = static_cast<std::uint32_t>(*gpus);
      if (!cell(c_duration).empty()) {
        r.run_time = detail::parse_seconds(cell(c_duration));
        if (!r.run_time) bad(c_duration, "a non-negative number of seconds (at most 1e9)");
      }
      if (!cell(c_iterations).empty()) {
        r.iterations = detail::parse_unsigned(cell(c_iterations));
        // As durations are bounded by 1e9 s, so are iteration counts: the simulator's time must
        // hold the job's work.
        if (!r.iterations || *r.iterations == 0 || *r.iterations > 1'000'000'000) {
          bad(c_iterations, "a positive integer (at most 1e9)");
        }
      }
      if (!r.run_time && !r.iterations) {
        scan.fail("expected a value in \"duration_s\" or \"iterations\", got both empty");
      }
      r.name = cell(c_name);
      if (const auto c = cell(c_class); c == "production") {
        r.priority = tgs::job_class::production;
      } else if (c == "opportunistic") {
        r.priority = tgs::job_class::opportunistic;
      } else if (!c.empty()) {
        bad(c_class, "\"production\", \"opportunistic\" or nothing");
      }
      if (!cell(c_model).empty()) r.model = std::string{cell(c_model)};
      if (!cell(c_batch).empty()) {
        const auto b = detail::parse_unsigned(cell(c_batch));
        if (!b || *b == 0 || *b > std::numeric_limits<std::uint32_t>::max()) {
          bad(c_batch, "a positive integer batch size");
        }
        r.batch_size = static_cast<std::uint32_t>(*b);
      }
      r.vc = cell(c_vc);
      const auto [it, fresh] = seen.try_emplace(scan.line(), scan.line_number());
      if (!fresh) {
        ++t.stats.duplicates;
        if (options.duplicates == duplicate_rule::drop) {
          rows.dropped(fmt::format("{}:{}: dropped: duplicate of line {}", source,
                                   scan.line_number(), it->second));
          continue;
        }
      }
      t.jobs.push_back(std::move(r));
    } catch (const trace_error& e) {
      rows.malformed(e);
    }
  }
  t.stats.rows_kept = t.jobs.size();
  normalise(t);
  return t;
}

void write_tgs_csv(std::ostream& out, const trace& t) {
  // Whole seconds go in the comment; the sub-second rest of the origin moves into submit_s, so
  // reading the file back gives the same origin and the same relative submissions.
  tgs::duration shift{};
  if (t.origin) {
    const auto whole = std::chrono::floor<std::chrono::seconds>(*t.origin);
    shift = *t.origin - whole;
    fmt::print(out, "{}{}\n", origin_prefix,
               detail::format_civil_time(std::chrono::sys_seconds{whole.time_since_epoch()}));
  }
  fmt::print(out, "{}\n", fmt::join(columns, ","));
  for (const job_record& j : t.jobs) {
    fmt::print(out, "{},{},{},{},{},{},{},{},{}\n",
               detail::format_seconds(j.submit - tgs::epoch + shift), j.gpus,
               j.run_time ? detail::format_seconds(*j.run_time) : std::string{},
               j.iterations ? fmt::to_string(*j.iterations) : std::string{}, csv_field(j.name),
               j.priority ? tgs::to_string(*j.priority) : std::string_view{},
               j.model ? csv_field(*j.model) : std::string{},
               j.batch_size ? fmt::to_string(*j.batch_size) : std::string{}, csv_field(j.vc));
  }
}

}  // namespace tgs::traces
