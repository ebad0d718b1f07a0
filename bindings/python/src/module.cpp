// SPDX-License-Identifier: Apache-2.0
// The extension module `tgs._tgs`: its parts, its exceptions and the registries' names.
#include <pybind11/stl.h>

#include "common.hpp"
#include "tgs/sim/commands.hpp"
#include "tgs/version.hpp"

PYBIND11_MODULE(_tgs, m) {
  namespace py = pybind11;
  using namespace tgs;
  m.doc() =
      "The simulator, trace readers and policies of tgs (transparent GPU sharing); "
      "import it as `tgs`.";
  m.attr("__version__") = TGS_VERSION;
  python::register_errors(m);
  m.def("rate_policies", &sim::registered_rate_policies,
        "The registered rate controllers (sharing policies), in registry order.");
  m.def("memory_policies", &sim::registered_memory_policies,
        "The registered memory policies, in registry order.");
  m.def("default_pair_policies", &sim::default_pair_policies,
        "The policies tgs.pairs compares unless told otherwise (NSDI'23 Figure 5).");
  m.def("default_cluster_policies", &sim::default_cluster_policies,
        "The policies tgs.mixed and tgs.replay compare unless told otherwise (NSDI'23 Figure 6).");
  m.def("baseline_policy", &sim::baseline_policy,
        "The policy cluster runs normalize to; it always runs.");
  python::define_policies(m);
  python::define_traces(m);
  python::define_runs(m);
}
