// SPDX-License-Identifier: Apache-2.0
// Traces from Python: the library's readers (every registered format, from a file or a string),
// the jobs as numpy columns, and the tgs job-stream writer.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "common.hpp"
#include "python_trace.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/traces/readers.hpp"

namespace tgs::python {
namespace {

traces::trace_format format_of(const std::string& name) {
  sim::check_member("format", name, sim::trace_format_names());
  return *traces::parse_trace_format(name);
}

traces::read_options read_options_of(bool skip_malformed, bool drop_duplicates) {
  traces::read_options options;
  if (skip_malformed) options.malformed = traces::on_malformed::skip;
  if (drop_duplicates) options.duplicates = traces::duplicate_rule::drop;
  return options;
}

py::dict stats_dict(const traces::trace_stats& s) {
  py::dict out;
  out["rows_read"] = s.rows_read;
  out["rows_kept"] = s.rows_kept;
  out["rows_dropped"] = s.rows_dropped;
  out["rows_skipped"] = s.rows_skipped;
  out["duplicates"] = s.duplicates;
  out["skip_reasons"] = s.skip_reasons;
  out["drop_reasons"] = s.drop_reasons;
  return out;
}

std::optional<double> seconds_of(const std::optional<duration>& d) {
  return d ? std::optional<double>(to_seconds(*d)) : std::nullopt;
}

template <typename T>
std::optional<double> number_of(const std::optional<T>& v) {
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

py::dict jobs_dict(const traces::trace& t) {
  std::vector<std::int64_t> id, gpus, attempts, line;
  std::vector<std::string> name, cls, model, vc, outcome;
  std::vector<double> submit, run, iterations, batch, queueing;
  for (const auto& j : t.jobs) {
    id.push_back(static_cast<std::int64_t>(j.id));
    name.push_back(j.name);
    submit.push_back(to_seconds(j.submit - epoch));
    run.push_back(or_nan(seconds_of(j.run_time)));
    gpus.push_back(j.gpus);
    cls.emplace_back(j.priority ? to_string(*j.priority) : "");
    model.push_back(j.model.value_or(""));
    batch.push_back(or_nan(number_of(j.batch_size)));
    iterations.push_back(or_nan(number_of(j.iterations)));
    vc.push_back(j.vc);
    attempts.push_back(j.attempts);
    queueing.push_back(or_nan(seconds_of(j.queueing_delay)));
    outcome.emplace_back(!j.outcome                                  ? ""
                         : *j.outcome == traces::job_outcome::passed ? "passed"
                         : *j.outcome == traces::job_outcome::killed ? "killed"
                                                                     : "failed");
    line.push_back(static_cast<std::int64_t>(j.source_line));
  }
  py::dict out;
  out["id"] = int_column(id);
  out["name"] = text_column(name);
  out["submit_s"] = float_column(submit);
  out["duration_s"] = float_column(run);
  out["gpus"] = int_column(gpus);
  out["class"] = text_column(cls);
  out["model"] = text_column(model);
  out["batch_size"] = float_column(batch);
  out["iterations"] = float_column(iterations);
  out["vc"] = text_column(vc);
  out["attempts"] = int_column(attempts);
  out["queueing_delay_s"] = float_column(queueing);
  out["outcome"] = text_column(outcome);
  out["source_line"] = int_column(line);
  return out;
}

py::object origin_text(const traces::trace& t) {
  if (!t.origin) return py::none();
  return py::str(
      fmt::format("{:%Y-%m-%d %H:%M:%S}", std::chrono::floor<std::chrono::seconds>(*t.origin)));
}

}  // namespace

void define_traces(py::module_& m) {
  py::class_<python_trace>(m, "Trace", R"(A job stream as the simulator reads it: jobs sorted by
submission, each with its GPUs, run time or iterations and, where known, class and model.

Made by tgs.read_trace (a file), tgs.parse_trace (a string) or tgs.make_trace (Python lists or a
pandas DataFrame); tgs.replay runs it.)")
      .def_property_readonly(
          "source", [](const python_trace& t) { return t.value->source; },
          "The file name (or label) the trace came from; messages name it.")
      .def_property_readonly(
          "origin", [](const python_trace& t) { return origin_text(*t.value); },
          "The absolute time of submit_s = 0 (UTC, \"YYYY-MM-DD HH:MM:SS\"), or None.")
      .def_property_readonly(
          "stats", [](const python_trace& t) { return stats_dict(t.value->stats); },
          "What the reader did: rows read, kept, dropped by the format's rules, skipped.")
      .def_property_readonly(
          "jobs", [](const python_trace& t) { return jobs_dict(*t.value); },
          R"(The jobs as numpy columns (pandas.DataFrame(trace.jobs) makes a table): id,
name, submit_s, duration_s, gpus, class, model, batch_size, iterations, vc, attempts,
queueing_delay_s, outcome, source_line; NaN or "" where the trace does not say.)")
      .def("__len__", [](const python_trace& t) { return t.value->jobs.size(); })
      .def("__repr__", [](const python_trace& t) {
        return fmt::format("<tgs.Trace {}: {} jobs>", t.value->source, t.value->jobs.size());
      });

  m.def(
      "trace_formats",
      [] {
        py::list out;
        for (const auto& f : traces::trace_formats()) {
          py::dict d;
          d["name"] = std::string(f.name);
          d["description"] = std::string(f.description);
          std::vector<std::string> aliases(f.aliases.begin(), f.aliases.end());
          d["aliases"] = aliases;
          out.append(d);
        }
        return out;
      },
      "The trace formats the readers know: name, description, aliases (the registry tgs-sim's "
      "--trace-format takes its names from).");

  m.def(
      "read_trace",
      [](const std::filesystem::path& path, const std::optional<std::string>& format,
         bool skip_malformed, bool drop_duplicates) {
        const traces::trace_format f =
            format_of(sim::trace_format_for(path.string(), format.value_or("")));
        auto t = std::make_shared<traces::trace>();
        {
          py::gil_scoped_release unlocked;
          *t = traces::read_trace(path, f, read_options_of(skip_malformed, drop_duplicates));
        }
        return python_trace{t};
      },
      py::arg("path"), py::kw_only(), py::arg("format") = py::none(),
      py::arg("skip_malformed") = false, py::arg("drop_duplicates") = false,
      R"(Reads a trace file with the library's reader for `format` (a name or alias of
tgs.trace_formats(); default: from the file name, .json: philly-json, else philly-csv). A
malformed file raises tgs.TraceError naming the file and line, unless skip_malformed (then the
rows are counted in trace.stats). drop_duplicates keeps only the first of identical rows.)");

