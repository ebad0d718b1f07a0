# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/targets.py: pooled cells set against the two targets unrounded, runs that met both in
the run itself, the cell's setting, and files that are not pools refused by name."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
sys.path.insert(0, os.path.dirname(__file__))
import byte_fuzz  # noqa: E402
import script_support  # noqa: E402
import targets  # noqa: E402


def call(production_runs, opportunistic_runs):
    return {"file": "c.json", "production_runs": production_runs, "opportunistic_runs": opportunistic_runs}


def cell(production, opportunistic, calls, **knobs):
    runs = sum(len(c.get("production_runs", [])) for c in calls)
    return {"runs": runs, "production": production, "opportunistic": opportunistic,
            "production_ci": {"low": production - 0.05, "high": production + 0.05, "coverage": 0.96},
            "opportunistic_ci": {"low": opportunistic - 0.1, "high": opportunistic + 0.1, "coverage": 0.96},
            "gpus_named": 2, "calls_naming_no_gpu": 1, "calls": calls, **knobs}


def pool(scenario, model, mode, c):
    return {"device": "NVIDIA H200", "scenarios": {scenario: {"production_model": model, "modes": {mode: c}}}}


def run_cli(*args):
    return script_support.run_script(targets.__file__, *args)


class Targets(unittest.TestCase):
    def write(self, obj):
        return script_support.temp_file(self, ".json", [obj])

    def test_targets_compared_unrounded_and_runs_counted_in_pairs(self):
        # 0.9496 prints as 0.95 but misses the production target; the third run has no
        # opportunistic share (a missing run) and is not counted.
        a = self.write(pool("high", "bert_base", "tgs", cell(
            0.9496, 0.51, [call([0.96, 0.90], [0.55, 0.60]), call([1.0, 0.97], [0.45, None])],
            MPS="1", MPS_OPP_PCT="35", tgs_node_flags="--tgs-preset host-bound")))
        b = self.write(pool("low", "resnet50", "tgs", cell(
            0.95, 0.50, [call([0.95], [0.5])], mixed_knobs=["MPS_OPP_PCT", "MPS_OPP_PRIORITY"])))
        rows = targets.cells(a, targets.read_pool(a), 0.95, 0.5) + targets.cells(b, targets.read_pool(b), 0.95, 0.5)
        self.assertEqual([(r["production_met"], r["opportunistic_met"]) for r in rows], [(False, True), (True, True)])
        self.assertEqual([(r["runs_meeting_both"], r["runs_with_both_shares"]) for r in rows], [(1, 3), (1, 1)])
        self.assertEqual(rows[0]["setting"], "MPS cap 35%; --tgs-preset host-bound")
        self.assertEqual(rows[1]["setting"], "mixed: MPS_OPP_PCT, MPS_OPP_PRIORITY")

        out = run_cli(a, b)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertIn("0.95 (0.90-1.00)", lines[1])   # rounded in print, and still a miss:
        self.assertRegex(lines[1], r"\s O\s+1/3\s")
        self.assertRegex(lines[2], r"\s PO\s+1/1\s")
        self.assertIn("2 +1 unnamed", lines[1])
        self.assertTrue(lines[-1].endswith("1 of 2 cells meet both"), lines[-1])

        # Other targets move the verdict; --json keeps the unrounded medians.
        out = run_cli(a, "--production", "0.9", "--opportunistic", "0.65", "--json")
        e = json.loads(out.stdout.splitlines()[0])
        self.assertEqual((e["production"], e["production_met"], e["opportunistic_met"]), (0.9496, True, False))
        self.assertEqual(e["runs_meeting_both"], 0)

        md = run_cli(a, "--markdown").stdout.splitlines()
        self.assertTrue(md[0].startswith("| file | cell |"))
        self.assertTrue(md[2].startswith(f"| {os.path.basename(a)} | high/tgs | bert_base | 4 | 2 |"))

    def test_older_pools_show_what_they_do_not_hold(self):
        # Pools written before pool_memory.py kept each call's runs and counted its GPUs: neither
        # is made up. The rate flags of a co-execution cell are not its setting.
        old = cell(0.98, 0.80, [{"file": "c.json", "production": 0.98, "opportunistic": 0.8}],
                   tgs_node_flags="--sync-wait-correction")
        for key in ("gpus_named", "calls_naming_no_gpu"):
            del old[key]
        old["runs"] = 2
        path = self.write(pool("low", "resnet50", "coexec-budget", old))
        (e,) = targets.cells(path, targets.read_pool(path), 0.95, 0.5)
        self.assertEqual((e["runs_meeting_both"], e["gpus_named"], e["setting"]), (None, None, "-"))
        r = targets.row(e)
        self.assertEqual((r[5], r[8], r[9]), ("-", "PO", "-"))

    def test_files_that_are_not_pools_are_refused_by_name(self):
        summary = self.write({"device": "x", "scenarios": {"high": {"modes": {"tgs": {"production": 1.0,
                                                                                    "opportunistic": 0.4,
                                                                                    "runs": 2}}}}})
        broken = self.write('{"scenarios": {\n  "high": nope}')
        runs_of_text = self.write(pool("high", "bert_base", "tgs", cell(0.9, 0.5, [call(["0.9"], [0.5])])))
        for path, message in ((summary, "no cell with pooled calls"), (broken, "line 2: not JSON"),
                              (runs_of_text, "'production_runs' is not a list of numbers"),
                              (path_missing := path_absent(), "cannot read")):
            out = run_cli(path)
            self.assertEqual(out.returncode, 2, path)
            self.assertIn(f"targets.py: {path}", out.stderr)
            self.assertIn(message, out.stderr)
        self.assertEqual(run_cli(summary, "--production", "0").returncode, 2)
        self.assertFalse(os.path.exists(path_missing))

    def test_fuzzed_pools_are_read_or_refused(self):
        path = self.write(pool("high", "bert_base", "tgs", cell(
            0.93, 0.53, [call([0.96, 0.90], [0.54, 0.56]), call([0.99, None], [0.42, 0.52])],
            MPS="1", MPS_OPP_PCT="50", MPS_OPP_PRIORITY="1", tgs_node_flags="--tgs-preset host-bound")))

        def read():
            for e in targets.cells(path, targets.read_pool(path), 0.95, 0.5):
                targets.row(e)

        refused = byte_fuzz.fuzz_files([path], read, rounds=600, seed=5, refusals=(SystemExit,))
        self.assertGreater(refused, 0)


def path_absent():
    d = tempfile.mkdtemp()
    os.rmdir(d)
    return os.path.join(d, "pooled.json")


if __name__ == "__main__":
    unittest.main()
