// SPDX-License-Identifier: Apache-2.0
/// @file
/// Reader of the Philly JSON traces: the raw `cluster_job_log` and the pass-attempts subset.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "json.hpp"
#include "text.hpp"
#include "tgs/traces/readers.hpp"

namespace tgs::traces {
namespace {

using detail::json_value;
using kind = json_value::kind;

/// Which of the two Philly JSON shapes a document has.
enum class philly_shape : std::uint8_t { cluster_job_log, pass_attempts };

/// Checks one job object and turns it into a record, naming the JSON path in every error.
class job_reader {
 public:
  job_reader(std::string_view source, philly_shape shape) : source_(source), shape_(shape) {}

  /// The job at `[index]`. Returns false with `drop_reason` set when the stated rules leave the
  /// job out (it never ran, or it holds no GPU).
  bool read(const json_value& job, std::size_t index, job_record& out,
            std::chrono::sys_seconds& submitted, std::string& drop_reason) const {
    const std::string path = fmt::format("[{}]", index);
    if (job.type != kind::object) fail(job, path, "a job object", describe(job.type));
    out.source_line = job.line;
    const bool raw = shape_ == philly_shape::cluster_job_log;
    out.name = string_member(job, path, raw ? "jobid" : "id");
    if (out.name.empty())
      fail(*job.find(raw ? "jobid" : "id"), path + (raw ? ".jobid" : ".id"), "a non-empty job id",
           "an empty string");
    submitted = time_member(job, path, "submitted_time");

    std::uint32_t listed_gpus = 0;
    std::optional<double> runtime_minutes;
    if (raw) {
      out.vc = string_member(job, path, "vc");
      const std::string status = string_member(job, path, "status");
      if (status == "Pass") {
        out.outcome = job_outcome::passed;
      } else if (status == "Killed") {
        out.outcome = job_outcome::killed;
      } else if (status == "Failed") {
        out.outcome = job_outcome::failed;
      } else {
        fail(*job.find("status"), path + ".status", "\"Pass\", \"Killed\" or \"Failed\"",
             detail::quote(status));
      }
      if (const json_value* user = job.find("user");
          user != nullptr && user->type != kind::string && user->type != kind::null) {
        fail(*user, path + ".user", "a string or null", describe(user->type));
      }
    } else {
      // The subset keeps only jobs whose status was Pass (its filter_jobs), so it says so.
      out.outcome = job_outcome::passed;
      const json_value& gpus = member(job, path, "num_gpus");
      out.gpus = positive_int(gpus, path + ".num_gpus");
      const json_value& rt = member(job, path, "runtime");
      if (rt.type != kind::number || rt.number < 0 || rt.number > detail::max_seconds / 60) {
        fail(rt, path + ".runtime", "a number of minutes in [0, 1.6e7]", shown(rt));
      }
      runtime_minutes = rt.number;
    }

    const json_value& attempts = member(job, path, "attempts");
    const std::string apath = path + ".attempts";
    if (attempts.type != kind::array) fail(attempts, apath, "an array", describe(attempts.type));
    out.attempts = static_cast<std::uint32_t>(
        std::min<std::size_t>(attempts.items.size(), std::numeric_limits<std::uint32_t>::max()));
    tgs::duration run{};
    std::size_t complete = 0;
    bool all_complete = true;
    std::optional<std::chrono::sys_seconds> first_start;
    std::optional<std::chrono::sys_seconds> last_end;
    for (std::size_t a = 0; a < attempts.items.size(); ++a) {
      const json_value& att = attempts.items[a];
      const std::string p = fmt::format("{}[{}]", apath, a);
      if (att.type != kind::object) fail(att, p, "an attempt object", describe(att.type));
      const auto start = optional_time(att, p, "start_time");
      const auto end = optional_time(att, p, "end_time");
      if (start && (!first_start || *start < *first_start)) first_start = start;
      if (end && (!last_end || *end > *last_end)) last_end = end;
      if (start && end) {
        if (*end < *start) {
          fail(*att.find("end_time"), p + ".end_time", "an end_time not before start_time",
               detail::quote(detail::format_civil_time(*end)));
        }
        run += *end - *start;
        ++complete;
      } else {
        all_complete = false;
      }
      if (raw) listed_gpus = std::max(listed_gpus, attempt_gpus(att, p));
    }
    if (raw) out.gpus = listed_gpus;
    if (runtime_minutes && all_complete && first_start && last_end) {
      // `runtime` is last end minus first start in minutes, rounded in the file to 0.01 min
      // (0.6 s); a wider gap means the record contradicts itself.
      const double span = tgs::to_seconds(*last_end - *first_start);
      if (std::abs(*runtime_minutes * 60 - span) > 1.0) {
        fail(*job.find("runtime"), path + ".runtime",
             fmt::format("{} minutes (last end_time - first start_time)", span / 60),
             shown(*job.find("runtime")));
      }
    }
    if (complete == 0) {
      drop_reason = fmt::format("{}:{}: {}: dropped: no attempt has both start_time and end_time",
                                source_, job.line, path);
      return false;
    }
    if (out.gpus == 0) {
      drop_reason = fmt::format("{}:{}: {}: dropped: no GPU listed in any attempt's detail",
                                source_, job.line, path);
      return false;
    }
    out.run_time = run;
    if (first_start && *first_start >= submitted) out.queueing_delay = *first_start - submitted;
    return true;
  }

