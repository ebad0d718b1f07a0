// SPDX-License-Identifier: Apache-2.0
// Policy settings from Python dicts, and the settings table as Python sees it.
#include "settings.hpp"

#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"

namespace tgs::python {
namespace {

/// Memory policies' settings carry this prefix, as their flags do (`--memory.tgs.reserve-mib`).
constexpr std::string_view memory_prefix = "memory.";

template <typename Registry>
void add_rows(py::list& out, std::string_view family, std::string_view prefix) {
  const typename Registry::configs defaults{};
  Registry::for_each_policy([&]<typename P>() {
    for (const auto& s : P::setting_table) {
      std::visit(
          [&](auto member) {
            using config = typename P::config;
            const auto [unit, type] = unit_and_type<config>(member);
            py::dict row;
            row["key"] = fmt::format("{}{}.{}", prefix, P::name, s.flag);
            row["family"] = family;
            row["policy"] = P::name;
            row["setting"] = s.flag;
            row["help"] = s.help;
            row["unit"] = unit;
            row["type"] = type;
            row["default"] = member_value(defaults.template of<P>(), member);
            out.append(row);
          },
          s.member);
    }
  });
}

}  // namespace

sim::run_settings run_settings_of(py::handle settings) {
  sim::run_settings out;
  if (settings.is_none()) return out;
  const py::dict given = to_dict(settings, "settings");
  for (const auto& [k, value] : given) {
    const std::string key = to_text(k, "settings: a key");
    if (key.starts_with(memory_prefix)) {
      const std::string policy = set_registry_setting<any_memory_policy>(
          out.memory, std::string_view(key).substr(memory_prefix.size()), value, key);
      out.memory_given.push_back({policy, key});
    } else {
      const std::string policy =
          set_registry_setting<any_rate_controller>(out.rate, key, value, key);
      out.rate_given.push_back({policy, key});
    }
  }
  return out;
}

py::list settings_table() {
  py::list out;
  add_rows<any_rate_controller>(out, "rate", "");
  add_rows<any_memory_policy>(out, "memory", memory_prefix);
  return out;
}

}  // namespace tgs::python
