# SPDX-License-Identifier: Apache-2.0
"""The Python module against tgs-sim: the same run gives the same results (tgs-sim's JSON holds
them rounded to 4 decimals) and the same files, and bad input the same message."""
import csv
import json
import math
import os
import tempfile
import unittest

import tgs
from support import SIM_DATA, SOURCE, TRACE_DATA, philly, tgs_sim


def rounded(value):
    """A Python result as tgs-sim writes it in JSON: 4 decimals, in nested records (node_choice) too."""
    if isinstance(value, float):
        return float(f"{value:.4f}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def as_cli(records, drop=("wall_s",)):
    return [{k: rounded(v) for k, v in r.items() if k not in drop} for r in records]


def cli_json(*args, drop=("wall_s",)):
    records = json.loads(tgs_sim(*args, "--format", "json").stdout)
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


class SameResults(unittest.TestCase):
    def test_pairs_paper_scenarios(self):
        self.assertEqual(as_cli(tgs.pairs()["results"]), cli_json("pairs"))

    def test_pairs_measured_on_another_gpu(self):
        # Cells with their own memory policy, budget, settings and an idle production job.
        self.assertEqual(as_cli(tgs.pairs(gpu="h100-80gb")["results"]), cli_json("pairs", "--gpu", "h100-80gb"))

    def test_pairs_custom_with_settings_noise_and_memory(self):
        args = ["pairs", "--production", "resnet50", "--opportunistic", "dlrm", "--policies", "tgs,mps,token-bucket",
                "--memory-policy", "hard-limit", "--memory.hard-limit.production-fraction", "0.6",
                "--tgs.dead-band", "0.15", "--token-bucket.budget-blocks", "5000", "--observation-noise", "0.07",
                "--seed", "3", "--duration", "300", "--warmup", "30", "--memory-budget-gib", "30"]
        py = tgs.pairs(production="resnet50", opportunistic="dlrm", policies=["tgs", "mps", "token-bucket"],
                       memory_policy="hard-limit", observation_noise=0.07, seed=3, duration=300, warmup=30,
                       memory_budget_gib=30,
                       settings={"memory.hard-limit.production-fraction": 0.6, "tgs.dead-band": 0.15,
                                 "token-bucket.budget-blocks": 5000})
        self.assertEqual(as_cli(py["results"]), cli_json(*args))

    def test_pairs_timeline(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "timeline.csv")
            tgs_sim("pairs", "--timeline", path, "--observation-noise", "0.05", "--seed", "3", "--policies", "tgs,mig")
            with open(path) as f:
                cli = list(csv.DictReader(f))
        tl = tgs.pairs(timeline=True, observation_noise=0.05, seed=3, policies=["tgs", "mig"])["timeline"]
        self.assertEqual(len(cli), len(tl["start_s"]))
        for i, row in enumerate(cli):
            budget = tl["opportunistic_budget_blocks"][i]
            self.assertEqual(row, {
                "scenario": tl["scenario"][i], "policy": tl["policy"][i], "start_s": f"{tl['start_s'][i]:.3f}",
                "end_s": f"{tl['end_s'][i]:.3f}", "production": f"{tl['production'][i]:.5f}",
                "opportunistic": f"{tl['opportunistic'][i]:.5f}",
                "opportunistic_budget_blocks": "" if math.isnan(budget) else str(int(budget)),
                "phase": tl["phase"][i]}, f"row {i + 2}")

    def test_mixed_summary_and_out_files(self):
        with tempfile.TemporaryDirectory() as d:
            cli_out, py_out = os.path.join(d, "cli"), os.path.join(d, "py")
            args = ["mixed", "--seed", "5", "--production-jobs", "20", "--opportunistic-jobs", "30",
                    "--interarrival-minutes", "10", "--policies", "tgs,mps,antman", "--lookahead", "4",
                    "--tgs.dead-band", "0.05", "--out", cli_out]
            py = tgs.mixed(seed=5, production_jobs=20, opportunistic_jobs=30, interarrival_minutes=10,
                           policies=["tgs", "mps", "antman"], lookahead=4, settings={"tgs.dead-band": 0.05},
                           out=py_out)
            self.assertEqual(as_cli(py["summary"]), cli_json(*args))
            for name in ("jobs.csv", "cdf.csv", "utilization.csv"):
                with open(os.path.join(cli_out, name)) as a, open(os.path.join(py_out, name)) as b:
                    self.assertEqual(a.read(), b.read(), name)
            # The columns are the files' columns.
            with open(os.path.join(cli_out, "jobs.csv")) as f:
                jobs = list(csv.DictReader(f))
        self.assertEqual(len(jobs), len(py["jobs"]["job"]))
        for i in (0, len(jobs) // 2, len(jobs) - 1):
            self.assertEqual(jobs[i]["policy"], py["jobs"]["policy"][i])
            self.assertEqual(jobs[i]["jct_s"], f"{py['jobs']['jct_s'][i]:.3f}")

    def test_replay_small_trace(self):
        pollux = os.path.join(TRACE_DATA, "pollux.csv")
        args = ["replay", "--trace", pollux, "--cluster", "1x8", "--no-progress", "--production-share", "0.3",
                "--label-seed", "7", "--label-models", "resnet50,gcn", "--preempted-keep-progress"]
        py = tgs.replay(pollux, cluster="1x8", production_share=0.3, label_seed=7, label_models="resnet50,gcn",
                        preempted_keep_progress=True)
        self.assertEqual(as_cli(py["summary"]), cli_json(*args))

    def test_replay_philly(self):
        for name in ("philly_jobs_pollux.csv", "philly_multigpu_pass_attempts.json"):
            with self.subTest(trace=name):
                path = philly(name)
                py = tgs.replay(path, policies=["tgs", "mig"])
                self.assertEqual(as_cli(py["summary"]), cli_json("replay", "--trace", path, "--policies", "tgs,mig",
                                                                  "--no-progress"))

    def test_fit_and_profiles(self):
        m = tgs.Model()
        self.assertEqual(m.fit(), json.loads(tgs_sim("fit", "--format", "json").stdout))
        self.assertEqual(m.profiles(), json.loads(tgs_sim("profiles", "--format", "json").stdout))

    def test_fit_write(self):
        with tempfile.TemporaryDirectory() as d:
            cli_path, py_path = os.path.join(d, "cli.csv"), os.path.join(d, "py.csv")
            cli = json.loads(tgs_sim("fit", "--write", cli_path, "--format", "json").stdout)
            py = tgs.Model().fit(write=py_path)
            self.assertEqual(py, cli)
            self.assertFalse(py["from_cache"])
            with open(cli_path) as a, open(py_path) as b:
                self.assertEqual(a.read(), b.read())
        self.assertTrue(tgs.Model().fit()["from_cache"])  # the model keeps its fit

    def test_predict(self):
        m = tgs.Model()
        self.assertEqual(m.predict(gpu="h100-80gb", format="table"), tgs_sim("predict", "--gpu", "h100-80gb").stdout)
        self.assertEqual(m.predict(gpu="h200-141gb", leave_one_out=True, format="markdown"),
                         tgs_sim("predict", "--gpu", "h200-141gb", "--leave-one-out", "--markdown").stdout)
        records = m.predict(gpu="h200-141gb", leave_one_out=True)
        with open(os.path.join(SOURCE, "sim", "data", "measured_pairs.csv")) as f:
            rows = [r for r in csv.reader(line for line in f if not line.startswith("#"))]
        gpu = rows[0].index("gpu")
        self.assertEqual(len(records), sum(1 for r in rows[1:] if r[gpu] == "h200-141gb"))
        for r in records:
            self.assertEqual(r["gpu"], "h200-141gb")
            # A prediction for each measured throughput, from both fits.
            for side in ("production", "opportunistic"):
                measured = r[f"measured_{side}"] is not None
                self.assertEqual(r[side] is not None, measured, r)
                self.assertEqual(r[f"left_out_{side}"] is not None, measured, r)
                # Each with its calibrated 95% interval (the table's "±"): the fit's covariance and
                # the model's error, so at least as wide as the covariance alone.
                for prefix in ("", "left_out_"):
                    value, se, sd, interval = (r[f"{prefix}{side}"], r[f"{prefix}{side}_se"],
                                               r[f"{prefix}{side}_sd"], r[f"{prefix}{side}_interval"])
                    self.assertEqual(interval is not None, measured, r)
                    if measured:
                        self.assertGreaterEqual(sd, se)
                        self.assertGreaterEqual(se, 0)
                        self.assertAlmostEqual(interval[1], value + 1.959964 * sd)
                        self.assertAlmostEqual(interval[0], max(0.0, value - 1.959964 * sd))


class SameMessages(unittest.TestCase):
    """tgs-sim prints "tgs-sim: MESSAGE" for bad input, or, for a flag its parser refuses,
    "MESSAGE" and a hint; Python raises MESSAGE. A setting is named as it was given: a flag
    with its dashes, a Python key without."""

    def check(self, args, call):
        r = tgs_sim(*args, check=False)
        self.assertNotEqual(r.returncode, 0, args)
        with self.assertRaises(tgs.InputError) as e:
            call()
        first = r.stderr.splitlines()[0]
        for setting in (a for a in args if a.startswith("--") and "." in a):
            first = first.replace(setting, setting[2:])
        self.assertIn(first, (f"tgs-sim: {e.exception}", str(e.exception)), args)

    def test_pairs(self):
        cases = [
            (["pairs", "--policies", "foo"], lambda: tgs.pairs(policies=["foo"])),
            (["pairs", "--memory-policy", "foo"], lambda: tgs.pairs(memory_policy="foo")),
            (["pairs", "--duration", "0.5"], lambda: tgs.pairs(duration=0.5)),
            (["pairs", "--warmup", "-1"], lambda: tgs.pairs(warmup=-1)),
            (["pairs", "--memory-budget-gib", "0"], lambda: tgs.pairs(memory_budget_gib=0)),
            (["pairs", "--observation-noise", "2"], lambda: tgs.pairs(observation_noise=2)),
            (["pairs", "--production-drift", "1"], lambda: tgs.pairs(production_drift=1)),
            (["pairs", "--production", "x"], lambda: tgs.pairs(production="x")),
            (["pairs", "--duration", "30"], lambda: tgs.pairs(duration=30)),
            (["pairs", "--gpu", "h100"], lambda: tgs.pairs(gpu="h100")),
            (["pairs", "--production", "nope", "--opportunistic", "gcn"],
             lambda: tgs.pairs(production="nope", opportunistic="gcn")),
            (["pairs", "--policies", "tgs", "--tgs.dead-band", "2"],
             lambda: tgs.pairs(policies=["tgs"], settings={"tgs.dead-band": 2})),
            (["pairs", "--policies", "mps", "--tgs.dead-band", "0.1"],
             lambda: tgs.pairs(policies=["mps"], settings={"tgs.dead-band": 0.1})),
            (["pairs", "--memory.hard-limit.production-fraction", "0.6"],
             lambda: tgs.pairs(settings={"memory.hard-limit.production-fraction": 0.6})),
        ]
        for args, call in cases:
            with self.subTest(args=args):
                self.check(args, call)

    def test_cluster(self):
        pollux = os.path.join(TRACE_DATA, "pollux.csv")
        cases = [
            (["mixed", "--production-jobs", "-1"], lambda: tgs.mixed(production_jobs=-1)),
            (["mixed", "--interarrival-minutes", "0"], lambda: tgs.mixed(interarrival_minutes=0)),
            (["mixed", "--cluster", "2by8"], lambda: tgs.mixed(cluster="2by8")),
            (["mixed", "--cluster", "1x2:h900"], lambda: tgs.mixed(cluster="1x2:h900")),
            (["mixed", "--seed", "-1"], lambda: tgs.mixed(seed=-1)),
            (["mixed", "--policies", "tgs", "--mps.production-threads", "0.5"],
             lambda: tgs.mixed(policies=["tgs"], settings={"mps.production-threads": 0.5})),
            (["replay", "--trace", "nope.csv"], lambda: tgs.replay("nope.csv")),
            (["replay", "--trace", pollux, "--trace-format", "foo"], lambda: tgs.replay(pollux, trace_format="foo")),
            (["replay", "--trace", pollux, "--production-share", "2"], lambda: tgs.replay(pollux, production_share=2)),
            (["replay", "--trace", pollux, "--label-seed", "-1"], lambda: tgs.replay(pollux, label_seed=-1)),
            (["replay", "--trace", pollux, "--cluster", "1x8:h900", "--no-progress"],
             lambda: tgs.replay(pollux, cluster="1x8:h900")),
            (["replay", "--trace", os.path.join(TRACE_DATA, "too_large_job.csv"), "--cluster", "4x8", "--no-progress"],
             lambda: tgs.replay(os.path.join(TRACE_DATA, "too_large_job.csv"), cluster="4x8")),
            (["replay", "--trace", os.path.join(SIM_DATA, "bad.csv"), "--no-progress"],
             lambda: tgs.replay(os.path.join(SIM_DATA, "bad.csv"))),
            (["--measurements", os.path.join(SIM_DATA, "unknown_model_pairs.csv"), "pairs"],
             lambda: tgs.Model(measurements=os.path.join(SIM_DATA, "unknown_model_pairs.csv"))),
            (["predict", "--gpu", "h900"], lambda: tgs.Model().predict(gpu="h900")),
            (["fit", "--write", os.path.join(SIM_DATA, "no-such-folder", "fit.csv")],
             lambda: tgs.Model().fit(write=os.path.join(SIM_DATA, "no-such-folder", "fit.csv"))),
        ]
        for args, call in cases:
            with self.subTest(args=args):
                self.check(args, call)


if __name__ == "__main__":
    unittest.main()
