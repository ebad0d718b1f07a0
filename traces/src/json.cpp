// SPDX-License-Identifier: Apache-2.0
/// @file
/// A strict recursive-descent JSON parser with line tracking and JSON-path error messages.
#include "json.hpp"

#include <fmt/format.h>

#include <algorithm>

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

class parser {
 public:
  parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  json_value document() {
    skip_space();
    json_value v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("end of input after the top-level value");
    return v;
  }

 private:
  struct path_step {
    const std::string* key = nullptr;  // null: an array index
    std::size_t index = 0;
  };

  [[noreturn]] void fail(std::string_view expected) const {
    std::string path;
    for (const path_step& s : path_) {
      if (s.key != nullptr) {
        path += fmt::format(".{}", *s.key);
      } else {
        path += fmt::format("[{}]", s.index);
      }
    }
    if (!path.empty() && path.front() == '.') path.erase(0, 1);
    std::string got;
    if (pos_ >= text_.size()) {
      got = "end of input";
    } else {
      got = quote(text_.substr(pos_, 1));
    }
    throw trace_error(std::string{source_}, line_,
                      fmt::format("{}{}JSON syntax: expected {}, got {}", path,
                                  path.empty() ? "" : ": ", expected, got));
  }

  void skip_space() noexcept {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++line_;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        return;
      }
      ++pos_;
    }
  }

  [[nodiscard]] bool at(char c) const noexcept { return pos_ < text_.size() && text_[pos_] == c; }

  json_value value(std::size_t depth) {
    json_value v;
    v.line = line_;
    if (pos_ >= text_.size()) fail("a value");
    switch (text_[pos_]) {
      case '{':
        if (depth >= max_depth) fail(fmt::format("nesting at most {} deep", max_depth));
        object(v, depth + 1);
        break;
      case '[':
        if (depth >= max_depth) fail(fmt::format("nesting at most {} deep", max_depth));
        array(v, depth + 1);
        break;
      case '"':
        v.type = json_value::kind::string;
        v.text = string();
        break;
      case 't':
        literal("true");
        v.type = json_value::kind::boolean;
        v.boolean = true;
        break;
      case 'f':
        literal("false");
        v.type = json_value::kind::boolean;
        break;
      case 'n':
        literal("null");
        break;
      default:
        number(v);
        break;
    }
    return v;
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("a value");
    pos_ += word.size();
  }

  void number(json_value& v) {
    const std::size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
        ++pos_;
      } else {
        break;
      }
    }
    const std::string_view literal_text = text_.substr(start, pos_ - start);
    const auto parsed = parse_decimal(literal_text);
    if (!parsed) {
      pos_ = start;
      fail("a value (a finite JSON number, string, object, array, true, false or null)");
    }
    v.type = json_value::kind::number;
    v.number = *parsed;
    v.text = literal_text;
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      if (pos_ >= text_.size()) fail("four hex digits after \\u");
      const char c = text_[pos_];
      unsigned d = 0;
      if (c >= '0' && c <= '9') {
        d = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("four hex digits after \\u");
      }
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      // Copy the plain run in one go: most strings have no escapes.
      const std::size_t start = pos_;
      while (pos_ < text_.size()) {
        const auto c = static_cast<unsigned char>(text_[pos_]);
        if (c == '"' || c == '\\' || c < 0x20) break;
        ++pos_;
      }
      out.append(text_.substr(start, pos_ - start));
      if (pos_ >= text_.size()) fail("'\"' closing the string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c != '\\') fail("a string character (control characters must be escaped)");
      ++pos_;
      if (pos_ >= text_.size()) fail("an escape character after '\\'");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a high surrogate before a low one");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("a low surrogate \\uDC00..\\uDFFF");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("a low surrogate \\uDC00..\\uDFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }

  void array(json_value& v, std::size_t depth) {
    v.type = json_value::kind::array;
    ++pos_;
    skip_space();
    if (at(']')) {
      ++pos_;
      return;
    }
    path_.push_back({});
    for (;;) {
      path_.back().index = v.items.size();
      skip_space();
      v.items.push_back(value(depth));
      skip_space();
      if (at(',')) {
        ++pos_;
        continue;
      }
      if (at(']')) {
        ++pos_;
        break;
      }
      fail("',' or ']' after an array element");
    }
    path_.pop_back();
  }

  void object(json_value& v, std::size_t depth) {
    v.type = json_value::kind::object;
    ++pos_;
    skip_space();
    if (at('}')) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      if (!at('"')) fail("'\"' starting a member name");
      std::string key = string();
      skip_space();
      if (!at(':')) fail("':' after a member name");
      ++pos_;
      skip_space();
      v.members.push_back({std::move(key), {}});
      path_.push_back({&v.members.back().key, 0});
      json_value member_value = value(depth);
      path_.pop_back();
      v.members.back().value = std::move(member_value);
      skip_space();
      if (at(',')) {
        ++pos_;
        continue;
      }
      if (at('}')) {
        ++pos_;
        break;
      }
      fail("',' or '}' after an object member");
    }
    check_unique_keys(v);
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
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::vector<path_step> path_;
};

}  // namespace

json_value parse_json(std::string_view text, std::string_view source) {
  return parser{text, source}.document();
}

}  // namespace tgs::traces::detail
