// SPDX-License-Identifier: Apache-2.0
/// @file
/// Line scanning, field splitting, header mapping and exact seconds parsing for the CSV readers.
#include "csv.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "text.hpp"

namespace tgs::traces::detail {

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

std::span<const std::string_view> csv_scanner::split() {
  fields_.clear();
  unescaped_.clear();
  const std::string_view l = line_;
  std::size_t i = 0;
  for (;;) {
    if (i < l.size() && l[i] == '"') {
      // A quoted field: "" stands for one quote; the field ends at a lone quote.
      std::string value;
      std::size_t k = i + 1;
      for (;;) {
        if (k >= l.size()) {
          fail(fmt::format("field {}: expected a closing '\"' before the end of the line",
                           fields_.size() + 1));
        }
        if (l[k] == '"') {
          if (k + 1 < l.size() && l[k + 1] == '"') {
            value += '"';
            k += 2;
            continue;
          }
          ++k;
          break;
        }
        value += l[k++];
      }
      if (k < l.size() && l[k] != ',') {
        fail(fmt::format("field {}: expected ',' after the closing quote, got {}",
                         fields_.size() + 1, quote(l.substr(k, 1))));
      }
      unescaped_.push_back(std::move(value));
      fields_.emplace_back(unescaped_.back());
      if (k >= l.size()) break;
      i = k + 1;
      continue;
    }
    const std::size_t comma = l.find(',', i);
    const std::size_t end = comma == std::string_view::npos ? l.size() : comma;
    const std::string_view field = l.substr(i, end - i);
    if (field.find('"') != std::string_view::npos) {
      fail(fmt::format("field {}: expected a quote only around a whole field, got {}",
                       fields_.size() + 1, quote(field)));
    }
    fields_.push_back(field);
    if (comma == std::string_view::npos) break;
    i = comma + 1;
  }
  return fields_;
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