 private:
  [[noreturn]] void fail(const json_value& at, const std::string& path, std::string_view expected,
                         std::string_view got) const {
    throw trace_error(std::string{source_}, at.line,
                      fmt::format("{}: expected {}, got {}", path, expected, got));
  }

  static std::string shown(const json_value& v) {
    if (v.type == kind::number) return v.text;
    if (v.type == kind::string) return detail::quote(v.text);
    return std::string{describe(v.type)};
  }

  const json_value& member(const json_value& obj, const std::string& path,
                           std::string_view key) const {
    const json_value* v = obj.find(key);
    if (v == nullptr) {
      throw trace_error(std::string{source_}, obj.line,
                        fmt::format("{}: expected a member \"{}\", got none", path, key));
    }
    return *v;
  }

  std::string string_member(const json_value& obj, const std::string& path,
                            std::string_view key) const {
    const json_value& v = member(obj, path, key);
    if (v.type != kind::string) {
      fail(v, fmt::format("{}.{}", path, key), "a string", describe(v.type));
    }
    return v.text;
  }

  std::chrono::sys_seconds time_member(const json_value& obj, const std::string& path,
                                       std::string_view key) const {
    const json_value& v = member(obj, path, key);
    const auto t = v.type == kind::string ? detail::parse_civil_time(v.text) : std::nullopt;
    if (!t) fail(v, fmt::format("{}.{}", path, key), "a time \"YYYY-MM-DD HH:MM:SS\"", shown(v));
    return *t;
  }

  /// An attempt time: absent, null, "None" and "" all mean "not recorded" (the raw log has all
  /// three); anything else must be a well-formed time.
  std::optional<std::chrono::sys_seconds> optional_time(const json_value& obj,
                                                        const std::string& path,
                                                        std::string_view key) const {
    const json_value* v = obj.find(key);
    if (v == nullptr || v->type == kind::null) return std::nullopt;
    if (v->type == kind::string && (v->text.empty() || v->text == "None")) return std::nullopt;
    const auto t = v->type == kind::string ? detail::parse_civil_time(v->text) : std::nullopt;
    if (!t) {
      fail(*v, fmt::format("{}.{}", path, key), "a time \"YYYY-MM-DD HH:MM:SS\", null or \"None\"",
           shown(*v));
    }
    return t;
  }

  std::uint32_t positive_int(const json_value& v, const std::string& path) const {
    const auto n = v.type == kind::number ? detail::parse_unsigned(v.text) : std::nullopt;
    if (!n || *n == 0 || *n > 1'000'000) {
      fail(v, path, "a positive integer number of GPUs (at most 1000000)", shown(v));
    }
    return static_cast<std::uint32_t>(*n);
  }