  m.def(
      "parse_trace",
      [](const std::string& text, const std::string& format, const std::string& source,
         bool skip_malformed, bool drop_duplicates) {
        const traces::trace_format f = format_of(format);
        auto t = std::make_shared<traces::trace>();
        {
          py::gil_scoped_release unlocked;
          *t = traces::parse_trace(text, f, source,
                                   read_options_of(skip_malformed, drop_duplicates));
        }
        return python_trace{t};
      },
      py::arg("text"), py::arg("format"), py::kw_only(), py::arg("source") = "<string>",
      py::arg("skip_malformed") = false, py::arg("drop_duplicates") = false,
      "Parses a trace held in a string; `source` names it in messages.");

  m.def(
      "write_trace",
      [](const python_trace& t, const std::optional<std::filesystem::path>& path) -> py::object {
        std::ostringstream text;
        traces::write_tgs_csv(text, *t.value);
        if (!path) return py::str(text.str());
        std::ofstream out(*path, std::ios::binary);
        out << text.str();
        if (!out) fail(fmt::format("write_trace: cannot write \"{}\"", path->string()));
        return py::none();
      },
      py::arg("trace"), py::arg("path") = py::none(),
      "Writes the trace as a tgs job-stream CSV (tgs-csv) to `path`, or returns the text.");
}

}  // namespace tgs::python
