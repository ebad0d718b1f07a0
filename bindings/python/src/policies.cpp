// SPDX-License-Identifier: Apache-2.0
// Any registered rate controller or memory policy, built by name with its settings and stepped
// by hand from Python: observation dict in, decision dict out.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <variant>

#include "common.hpp"
#include "settings.hpp"
#include "tgs/memory/any_memory_policy.hpp"
#include "tgs/rate/any_rate_controller.hpp"
#include "tgs/sim/pairs.hpp"

namespace tgs::python {
namespace {

/// The configuration of `Registry`'s policy `name` with the settings of `settings` (a dict keyed
/// by the policy's setting names, `{"dead-band": 0.05}`); `name` is known.
template <typename Registry>
typename Registry::config config_of(const std::string& name, py::handle settings) {
  typename Registry::configs all;
  if (!settings.is_none()) {
    const py::dict given = to_dict(settings, "settings");
    Registry::for_each_policy([&]<typename P>() {
      if (P::name != name) return;
      for (const auto& [k, value] : given) {
        const std::string key = to_text(k, "settings: a key");
        set_setting<P>(all.template of<P>(), key, value, key);
      }
    });
  }
  return *all.find(name);
}

/// The settings a policy runs with, by setting name, in the flags' units.
template <typename Registry>
py::dict settings_of(const Registry& policy) {
  py::dict out;
  Registry::for_each_policy([&]<typename P>() {
    const auto* cfg = std::get_if<typename P::config>(&policy.settings());
    if (cfg == nullptr || P::name != policy.policy_name()) return;
    for (const auto& s : P::setting_table) {
      std::visit(
          [&](auto member) { out[py::str(std::string(s.flag))] = member_value(*cfg, member); },
          s.member);
    }
  });
  return out;
}

py::dict report_dict(const state_report& report) {
  py::dict out;
  for (const state_field& f : report.fields()) {
    std::visit(
        [&](const auto& v) {
          using T = std::remove_cvref_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>) {
            out[py::str(std::string(f.key))] = py::str(std::string(v));
          } else {
            out[py::str(std::string(f.key))] = v;
          }
        },
        f.value);
  }
  return out;
}

double non_negative_seconds(py::handle value, const std::string& what) {
  const double s = to_double(value, what);
  if (!(s >= 0)) fail(fmt::format("{}: must not be negative, got {}", what, s));
  if (!(s < 9e9)) fail(fmt::format("{}: {} s is beyond 9e9 s", what, s));
  return s;
}

job_activity activity_of(py::handle value, const std::string& what) {
  const py::dict d = to_dict(value, what);
  refuse_unknown_keys(d, what,
                      {"blocks_launched", "launches", "mean_iteration_time_s", "sync_wait_s",
                       "gpu_busy_s", "synced_blocks", "synced_gpu_busy_s", "synced_span_s",
                       "synced_sync_wait_s"});
  job_activity a;
  if (d.contains("blocks_launched")) {
    a.blocks_launched = to_count(d["blocks_launched"], what + ".blocks_launched");
  }
  if (d.contains("launches")) a.launches = to_count(d["launches"], what + ".launches");
  if (d.contains("synced_blocks") && !d["synced_blocks"].is_none()) {
    a.synced_blocks = to_count(d["synced_blocks"], what + ".synced_blocks");
  }
  for (const auto& [key, field] :
       {std::pair{"mean_iteration_time_s", &job_activity::mean_iteration_time},
        std::pair{"sync_wait_s", &job_activity::sync_wait},
        std::pair{"gpu_busy_s", &job_activity::gpu_busy},
        std::pair{"synced_gpu_busy_s", &job_activity::synced_gpu_busy},
        std::pair{"synced_span_s", &job_activity::synced_span},
        std::pair{"synced_sync_wait_s", &job_activity::synced_sync_wait}}) {
    if (d.contains(key) && !d[key].is_none()) {
      a.*field = from_seconds(non_negative_seconds(d[key], what + "." + key));
    }
  }
  return a;
}

rate_observation rate_observation_of(py::handle value) {
  const py::dict d = to_dict(value, "observation");
  refuse_unknown_keys(d, "observation", {"now_s", "window_s", "production", "opportunistic"});
  rate_observation o;
  if (d.contains("now_s")) o.now = instant_of(to_double(d["now_s"], "observation.now_s"));
  if (d.contains("window_s")) {
    o.window = from_seconds(non_negative_seconds(d["window_s"], "observation.window_s"));
  }
  if (d.contains("production") && !d["production"].is_none()) {
    o.production = activity_of(d["production"], "observation.production");
  }
  if (d.contains("opportunistic") && !d["opportunistic"].is_none()) {
    o.opportunistic = activity_of(d["opportunistic"], "observation.opportunistic");
  }
  return o;
}

py::dict share_dict(const gpu_share& share) {
  py::dict out;
  std::visit(
      [&](const auto& s) {
        using T = std::remove_cvref_t<decltype(s)>;
        if constexpr (std::is_same_v<T, time_sliced>) {
          out["kind"] = "time-sliced";
        } else if constexpr (std::is_same_v<T, mps_partition>) {
          out["kind"] = "mps";
          out["production_threads"] = s.production_threads;
          out["opportunistic_threads"] = s.opportunistic_threads;
          out["opportunistic_below_normal"] = s.opportunistic_below_normal;
        } else if constexpr (std::is_same_v<T, mig_partition>) {
          out["kind"] = "mig";
          out["production_slices"] = s.production_slices;
          out["opportunistic_slices"] = s.opportunistic_slices;
          out["total_slices"] = s.total_slices;
        } else {
          static_assert(std::is_same_v<T, exclusive_turn>);
          out["kind"] = "exclusive-turn";
          out["holder"] = std::string(to_string(s.holder));
        }
      },
      share);
  return out;
}

py::dict rate_decision_dict(const rate_decision& d) {
  py::dict out;
  out["share"] = share_dict(d.share);
  out["opportunistic_budget"] = d.opportunistic_budget
                                    ? py::object(py::int_(*d.opportunistic_budget))
                                    : py::object(py::none());
  out["budget_window_s"] = to_seconds(d.budget_window);
  out["revisit_at_s"] = seconds_or_none(d.revisit_at);
  if (d.fill_gaps) {
    out["fill_gaps"] = py::dict("holdoff_s"_a = to_seconds(d.fill_gaps->holdoff),
                                "max_inflight"_a = d.fill_gaps->max_inflight);
  } else {
    out["fill_gaps"] = py::none();
  }
  return out;
}

py::dict traits_dict(const rate_policy_traits& t) {
  py::dict out;
  out["name"] = std::string(t.name);
  out["enforced_by"] = std::string(to_string(t.enforced_by));
  out["mechanism"] = std::string(to_string(t.mechanism));
  out["co_locates"] = t.co_locates;
  out["default_memory_policy"] = std::string(t.default_memory_policy);
  out["adaptive"] = t.adaptive;
  out["fixed_block_budget"] = t.fixed_block_budget;
  return out;
}

/// A rate controller stepped from Python.
class controller {
 public:
  controller(const std::string& name, py::handle settings) : inner_(build(name, settings)) {}