  /// GPUs listed in one attempt's `detail` (machines, each with its `gpus` list).
  std::uint32_t attempt_gpus(const json_value& att, const std::string& path) const {
    const json_value* detail = att.find("detail");
    if (detail == nullptr || detail->type == kind::null) return 0;
    const std::string dpath = path + ".detail";
    if (detail->type != kind::array) fail(*detail, dpath, "an array", describe(detail->type));
    std::size_t total = 0;
    for (std::size_t m = 0; m < detail->items.size(); ++m) {
      const json_value& machine = detail->items[m];
      const std::string mpath = fmt::format("{}[{}]", dpath, m);
      if (machine.type != kind::object) {
        fail(machine, mpath, "a machine object {ip, gpus}", describe(machine.type));
      }
      const json_value& gpus = member(machine, mpath, "gpus");
      if (gpus.type != kind::array) fail(gpus, mpath + ".gpus", "an array", describe(gpus.type));
      for (std::size_t g = 0; g < gpus.items.size(); ++g) {
        if (gpus.items[g].type != kind::string) {
          fail(gpus.items[g], fmt::format("{}.gpus[{}]", mpath, g), "a GPU name string",
               describe(gpus.items[g].type));
        }
      }
      total += gpus.items.size();
    }
    return static_cast<std::uint32_t>(std::min<std::size_t>(total, 1'000'000));
  }

  std::string_view source_;
  philly_shape shape_;
};

}  // namespace

trace parse_philly_json(std::string_view text, std::string_view source,
                        const read_options& options) {
  text = detail::utf8_text(text, source);
  const json_value doc = detail::parse_json(text, source);
  if (doc.type != kind::array) {
    throw trace_error(
        std::string{source}, doc.line,
        fmt::format("expected a top-level array of jobs, got {}", describe(doc.type)));
  }
  trace t;
  t.source = source;
  detail::row_accounting rows{options, t.stats};
  philly_shape shape = philly_shape::cluster_job_log;
  if (!doc.items.empty()) {
    const json_value& first = doc.items.front();
    if (first.type == kind::object && first.find("jobid") != nullptr) {
      shape = philly_shape::cluster_job_log;
    } else if (first.type == kind::object && first.find("id") != nullptr) {
      shape = philly_shape::pass_attempts;
    } else {
      throw trace_error(
          std::string{source}, first.line,
          "[0]: expected a job object with \"jobid\" (cluster_job_log) or \"id\" "
          "(pass-attempts subset), got " +
              std::string{first.type == kind::object ? "neither" : describe(first.type)});
    }
  }
  const job_reader reader{source, shape};
  std::vector<std::chrono::sys_seconds> submitted;
  t.jobs.reserve(doc.items.size());
  submitted.reserve(doc.items.size());
  std::unordered_map<std::string, std::size_t> seen;  // job name -> line of its first record
  for (std::size_t i = 0; i < doc.items.size(); ++i) {
    ++t.stats.rows_read;
    job_record r;
    std::chrono::sys_seconds sub{};
    std::string drop_reason;
    try {
      if (!reader.read(doc.items[i], i, r, sub, drop_reason)) {
        rows.dropped(std::move(drop_reason));
        continue;
      }
    } catch (const trace_error& e) {
      rows.malformed(e);
      continue;
    }
    const auto [it, fresh] = seen.try_emplace(r.name, r.source_line);
    if (!fresh) {
      ++t.stats.duplicates;
      if (options.duplicates == duplicate_rule::drop) {
        rows.dropped(fmt::format("{}:{}: [{}]: dropped: duplicate of the job \"{}\" at line {}",
                                 source, r.source_line, i, r.name, it->second));
        continue;
      }
    }
    t.jobs.push_back(std::move(r));
    submitted.push_back(sub);
  }
  if (!t.jobs.empty()) {
    const auto origin = *std::min_element(submitted.begin(), submitted.end());
    for (std::size_t i = 0; i < t.jobs.size(); ++i)
      t.jobs[i].submit = tgs::epoch + (submitted[i] - origin);
    t.origin = std::chrono::sys_time<tgs::duration>{origin};
  }
  t.stats.rows_kept = t.jobs.size();
  normalise(t);
  return t;
}

}  // namespace tgs::traces
