// SPDX-License-Identifier: Apache-2.0
// Reads the simulator's CSV tables with errors that name file, line, column and expectation.
#include "tgs/sim/catalog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "embedded_data.hpp"

namespace tgs::sim {
namespace {

/// One data row of a small CSV table: comment lines (#) and blank lines are skipped; fields are
/// split on commas (the tables have no quoted fields; a quote is an error).
struct csv_row {
  std::size_t line = 0;
  std::vector<std::string_view> fields;
};

struct csv_table {
  std::string origin;
  std::vector<std::string_view> header;
  std::size_t header_line = 0;
  std::vector<csv_row> rows;
};

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    std::string_view field = line.substr(start, comma == std::string_view::npos ? line.npos : comma - start);
    while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
    while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
    out.push_back(field);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

/// Reads a table whose header is `expected_header`; with `optional_tail` > 0 the header may also
/// end before that many last columns (tables written before those columns existed).
csv_table read_table(std::string_view text, std::string_view origin,
                     const std::vector<std::string_view>& expected_header,
                     std::size_t optional_tail = 0) {
  csv_table table{std::string(origin), {}, 0, {}};
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (line.find('"') != std::string_view::npos) {
      throw input_error(fmt::format("{}:{}: quoted fields are not supported", origin, line_no));
    }
    auto fields = split(line);
    if (table.header.empty()) {
      const std::size_t required = expected_header.size() - optional_tail;
      const bool matches =
          fields == expected_header ||
          (optional_tail > 0 && fields.size() == required &&
           std::equal(fields.begin(), fields.end(), expected_header.begin()));
      if (!matches) {
        std::string want;
        for (auto h : expected_header) want += (want.empty() ? "" : ",") + std::string(h);
        if (optional_tail > 0) want += fmt::format("\" (the last {} optional)", optional_tail);
        else want += "\"";
        throw input_error(fmt::format("{}:{}: expected the header \"{}, got \"{}\"", origin,
                                      line_no, want, line));
      }
      table.header = std::move(fields);
      table.header_line = line_no;
      continue;
    }
    if (fields.size() != table.header.size()) {
      throw input_error(fmt::format("{}:{}: expected {} comma-separated fields, got {}", origin,
                                    line_no, table.header.size(), fields.size()));
    }
    table.rows.push_back({line_no, std::move(fields)});
  }
  if (table.header.empty()) {
    throw input_error(fmt::format("{}: empty table (no header line)", origin));
  }
  return table;
}

[[noreturn]] void bad_field(const csv_table& t, const csv_row& r, std::size_t col,
                            std::string_view expectation) {
  throw input_error(fmt::format("{}:{}: {}: expected {}, got \"{}\"", t.origin, r.line,
                                t.header[col], expectation, r.fields[col]));
}

double number(const csv_table& t, const csv_row& r, std::size_t col, double lo, double hi,
              bool lo_open, std::string_view expectation) {
  const std::string_view s = r.fields[col];
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || ptr != s.data() + s.size() || !std::isfinite(v) ||
      (lo_open ? v <= lo : v < lo) || v > hi) {
    bad_field(t, r, col, expectation);
  }
  return v;
}

int integer(const csv_table& t, const csv_row& r, std::size_t col, int lo, int hi) {
  const std::string_view s = r.fields[col];
  int v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || ptr != s.data() + s.size() || v < lo || v > hi) {
    bad_field(t, r, col, fmt::format("an integer in [{}, {}]", lo, hi));
  }
  return v;
}

std::string name(const csv_table& t, const csv_row& r, std::size_t col) {
  const std::string_view s = r.fields[col];
  const bool ok = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
  if (!ok) bad_field(t, r, col, "a name of lower-case letters, digits, '-', '_' or '.'");
  return std::string(s);
}

}  // namespace

const gpu_profile* catalog::find_gpu(std::string_view n) const noexcept {
  const auto it = std::find_if(gpus.begin(), gpus.end(), [n](const auto& g) { return g.name == n; });
  return it == gpus.end() ? nullptr : &*it;
}

