# SPDX-License-Identifier: Apache-2.0
"""Tests of the container deployment files (deploy/): the Grafana dashboard queries only metrics
tgs-node exports, with the labels it gives them, and shows every kind the issue asks for; the
Containerfile installs the package and starts tgs-node with the class sockets and the CDI spec."""
import argparse
import json
import pathlib
import re
import sys
import unittest

ARGS = None

METRIC = re.compile(r"\btgs_[a-z0-9_]+\b")


def dashboard():
    with open(pathlib.Path(ARGS.deploy) / "grafana-dashboard.json", encoding="utf-8") as f:
        return json.load(f)


def panels(d):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def expressions(d):
    for p in panels(d):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


def exported():
    """Metric name -> label names, from the calls that build tgs-node's snapshot."""
    source = pathlib.Path(ARGS.node_metrics).read_text(encoding="utf-8")
    names = {}
    for m in re.finditer(r'b\.(?:gauge|counter|family)\(\s*"(tgs_[a-z0-9_]+)"', source):
        names.setdefault(m.group(1), set())
    # Labels: the per-job set and the literal {"name", ...} pairs next to each family.
    job_labels = set(re.findall(r'\{"([a-z_]+)", ', source[source.find("const labels jl"):]
                                [:source[source.find("const labels jl"):].find(";")]))
    for name in names:
        if name.startswith("tgs_job_"):
            names[name] = job_labels
    return names, source


class Dashboard(unittest.TestCase):
    def test_is_an_importable_dashboard(self):
        d = dashboard()
        for key in ("uid", "title", "panels", "schemaVersion", "templating"):
            self.assertIn(key, d)
        self.assertEqual([i["name"] for i in d["__inputs"]], ["DS_PROMETHEUS"])
        ids = [p["id"] for p in panels(d)]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        for p in panels(d):
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            if p["type"] != "row":
                self.assertEqual(p["datasource"]["uid"], "${DS_PROMETHEUS}", p["title"])
                self.assertTrue(p.get("targets"), p["title"])

    def test_queries_only_what_tgs_node_exports(self):
        names, _ = exported()
        self.assertIn("tgs_job_throttled_seconds_total", names, "the source parser found no families")
        used = set()
        for title, expr in expressions(dashboard()):
            self.assertEqual(expr.count("("), expr.count(")"), f"{title}: {expr}")
            self.assertEqual(expr.count("{"), expr.count("}"), f"{title}: {expr}")
            for metric in METRIC.findall(expr):
                self.assertIn(metric, names, f"{title}: {metric} is not a metric tgs-node exports")
                used.add(metric)
        # The list: per GPU phase, state, budget and production rate; per job rates,
        # throttled time, memory resident and evicted, evictions, restores, denied allocations.
        for wanted in ("tgs_gpu_controller_info", "tgs_gpu_controller_state", "tgs_gpu_opportunistic_budget_blocks",
                       "tgs_gpu_production_blocks_per_second", "tgs_job_launched_blocks_per_second",
                       "tgs_job_throttled_seconds_total", "tgs_job_memory_resident_bytes",
                       "tgs_job_memory_evicted_bytes", "tgs_job_evictions_total", "tgs_job_restores_total",
                       "tgs_job_denied_allocations_total", "tgs_unregistered_process"):
            self.assertIn(wanted, used, f"the dashboard does not show {wanted}")

    def test_legends_name_labels_the_queries_keep(self):
        names, _ = exported()
        for p in panels(dashboard()):
            for t in p.get("targets", []):
                expr, legend = t["expr"], t.get("legendFormat", "")
                kept = re.search(r"\b(?:sum|count|max|min|avg) by \(([^)]*)\)", expr)
                if kept:
                    allowed = {x.strip() for x in kept.group(1).split(",")}
                elif any(m.startswith("tgs_job_") for m in METRIC.findall(expr)):
                    # A job's own labels, and the target label Prometheus adds to every series.
                    allowed = set.union(*(names[m] for m in METRIC.findall(expr) if m.startswith("tgs_job_")))
                    allowed.add("instance")
                else:
                    continue
                for label in re.findall(r"\{\{(\w+)\}\}", legend):
                    self.assertIn(label, allowed, f"{p['title']}: {legend} after {expr}")

    def test_no_label_is_one_prometheus_sets_itself(self):
        names, _ = exported()
        for name, labels in names.items():
            self.assertFalse(labels & {"job", "instance"}, f"{name}: Prometheus renames these to exported_*")


class Containerfile(unittest.TestCase):
    def test_installs_the_package_and_serves_the_class_sockets_and_the_spec(self):
        text = (pathlib.Path(ARGS.deploy) / "Containerfile").read_text(encoding="utf-8")
        self.assertRegex(text, r"(?m)^ARG BASE=\S*debian:12$")
        self.assertRegex(text, r"(?m)^COPY tgs-node_\*\.deb /tmp/$")
        self.assertIn("apt-get install -y --no-install-recommends /tmp/tgs-node_*.deb", text)
        entry = json.loads(re.search(r"(?m)^ENTRYPOINT (\[.*\])$", text).group(1))
        self.assertEqual(entry[:2], ["/bin/sh", "-c"])
        command = re.search(r"exec (/usr/bin/tgs-node .*)$", entry[2]).group(1).split()
        # The fixed flags are the entry point's, so the arguments after the image add to them.
        self.assertEqual(command[-1], '"$@"')
        flags = dict(zip(command[1:-1:2], command[2:-1:2]))
        self.assertEqual(flags, {"--interposer": "/run/tgs/libtgs-intercept.so", "--socket": "/run/tgs/node.sock",
                                 "--class-sockets": "/run/tgs/gpus", "--cdi-spec": "/run/cdi/tgs.json"})
        self.assertIn("/run/tgs/libtgs-intercept.so", entry[2].split(" && exec")[0])
        self.assertEqual(json.loads(re.search(r"(?m)^CMD (\[.*\])$", text).group(1)), [])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--deploy", required=True)
    parser.add_argument("--node-metrics", required=True, help="bindings/cuda/node/node_metrics.cpp")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