  py::dict step(py::handle observation) {
    return rate_decision_dict(inner_.step(rate_observation_of(observation)));
  }
  [[nodiscard]] py::dict describe() const { return report_dict(inner_.describe()); }
  [[nodiscard]] std::string name() const { return std::string(inner_.policy_name()); }
  [[nodiscard]] py::dict traits() const { return traits_dict(inner_.traits()); }
  [[nodiscard]] py::dict settings() const { return settings_of(inner_); }

 private:
  static any_rate_controller build(const std::string& name, py::handle settings) {
    (void)sim::policy_traits(name);  // an unknown name, worded as the simulator words it
    return any_rate_controller{config_of<any_rate_controller>(name, settings)};
  }
  any_rate_controller inner_;
};

job_memory job_memory_of(py::handle value, const std::string& what) {
  const py::dict d = to_dict(value, what);
  refuse_unknown_keys(d, what, {"allocated_bytes", "resident_bytes"});
  job_memory m;
  if (d.contains("allocated_bytes"))
    m.allocated = bytes{to_count(d["allocated_bytes"], what + ".allocated_bytes")};
  if (d.contains("resident_bytes"))
    m.resident = bytes{to_count(d["resident_bytes"], what + ".resident_bytes")};
  return m;
}

job_class class_of(py::handle value, const std::string& what) {
  const std::string text = to_text(value, what);
  if (text == to_string(job_class::production)) return job_class::production;
  if (text == to_string(job_class::opportunistic)) return job_class::opportunistic;
  fail(fmt::format("{}: expected \"production\" or \"opportunistic\", got \"{}\"", what, text));
}

memory_observation memory_observation_of(py::handle value) {
  const py::dict d = to_dict(value, "observation");
  refuse_unknown_keys(d, "observation",
                      {"now_s", "capacity_bytes", "production", "opportunistic", "request"});
  memory_observation o;
  if (d.contains("now_s")) o.now = instant_of(to_double(d["now_s"], "observation.now_s"));
  if (d.contains("capacity_bytes"))
    o.capacity = bytes{to_count(d["capacity_bytes"], "observation.capacity_bytes")};
  if (d.contains("production") && !d["production"].is_none()) {
    o.production = job_memory_of(d["production"], "observation.production");
  }
  if (d.contains("opportunistic") && !d["opportunistic"].is_none()) {
    o.opportunistic = job_memory_of(d["opportunistic"], "observation.opportunistic");
  }
  if (d.contains("request") && !d["request"].is_none()) {
    const std::string what = "observation.request";
    const py::dict r = to_dict(d["request"], what);
    refuse_unknown_keys(r, what, {"requester", "size_bytes", "movable"});
    allocation_request request;
    if (r.contains("requester")) request.requester = class_of(r["requester"], what + ".requester");
    if (r.contains("size_bytes"))
      request.size = bytes{to_count(r["size_bytes"], what + ".size_bytes")};
    if (r.contains("movable")) request.movable = to_bool(r["movable"], what + ".movable");
    o.request = request;
  }
  return o;
}

py::dict memory_decision_dict(const memory_decision& d) {
  py::dict out;
  out["verdict"] =
      d.verdict ? py::object(py::str(std::string(to_string(*d.verdict)))) : py::object(py::none());
  out["opportunistic_resident_limit_bytes"] =
      d.opportunistic_resident_limit == bytes::max()
          ? py::object(py::none())
          : py::object(py::int_(d.opportunistic_resident_limit.count()));
  out["production_pinned"] = d.production_pinned;
  out["revisit_at_s"] = seconds_or_none(d.revisit_at);
  auto bytes_or_none = [](const std::optional<bytes>& b) {
    return b ? py::object(py::int_(b->count())) : py::object(py::none());
  };
  out["production_view_bytes"] = bytes_or_none(d.production_view);
  out["opportunistic_view_bytes"] = bytes_or_none(d.opportunistic_view);
  return out;
}

/// A memory policy stepped from Python.
class memory_policy {
 public:
  memory_policy(const std::string& name, py::handle settings) : inner_(build(name, settings)) {}

