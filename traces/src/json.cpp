// SPDX-License-Identifier: Apache-2.0
/// @file
/// The JSON documents of the readers, parsed by nlohmann::json's SAX parser into a tree whose
/// values know their line, with JSON-path error messages.
#include "json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "text.hpp"
#include "tgs/traces/trace.hpp"

namespace tgs::traces::detail {

const json_value* json_value::find(std::string_view key) const noexcept {
  for (const json_member& m : members) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

std::string_view describe(json_value::kind k) noexcept {
  switch (k) {
    case json_value::kind::null:
      return "null";
    case json_value::kind::boolean:
      return "a boolean";
    case json_value::kind::number:
      return "a number";
    case json_value::kind::string:
      return "a string";
    case json_value::kind::array:
      return "an array";
    case json_value::kind::object:
      return "an object";
  }
  return "a value";
}

namespace {

/// Walks the text for nlohmann's lexer and records the last byte the lexer consumed, so the
/// tree builder can tell the line of each value: the lexer reads at most one byte past a
/// number and none past any other token, and that byte is on the token's line (a newline is
/// counted on the line it ends).
class tracking_iterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  tracking_iterator() = default;
  tracking_iterator(const char* at, const char** last) noexcept : at_(at), last_(last) {}

  reference operator*() const noexcept { return *at_; }
  tracking_iterator& operator++() noexcept {
    *last_ = at_;
    ++at_;
    return *this;
  }
  tracking_iterator operator++(int) noexcept {
    tracking_iterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const tracking_iterator& other) const noexcept { return at_ == other.at_; }

 private:
  const char* at_ = nullptr;
  const char** last_ = nullptr;
};

/// nlohmann's SAX events turned into a `json_value` tree whose values know their line, with
/// the rules the readers rely on that nlohmann leaves to its user: unique member names, a
/// bounded depth, and errors that name the file, the line and the JSON path.
class tree_builder {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  tree_builder(std::string_view text, std::string_view source) noexcept
      : text_(text), source_(source), last_(text.data()), counted_(text.data()) {}

  /// The position the lexer reports to; `tracking_iterator`s write it.
  const char** last_consumed() noexcept { return &last_; }

  json_value take_root() { return std::move(root_); }

  bool null() { return add(leaf(json_value::kind::null)); }
  bool boolean(bool b) {
    json_value v = leaf(json_value::kind::boolean);
    v.boolean = b;
    return add(std::move(v));
  }
  bool number_integer(number_integer_t n) { return add(number(static_cast<double>(n), n)); }
  bool number_unsigned(number_unsigned_t n) { return add(number(static_cast<double>(n), n)); }
  bool number_float(number_float_t n, const string_t& literal) {
    json_value v = leaf(json_value::kind::number);
    v.number = n;
    v.text = literal;
    return add(std::move(v));
  }
  bool string(string_t& s) {
    json_value v = leaf(json_value::kind::string);
    // A copy, not a move: the lexer keeps its buffer's capacity for the next token instead of
    // growing a fresh one a character at a time.
    v.text = s;
    return add(std::move(v));
  }
  bool binary(binary_t& /*unused*/) { return true; }  // JSON text has no binary values

  bool start_object(std::size_t /*unknown*/) { return open(json_value::kind::object); }
  bool key(string_t& k) {
    frames_.back().key = k;
    frames_.back().has_key = true;
    return true;
  }
  bool end_object() {
    check_unique_keys(frames_.back().value);
    return close();
  }
  bool start_array(std::size_t /*unknown*/) { return open(json_value::kind::array); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line L, column
    // C: syntax error while ..."; the line, column and path are told our way, so keep what
    // follows.
    std::string_view what = e.what();
    if (const auto bracket = what.find("] "); what.starts_with('[') && bracket != what.npos) {
      what.remove_prefix(bracket + 2);
    }
    if (what.starts_with("parse error")) {
      if (const auto colon = what.find(": "); colon != what.npos) what.remove_prefix(colon + 2);
    }
    constexpr std::string_view syntax = "syntax error ";
    const bool is_syntax = what.starts_with(syntax);
    if (is_syntax) what.remove_prefix(syntax.size());
    constexpr std::size_t longest = 200;  // "last read" quotes a whole token, maybe megabytes
    fail(fmt::format("JSON {} at column {}: {}{}", is_syntax ? "syntax error" : "error", column(),
                     what.substr(0, longest), what.size() > longest ? "..." : ""));
  }

 private:
  struct frame {
    json_value value;
    /// An object's member name read and its value not yet complete.
    std::string key;
    bool has_key = false;
  };

  /// The line of the byte the lexer consumed last, counted on from the previous call.
  std::size_t line() noexcept {
    for (; counted_ < last_; ++counted_) {
      if (*counted_ == '\n') {
        ++line_;
        line_start_ = counted_ + 1;
      }
    }
    return line_;
  }

  std::size_t column() noexcept {
    (void)line();
    return static_cast<std::size_t>(last_ - line_start_) + 1;
  }

  json_value leaf(json_value::kind k) noexcept {
    json_value v;
    v.type = k;
    v.line = line();
    return v;
  }

  json_value number(double n, auto exact) {
    json_value v = leaf(json_value::kind::number);
    v.number = n;
    v.text = fmt::to_string(exact);  // integers keep every digit: the readers check them
    return v;
  }

  bool add(json_value v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return true;
    }
    frame& parent = frames_.back();
    if (parent.value.type == json_value::kind::array) {
      parent.value.items.push_back(std::move(v));
    } else {
      parent.value.members.push_back({std::move(parent.key), std::move(v)});
      parent.has_key = false;
    }
    return true;
  }

  bool open(json_value::kind k) {
    if (frames_.size() >= max_depth) {
      fail(fmt::format("JSON syntax: expected nesting at most {} deep, got deeper", max_depth));
    }
    frames_.push_back({leaf(k), {}, false});
    return true;
  }

  bool close() {
    json_value done = std::move(frames_.back().value);
    frames_.pop_back();
    return add(std::move(done));
  }

  [[noreturn]] void fail(std::string_view what) {
    // The path of the value being read: the index an array is at, the member an object is in.
    std::string path;
    for (const frame& f : frames_) {
      if (f.value.type == json_value::kind::array) {
        path += fmt::format("[{}]", f.value.items.size());
      } else if (f.has_key) {
        path += fmt::format("{}{}", path.empty() ? "" : ".", f.key);
      }
    }
    throw trace_error(std::string{source_}, line(),
                      fmt::format("{}{}{}", path, path.empty() ? "" : ": ", what));
  }

  void check_unique_keys(const json_value& v) const {
    // Sorting views keeps hostile objects with many keys at O(n log n).
    std::vector<std::string_view> keys;
    keys.reserve(v.members.size());
    for (const json_member& m : v.members) keys.emplace_back(m.key);
    std::sort(keys.begin(), keys.end());
    const auto dup = std::adjacent_find(keys.begin(), keys.end());
    if (dup != keys.end()) {
      throw trace_error(std::string{source_}, v.line,
                        fmt::format("JSON: expected unique member names in the object, got {} "
                                    "twice",
                                    quote(*dup)));
    }
  }

  std::string_view text_;
  std::string_view source_;
  const char* last_;
  const char* counted_;
  const char* line_start_ = text_.data();
  std::size_t line_ = 1;
  std::vector<frame> frames_;
  json_value root_;
};

}  // namespace

json_value parse_json(std::string_view text, std::string_view source) {
  tree_builder builder{text, source};
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  // strict: nothing may follow the top-level value; comments are not JSON.
  nlohmann::json::sax_parse(tracking_iterator{begin, builder.last_consumed()},
                            tracking_iterator{end, builder.last_consumed()}, &builder,
                            nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/false);
  return builder.take_root();
}

}  // namespace tgs::traces::detail
