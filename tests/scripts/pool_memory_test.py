# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/pool_memory.py: runs of one cell pooled over calls, each normalized within its own
call (to the call's alone median, and for interleaved calls to the same round's alone run), a
missing job counted 0, the median's order-statistic interval, and bad input refused with a
message naming the file."""
import io
import json
import os
import statistics
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import pool_memory  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import byte_fuzz  # noqa: E402


class PoolMemory(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def call(self, name, order, alone, pairs, model="resnet50", runs_name=None, mode="tgs", knobs="",
             dlrm_windows=(1,), gpu=None):
        """A summary NAME.json and its runs file: alone = {i: (prod, dlrm)}, pairs = {i: (prod, opp)}
        rates in it/s (None: the job printed nothing) of MODE; KNOBS opens the command line. An
        alone production run's windows are prod x (1, 1.1, 0.9), a DLRM one's dlrm x DLRM_WINDOWS."""
        summary = {"device": "GPU X", "driver": "1.0", "date": f"2026-11-2{len(name) % 10}T00:00:00Z",
                   "command": f'{knobs}SCENARIOS="low" ORDER={order} MODES="tgs" bench/gpu/memory.sh', "ratio": 1.5,
                   "scenarios": {"low": {"production_model": model, "opportunistic_model": "dlrm", "budget_mib": 100,
                                         "footprint_mib": {"production": 20, "opportunistic": 130},
                                         "modes": {"alone": {}, mode: {}}}}}
        if gpu is not None:
            summary["gpu_serial"] = gpu
        path = os.path.join(self.dir.name, name + ".json")
        with open(path, "w") as f:
            json.dump(summary, f)
        lines = []
        for i, (p, d) in alone.items():
            lines.append({"label": f"alone/{model}/{i}", "it_per_s": [p, p * 1.1, p * 0.9]})
            lines.append({"label": f"alone/dlrm/{i}", "it_per_s": [d * x for x in dlrm_windows]})
        for i, (p, o) in pairs.items():
            for cls, r in (("production", p), ("opportunistic", o)):
                lines.append({"label": f"low/{mode}/{i}/{cls}", **({"it_per_s": [r]} if r is not None else {})})
        rpath = os.path.join(self.dir.name, runs_name or name + "-runs.jsonl")
        with open(rpath, "w") as f:
            f.write("not a result line\n")
            for line in lines:
                f.write(json.dumps(line) + "\n")
        return path

    def add_mode(self, path, mode, pairs):
        """Adds MODE to the call at PATH (made by call()): its cell in the summary and its runs,
        pairs = {i: (prod, opp)} in it/s, so a test can compare two modes of one call."""
        with open(path[:-len(".json")] + "-runs.jsonl", "a") as f:
            for i, (p, o) in pairs.items():
                f.write(json.dumps({"label": f"low/{mode}/{i}/production", "it_per_s": [p]}) + "\n")
                f.write(json.dumps({"label": f"low/{mode}/{i}/opportunistic", "it_per_s": [o]}) + "\n")
        with open(path) as f:
            summary = json.load(f)
        summary["scenarios"]["low"]["modes"][mode] = {}
        with open(path, "w") as f:
            json.dump(summary, f)

    def test_each_call_is_normalized_to_its_own_alone_runs_and_rounds(self):
        # Call a: alone 40 then 30 (drift); the pair runs beside them at 36 and 27.
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, 50)})
        # Call b, grouped: alone 20 and 20; pairs 19 and 18, opportunistic missing in run 2.
        b = self.call("b", "grouped", {1: (20, 80), 2: (20, 80)}, {1: (19, 40), 2: (18, None)})
        cell = pool_memory.pool("low/tgs", [a, b])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(cell["runs"], 4)
        ca, cb = cell["calls"]
        # a: alone median 35 -> 36/35, 27/35; paired 36/40 = 0.9 and 27/30 = 0.9.
        self.assertAlmostEqual(ca["production"], (36 / 35 + 27 / 35) / 2)
        self.assertAlmostEqual(ca["production_paired"], 0.9)
        self.assertAlmostEqual(ca["opportunistic_paired"], 0.5)
        self.assertEqual(ca["order"], "interleaved")
        self.assertNotIn("production_paired", cb)
        # b: the missing opportunistic run counts 0.
        self.assertAlmostEqual(cb["opportunistic"], (40 / 80 + 0) / 2)
        # Each call keeps its runs in round order.
        self.assertEqual(ca["production_runs"], [36 / 35, 27 / 35])
        self.assertEqual(cb["opportunistic_runs"], [40 / 80, 0.0])
        self.assertAlmostEqual(cell["production"], (18 / 20 + 19 / 20) / 2)  # of 27/35, 0.9, 0.95, 36/35
        self.assertEqual(cell["production_spread"], [27 / 35, 36 / 35])
        # One grouped call: no pooled paired numbers.
        self.assertIsNone(cell["production_paired"])
        self.assertEqual(cell["production_ci"]["coverage"], 0.875)
        self.assertAlmostEqual(cell["production_sd"], statistics.stdev([36 / 35, 27 / 35, 19 / 20, 18 / 20]))

    def test_interleaved_calls_pool_their_paired_numbers(self):
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, 50)})
        c = self.call("c", "interleaved", {1: (10, 10)}, {1: (10, 10), 2: (5, 5)})  # run 2 has no alone run 2
        cell = pool_memory.pool("low/tgs", [a, c])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(cell["runs"], 4)
        self.assertAlmostEqual(cell["production_paired"], 0.9)  # 0.9, 0.9, 1.0
        self.assertEqual(cell["production_paired_spread"], [0.9, 1.0])
        # Per run in round order, null where the round made no alone run of its own.
        ca, cc = cell["calls"]
        self.assertEqual(cc["rounds"], [1, 2])
        self.assertEqual(cc["production_paired_runs"], [1.0, None])
        self.assertEqual(ca["production_paired_runs"], [0.9, 0.9])

    def test_median_interval_takes_the_narrowest_order_statistics_that_cover_it(self):
        self.assertIsNone(pool_memory.median_ci([]))
        self.assertEqual(pool_memory.median_ci([3.0]), {"low": 3.0, "high": 3.0, "coverage": 0.0})
        ci = pool_memory.median_ci([5, 1, 4, 2, 3, 6])  # n = 6: only min-max reaches 95%
        self.assertEqual((ci["low"], ci["high"]), (1, 6))
        self.assertAlmostEqual(ci["coverage"], 1 - 2 / 64, places=4)
        ci = pool_memory.median_ci(list(range(1, 10)))  # n = 9: x(2)..x(8) covers 96.1%
        self.assertEqual((ci["low"], ci["high"]), (2, 8))
        self.assertAlmostEqual(ci["coverage"], 1 - 2 * 10 / 512, places=4)
        ci = pool_memory.median_ci(list(range(1, 21)))  # n = 20: x(6)..x(15), 95.9%
        self.assertEqual((ci["low"], ci["high"]), (6, 15))

    def test_calls_with_other_flags_or_budget_are_refused_unless_mixed(self):
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)})
        b = self.call("b", "interleaved", {1: (40, 200)}, {1: (20, 100)})
        summary = json.load(open(b))
        summary["command"] = 'TGS_NODE_FLAGS="--noise-band-multiple 2" ' + summary["command"]
        with open(b, "w") as f:
            json.dump(summary, f)
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [a, b])
        self.assertIn("tgs_node_flags '--noise-band-multiple 2' (first call: '')", str(e.exception))
        self.assertIn("--mixed", str(e.exception))
        cell = pool_memory.pool("low/tgs", [a, b], mixed=True)["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(cell["runs"], 2)
        self.assertNotIn("tgs_node_flags", cell)  # they differ: named, not given one value
        self.assertEqual((cell["mixed_knobs"], cell["budget_mib"], cell["OPP_DELAY_S"]), (["tgs_node_flags"], 100, "5"))
        cell = pool_memory.pool("low/tgs", [a, a])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual((cell["tgs_node_flags"], cell["budget_mib"]), ("", 100))
        self.assertNotIn("mixed_knobs", cell)

    def test_tgs_cells_must_share_the_knobs_that_shape_the_controller(self):
        # A later arrival or more profiling windows make another measurement; a knob a command
        # does not name is memory.sh's default (calls before the knob existed ran with it).
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)})
        same = self.call("same", "interleaved", {1: (40, 200)}, {1: (38, 100)}, knobs="OPP_DELAY_S=5 PROFILE_WINDOWS=3 ")
        late = self.call("late", "interleaved", {1: (40, 200)}, {1: (20, 100)},
                         knobs="OPP_DELAY_S=15 MAX_PROFILE_WINDOWS=20 ")
        cell = pool_memory.pool("low/tgs", [a, same])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual((cell["runs"], cell["OPP_DELAY_S"], cell["PROFILE_WINDOWS"]), (2, "5", "3"))
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [a, late])
        self.assertIn("OPP_DELAY_S '15' (first call: '5'), MAX_PROFILE_WINDOWS '20' (first call: '6')", str(e.exception))
        self.assertEqual(pool_memory.pool("low/tgs", [a, late], mixed=True)["scenarios"]["low"]["modes"]["tgs"]["runs"], 2)
        # Modes other than tgs do not run the controller: their cells pool across those knobs.
        b = self.call("b", "interleaved", {1: (40, 200)}, {1: (36, 100)}, mode="coexec-budget")
        c = self.call("c", "interleaved", {1: (40, 200)}, {1: (30, 100)}, mode="coexec-budget", knobs="OPP_DELAY_S=15 ")
        self.assertEqual(pool_memory.pool("low/coexec-budget", [b, c])["scenarios"]["low"]["modes"]["coexec-budget"]["runs"], 2)

    def test_alone_runs_can_be_taken_from_a_later_window(self):
        # Alone windows 40, 44, 36 (median 40): from window 2 on, median(44, 36) = 40; from window
        # 3 on, 36, so a production run at 36 it/s becomes 1.0 of alone instead of 0.9.
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)}, dlrm_windows=(1, 1, 0.5))
        self.assertAlmostEqual(pool_memory.pool("low/tgs", [a])["scenarios"]["low"]["modes"]["tgs"]["production"], 0.9)
        cell = pool_memory.pool("low/tgs", [a], alone_from_window=3)["scenarios"]["low"]["modes"]["tgs"]
        self.assertAlmostEqual(cell["production"], 1.0)
        self.assertAlmostEqual(cell["production_paired"], 1.0)
        self.assertAlmostEqual(cell["opportunistic"], 1.0)  # the DLRM job's last window: 100 it/s
        self.assertEqual(cell["alone_from_window"], 3)
        self.assertNotIn("alone_from_window", pool_memory.pool("low/tgs", [a])["scenarios"]["low"]["modes"]["tgs"])
        b = self.call("b", "interleaved", {1: (40, 200)}, {1: (36, 100)})  # one DLRM window
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [b], alone_from_window=2)
        self.assertIn("alone/dlrm/1 has 1 windows, --alone-from-window 2 leaves none", str(e.exception))
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [a], alone_from_window=0)
        self.assertIn("--alone-from-window counts from 1 (got 0)", str(e.exception))

    def test_a_cell_is_compared_round_by_round_with_another_mode(self):
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, 50)})
        b = self.call("b", "interleaved", {1: (40, 200), 2: (40, 200)}, {1: (30, 60), 2: (30, 0)})
        self.add_mode(a, "coexec-budget", {1: (30, 200), 2: (30, 100)})
        self.add_mode(b, "coexec-budget", {1: (30, 120), 2: (20, 0)})
        cell = pool_memory.pool("low/tgs", [a, b], against="coexec-budget")["scenarios"]["low"]["modes"]["tgs"]
        vs = cell["against"]
        # production: 36/30, 27/30, 30/30 (a tie), 30/20; opportunistic: 100/200, 50/100, 60/120
        # (the round whose co-execution run made 0 it/s compares nothing).
        self.assertEqual(vs["mode"], "coexec-budget")
        self.assertAlmostEqual(vs["production"], (1.0 + 1.2) / 2)
        self.assertEqual((vs["production_rounds"], vs["production_above"], vs["production_untied"]), (4, 2, 3))
        self.assertAlmostEqual(vs["production_sign_p"], 1.0)
        self.assertEqual((vs["opportunistic_rounds"], vs["opportunistic_above"]), (3, 0))
        self.assertAlmostEqual(vs["opportunistic"], 0.5)
        self.assertAlmostEqual(vs["opportunistic_sign_p"], 2 / 8)
        self.assertAlmostEqual(cell["calls"][0]["production_against"], (1.2 + 0.9) / 2)
        self.assertNotIn("against", pool_memory.pool("low/tgs", [a])["scenarios"]["low"]["modes"]["tgs"])
        self.assertEqual(pool_memory.sign_test([0.5] * 10)["sign_p"], 2 / 1024)
        self.assertIsNone(pool_memory.sign_test([1.0])["sign_p"])
        for calls, mode, words in (([a], "coexec-um", "no cell low/coexec-um to compare low/tgs against"),
                                   ([a], "bad mode!", "bad --against mode 'bad mode!'"),
                                   ([self.call("g", "grouped", {1: (40, 200)}, {1: (36, 100)})], "alone",
                                    "--against pairs round i of two modes, and this call is not interleaved")):
            with self.assertRaises(ValueError) as e:
                pool_memory.pool("low/tgs", calls, against=mode)
            self.assertIn(words, str(e.exception))

    def test_alone_under_mps_is_a_cell_and_a_mode_to_compare_against(self):
        # memory.sh MPS=1: alone-mps runs each job alone under MPS, normalized to the plain alone
        # runs like any shared mode, so it pools, and tgs compares with it round by round.
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (44, 150), 2: (36, 80)}, mode="alone-mps")
        self.add_mode(a, "tgs", {1: (33, 75), 2: (36, 40)})
        mps = pool_memory.pool("low/alone-mps", [a])["scenarios"]["low"]["modes"]["alone-mps"]
        self.assertEqual(mps["runs"], 2)
        self.assertAlmostEqual(mps["production"], (44 / 35 + 36 / 35) / 2)  # the plain alone median 35
        vs = pool_memory.pool("low/tgs", [a], against="alone-mps")["scenarios"]["low"]["modes"]["tgs"]["against"]
        self.assertAlmostEqual(vs["production"], (33 / 44 + 36 / 36) / 2)
        self.assertAlmostEqual(vs["opportunistic"], (75 / 150 + 40 / 80) / 2)
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/alone", [a])
        self.assertIn("normalization", str(e.exception))

    def one_round(self, name, knobs="", mode="coexec-budget", prod=36):
        """A call of one interleaved round (alone 40 / 200 it/s, MODE at PROD / 100) whose command
        opens with KNOBS: what the knob tests vary is the command, not the rates."""
        return self.call(name, "interleaved", {1: (40, 200)}, {1: (prod, 100)}, mode=mode, knobs=knobs)

    @staticmethod
    def pooled(mode, calls, **kw):
        """The pooled cell low/MODE of CALLS."""
        return pool_memory.pool(f"low/{mode}", calls, **kw)["scenarios"]["low"]["modes"][mode]

    def test_every_cell_must_share_the_alone_runs_settling(self):
        # Alone runs measured later are another normalization, for every mode; a command that does
        # not name ALONE_SETTLE_S ran with 0.
        a, zero, late = self.one_round("a"), self.one_round("zero", "ALONE_SETTLE_S=0 "), \
            self.one_round("late", "ALONE_SETTLE_S=40 ")
        cell = self.pooled("coexec-budget", [a, zero])
        self.assertEqual((cell["runs"], cell["ALONE_SETTLE_S"]), (2, "0"))
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/coexec-budget", [a, late])
        self.assertIn("ALONE_SETTLE_S '40' (first call: '0')", str(e.exception))

    def test_every_cell_must_share_the_mps_settings(self):
        # Under MPS (memory.sh MPS=1) the pair shares the SMs instead of time-slicing them, and the
        # DLRM job's SM cap and client priority set how: calls that differ in any of them ran
        # another cell, in every mode. A call without MPS=1 ran no MPS settings at all; one with
        # it and no MPS_OPP_PRIORITY ran memory.sh's default, 0.
        plain, half = self.one_round("plain"), self.one_round("half", "MPS=1 MPS_OPP_PCT=50 ")
        half0 = self.one_round("half0", "MPS=1 MPS_OPP_PCT=50 MPS_OPP_PRIORITY=0 ", prod=30)
        cell = self.pooled("coexec-budget", [half, half0])
        self.assertEqual((cell["runs"], cell["MPS"], cell["MPS_OPP_PCT"], cell["MPS_OPP_PRIORITY"]), (2, "1", "50", "0"))
        self.assertNotIn("MPS", self.pooled("coexec-budget", [plain]))
        for knobs, said in (("MPS=1 MPS_OPP_PCT=100 ", "MPS_OPP_PCT '100' (first call: '50')"),
                            ("MPS=1 MPS_OPP_PCT=50 MPS_OPP_PRIORITY=1 ", "MPS_OPP_PRIORITY '1' (first call: '0')")):
            with self.assertRaises(ValueError) as e:
                pool_memory.pool("low/coexec-budget", [half, self.one_round("other", knobs)])
            self.assertIn(said, str(e.exception))
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/coexec-budget", [plain, half])
        self.assertIn("MPS '1' (first call: unset)", str(e.exception))
        mixed = self.pooled("coexec-budget", [plain, half], mixed=True)
        self.assertEqual((mixed["runs"], mixed["mixed_knobs"]), (2, ["MPS", "MPS_OPP_PCT", "MPS_OPP_PRIORITY"]))
        # tgs cells too, beside the controller's knobs.
        t_half = self.one_round("t_half", "MPS=1 MPS_OPP_PCT=50 ", mode="tgs")
        t_35 = self.one_round("t_35", "MPS=1 MPS_OPP_PCT=35 ", mode="tgs")
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [t_half, t_35])
        self.assertIn("MPS_OPP_PCT '35' (first call: '50')", str(e.exception))

    def test_a_variant_mode_of_one_call_stands_for_the_cell(self):
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)}, knobs='TGS_NODE_FLAGS="--x 1 --y 2" ')
        v = self.call("v", "interleaved", {1: (40, 200)}, {1: (20, 50)}, mode="tgs-y", knobs='TGS_NODE_FLAGS="--x 1" ')
        summary = json.load(open(v))
        summary["scenarios"]["low"]["modes"]["tgs-y"]["tgs_node_flags"] = "--x 1 --y 2"
        with open(v, "w") as f:
            json.dump(summary, f)
        pooled = pool_memory.pool("low/tgs", [a, v + ":tgs-y"])
        cell = pooled["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(list(pooled["scenarios"]["low"]["modes"]), ["tgs"])
        self.assertEqual(cell["runs"], 2)
        self.assertEqual(cell["calls"][1]["mode"], "tgs-y")
        self.assertNotIn("mode", cell["calls"][0])
        self.assertAlmostEqual(cell["production"], (36 / 40 + 20 / 40) / 2)
        # Its own flags are the ones compared: the call's plain tgs flags differ.
        summary["scenarios"]["low"]["modes"]["tgs-y"]["tgs_node_flags"] = "--x 1 --y 3"
        with open(v, "w") as f:
            json.dump(summary, f)
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [a, v + ":tgs-y"])
        self.assertIn("low/tgs-y ran with tgs_node_flags '--x 1 --y 3'", str(e.exception))
        for bad, words in ((v + ":alone", "normalization"), (v + ":tgs", "no cell low/tgs"), (v + ":", "")):
            with self.assertRaises((ValueError, OSError)) as e:
                pool_memory.pool("low/tgs", [bad])
            self.assertIn(words, str(e.exception))
        text = io.StringIO()
        with redirect_stdout(text):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", a, v + ":tgs-y", "--mixed"]), 0)
        self.assertIn("v.json:tgs-y", text.getvalue())

    def test_runs_lines_are_read_as_memory_sh_reads_them(self):
        # Two jobs append to one file: two records on one line both count; a broken fragment is
        # reported and skipped, as the call's own summary skipped it.
        a = self.call("a", "interleaved", {1: (40, 200)}, {})
        with open(os.path.join(self.dir.name, "a-runs.jsonl"), "a") as f:
            f.write(json.dumps({"label": "low/tgs/1/production", "it_per_s": [20.0]})
                    + json.dumps({"label": "low/tgs/1/opportunistic", "it_per_s": [50.0]}) + "\n")
            f.write('{"label": "low/tgs/2/produc\n')
        err = io.StringIO()
        with redirect_stderr(err):
            cell = pool_memory.pool("low/tgs", [a])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(cell["runs"], 1)
        self.assertAlmostEqual(cell["production"], 0.5)
        self.assertAlmostEqual(cell["opportunistic"], 0.25)
        self.assertIn("a-runs.jsonl:5: not JSON", err.getvalue())  # the junk line, 2 alone and the double line before
        self.assertEqual(len(cell["calls"][0]["skipped_lines"]), 1)

    def test_runs_file_falls_back_to_the_calls_out_folder(self):
        a = self.call("gpu-memory", "grouped", {1: (40, 200)}, {1: (20, 100)}, runs_name="memory-runs.jsonl")
        cell = pool_memory.pool("low/tgs", [a])["scenarios"]["low"]["modes"]["tgs"]
        self.assertAlmostEqual(cell["production"], 0.5)
        self.assertEqual(cell["calls"][0]["runs_file"], "memory-runs.jsonl")

    def test_bad_input_is_refused_with_a_message(self):
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)})
        bert = self.call("bert", "interleaved", {1: (20, 200)}, {1: (18, 100)}, model="bert_base")
        for cell, calls, words in (("low", [a], "bad cell"), ("low/alone", [a], "normalization"),
                                   ("low/coexec-um", [a], "no cell low/coexec-um"),
                                   ("high/tgs", [a], "no cell high/tgs"),
                                   ("low/tgs", [a, bert], "not the same cell"), ("low/tgs", [], "at least one")):
            with self.assertRaises(ValueError) as e:
                pool_memory.pool(cell, calls)
            self.assertIn(words, str(e.exception))
        with open(os.path.join(self.dir.name, "a-runs.jsonl"), "a") as f:
            f.write('{"label": "low/tgs/1/production", "it_per_s": "fast"}\n')
        with self.assertRaises(ValueError) as e:
            pool_memory.pool("low/tgs", [a])
        self.assertIn("a-runs.jsonl:", str(e.exception))
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", os.path.join(self.dir.name, "no.json")]), 2)
        self.assertIn("pool_memory:", err.getvalue())

    def test_mutated_inputs_are_refused_or_pooled_never_crash(self):
        # A small fuzz of both inputs: bytes of a valid summary and runs file replaced by JSON
        # punctuation and digits; every outcome is a pooled cell or a ValueError/OSError/KeyError.
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, None)})
        rpath = os.path.join(self.dir.name, "a-runs.jsonl")
        refused = byte_fuzz.fuzz_files([a, rpath], lambda: pool_memory.pool("low/tgs", [a], with_by_round=True),
                                       rounds=600, seed=5)
        self.assertGreater(refused, 0)

    def test_values_of_the_wrong_type_are_refused_never_crash(self):
        # A structural fuzz: one value anywhere in the summary or in a runs line replaced by a
        # value of another type.
        import random
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, 50)})
        rpath = os.path.join(self.dir.name, "a-runs.jsonl")
        summary = json.load(open(a))
        lines = [json.loads(line) for line in open(rpath) if line.startswith("{")]
        junk = ["x", -1, None, [], {}, [1, "2"], {"a": 1}, True, 1e308]
        rng = random.Random(7)

        def paths(obj, prefix=()):
            yield prefix
            items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
            for k, v in items:
                yield from paths(v, prefix + (k,))

        def replaced(obj, path, value):
            if not path:
                return value
            obj = json.loads(json.dumps(obj))
            node = obj
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
            return obj

        for _ in range(400):
            s2, l2 = summary, lines
            if rng.random() < 0.5:
                s2 = replaced(summary, rng.choice(list(paths(summary))), rng.choice(junk))
            else:
                i = rng.randrange(len(lines))
                l2 = lines[:i] + [replaced(lines[i], rng.choice(list(paths(lines[i]))), rng.choice(junk))] + lines[i + 1:]
            with open(a, "w") as f:
                json.dump(s2, f)
            with open(rpath, "w") as f:
                f.writelines(json.dumps(x) + "\n" for x in l2)
            try:
                with redirect_stderr(io.StringIO()):
                    pool_memory.pool("low/tgs", [a], with_by_round=True)
            except (ValueError, OSError, KeyError):
                pass

    def test_the_gpus_that_ran_the_calls_are_counted(self):
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (36, 100)}, gpu="1652824030525")
        b = self.call("b", "interleaved", {1: (40, 200)}, {1: (38, 100)}, gpu="1652824030525")
        c = self.call("c", "interleaved", {1: (40, 200)}, {1: (30, 100)}, gpu="1753024029445")
        d = self.call("d", "interleaved", {1: (40, 200)}, {1: (30, 100)})  # before cards were recorded
        cell = pool_memory.pool("low/tgs", [a, b, c, d])["scenarios"]["low"]["modes"]["tgs"]
        self.assertEqual(cell["gpus_named"], 2)
        self.assertEqual(cell["calls_naming_no_gpu"], 1)
        self.assertEqual([e["gpu"] for e in cell["calls"]], ["1652824030525", "1652824030525", "1753024029445", None])
        text = io.StringIO()
        with redirect_stdout(text):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", a, c, d]), 0)
        self.assertIn("low/tgs: 3 runs in 3 calls on 2 GPUs (1 of them name no GPU)", text.getvalue())
        self.assertIn("a.json [GPU 1652824030525]", text.getvalue())

    def test_runs_are_pooled_by_their_place_in_the_call(self):
        # One alone run at each call's start; the later runs are slower in both calls (drift).
        a = self.call("a", "interleaved", {1: (40, 200)}, {1: (40, 100), 2: (36, 120), 3: (34, 100)})
        b = self.call("b", "interleaved", {1: (20, 100)}, {1: (19, 50), 2: (18, 60)})
        cell = pool_memory.pool("low/tgs", [a, b], with_by_round=True)["scenarios"]["low"]["modes"]["tgs"]
        prod = cell["by_round"]["production"]
        self.assertEqual([r["position"] for r in prod], [1, 2, 3])
        self.assertEqual([r["runs"] for r in prod], [2, 2, 1])
        self.assertAlmostEqual(prod[0]["median"], (1.0 + 0.95) / 2)
        self.assertAlmostEqual(prod[1]["median"], (0.9 + 0.9) / 2)
        self.assertEqual(prod[2]["spread"], [0.85, 0.85])
        self.assertAlmostEqual(cell["by_round"]["opportunistic"][1]["median"], 0.6)
        self.assertNotIn("by_round", pool_memory.pool("low/tgs", [a, b])["scenarios"]["low"]["modes"]["tgs"])
        text = io.StringIO()
        with redirect_stdout(text):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", a, b, "--by-round"]), 0)
        self.assertIn("production    by place in the call: run 1 0.97 (2 runs, 0.95-1.00), run 2 0.90 (2 runs",
                      text.getvalue())

    def test_calls_are_ranked_by_the_production_jobs_alone_rate(self):
        # Alone rates 60, 30, 45 and 40 it/s; the production job keeps 0.9 of alone in every call,
        # and the opportunistic share falls as the host gets faster: 0.2, 0.8, 0.4, 0.6.
        calls = [self.call("fast", "interleaved", {1: (60, 100)}, {1: (54, 20)}),
                 self.call("slow", "interleaved", {1: (30, 100)}, {1: (27, 80)}),
                 self.call("mid", "interleaved", {1: (45, 100)}, {1: (40.5, 40)}),
                 self.call("mid2", "interleaved", {1: (40, 100)}, {1: (36, 60)}, mode="tgs-x")]
        calls[3] += ":tgs-x"
        # A call whose runs of the cell printed nothing has no median: listed, not ranked.
        calls.append(self.call("none", "interleaved", {1: (50, 100)}, {}))
        cell = pool_memory.pool("low/tgs", calls, with_host_speed=True)["scenarios"]["low"]["modes"]["tgs"]
        h = cell["by_host_speed"]
        self.assertEqual([r["file"] for r in h["calls"]],
                         ["slow.json", "mid2.json", "mid.json", "none.json", "fast.json"])
        self.assertIsNone(h["calls"][3]["opportunistic"])
        self.assertEqual(h["calls"][1]["mode"], "tgs-x")
        self.assertEqual([r["production_alone_it_per_s"] for r in h["calls"]], [30, 40, 45, 50, 60])
        self.assertEqual([r["opportunistic"] for r in h["calls"]], [0.8, 0.6, 0.4, None, 0.2])
        self.assertAlmostEqual(h["opportunistic_spearman"], -1.0)
        self.assertEqual(h["opportunistic_ranked_calls"], 4)
        # 4 calls: 2 of the 24 orders are as extreme, so the permutation p is near 1/12.
        self.assertGreater(h["opportunistic_permutation_p"], 0.06)
        self.assertLess(h["opportunistic_permutation_p"], 0.11)
        # The production job's share is the same in every call: no order to rank.
        self.assertEqual((h["production_spearman"], h["production_permutation_p"]), (None, None))
        self.assertNotIn("by_host_speed", pool_memory.pool("low/tgs", calls)["scenarios"]["low"]["modes"]["tgs"])
        text = io.StringIO()
        with redirect_stdout(text):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", *calls, "--by-host-speed"]), 0)
        lines = text.getvalue().splitlines()
        at = lines.index("  by the production job's alone rate (it/s), slowest first:")
        self.assertEqual(lines[at + 1].split(), ["30.0", "slow.json", "0.90", "0.80"])
        self.assertEqual(lines[at + 2].split(), ["40.0", "mid2.json:tgs-x", "0.90", "0.60"])
        self.assertEqual(lines[at + 4].split(), ["50.0", "none.json", "-", "-"])
        self.assertIn("opportunistic against the alone rate over 4 calls: Spearman -1.00, permutation p 0.0",
                      text.getvalue())
        self.assertIn("production    against the alone rate over 4 calls: Spearman -\n", text.getvalue())

    def test_main_prints_the_table_and_writes_a_cell_merge_memory_reads(self):
        import merge_memory
        a = self.call("a", "interleaved", {1: (40, 200), 2: (30, 100)}, {1: (36, 100), 2: (27, 50)})
        out = os.path.join(self.dir.name, "pooled.json")
        text = io.StringIO()
        with redirect_stdout(text):
            self.assertEqual(pool_memory.main(["pool_memory.py", "low/tgs", a, "--json", out]), 0)
        self.assertIn("low/tgs: 2 runs in 1 calls (1 of them name no GPU)\n", text.getvalue())
        self.assertIn("runs (production / opportunistic): 1.03 / 0.67, 0.77 / 0.33", text.getvalue())
        with open(out) as f:
            pooled = json.load(f)
        self.assertIn("pool_memory.py low/tgs", pooled["command"])
        with redirect_stdout(io.StringIO()):
            merged = merge_memory.merge("m.json", [f"{out}:low/tgs=r50/tgs-pooled"])
        self.assertAlmostEqual(merged["scenarios"]["r50"]["modes"]["tgs-pooled"]["production_paired"], 0.9)


if __name__ == "__main__":
    unittest.main()
