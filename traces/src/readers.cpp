// SPDX-License-Identifier: Apache-2.0
/// @file
/// The registry of trace formats built from `TGS_TRACE_FORMATS`, name lookup, and the entry
/// points that dispatch to each reader.
#include "tgs/traces/readers.hpp"

#include <array>
#include <initializer_list>
#include <vector>

#include "text.hpp"

namespace tgs::traces {
namespace {

// The aliases of each format, in arrays of static storage that the registry views.
#define TGS_TRACE_FORMAT_ALIASES(enumerator, name, description, reader, ...)        \
  constexpr std::array<std::string_view,                                            \
                       std::initializer_list<std::string_view>{__VA_ARGS__}.size()> \
      enumerator##_aliases{__VA_ARGS__};
TGS_TRACE_FORMATS(TGS_TRACE_FORMAT_ALIASES)
#undef TGS_TRACE_FORMAT_ALIASES

#define TGS_TRACE_FORMAT_INFO(enumerator, name, description, reader, ...) \
  trace_format_info{trace_format::enumerator, name, description, &reader, \
                    std::span<const std::string_view>{enumerator##_aliases}},
constexpr std::array registry{TGS_TRACE_FORMATS(TGS_TRACE_FORMAT_INFO)};
#undef TGS_TRACE_FORMAT_INFO

/// The registry's own rules: enum order, a description, and no name used twice (a name that
/// meant two formats would make the command line ambiguous).
constexpr bool registry_is_consistent() {
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < registry.size(); ++i) {
    const trace_format_info& f = registry[i];
    if (static_cast<std::size_t>(f.format) != i || f.name.empty() || f.description.empty()) {
      return false;
    }
    names.push_back(f.name);
    names.insert(names.end(), f.aliases.begin(), f.aliases.end());
  }
  for (std::size_t a = 0; a < names.size(); ++a) {
    for (std::size_t b = a + 1; b < names.size(); ++b) {
      if (names[a] == names[b]) return false;
    }
  }
  return true;
}
static_assert(
    registry_is_consistent(),
    "TGS_TRACE_FORMATS: a line is out of enum order, has no description, or reuses a name");

}  // namespace

std::span<const trace_format_info> trace_formats() noexcept {
  return registry;
}

const trace_format_info& format_info(trace_format f) noexcept {
  return registry[static_cast<std::size_t>(f)];
}

std::string_view to_string(trace_format f) noexcept {
  return format_info(f).name;
}

std::optional<trace_format> parse_trace_format(std::string_view name) noexcept {
  for (const trace_format_info& f : registry) {
    if (f.name == name) return f.format;
    for (const std::string_view alias : f.aliases) {
      if (alias == name) return f.format;
    }
  }
  return std::nullopt;
}

trace parse_trace(std::string_view text, trace_format format, std::string_view source,
                  const read_options& options) {
  return format_info(format).read(text, source, options);
}

trace read_trace(const std::filesystem::path& path, trace_format format,
                 const read_options& options) {
  const std::string text = detail::read_file(path);
  return parse_trace(text, format, path.string(), options);
}

}  // namespace tgs::traces