const model_profile* catalog::find_model(std::string_view model, std::string_view gpu) const noexcept {
  const auto it = std::find_if(models.begin(), models.end(), [&](const auto& m) {
    return m.model == model && m.gpu == gpu;
  });
  return it == models.end() ? nullptr : &*it;
}

std::vector<std::string> catalog::model_names(std::string_view gpu) const {
  std::vector<std::string> out;
  for (const auto& m : models) {
    if (m.gpu == gpu) out.push_back(m.model);
  }
  return out;
}

std::vector<gpu_profile> parse_gpus(std::string_view text, std::string_view origin) {
  const auto t = read_table(text, origin,
                            {"gpu", "memory_gib", "host_link_gbps", "mig_slices",
                             "interposer_overhead", "context_switch_us", "gap_exposure", "source"});
  std::vector<gpu_profile> out;
  for (const auto& r : t.rows) {
    gpu_profile g;
    g.name = name(t, r, 0);
    g.memory = from_gib(number(t, r, 1, 0, 1e6, true, "a positive number of GiB"));
    g.host_link_gbps = number(t, r, 2, 0, 1e4, true, "a positive bandwidth in GB/s");
    g.mig_slices = integer(t, r, 3, 0, 64);
    g.contention.interposer_overhead = number(t, r, 4, 0, 1, false, "a fraction in [0, 1]");
    g.contention.context_switch_s = number(t, r, 5, 0, 1e6, false, "microseconds, at least 0") / 1e6;
    g.contention.gap_exposure = number(t, r, 6, 0, 1, false, "a fraction in [0, 1]");
    for (const auto& seen : out) {
      if (seen.name == g.name) {
        throw input_error(fmt::format("{}:{}: gpu \"{}\" appears twice", origin, r.line, g.name));
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<model_profile> parse_models(std::string_view text, std::string_view origin) {
  std::vector<std::string_view> header{"model", "gpu", "batch_size"};
  for (std::size_t f = 0; f < profile_field_count; ++f) {
    header.push_back(to_string(static_cast<profile_field>(f)));
  }
  header.insert(header.end(), {"provenance", "source"});
  const auto t = read_table(text, origin, header);
  std::vector<model_profile> out;
  for (const auto& r : t.rows) {
    model_profile m;
    m.model = name(t, r, 0);
    m.gpu = name(t, r, 1);
    m.batch_size = integer(t, r, 2, 1, 1 << 24);
    m.iteration_time =
        from_seconds(number(t, r, 3, 0, 1e9, true, "a positive time in milliseconds") / 1e3);
    m.busy_fraction = number(t, r, 4, 0, 1, true, "a number in (0, 1]");
    m.kernels_per_iteration = number(t, r, 5, 0, 1e12, false, "a number of kernels, at least 0");
    m.blocks_per_iteration = number(t, r, 6, 0, 1e15, true, "a positive number of thread blocks");
    m.gaps_per_iteration = number(t, r, 7, 0, 1e12, false, "a number of gaps, at least 0");
    m.jitter = number(t, r, 8, 0, 1, false, "a relative standard deviation in [0, 1]");
    m.slice_sensitivity = number(t, r, 9, 0, 1, false, "a number in [0, 1]");
    m.footprint = from_gib(number(t, r, 10, 0, 1e6, true, "a positive number of GiB"));
    m.hot_set = from_gib(number(t, r, 11, 0, 1e6, false, "a number of GiB, at least 0"));
    const std::string_view letters = r.fields[12];
    if (letters.size() != profile_field_count ||
        letters.find_first_not_of("mpef") != std::string_view::npos) {
      bad_field(t, r, 12,
                fmt::format("{} letters, one per field from iteration_ms to hot_gib: m (measured), "
                            "p (paper), e (estimate) or f (fitted)",
                            profile_field_count));
    }
    for (std::size_t f = 0; f < profile_field_count; ++f) {
      m.origin[f] = letters[f] == 'm'   ? provenance::measured
                    : letters[f] == 'p' ? provenance::paper
                    : letters[f] == 'e' ? provenance::estimate
                                        : provenance::fitted;
    }
    m.source = std::string(r.fields[13]);
    for (const auto& seen : out) {
      if (seen.model == m.model && seen.gpu == m.gpu) {
        throw input_error(fmt::format("{}:{}: model \"{}\" on \"{}\" appears twice", origin,
                                      r.line, m.model, m.gpu));
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<measured_pair> parse_measurements(std::string_view text, std::string_view origin) {
  const auto t = read_table(text, origin,
                            {"scenario", "gpu", "production_model", "opportunistic_model",
                             "policy", "memory_policy", "budget_gib", "production_idle",
                             "settings", "production", "opportunistic", "runs", "source",
                             "production_alone_it_per_s", "opportunistic_alone_it_per_s"},
                            2);
  std::vector<measured_pair> out;
  auto optional_number = [&](const csv_row& r, std::size_t col) -> std::optional<double> {
    if (r.fields[col].empty()) return std::nullopt;
    return number(t, r, col, 0, 2, false, "a normalized throughput in [0, 2], or nothing");
  };
  for (const auto& r : t.rows) {
    measured_pair p;
    p.scenario = name(t, r, 0);
    p.gpu = name(t, r, 1);
    p.production_model = name(t, r, 2);
    if (!r.fields[3].empty()) p.opportunistic_model = name(t, r, 3);
    p.policy = name(t, r, 4);
    if (!r.fields[5].empty()) p.memory_policy = name(t, r, 5);
    if (!r.fields[6].empty()) {
      p.memory_budget = from_gib(number(t, r, 6, 0, 1e6, true, "a positive number of GiB, or nothing"));
    }
    p.production_idle = integer(t, r, 7, 0, 1) == 1;
    std::string_view settings = r.fields[8];
    while (!settings.empty()) {
      const std::size_t space = settings.find(' ');
      const std::string_view item = settings.substr(0, space);
      settings = space == std::string_view::npos ? std::string_view{} : settings.substr(space + 1);
      if (item.empty()) continue;
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
        bad_field(t, r, 8, "space-separated policy.setting=value items");
      }
      p.settings.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
    p.production = optional_number(r, 9);
    p.opportunistic = optional_number(r, 10);
    if (!p.production && !p.opportunistic) bad_field(t, r, 9, "at least one measured throughput");
    if (p.opportunistic && p.opportunistic_model.empty()) {
      bad_field(t, r, 10, "nothing: the row names no opportunistic model");
    }
    p.runs = r.fields[11].empty() ? 0 : integer(t, r, 11, 0, 1000000);
    p.source = std::string(r.fields[12]);
    if (r.fields.size() > 14) {
      auto alone_rate = [&](std::size_t col) -> std::optional<double> {
        if (r.fields[col].empty()) return std::nullopt;
        return number(t, r, col, 0, 1e6, true, "iterations per second above 0, or nothing");
      };
      p.production_alone_rate = alone_rate(13);
      p.opportunistic_alone_rate = alone_rate(14);
      if (p.opportunistic_alone_rate && p.opportunistic_model.empty()) {
        bad_field(t, r, 14, "nothing: the row names no opportunistic model");
      }
    }
    p.origin = fmt::format("{}:{}", origin, r.line);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<job_facts> parse_job_facts(std::string_view text, std::string_view origin) {
  const auto t = read_table(text, origin,
                            {"model", "gpu", "production_gpu_wait", "production_gpu_wait_source",
                             "opportunistic_longest_span_ms", "opportunistic_longest_span_source"});
  std::vector<job_facts> out;
  // A value and its source come together: a number nobody can trace is not a measurement.
  auto paired = [&](const csv_row& r, std::size_t value, std::size_t source) {
    if (r.fields[value].empty() != r.fields[source].empty()) {
      bad_field(t, r, r.fields[value].empty() ? value : source, "a value and its source, or neither");
    }
    return !r.fields[value].empty();
  };
  for (const auto& r : t.rows) {
    job_facts f;
    f.model = name(t, r, 0);
    f.gpu = name(t, r, 1);
    if (paired(r, 2, 3)) {
      f.production_gpu_wait = number(t, r, 2, 0, 1, false, "a fraction in [0, 1], or nothing");
      f.production_gpu_wait_source = std::string(r.fields[3]);
    }
    if (paired(r, 4, 5)) {
      f.opportunistic_longest_span =
          from_seconds(number(t, r, 4, 0, 3.6e6, true, "milliseconds above 0, at most an hour, or nothing") / 1e3);
      f.opportunistic_longest_span_source = std::string(r.fields[5]);
    }
    if (!f.production_gpu_wait && !f.opportunistic_longest_span) {
      bad_field(t, r, 2, "at least one measured fact");
    }
    for (const auto& seen : out) {
      if (seen.model == f.model && seen.gpu == f.gpu) {
        throw input_error(fmt::format("{}:{}: model \"{}\" on \"{}\" appears twice", origin, r.line, f.model, f.gpu));
      }
    }
    f.origin = fmt::format("{}:{}", origin, r.line);
    out.push_back(std::move(f));
  }
  return out;
}

std::uint64_t catalog_inputs::hash() const noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  for (const std::string* text : {&gpus, &models, &measurements}) {
    for (const char c : *text) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ULL;
    }
    h ^= 0xff;  // a separator, so moving text between tables changes the hash
    h *= 1099511628211ULL;
  }
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(fmt::format("{}: cannot open file", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw input_error(fmt::format("{}: read error", path));
  return s.str();
}

catalog load_catalog(const catalog_sources& sources, catalog_inputs* inputs) {
  auto text = [](const std::string& path, std::string_view fallback) {
    return path.empty() ? std::string(fallback) : read_file(path);
  };
  auto origin = [](const std::string& path, std::string_view fallback) {
    return path.empty() ? std::string(fallback) : path;
  };
  catalog_inputs read;
  read.gpus = text(sources.gpus, embedded::gpus_csv);
  read.models = text(sources.models, embedded::models_csv);
  catalog c;
  c.gpus = parse_gpus(read.gpus, origin(sources.gpus, "gpus.csv"));
  c.models = parse_models(read.models, origin(sources.models, "models.csv"));
  if (sources.measurements.empty()) {
    read.measurements = std::string(embedded::paper_pairs_csv) + std::string(embedded::measured_pairs_csv);
    c.measurements = parse_measurements(embedded::paper_pairs_csv, "paper_pairs.csv");
    auto ours = parse_measurements(embedded::measured_pairs_csv, "measured_pairs.csv");
    c.measurements.insert(c.measurements.end(), ours.begin(), ours.end());
  } else {
    read.measurements = read_file(sources.measurements);
    c.measurements = parse_measurements(read.measurements, sources.measurements);
  }
  for (const auto& m : c.models) {
    if (c.find_gpu(m.gpu) == nullptr) {
      throw input_error(fmt::format("model \"{}\" names unknown gpu \"{}\"", m.model, m.gpu));
    }
  }
  // The facts are not fitted and not in `inputs`: the fit cache stays valid when they change.
  for (const job_facts& f : parse_job_facts(embedded::job_facts_csv, "job_facts.csv")) {
    const auto it = std::find_if(c.models.begin(), c.models.end(),
                                 [&](const model_profile& m) { return m.model == f.model && m.gpu == f.gpu; });
    if (it == c.models.end()) continue;
    it->production_gpu_wait = f.production_gpu_wait;
    it->production_gpu_wait_source = f.production_gpu_wait_source;
    it->opportunistic_longest_span = f.opportunistic_longest_span;
    it->opportunistic_longest_span_source = f.opportunistic_longest_span_source;
  }
  for (const auto& p : c.measurements) {
    if (c.find_gpu(p.gpu) == nullptr) {
      throw input_error(fmt::format("{}: unknown gpu \"{}\"", p.origin, p.gpu));
    }
    for (const auto& model : {p.production_model, p.opportunistic_model}) {
      if (!model.empty() && c.find_model(model, p.gpu) == nullptr) {
        throw input_error(fmt::format("{}: no profile for model \"{}\" on gpu \"{}\"", p.origin,
                                      model, p.gpu));
      }
    }
  }
  if (inputs != nullptr) *inputs = std::move(read);
  return c;
}

}  // namespace tgs::sim