  [[nodiscard]] py::dict step(py::handle observation) const {
    return memory_decision_dict(inner_.step(memory_observation_of(observation)));
  }
  /// The policy's state report where it keeps one; today's memory policies step as const and
  /// keep none.
  [[nodiscard]] py::dict describe() const {
    return std::visit(
        [](const auto& m) {
          if constexpr (requires { m.describe(); }) {
            return report_dict(m.describe());
          } else {
            return py::dict{};
          }
        },
        inner_.held());
  }
  [[nodiscard]] std::string name() const { return std::string(inner_.policy_name()); }
  [[nodiscard]] py::dict settings() const { return settings_of(inner_); }
  /// How the policy's pages move when the jobs' memory does not fit.
  [[nodiscard]] std::string paging() const {
    switch (*any_memory_policy::paging_of_policy(inner_.policy_name())) {
      case memory_paging::none:
        return "none";
      case memory_paging::driver_demand:
        return "driver-demand";
      case memory_paging::policy_eviction:
        return "policy-eviction";
    }
    return "unknown";
  }

 private:
  static any_memory_policy build(const std::string& name, py::handle settings) {
    (void)make_memory_policy(name);  // an unknown name, worded as the library words it
    return any_memory_policy{config_of<any_memory_policy>(name, settings)};
  }
  any_memory_policy inner_;
};

/// `copy()`, and `copy.copy` and `copy.deepcopy` alike: a fork that steps on its own.
template <typename Policy>
void def_copies(py::class_<Policy>& cls) {
  cls.def(
         "copy", [](const Policy& p) { return Policy(p); }, "A fork: the copy steps on its own.")
      .def("__copy__", [](const Policy& p) { return Policy(p); })
      .def(
          "__deepcopy__", [](const Policy& p, py::handle) { return Policy(p); }, py::arg("memo"));
}

}  // namespace

