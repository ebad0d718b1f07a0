# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/harness.py: its analysis on made-up inputs (run by name: Analysis Data TrainWindows),
and FakeGpu, whole calls against the fake driver (TGS_BUILD_DIR: a build with tgs-node, the
interposer and tgs-fake-train)."""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu")
sys.path.insert(0, GPU)
import harness  # noqa: E402
import train  # noqa: E402  (torch is imported in its main only)

HARNESS = os.path.join(GPU, "harness.py")


def write_lines(path: str, objects: list) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(o) + "\n" for o in objects)


def windows(run: str, cls: str, rates: list) -> list:
    return [{"run": run, "class": cls, "t": 100.0 + i, "line": {"iter_per_s": r}} for i, r in enumerate(rates)]


def make_call(d: str, command: str = "run") -> str:
    """A call with two alone runs, two tgs runs (one failed) and a status sample."""
    os.makedirs(d)
    harness.write_json(os.path.join(d, "call.json"), {
        "device": "GPU X", "driver": "1", "date": "2026-01-01T00:00:00Z", "command": command, "complete": True,
        "cpus": None, "budgets": {}, "baseline": "alone", "skipped": [], "warnings": [],
        "pairs": {"p": {"production": "a", "opportunistic": "b"}}, "modes": {"alone": "each", "tgs": "both"}})
    job = lambda name, m, **kw: {"job": name, "started": 100.0, "steady": True, "measure": m, **kw}  # noqa: E731
    runs = [{"run": f"{r}/p/alone", "pair": "p", "mode": "alone", "setting": "-", "failed": None,
             "jobs": {"production": job("a", [100, 110]), "opportunistic": job("b", [100, 110])}} for r in (1, 2)]
    runs += [{"run": f"{r}/p/tgs", "pair": "p", "mode": "tgs", "setting": "tgs-node", "failed": fail, "node": True,
              "convergence_target": 0.9, "recovery_target": 0.95, "steady_windows": 2,
              "jobs": {"production": job("a", [105, 110], resume=111.5), "opportunistic": job("b", [105, 110])}}
             for r, fail in ((1, None), (2, "the opportunistic job died"))]
    write_lines(os.path.join(d, "runs.jsonl"), runs)
    write_lines(os.path.join(d, "windows.jsonl"), [x for args in (
        ("1/p/alone", "production", [0] + [10] * 11), ("2/p/alone", "production", [12] * 12),
        ("1/p/alone", "opportunistic", [20] * 12), ("2/p/alone", "opportunistic", [20] * 12),
        ("1/p/tgs", "production", [11] * 12 + [0, 11]), ("1/p/tgs", "opportunistic", [0, 0, 0, 9, 10] + [10] * 7))
        for x in windows(*args)])
    write_lines(os.path.join(d, "status-samples.jsonl"), [{"run": "1/p/tgs", "t": 102.0, "gpus": [], "jobs": [
        {"gpu": 0, "class": "opportunistic", "up_s": 0.5, "mechanism": "mps-client", "mechanism_reason": "measured-safe"},
        {"gpu": 0, "class": "production"}]}])
    return d


class Analysis(unittest.TestCase):
    def test_steady_state(self):
        self.assertTrue(harness.is_steady([10, 10.5, 9.8, 10.2, 10, 9.9], 3, 0.1, 1.0))
        self.assertFalse(harness.is_steady([0, 0, 2, 10, 20, 30], 3, 0.1, 1.0))  # still speeding up
        self.assertTrue(harness.is_steady([0, 1, 0, 0, 1, 0], 3, 0.1, 1.0))  # starved: within one iteration
        self.assertFalse(harness.is_steady([10, 10, 10, 10, 10], 3, 0.1, 1.0))  # too few windows
        self.assertFalse(harness.is_steady([100, 100, 100, 80, 80, 80], 3, 0.1, 1.0))  # fell by 20%

    def test_rates_convergence_and_recovery(self):
        w = [(1, 0.0), (2, 5.0), (3, 9.5), (4, 4.0), (5, 9.2), (6, 9.6), (7, 10.0), (8, 10.0)]
        self.assertEqual((harness.rate_in(w, 6, 8), harness.rate_in(w, 8, 9)), (10.0, None))
        # The mean of the windows, not their median: whole iterations per window of a job at
        # 17.4 it/s read 17 and 18, whose median would be either.
        self.assertAlmostEqual(harness.rate_in([(1, 17), (2, 18), (3, 17), (4, 18), (5, 17)], 0, 5), 17.4)
        self.assertEqual(harness.convergence(w, 0.5, 10.0, 0.9, 3), 4.5)  # the dip at 4 s resets it
        self.assertIsNone(harness.convergence(w, 0.5, 20.0, 0.9, 3))  # never reached
        self.assertIsNone(harness.convergence(w, 0.5, 0.0, 0.9, 3))  # nothing to converge to
        self.assertEqual(harness.recovery(w, 4.5, 10.0, 0.95), 1.5)
        self.assertIsNone(harness.recovery(w, 7.5, 20.0, 0.95))

    def test_stats_and_the_interval_of_the_median(self):
        self.assertEqual(harness.stats([3, None, 1, 2]), {"median": 2, "min": 1, "max": 3})
        self.assertIsNone(harness.stats([None, True]))
        ci = harness.median_ci(list(range(1, 21)))
        self.assertEqual((ci["low"], ci["high"]), (6, 15))
        self.assertGreaterEqual(ci["coverage"], 0.95)
        self.assertEqual(harness.median_ci([1, 2, 3])["coverage"], 0.75)  # too few: min-max

    def test_a_call_is_summarized_into_normalized_cells(self):
        with tempfile.TemporaryDirectory() as t, redirect_stdout(io.StringIO()) as out:
            s = harness.summarize(make_call(os.path.join(t, "c")))
        self.assertEqual(s["baseline_it_per_s"], {"a": 11.0, "b": 20.0})
        cells = {c["mode"]: c for c in s["cells"]}
        tgs = cells["tgs"]
        self.assertEqual(tgs["runs"], 1)  # the failed run is left out, and listed
        self.assertEqual(s["failed"], [{"run": "2/p/tgs", "why": "the opportunistic job died"}])
        self.assertEqual((tgs["production"]["median"], tgs["opportunistic"]["median"]), (1.0, 0.5))
        self.assertEqual(tgs["convergence_s"]["median"], 1.5)  # from registration at 101.5 to 103 s
        self.assertEqual(tgs["recovery_s"]["median"], 1.5)  # not the window of 0 at 112 s: the one at 113
        self.assertEqual(cells["alone"]["production"]["median"], 1.0)
        self.assertEqual(set(tgs) - {"unsteady_runs", "per_run"}, {
            "scenario", "production_model", "opportunistic_model", "mode", "setting", "device", "driver", "date",
            "command", "runs", "production", "opportunistic", "convergence_s", "recovery_s", "production_own"})
        # Its own rate before the opportunistic job started at 100 s: the window of 11 at t = 100.
        self.assertEqual(tgs["per_run"]["production_own"], [1.0])
        self.assertEqual(cells["alone"]["per_run"]["production_own"], [None, None])  # the two jobs never met
        # The node's choice per run, from its status; none where no node ran.
        self.assertEqual(tgs["per_run"]["mechanism"], ["mps-client (measured-safe)"])
        self.assertEqual(cells["alone"]["per_run"]["mechanism"], [None, None])
        self.assertRegex(out.getvalue(), r"p\s+tgs\s+1\.00 \(1\.00-1\.00\)\s+0\.50 \(0\.50-0\.50\)")

    def test_pools_and_targets(self):
        with tempfile.TemporaryDirectory() as t, redirect_stdout(io.StringIO()):
            a = harness.summarize(make_call(os.path.join(t, "a"), "first"))
            harness.summarize(make_call(os.path.join(t, "b"), "second"))
            tgs = harness.pool([os.path.join(t, x, "summary.json") for x in "ab"])["cells"][1]
            self.assertEqual([tgs[k] for k in ("mode", "runs", "calls", "command")], ["tgs", 2, 2, ["first", "second"]])
            self.assertEqual(tgs["per_run"]["mechanism"], ["mps-client (measured-safe)"] * 2)  # pooled, run by run
            harness.write_json(os.path.join(t, "bad.json"), {"pairs": {}})
            with self.assertRaisesRegex(harness.HarnessError, "bad.json: no 'cells' list"):
                harness.pool([os.path.join(t, "bad.json")])
        per_run = {"production": [0.96, 0.94, None], "opportunistic": [0.6, 0.7, 0.8]}
        row = harness.targets([dict(a["cells"][1], production={"median": 0.9496}, per_run=per_run)], 0.95, 0.5)[0]
        self.assertEqual((row["production_met"], row["opportunistic_met"]), (False, True))  # 0.9496 prints as 0.95
        self.assertEqual((row["runs_meeting_both"], row["runs_with_both"]), (1, 2))

    def test_phases(self):
        def sample(phase, prod, rel):
            return {"run": "r", "t": 1, "gpus": [{"gpu": 0, "phase": phase, "controller": {
                        "phase": phase, "max_rate_blocks_per_s": 100, "sample_blocks_per_s": 100 * rel}}],
                    "jobs": [{"gpu": 0, "class": "production", "blocks_per_s": prod},
                             {"gpu": 0, "class": "opportunistic", "blocks_per_s": 5}]}
        alone = {"run": "r", "t": 0, "gpus": [], "jobs": [{"gpu": 0, "class": "production", "blocks_per_s": 99}]}
        rows = harness.phases([alone, sample("slow_start", 90, 0.9), sample("slow_start", 110, 1.1)])
        self.assertEqual([(r["phase"], r["samples"], r["prod_bps"], r["opp_bps"]) for r in rows],
                         [("production-alone", 1, 99, None), ("slow_start", 2, 100, 5)])
        self.assertEqual(rows[1]["max_rate_blocks_per_s"], 100)  # the controller's own numbers
        self.assertAlmostEqual(rows[1]["sample_blocks_per_s"], 100)
        self.assertIsNone(rows[0]["sample_blocks_per_s"])
        self.assertNotIn("mechanism", rows[1], "a node that chose nothing says nothing")
        chosen = sample("sharing", 90, 0.9)
        chosen["jobs"][1].update({"mechanism": "time-sliced", "mechanism_reason": "kernels-unmeasured", "held": False})
        held = sample("sharing", 90, 0.9)
        held["jobs"][1].update({"mechanism": "time-sliced", "mechanism_reason": "kernels-unmeasured", "held": True})
        rows = harness.phases([alone, chosen, chosen, held])
        self.assertEqual(rows[1]["mechanism"], "time-sliced (kernels-unmeasured); time-sliced (kernels-unmeasured), held")
        with self.assertRaisesRegex(harness.HarnessError, "status sample 2: not a status sample"):
            harness.phases([alone, {"run": "r"}])
        with tempfile.TemporaryDirectory() as t:  # a call's folder names its samples; a missing one is refused
            write_lines(os.path.join(t, "status-samples.jsonl"), [alone, sample("slow_start", 90, 0.9)])
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(harness.main(["phases", t, "--json"]), 0)
            self.assertEqual([json.loads(line)["phase"] for line in out.getvalue().splitlines()],
                             ["production-alone", "slow_start"])
            self.assertEqual(harness.main(["phases", os.path.join(t, "none")]), 2)

    def test_halves_keep_cores_whole(self):
        siblings = {0: [0, 4], 4: [0, 4], 1: [1, 5], 5: [1, 5], 2: [2, 6], 6: [2, 6]}
        self.assertEqual(harness.halves([0, 1, 2, 4, 5, 6], siblings.get), ([0, 4], [1, 2, 5, 6]))
        self.assertEqual(harness.halves([0, 1, 2, 3], lambda c: []), ([0, 1], [2, 3]))  # topology unknown
        self.assertEqual(harness.parse_cpulist("0-2,8\n"), [0, 1, 2, 8])

    def test_gpus_share_their_local_cpus_in_parts_of_whole_cores(self):
        eight = {c: [c % 8, c % 8 + 8] for c in range(16)}  # 8 cores of two threads
        parts = harness.parts(list(range(16)), eight.get, 4)
        self.assertEqual(parts, [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]])
        self.assertEqual(harness.parts([0, 1, 2], lambda c: [], 2), [[0], [1, 2]])  # the earlier part no larger
        self.assertEqual(harness.parts([0, 8], eight.get, 2), [[0], [8]])  # one core, two parts: its threads
        self.assertEqual(harness.cpu_part("2/3"), (2, 3))
        for bad in ("0/2", "3/2", "x", "1"):
            with self.assertRaises(argparse.ArgumentTypeError):
                harness.cpu_part(bad)
        args = argparse.Namespace(pairs="a,b,c", gpus="0,1")
        shares = harness.gpu_shares(args, [0, 1])  # no nvidia-smi here: both GPUs see the same CPUs
        self.assertEqual([(s["pairs"], s["cpu_part"]) for s in shares], [(["a", "c"], (1, 2)), (["b"], (2, 2))])
        for gpus in ([0, 0], [0, 1, 2, 3]):
            with self.assertRaisesRegex(harness.HarnessError, "each GPU once, and at least one pair per GPU"):
                harness.gpu_shares(args, gpus)
        with redirect_stderr(io.StringIO()) as err:  # each child's GPU and CPUs are the parent's to set
            self.assertEqual(harness.main(["run", "--gpus", "0,1", "--cpu-part", "1/2", "--pairs", "low,high",
                                           "--plan"]), 2)
        self.assertIn("give neither with it", err.getvalue())

    def test_dominance_verdicts(self):
        def cell(pair, mode, prod, opp, device="GPU X"):
            return {"scenario": pair, "production_model": "a", "opportunistic_model": "b", "mode": mode,
                    "setting": "-", "device": device, "driver": "1", "date": "d", "command": "c", "runs": len(prod),
                    "per_run": {"production": prod, "opportunistic": opp}}
        cells = [cell("p", "alone", [1.0, 1.0], [1.0, 1.0]),
                 cell("p", "default", [0.96, 0.97, 0.95], [0.30, 0.32, 0.31]),
                 cell("p", "co-execution", [0.98, 0.99, 0.985], [0.50, 0.52, 0.51]),  # above both intervals
                 cell("p", "other", [0.99, 0.60], [0.9, 0.9]),  # its production interval reaches below
                 cell("q", "default", [0.96, 0.90, 0.97], [0.95, 0.93, 0.90]),
                 cell("q", "co-execution", [0.99], [0.99])]
        targets = {"production": 0.95, "production_low": 0.92, "opportunistic": {"p": 0.25, "q": 0.80}}
        rows = {r["scenario"]: r for r in harness.dominance(cells, "default", targets,
                                                             {"default": 3, "others": 2, "modes": 1})}
        self.assertEqual(rows["p"]["beaten_by"], ["co-execution"])
        self.assertTrue(rows["p"]["targets_met"])
        self.assertEqual(rows["p"]["too_few_runs"], [], "other has 2 runs, one mode is asked for")
        self.assertEqual(rows["q"]["beaten_by"], [], "one run has no interval: it beats nothing")
        self.assertFalse(rows["q"]["targets_met"], "production's interval reaches 0.90, below 0.92")
        self.assertEqual(rows["q"]["too_few_runs"], ["co-execution", "1 more mode(s) beside co-execution"])
        ci = harness.bootstrap_ci([0.96, 0.97, 0.95])
        self.assertEqual((ci["low"], ci["high"]), (0.95, 0.97))
        self.assertIsNone(harness.bootstrap_ci([0.9]))
        with tempfile.TemporaryDirectory() as t:  # FILE:KEY and one device at a time
            harness.write_json(os.path.join(t, "r.json"), {"gpu": {"cells": cells + [cell("p", "default", [0.1],
                                                                                          [0.1], "GPU Y")]}})
            with redirect_stdout(io.StringIO()) as out:
                self.assertEqual(harness.main(["dominance", os.path.join(t, "r.json:gpu"), "--default", "default"]), 2)
                self.assertEqual(harness.main(["dominance", os.path.join(t, "r.json:gpu"), "--default", "default",
                                               "--device", "GPU X", "--markdown", "--json", f"{t}/d.json"]), 0)
            self.assertIn("| p | default (default) | 0.96 (0.95-0.97) | 0.31 (0.30-0.32) | 3 | - | beaten by "
                          "co-execution; targets met; too few runs: 1 more mode(s) beside co-execution |",
                          out.getvalue())
            self.assertEqual([r["scenario"] for r in harness.read_json(f"{t}/d.json")["verdicts"]], ["p", "q"])
            with self.assertRaisesRegex(harness.HarnessError, "r.json: no key 'cpu'"):
                harness.pool([os.path.join(t, "r.json:cpu")])


    def test_a_recorded_command_names_the_output_folder_as_out(self):
        self.assertEqual(harness.recorded_command(["run", "--out", "/srv/o/a/gpu0"], "/srv/o/"),
                         "python3 bench/gpu/harness.py run --out $OUT/a/gpu0")
        self.assertEqual(harness.recorded_command(["run", "--out", "/srv/other"], "/srv/o"),
                         "python3 bench/gpu/harness.py run --out /srv/other")  # only the folder itself
        self.assertEqual(harness.recorded_command(["run", "--out", "/srv/o"], None),
                         "python3 bench/gpu/harness.py run --out /srv/o")

    def test_dominance_shows_the_defaults_first_and_next_starts_apart(self):
        def cell(mode, prod, opp, mechanism=None):
            per_run = {"production": prod, "opportunistic": opp}
            if mechanism is not None:
                per_run["mechanism"] = mechanism
            return {"scenario": "p", "production_model": "a", "opportunistic_model": "b", "mode": mode, "setting": "-",
                    "device": "GPU X", "driver": "1", "date": "d", "command": "c", "runs": len(prod), "per_run": per_run}
        first, safe = "time-sliced (kernels-unmeasured)", "mps-client (measured-safe)"
        cells = [cell("auto", [0.70, 0.96, 0.97, 0.95], [0.10, 0.30, None, 0.32], [first, safe, safe, safe]),
                 cell("auto", [0.94], [0.2]),  # a summary older than the field: pooled, in neither part
                 cell("co-execution", [0.50, 0.52, 0.51], [0.9, 0.9, 0.9]),
                 cell("other", [0.2, 0.2], [0.1, 0.1], [first, first])]  # not the default: never split
        targets = {"production": 0.95, "production_low": 0.92, "opportunistic": {}}
        row = harness.dominance(cells, "auto", targets, {"default": 3, "others": 2, "modes": 2})[0]
        modes = row["modes"]
        self.assertEqual(set(modes), {"auto", "auto, first start", "auto, next start", "co-execution", "other"})
        self.assertEqual([modes[m]["runs"] for m in ("auto", "auto, first start", "auto, next start")], [5, 1, 3])
        self.assertEqual(modes["auto, next start"]["per_run"]["production"], [0.96, 0.97, 0.95])
        self.assertEqual(modes["auto, next start"]["per_run"]["opportunistic"], [0.30, 0.32])
        self.assertEqual(modes["auto, first start"]["production"]["median"], 0.70)
        # The parts are the default's own runs: they beat nothing, lack no runs and count as no other mode.
        self.assertEqual(row["beaten_by"], [])
        self.assertEqual(row["too_few_runs"], ["1 more mode(s) beside co-execution"])
        with redirect_stdout(io.StringIO()) as out:
            harness.dominance_table([row], True)
        lines = [x.split(" | ")[1] for x in out.getvalue().splitlines()[2:]]
        self.assertEqual(lines, ["auto (default)", "auto, first start", "auto, next start", "co-execution", "other"])
        self.assertEqual([harness.start_of(m) for m in (first, safe, "time-sliced (long-kernels)", None)],
                         ["first start", "next start", "next start", None])


class Data(unittest.TestCase):
    def test_errors_name_what_is_wrong(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write('[pairs]\nx = { production = "nope", opportunistic = "dlrm" }\n')
            f.flush()
            with self.assertRaisesRegex(harness.HarnessError, "pair 'x': production job 'nope' is not in"):
                harness.load_data([os.path.join(GPU, "scenarios.toml"), f.name])
        with self.assertRaisesRegex(harness.HarnessError, "missing.toml: No such file"):
            harness.load_data(["missing.toml"])
        with self.assertRaisesRegex(harness.HarnessError, "mode 'm': cannot fill .* unknown placeholder 'budget_mib'"):
            harness.fill(["--memory-budget-mib", "{budget_mib}"], {}, "mode 'm'")
        with self.assertRaisesRegex(harness.HarnessError, "--set 'nope=1': want KEY=VALUE"):
            harness.parse_sets(["nope=1"], {"windows": 8})
        self.assertEqual(harness.parse_sets(["windows=3", "baseline=alone"], {"windows": 8, "baseline": "x"}),
                         {"windows": 3, "baseline": "alone"})
        for args, error in ((["--pairs", "nope"], "--pairs: unknown pair 'nope' (known: low, high"),
                            (["--modes", "nope"], "--modes: unknown mode 'nope' (known: alone, interposer")):
            r = subprocess.run([sys.executable, HARNESS, "run", "--plan", *args], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn(error, r.stderr)

    def test_the_plan_interleaves_and_runs_nothing(self):
        with redirect_stdout(io.StringIO()) as out:
            rc = harness.main(["run", "--plan", "--pairs", "high,memory-bert", "--modes", "alone,tgs",
                               "--out", "/nonexistent/never-written"])
        self.assertEqual(rc, 0)
        runs = [f"{r}/{p}/{m}" for r in "12" for p in ("high", "memory-bert") for m in ("alone", "tgs")]
        self.assertEqual([line.split()[0] for line in out.getvalue().splitlines()[1:-1]], runs)
        self.assertRegex(out.getvalue(), r"8 runs, about \d+ s")
        self.assertFalse(os.path.exists("/nonexistent/never-written"))

    def test_a_profiles_windows_follow_its_setting(self):
        def planned_s(*sets):
            with redirect_stdout(io.StringIO()) as out:
                self.assertEqual(harness.main(["profile", "mobilenet_v2_b64", "--plan", *sets]), 0)
            return int(out.getvalue().splitlines()[-1].split("about ")[1].split(" s")[0])
        # Each measured window is a second of the estimate, so 25 fewer windows plan 25 s less.
        self.assertEqual(planned_s() - planned_s("--set", "profile_windows=5"), 25)


class TrainWindows(unittest.TestCase):
    def test_windows_count_steps_on_their_own_clock(self):
        lines, now = [], [0.0]
        w = train.Windows(0.01, lines.append, clock=lambda: now[0])
        for _ in range(3):
            w.step_done()
        now[0] = 0.5
        for _ in range(50):
            if not lines:
                w.stopped.wait(0.02)
        w.stopped.set()
        self.assertEqual(len(lines), 1)
        self.assertEqual((lines[0]["iterations"], lines[0]["iter_per_s"]), (3, 4.0))  # 2 steps after the first
        self.assertEqual((lines[0]["event"], lines[0]["t"], lines[0]["window_s"]), ("window", 0.5, 0.5))

    def test_kernel_spans_give_busy_time_kernels_and_gaps(self):  # 2 steps; 100-300 and 250-400 us overlap
        self.assertEqual(train.span_stats([(600, 700), (100, 300), (250, 400)], 2, 0.0008), {
            "event": "kernels", "busy_fraction": 0.5, "kernels_per_step": 1.5, "gaps_per_step": 1.0})


class FakeGpu(unittest.TestCase):
    """Whole calls through the code a GPU runs: tgs-fake-train jobs on the fake driver, a real
    tgs-node, an MPS control stand-in that logs what it is told, and a job that dies."""

    def test_calls_against_the_fake_driver(self):
        build = os.environ.get("TGS_BUILD_DIR", "")
        self.assertTrue(os.path.exists(f"{build}/bin/tgs-fake-train"), "TGS_BUILD_DIR: a build with tgs-fake-train")
        with tempfile.TemporaryDirectory() as t:
            os.mkdir(os.path.join(t, "bin"))
            control, log = os.path.join(t, "bin", "nvidia-cuda-mps-control"), os.path.join(t, "mps.log")
            with open(control, "w") as f:
                f.write(f'#!/bin/sh\n[ "$1" = -d ] && echo start >> {log} || {{ read c; echo "$c" >> {log}; }}\n')
            os.chmod(control, 0o755)
            with open(os.path.join(t, "dying.toml"), "w") as f:
                f.write('[jobs]\ndying = { program = ["{build}/bin/tgs-fake-train", "--report", "{window_s}"], '
                        'args = ["--seconds", "0", "--fail-at", "1", "--fail", "abort"] }\n[pairs]\nfake-dying = '
                        '{ production = "fake_production", opportunistic = "dying", modes = ["mps"] }\n')
            device = f"tgs-harness-test-{os.getpid()}"
            # The fake NVML on the library path: tgs-node counts its GPUs through NVML, as on a GPU node.
            env = {**os.environ, "PATH": f"{t}/bin:{os.environ['PATH']}", "TGS_FAKE_DEVICE": device,
                   "LD_LIBRARY_PATH": f"{build}/fake-driver"}
            self.addCleanup(lambda: os.path.exists(f"/dev/shm/{device}-0") and os.unlink(f"/dev/shm/{device}-0"))

            def call(out, *args):
                return subprocess.run([sys.executable, HARNESS, *args, "--no-build", "--build", build, "--out",
                                       f"{t}/{out}", "--free-mib", "16384", "--data", f"{GPU}/scenarios.toml",
                                       "--data", f"{t}/dying.toml"], env=env, capture_output=True, text=True)
            # Convergence at half the measured rate: on a loaded CI machine the fake jobs' windows
            # swing more than the 10% a GPU call allows, and this checks where it is computed.
            r = call("a", "run", "--pairs", "fake,fake-memory", "--set", "rounds=2", "--set", "idle_s=1",
                     "--set", "convergence_target=0.5")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(r.stdout.rstrip().splitlines()[-1].startswith("summary: "))
            cells = {(c["scenario"], c["mode"]): c for c in harness.read_json(f"{t}/a/summary.json")["cells"]}
            self.assertEqual(set(cells), {("fake", m) for m in ("alone", "mps", "tgs", "idle-harvest")}
                             | {("fake-memory", "alone"), ("fake-memory", "tgs")})
            for key, c in cells.items():
                self.assertEqual((c["runs"], c["unsteady_runs"]), (2, 0), c)
                self.assertGreater(c["production"]["min"], 0, c)
                if key != ("fake-memory", "tgs"):  # beside a tgs-node only (the memory pair's slow job may not)
                    self.assertEqual(c["convergence_s"] is not None, key[1] in ("tgs", "idle-harvest"), c)
            self.assertAlmostEqual(cells[("fake", "alone")]["opportunistic"]["median"], 1.0)
            self.assertNotIn(None, cells[("fake", "mps")]["per_run"]["recovery_s"])
            self.assertIn("--memory-budget-mib 5547", cells[("fake-memory", "tgs")]["setting"])  # 8320 / 1.5
            runs = harness.read_jsonl(f"{t}/a/runs.jsonl")
            self.assertEqual([x["round"] for x in runs], [1] * 6 + [2] * 6)  # interleaved rounds
            sampled = {x["run"] for x in harness.read_jsonl(f"{t}/a/status-samples.jsonl")}
            self.assertEqual(sampled, {x["run"] for x in runs if x["node"]})

            r = call("b", "run", "--pairs", "fake-dying", "--set", "rounds=1", "--set", "window_s=0.25")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertRegex(r.stdout, r"failed 1/fake-dying/mps: the opportunistic job \(dying\) exited with status")
            with open(log) as f:
                self.assertEqual(f.read().split(), ["start", "quit"] * 3)  # two fake/mps runs and the failed one

            # One call per GPU at once (run --gpus): the pairs dealt out, each call on its own GPU.
            r = call("d", "run", "--gpus", "0,1", "--pairs", "fake,fake-memory", "--modes", "alone",
                     "--set", "rounds=1", "--set", "window_s=0.25")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for gpu, pair in ((0, "fake"), (1, "fake-memory")):
                c = harness.read_json(f"{t}/d/gpu{gpu}/call.json")
                self.assertEqual((c["gpu"], c["cuda_visible_devices"], list(c["pairs"])), (gpu, str(gpu), [pair]))
                self.assertRegex(c["command"], rf"--gpu {gpu} --cpu-part {gpu + 1}/2 ")
            pooled = harness.read_json(f"{t}/d/summary.json")
            self.assertEqual(sorted(x["scenario"] for x in pooled["cells"]), ["fake", "fake-memory"])

            r = call("c", "profile", "fake_production", "--set", "window_s=0.25", "--set", "windows=12")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            row = harness.read_json(f"{t}/c/profile.json")
            self.assertTrue(row["it_per_s"] > 0 and row["blocks_per_s"] > 0 and row["jitter"]["p5"] <= 1.0, row)


if __name__ == "__main__":
    unittest.main()
