# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/memory.sh's summary (its embedded Python helper), without a GPU: two jobs that append
their result lines at the same moment can leave two records on one line, and the summary must
still count both runs; a line that is not JSON is reported, not fatal; a job that was not ready at
the first window is reported per mode."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "gpu", "memory.sh")


def helper_source() -> str:
    """The helper memory.sh writes to its work folder (the heredoc after `cat > "$helper"`)."""
    with open(SCRIPT) as f:
        text = f.read()
    m = re.search(r"cat > \"\$helper\" <<'PY'\n(.*?)\nPY\n", text, re.S)
    if not m:
        raise AssertionError("memory.sh no longer embeds its helper as a 'PY' heredoc")
    return m.group(1)


def record(label, model, rates, ready_late_s=0.0):
    return json.dumps({"label": label, "model": model, "batch": 32, "it_per_s": rates,
                       "ready_late_s": ready_late_s, "peak_reserved_bytes": 1 << 30})


class MemorySummary(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.d = self.tmp.name
        with open(self.path("memhelper.py"), "w") as f:
            f.write(helper_source())
        self.write("budgets.tsv", "low resnet50 1922 16334 12171 3970 8201\n")
        self.write("footprints.jsonl", '{"model": "resnet50", "peak_reserved_bytes": 2015363072}\n'
                                       '{"model": "dlrm", "peak_reserved_bytes": 17127440384}\n')
        for name in ("exits.tsv", "faults.jsonl", "tgsruns.tsv", "warnings.txt", "samples.jsonl"):
            self.write(name, "")

    def path(self, name):
        return os.path.join(self.d, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)

    def summarize(self, runs_text, **extra_env):
        self.write("runs.jsonl", runs_text)
        env = dict(os.environ, GPU_SCRIPTS=os.path.join(ROOT, "bench", "gpu"), DEVICE="GPU X", DRIVER="1",
                   STARTED="2026-11-25", COMMAND="SCENARIOS=low bench/gpu/memory.sh", WINDOWS="3",
                   WINDOW_S="4", RATIO="1.5", RESERVE_MIB="1024", FREE_MIB="80000", SCENARIO_LIST="low",
                   DLRM_TABLES="8", DLRM_ROWS="2000000", DLRM_DIM="256", DLRM_BAG="32", DLRM_BATCH="2048",
                   DLRM_ZIPF="1.0", RESIDENCY_SPLIT="even", FIXED_MODES="fixed-4000000 4000000 50 0\n",
                   RUNS_FILE=self.path("runs.jsonl"), SAMPLES=self.path("samples.jsonl"),
                   JSON_OUT=self.path("out.json"), EXITS=self.path("exits.tsv"), BUDGETS=self.path("budgets.tsv"),
                   FOOTPRINTS=self.path("footprints.jsonl"), FAULTS=self.path("faults.jsonl"),
                   TGSRUNS=self.path("tgsruns.tsv"), PROBE_LOG=self.path("probe.log"),
                   WARNINGS=self.path("warnings.txt"), **extra_env)
        proc = subprocess.run([sys.executable, self.path("memhelper.py"), "summarize"], env=env,
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.table = proc.stdout
        with open(self.path("out.json")) as f:
            return json.load(f), proc.stderr

    def lines(self):
        return [record("alone/resnet50/1", "resnet50", [40.0, 40.0, 40.0]),
                record("alone/dlrm/1", "dlrm", [200.0, 200.0, 200.0]),
                record("low/fixed-4000000/1/production", "resnet50", [36.0, 36.0, 36.0]),
                record("low/fixed-4000000/1/opportunistic", "dlrm", [120.0, 120.0, 120.0])]

    def test_two_records_on_one_line_both_count(self):
        a, b, p, o = self.lines()
        out, err = self.summarize("\n".join([a, b, p + o, "", ""]) + "\n")
        cell = out["scenarios"]["low"]["modes"]["fixed-4000000"]
        self.assertEqual(cell["runs"], 1)
        self.assertAlmostEqual(cell["production"], 0.9)
        self.assertAlmostEqual(cell["opportunistic"], 0.6)
        self.assertEqual(err, "")

    def test_a_broken_line_is_reported_and_the_rest_summarized(self):
        a, b, p, o = self.lines()
        out, err = self.summarize("\n".join([a, b, p, o[:40], o]) + "\n")
        self.assertIn("runs.jsonl:4: not JSON", err)
        cell = out["scenarios"]["low"]["modes"]["fixed-4000000"]
        self.assertAlmostEqual(cell["production"], 0.9)
        self.assertAlmostEqual(cell["opportunistic"], 0.6)

    def test_a_job_ready_after_the_first_window_began_is_reported(self):
        a, b, p, _ = self.lines()
        late = record("low/fixed-4000000/1/opportunistic", "dlrm", [10.0, 120.0, 120.0], ready_late_s=3.44)
        out, _ = self.summarize("\n".join([a, b, p, late]) + "\n")
        cell = out["scenarios"]["low"]["modes"]["fixed-4000000"]
        self.assertEqual(cell["opportunistic_ready_late_max_s"], 3.4)
        self.assertEqual(cell["production_ready_late_max_s"], 0.0)
        self.assertIn("ready late (first window partial): opportunistic 3.4 s", self.table)

    def test_the_card_that_ran_the_call_is_named_and_a_missing_serial_is_null(self):
        text = "\n".join(self.lines()) + "\n"
        out, _ = self.summarize(text, GPU_SERIAL="1652824030525", GPU_UUID="GPU-0d9e2c55-aaaa-bbbb-cccc-0123456789ab")
        self.assertEqual(out["gpu_serial"], "1652824030525")
        self.assertEqual(out["gpu_uuid"], "GPU-0d9e2c55-aaaa-bbbb-cccc-0123456789ab")
        out, _ = self.summarize(text, GPU_SERIAL="[N/A]", GPU_UUID="GPU-1")
        self.assertIsNone(out["gpu_serial"], "a card without a serial reports [N/A], which names nothing")
        self.assertEqual(out["gpu_uuid"], "GPU-1")
        out, _ = self.summarize(text)  # a summary redone from the inputs of a call before the card was recorded
        self.assertIsNone(out["gpu_serial"])
        self.assertIsNone(out["gpu_uuid"])

    def test_the_host_cpu_is_named_and_unreadable_parts_are_null(self):
        text = "\n".join(self.lines()) + "\n"
        out, _ = self.summarize(text, HOST_CPU_MODEL="Intel(R) Xeon(R) Platinum 8480+", HOST_CPUS="16",
                                HOST_CPU_GOVERNOR="performance", HOST_THREADS_PER_CORE="2",
                                PINNED_PRODUCTION="0,1,8,9", PINNED_OPPORTUNISTIC="2,3,10,11")
        self.assertEqual(out["host_cpu"], {"model": "Intel(R) Xeon(R) Platinum 8480+", "cpus": 16,
                                           "threads_per_core": 2, "governor": "performance",
                                           "pinned": {"production": "0,1,8,9", "opportunistic": "2,3,10,11"}})
        # No cpufreq, no model name, no topology, no pinning (PIN_CPUS=0): null, not "".
        out, _ = self.summarize(text, HOST_CPUS="?", PINNED_PRODUCTION="", PINNED_OPPORTUNISTIC="")
        self.assertEqual(out["host_cpu"], {"model": None, "cpus": None, "threads_per_core": None, "governor": None,
                                           "pinned": None})

    def test_alone_runs_wider_than_the_target_margin_are_warned_about(self):
        a, b, p, o = self.lines()
        # Three alone runs of the production model at 40, 34 and 48 it/s: 0.85-1.20 of 40.
        more = [record("alone/resnet50/2", "resnet50", [34.0]), record("alone/resnet50/3", "resnet50", [48.0])]
        self.write("warnings.txt", "!! WARNING: skipped low/tgs/3\n")
        out, _ = self.summarize("\n".join([a, b, p, o] + more) + "\n")
        self.assertEqual(len(out["warnings"]), 2)
        self.assertEqual(out["warnings"][0], "!! WARNING: skipped low/tgs/3")  # the script's own come first
        self.assertIn("alone runs of resnet50 spread 0.85-1.20 of their median", out["warnings"][1])
        self.assertIn("!! WARNING: alone runs of resnet50 spread 0.85-1.20", self.table)
        # Within +-5% (39 and 41 around 40) and a single alone run (the DLRM job): no warning.
        self.write("warnings.txt", "")
        more = [record("alone/resnet50/2", "resnet50", [39.0]), record("alone/resnet50/3", "resnet50", [41.0])]
        out, _ = self.summarize("\n".join([a, b, p, o] + more) + "\n")
        self.assertEqual(out["warnings"], [])
        self.assertNotIn("WARNING", self.table)

    def test_a_tgs_variant_is_summarized_with_its_flags(self):
        a, b, _, _ = self.lines()
        rows = [record("low/tgs-band/1/production", "resnet50", [38.0, 38.0, 38.0]),
                record("low/tgs-band/1/opportunistic", "dlrm", [100.0, 100.0, 100.0])]
        out, _ = self.summarize("\n".join([a, b] + rows) + "\n", VARIANT_MODES="tgs-band\t--noise-band-multiple 2\n",
                                TGS_NODE_FLAGS="--sync-wait-correction")
        cell = out["scenarios"]["low"]["modes"]["tgs-band"]
        self.assertAlmostEqual(cell["production"], 0.95)
        self.assertAlmostEqual(cell["opportunistic"], 0.5)
        self.assertEqual(cell["tgs_node_flags"], "--sync-wait-correction --noise-band-multiple 2")
        self.assertIn("tgs-band", self.table)


if __name__ == "__main__":
    unittest.main()
