// SPDX-License-Identifier: Apache-2.0
/// @file
/// Line scanning, field splitting, header mapping and exact seconds parsing for the CSV readers.
#include "csv.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <new>

#include "text.hpp"

namespace tgs::traces::detail {

namespace {

/// libcsv's space and line-end tests, both off: a field keeps its spaces (as RFC 4180 says) and
/// a carriage return inside a line stays data, as before libcsv; lines are split here.
int never(unsigned char /*unused*/) {
  return 0;
}

}  // namespace

csv_scanner::csv_scanner(std::string_view text, std::string_view source)
    : text_(text), source_(source) {
  // Strict: a quote inside an unquoted field, or text after a closing quote, is an error;
  // strict at the end: so is a quoted field still open when the line ends.
  if (csv_init(&parser_, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    throw trace_error(std::string{source_}, 0, "cannot set up the CSV parser");
  }
  csv_set_space_func(&parser_, never);
  csv_set_term_func(&parser_, never);
}

csv_scanner::~csv_scanner() {
  csv_free(&parser_);
}

bool csv_scanner::next_line() {
  while (pos_ < text_.size()) {
    const std::size_t nl = text_.find('\n', pos_);
    const std::size_t end = nl == std::string_view::npos ? text_.size() : nl;
    std::string_view l = text_.substr(pos_, end - pos_);
    pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
    line_number_ = next_line_number_++;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank: not a row
    line_ = l;
    return true;
  }
  return false;
}

void csv_scanner::fail(const std::string& message) const {
  throw trace_error(std::string{source_}, line_number_, message);
}

void csv_scanner::on_field(void* cell, std::size_t size, void* self) {
  auto& s = *static_cast<csv_scanner*>(self);
  s.spans_.emplace_back(s.cells_.size(), size);
  if (size > 0) s.cells_.append(static_cast<const char*>(cell), size);
}

std::span<const std::string_view> csv_scanner::split() {
  cells_.clear();
  spans_.clear();
  fields_.clear();
  const std::size_t used = csv_parse(&parser_, line_.data(), line_.size(), on_field, nullptr, this);
  const bool refused = used != line_.size();
  const bool open_quote = !refused && csv_fini(&parser_, on_field, nullptr, this) != 0;
  if (refused || open_quote) {
    // Leave the parser ready for the next line (skipped rows go on): a plain fini resets it.
    csv_set_opts(&parser_, CSV_STRICT);
    (void)csv_fini(&parser_, nullptr, nullptr, nullptr);
    csv_set_opts(&parser_, CSV_STRICT | CSV_STRICT_FINI);
    if (refused && csv_error(&parser_) == CSV_ENOMEM) throw std::bad_alloc{};
    if (refused) fail_quote(used);
    fail(fmt::format("field {}: expected a closing '\"' before the end of the line",
                     spans_.size() + 1));
  }
  fields_.reserve(spans_.size());
  for (const auto& [offset, size] : spans_) fields_.emplace_back(cells_.data() + offset, size);
  return fields_;
}

void csv_scanner::fail_quote(std::size_t at) const {
  const std::string_view l = line_;
  const std::size_t field = spans_.size() + 1;
  if (l[at] != '"') {
    fail(fmt::format("field {}: expected ',' after the closing quote, got {}", field,
                     quote(l.substr(at, 1))));
  }
  // A quote inside an unquoted field: the field has no comma before it, so it starts after the
  // last comma before the quote.
  const std::size_t comma = l.rfind(',', at);
  const std::size_t start = comma == std::string_view::npos ? 0 : comma + 1;
  const std::size_t next = l.find(',', at);
  fail(fmt::format("field {}: expected a quote only around a whole field, got {}", field,
                   quote(l.substr(start, next == std::string_view::npos ? l.npos : next - start))));
}

csv_header::csv_header(const csv_scanner& scanner, std::span<const std::string_view> names,
                       std::span<const std::string_view> known,
                       std::span<const std::string_view> required)
    : positions_(known.size()), size_(names.size()) {
  const auto list = [](std::span<const std::string_view> v) {
    return fmt::format("{}", fmt::join(v, ","));
  };
  for (std::size_t p = 0; p < names.size(); ++p) {
    std::size_t k = 0;
    while (k < known.size() && known[k] != names[p]) ++k;
    if (k == known.size()) {
      scanner.fail(fmt::format("header: expected column names from {}, got {}", list(known),
                               quote(names[p])));
    }
    if (positions_[k]) {
      scanner.fail(fmt::format("header: expected each column once, got {} twice", quote(names[p])));
    }
    positions_[k] = p;
  }
  for (const std::string_view r : required) {
    std::size_t k = 0;
    while (known[k] != r) ++k;
    if (!positions_[k]) {
      scanner.fail(fmt::format("header: expected a column \"{}\" (required: {}), got {}", r,
                               list(required), quote(scanner.line())));
    }
  }
}

std::optional<tgs::duration> parse_seconds(std::string_view s) noexcept {
  std::size_t i = 0;
  std::int64_t whole = 0;
  const auto is_digit = [&](std::size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  if (!is_digit(0)) return std::nullopt;
  while (is_digit(i)) {
    whole = whole * 10 + (s[i] - '0');
    if (whole > static_cast<std::int64_t>(max_seconds)) return std::nullopt;
    ++i;
  }
  std::int64_t nanos = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!is_digit(i)) return std::nullopt;
    std::int64_t scale = 100'000'000;
    bool round_up = false;
    bool first_dropped = true;
    while (is_digit(i)) {
      const int d = s[i] - '0';
      if (scale > 0) {
        nanos += d * scale;
        scale /= 10;
      } else if (first_dropped) {
        round_up = d >= 5;
        first_dropped = false;
      }
      ++i;
    }
    if (round_up) ++nanos;
  }
  if (i != s.size()) return std::nullopt;
  const tgs::duration d = std::chrono::seconds{whole} + tgs::duration{nanos};
  if (d > std::chrono::seconds{static_cast<std::int64_t>(max_seconds)}) return std::nullopt;
  return d;
}

std::string format_seconds(tgs::duration d) {
  const auto whole = std::chrono::floor<std::chrono::seconds>(d);
  const std::int64_t nanos = (d - whole).count();
  if (nanos == 0) return fmt::format("{}", whole.count());
  std::string frac = fmt::format("{:09}", nanos);
  while (frac.back() == '0') frac.pop_back();
  return fmt::format("{}.{}", whole.count(), frac);
}

}  // namespace tgs::traces::detail