void define_policies(py::module_& m) {
  py::class_<controller> controllers(m, "Controller",
                                     R"(A rate controller of the registry, stepped by hand.

Controller(name, settings=None): `name` is a registered rate controller (`tgs.rate_policies()`),
`settings` a dict of its settings by name, in the units of tgs-sim's flags (`{"dead-band": 0.05}`
is `--tgs.dead-band 0.05`; durations in ms, byte counts in MiB). Out-of-range settings raise
tgs.ConfigError with the policy's own message.

    c = tgs.Controller("tgs")
    d = c.step({"now_s": 0, "window_s": 0, "production": {"blocks_launched": 0},
                "opportunistic": {"blocks_launched": 0}})
    d["opportunistic_budget"], c.describe()["phase"]   # 0, 'profiling'
)");
  controllers
      .def(py::init<const std::string&, py::handle>(), py::arg("name"),
           py::arg("settings") = py::none())
      .def("step", &controller::step, py::arg("observation"),
           R"(One step. `observation`: {"now_s", "window_s", "production", "opportunistic"}, each
job (or None when absent) {"blocks_launched", "launches", "mean_iteration_time_s", "sync_wait_s",
"gpu_busy_s", "synced_blocks", "synced_gpu_busy_s", "synced_span_s", "synced_sync_wait_s"} (None or
absent: not known).
Returns {"share", "opportunistic_budget" (blocks per budget window; None: unthrottled),
"budget_window_s", "revisit_at_s" (None: only on a job event), "fill_gaps" (None, or
{"holdoff_s", "max_inflight"}: opportunistic launches also pass while the production job leaves
the GPU idle that long)}.)")
      .def("describe", &controller::describe,
           "The controller's state report (what tgs-node status prints).")
      .def_property_readonly("name", &controller::name)
      .def_property_readonly("traits", &controller::traits)
      .def_property_readonly("settings", &controller::settings,
                             "Every setting the controller runs with, in the flags' units.")
      .def("__repr__",
           [](const controller& c) { return fmt::format("tgs.Controller(\"{}\")", c.name()); });
  def_copies(controllers);

  py::class_<memory_policy> memory_policies(m, "MemoryPolicy",
                                            R"(A memory policy of the registry, stepped by hand.

MemoryPolicy(name, settings=None): `name` is a registered memory policy (`tgs.memory_policies()`),
`settings` a dict by setting name in the flags' units (`{"reserve-mib": 512}`).

    m = tgs.MemoryPolicy("hard-limit")
    m.step({"capacity_bytes": 40 << 30, "request": {"requester": "opportunistic",
            "size_bytes": 30 << 30}})["verdict"]
)");
  memory_policies
      .def(py::init<const std::string&, py::handle>(), py::arg("name"),
           py::arg("settings") = py::none())
      .def("step", &memory_policy::step, py::arg("observation"),
           R"(One step. `observation`: {"now_s", "capacity_bytes", "production", "opportunistic",
"request"}; a job (or None) {"allocated_bytes", "resident_bytes"}; a request (or None)
{"requester", "size_bytes", "movable"}. Returns {"verdict" (None without a request),
"opportunistic_resident_limit_bytes" (None: no cap), "production_pinned", "revisit_at_s",
"production_view_bytes", "opportunistic_view_bytes" (the memory each class is told it has; None:
the budget less what the other jobs hold)}.)")
      .def("describe", &memory_policy::describe,
           "The policy's state report ({} for a policy that keeps none).")
      .def_property_readonly("name", &memory_policy::name)
      .def_property_readonly("paging", &memory_policy::paging,
                             "How its pages move when the jobs' memory does not fit: \"none\" "
                             "(refused or limited), \"driver-demand\" (unified memory paged by "
                             "the driver) or \"policy-eviction\" (the opportunistic job's "
                             "evicted to keep the production job's resident).")
      .def_property_readonly("settings", &memory_policy::settings)
      .def("__repr__", [](const memory_policy& p) {
        return fmt::format("tgs.MemoryPolicy(\"{}\")", p.name());
      });
  def_copies(memory_policies);

  m.def(
      "policy_traits",
      [](const std::string& name) { return traits_dict(sim::policy_traits(name)); },
      py::arg("name"), "What a registered rate controller says about itself.");
  m.def("settings", &settings_table,
        R"(Every setting of every registered policy: a list of dicts with "key" (the name runs take,
as tgs-sim's flag without dashes: "tgs.dead-band", "memory.tgs.reserve-mib"), "family", "policy",
"setting" (the name Controller and MemoryPolicy take), "help", "unit", "type", "default".)");
}

}  // namespace tgs::python
