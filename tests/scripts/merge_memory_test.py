# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/merge_memory.py: cells renamed and traced to their call, the call's tgs-node flags
kept, and a missing or twice-named cell refused with a message."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import merge_memory  # noqa: E402


def summary(command, scen, modes, date="2026-11-23T00:00:00Z"):
    return {"device": "GPU X", "driver": "1.0", "date": date, "command": command, "ratio": 1.5,
            "scenarios": {scen: {"production_model": "resnet50", "opportunistic_model": "dlrm", "budget_mib": 100,
                                 "footprint_mib": {"production": 20, "opportunistic": 130}, "modes": modes}}}


class MergeMemory(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.a = self.write("a.json", summary('SCENARIOS="low" MODES="tgs" bench/gpu/memory.sh', "low", {
            "alone": {"runs": 2, "production": 1.0, "opportunistic": 1.0},
            "tgs": {"runs": 3, "production": 0.97, "production_spread": [0.9, 1.0], "opportunistic": 0.0}}))
        self.b = self.write("b.json", summary(
            'SCENARIOS="low" TGS_NODE_FLAGS="--sync-wait-correction --cap-floor 20000" bench/gpu/memory.sh', "low",
            {"tgs": {"runs": 2, "production": 0.98, "opportunistic": 0.05}}, date="2026-11-24T00:00:00Z"))

    def write(self, name, obj):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def test_cells_are_renamed_and_traced(self):
        m = merge_memory.merge("out.json", [f"{self.a}:low/alone=r50/alone,low/tgs=r50/tgs",
                                            f"{self.b}:low/tgs=r50/tgs-sync-wait"])
        modes = m["scenarios"]["r50"]["modes"]
        self.assertEqual(list(modes), ["alone", "tgs", "tgs-sync-wait"])
        self.assertEqual(modes["tgs"]["production_spread"], [0.9, 1.0])
        self.assertEqual(modes["tgs"]["tgs_node_flags"], "")
        self.assertEqual(modes["tgs-sync-wait"]["tgs_node_flags"], "--sync-wait-correction --cap-floor 20000")
        self.assertEqual(modes["tgs-sync-wait"]["source"], "b.json")
        self.assertEqual(modes["tgs-sync-wait"]["budget_mib"], 100)
        self.assertEqual(m["date"], "2026-11-24T00:00:00Z")
        self.assertEqual(m["device"], "GPU X")
        self.assertEqual([s["cells"] for s in m["sources"]],
                         [["low/alone=r50/alone", "low/tgs=r50/tgs"], ["low/tgs=r50/tgs-sync-wait"]])

    def test_a_tgs_variant_cell_keeps_its_own_flags(self):
        c = self.write("c.json", summary('TGS_NODE_FLAGS="--sync-wait-correction" TGS_VARIANTS="band=--noise-band-multiple 2" '
                                         'bench/gpu/memory.sh', "low", {
                                             "tgs": {"runs": 2, "production": 0.97, "opportunistic": 0.1},
                                             "tgs-band": {"runs": 2, "production": 0.95, "opportunistic": 0.6,
                                                          "tgs_node_flags": "--sync-wait-correction --noise-band-multiple 2"}}))
        modes = merge_memory.merge("out.json", [f"{c}:low/tgs,low/tgs-band"])["scenarios"]["low"]["modes"]
        self.assertEqual(modes["tgs"]["tgs_node_flags"], "--sync-wait-correction")
        self.assertEqual(modes["tgs-band"]["tgs_node_flags"], "--sync-wait-correction --noise-band-multiple 2")

    def test_missing_and_twice_named_cells_are_refused(self):
        with self.assertRaisesRegex(ValueError, "no cell low/mps"):
            merge_memory.merge("out.json", [f"{self.a}:low/mps"])
        with self.assertRaisesRegex(ValueError, "low/tgs is named twice"):
            merge_memory.merge("out.json", [f"{self.a}:low/tgs", f"{self.b}:low/tgs"])
        with self.assertRaisesRegex(ValueError, "name the cells"):
            merge_memory.merge("out.json", [self.a])
        with self.assertRaisesRegex(ValueError, "bad cell"):
            merge_memory.merge("out.json", [f"{self.a}:low"])

    def test_command_line_writes_the_file_and_says_what_failed(self):
        script = os.path.join(os.path.dirname(merge_memory.__file__), "merge_memory.py")
        out = os.path.join(self.dir.name, "out.json")
        p = subprocess.run([sys.executable, script, out, f"{self.b}:low/tgs"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("production  0.98 opportunistic  0.05 (2 runs, b.json)", p.stdout)
        self.assertEqual(json.load(open(out))["scenarios"]["low"]["modes"]["tgs"]["runs"], 2)
        p = subprocess.run([sys.executable, script, out, f"{self.b}:low/alone"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no cell low/alone", p.stderr)


if __name__ == "__main__":
    unittest.main()
