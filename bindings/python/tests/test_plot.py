# SPDX-License-Identifier: Apache-2.0
"""tgs.plot: every plot from Python results and from the files tgs-sim and the GPU harness write,
checked to be a valid PNG or SVG with real content (many colours, the axis labels), and its
errors."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import matplotlib.image
import numpy as np

import tgs
import tgs.plot
from support import SOURCE, tgs_sim

SVG = "{http://www.w3.org/2000/svg}"


def write_lines(path, objects):
    with open(path, "w") as f:
        f.writelines(json.dumps(o) + "\n" for o in objects)


def harness_folder(d):
    """A made-up harness output folder in the harness's formats (bench/gpu/harness.py): one tgs run
    of the pair "high", production alone from t=1000, the opportunistic job registered at t=1009.75,
    status samples once a second and 2 s rate windows; alone rates 10 and 40 it/s."""
    write_lines(os.path.join(d, "runs.jsonl"), [{"run": "1/high/tgs", "pair": "high", "mode": "tgs", "node": True,
                                                 "jobs": {"production": {"job": "resnet50_b256"},
                                                          "opportunistic": {"job": "shufflenet_b128"}}}])
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"baseline_it_per_s": {"resnet50_b256": 10.0, "shufflenet_b128": 40.0}, "cells": []}, f)
    samples = []
    for i in range(60):
        t = 1000.0 + i
        jobs = [{"job": 1, "gpu": 0, "class": "production", "up_s": i, "blocks_per_s": 1e6}]
        gpus = [{"gpu": 0, "phase": "unthrottled", "budget_blocks": None}]
        if t >= 1010:
            jobs.append({"job": 2, "gpu": 0, "class": "opportunistic", "up_s": t - 1009.75, "blocks_per_s": 1e5})
            phase = "profiling" if t < 1035 else "slow_start" if t < 1045 else "congestion_avoidance"
            gpus = [{"gpu": 0, "phase": phase, "budget_blocks": 0 if phase == "profiling" else 20000 + 100 * i,
                     "controller": {"max_rate": 1e6}}]
        samples.append({"run": "1/high/tgs", "t": t, "gpus": gpus, "jobs": jobs})
    write_lines(os.path.join(d, "status-samples.jsonl"), samples)
    windows = [{"run": "1/high/tgs", "class": "production", "t": 1000.0 + 2 * i, "line": {"iter_per_s": 9.5}}
               for i in range(30)]
    windows += [{"run": "1/high/tgs", "class": "opportunistic", "t": 1012.0 + 2 * i, "line": {"iter_per_s": 8.0}}
                for i in range(24)]
    write_lines(os.path.join(d, "windows.jsonl"), windows)
    return d


class ImageChecks(unittest.TestCase):
    def assert_png(self, path, min_colors=8):
        with open(path, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n", path)
        width, height = struct.unpack(">II", head[16:24])
        self.assertGreater(min(width, height), 300, path)
        pixels = matplotlib.image.imread(path)[..., :3]
        ink = np.mean(np.any(pixels < 0.9, axis=-1))
        self.assertGreater(ink, 0.03, f"{path}: almost blank")
        colors = np.unique((pixels.reshape(-1, 3) * 15).round(), axis=0)
        self.assertGreaterEqual(len(colors), min_colors, f"{path}: too few colours")
        self.assertLess(os.path.getsize(path), 400_000, path)

    def assert_svg(self, path, texts):
        root = ET.parse(path).getroot()
        self.assertEqual(root.tag, f"{SVG}svg")
        self.assertGreater(len(root.findall(f".//{SVG}path")), 20, path)
        shown = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
        for text in texts:
            self.assertIn(text, shown, path)


class Colours(unittest.TestCase):
    def test_each_policy_keeps_its_colour(self):
        registry = tgs.rate_policies()
        colours = [tgs.plot.policy_color(p) for p in registry]
        self.assertEqual(len(set(colours)), len(registry))
        self.assertEqual(tgs.plot.policy_color("tgs", ["alone-mps", "tgs"]), colours[0])
        others = ["alone-mps", "fixed-share"]
        self.assertNotEqual(tgs.plot.policy_color(others[0], others), tgs.plot.policy_color(others[1], others))
        self.assertNotIn(tgs.plot.policy_color(others[0], others), colours)


class Cdf(ImageChecks):
    @classmethod
    def setUpClass(cls):
        cls.result = tgs.mixed(policies=["tgs", "mps"])

    def test_from_a_result(self):
        with tempfile.TemporaryDirectory() as d:
            fig = tgs.plot.cdf(self.result, os.path.join(d, "cdf.png"))
            self.assertEqual(len(fig.axes), 2)
            self.assertEqual([len(ax.get_lines()) for ax in fig.axes], [3, 3])  # exclusive, tgs, mps
            self.assert_png(os.path.join(d, "cdf.png"))
            tgs.plot.cdf(self.result, os.path.join(d, "cdf.svg"))
            self.assert_svg(os.path.join(d, "cdf.svg"), ["production jobs", "opportunistic jobs", "fraction of jobs",
                                                         "job completion time (hours, log scale)", "tgs (",
                                                         "mixed stream: 50 production"])

    def test_from_the_files_of_tgs_sim(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out")
            tgs_sim("mixed", "--policies", "tgs", "--out", out)
            fig = tgs.plot.cdf(out, os.path.join(d, "a.png"))
            lines = fig.axes[0].get_lines()
            # Each line is labelled with the policy's normalized mean JCT from summary.json.
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual([line.get_label() for line in lines],
                             [f"{r['policy']} ({r['production_jct']:.2f}x)" for r in summary])
            self.assert_png(os.path.join(d, "a.png"))
            # cdf.csv alone: the quantiles tgs-sim wrote.
            fig = tgs.plot.cdf(os.path.join(out, "cdf.csv"), os.path.join(d, "b.png"), classes=["opportunistic"])
            self.assertEqual(len(fig.axes), 1)
            self.assert_png(os.path.join(d, "b.png"))

    def test_errors(self):
        with self.assertRaisesRegex(tgs.InputError, r"cdf: no results for sjf \(have: exclusive, tgs, mps\)"):
            tgs.plot.cdf(self.result, policies=["sjf"])
        with self.assertRaisesRegex(tgs.InputError, r"no such file"):
            tgs.plot.cdf("nowhere")
        with self.assertRaisesRegex(tgs.InputError, r"expected a file name ending in .png or .svg"):
            tgs.plot.cdf(self.result, "cdf.jpg")
        with self.assertRaisesRegex(tgs.InputError, r"cdf: expected the result of tgs.mixed or tgs.replay"):
            tgs.plot.cdf({"results": []})


class Timeline(ImageChecks):
    @classmethod
    def setUpClass(cls):
        cls.pairs = tgs.pairs(timeline=True, policies=["tgs", "mps"])

    def test_simulated(self):
        with tempfile.TemporaryDirectory() as d:
            fig = tgs.plot.timeline(self.pairs, path=os.path.join(d, "t.svg"), scenario="high-contention")
            self.assertEqual(len(fig.axes), 3)
            self.assert_svg(os.path.join(d, "t.svg"), ["throughput / alone", "opportunistic budget",
                                                       "time since the opportunistic job arrived (s)", "profiling",
                                                       "slow start", "high-contention (resnet50/shufflenet"])
            tgs.plot.timeline(self.pairs, path=os.path.join(d, "t.png"))
            self.assert_png(os.path.join(d, "t.png"))

    def test_the_csv_of_tgs_sim(self):
        with tempfile.TemporaryDirectory() as d:
            csv_path = os.path.join(d, "timeline.csv")
            tgs_sim("pairs", "--timeline", csv_path, "--policies", "tgs")
            tgs.plot.timeline(csv_path, path=os.path.join(d, "t.png"), scenario="memory-oversubscribed")
            self.assert_png(os.path.join(d, "t.png"))

    def test_real_samples_are_read_as_the_harness_writes_them(self):
        with tempfile.TemporaryDirectory() as d:
            r = tgs.plot._real_timeline(harness_folder(d), None)
        self.assertEqual(r["run"], "1/high/tgs")
        self.assertEqual(r["t"][0], 0.25)  # up 0.25 s at 1010: it registered at 1009.75
        self.assertEqual(r["phase"][:2], ["profiling", "profiling"])
        self.assertEqual(r["budget"][-1], 20000 + 100 * 59)
        np.testing.assert_allclose(r["rates"]["production"][:, 1], 0.95)
        np.testing.assert_allclose(r["rates"]["opportunistic"][:, 1], 0.2)
        self.assertEqual(r["rates"]["opportunistic"][0, 0], 2.25)  # its first window, at 1012
        self.assertIsNone(r["note"])

    def test_simulated_and_real_on_the_same_axes(self):
        with tempfile.TemporaryDirectory() as d:
            fig = tgs.plot.timeline(self.pairs, harness_folder(d), os.path.join(d, "both.svg"),
                                    scenario="high-contention")
            labels = [line.get_label() for line in fig.axes[0].get_lines()]
            self.assertEqual(labels, ["production (GPU)", "opportunistic (GPU)"])
            # The simulated run is far longer than the real one: the axes show the real run's span.
            r = tgs.plot._real_timeline(d, None)
            self.assertEqual(fig.axes[2].get_xlim(), (min(r["t"][0], 0.0) - 5.0, r["t"][-1] + 5.0))
            self.assert_svg(os.path.join(d, "both.svg"), ["GPU", "sim", "congestion avoidance",
                                                          "GPU: run 1/high/tgs", "GPU (tgs-node)"])
            tgs.plot.timeline(real=os.path.join(d, "status-samples.jsonl"), path=os.path.join(d, "real.png"))
            self.assert_png(os.path.join(d, "real.png"))

    def test_errors(self):
        with self.assertRaisesRegex(tgs.InputError, r"run tgs.pairs\(\.\.\., timeline=True\)"):
            tgs.plot.timeline(tgs.pairs(policies=["mig"], duration=60, warmup=10))
        with self.assertRaisesRegex(tgs.InputError, r'no segments of policy "antman" \(have: tgs, mps\)'):
            tgs.plot.timeline(self.pairs, policy="antman")
        with self.assertRaisesRegex(tgs.InputError, r"give sim, real or both"):
            tgs.plot.timeline()
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "status-samples.jsonl")
            with open(bad, "w") as f:
                f.write('{"run": "1", "t": 1, "gpus": [], "jobs": []}\n{"run": \n')
            with self.assertRaisesRegex(tgs.InputError, r"status-samples.jsonl:2: not a JSON line"):
                tgs.plot.timeline(real=bad)
            harness_folder(d)
            with self.assertRaisesRegex(tgs.InputError, r'no samples of run "2/high/tgs" \(have: 1/high/tgs\)'):
                tgs.plot.timeline(real=d, run="2/high/tgs")


class Tradeoff(ImageChecks):
    RESULTS = os.path.join(SOURCE, "docs", "results", "rate-control.json")

    def test_simulated_and_real(self):
        pairs = tgs.pairs(policies=["tgs", "co-execution", "mps", "mig"])
        with tempfile.TemporaryDirectory() as d:
            fig = tgs.plot.tradeoff(pairs, self.RESULTS, os.path.join(d, "t.svg"), scenario="high-contention",
                                    real_scenario="high")
            self.assert_svg(os.path.join(d, "t.svg"), [
                "production throughput / alone", "opportunistic throughput / alone", "simulated (tgs-sim)",
                "GPU (median, min-max over runs)", "measured (NSDI'23 Figure 5)", "co-execution", "mig"])
            self.assertGreaterEqual(len(fig.axes[0].collections), 8)  # 4 simulated, 4 measured, the GPU cells
            tgs.plot.tradeoff(pairs, None, os.path.join(d, "sim.png"))
            self.assert_png(os.path.join(d, "sim.png"))

    def test_the_json_and_csv_of_tgs_sim(self):
        with tempfile.TemporaryDirectory() as d:
            for fmt in ("json", "csv"):
                path = os.path.join(d, f"pairs.{fmt}")
                with open(path, "w") as f:
                    f.write(tgs_sim("pairs", "--format", fmt).stdout)
                tgs.plot.tradeoff(path, path=os.path.join(d, f"{fmt}.png"), scenario="low-contention")
                self.assert_png(os.path.join(d, f"{fmt}.png"))

    def test_errors(self):
        with self.assertRaisesRegex(tgs.InputError, r"several scenarios \(high, low\): name one with real_scenario"):
            tgs.plot.tradeoff(real=self.RESULTS)
        with self.assertRaisesRegex(tgs.InputError, r'no scenario "nope"'):
            tgs.plot.tradeoff([{"scenario": "a", "policy": "tgs", "production": 1, "opportunistic": 0}],
                              scenario="nope")
        with self.assertRaisesRegex(tgs.InputError, r'no "cells" list'):
            tgs.plot.tradeoff(real=os.path.join(SOURCE, "CMakePresets.json"))


class CommandLine(ImageChecks):
    def run_plot(self, *args):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        return subprocess.run([sys.executable, "-m", "tgs.plot", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    def test_writes_png_and_svg(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out")
            tgs_sim("mixed", "--policies", "tgs", "--out", out)
            r = self.run_plot("cdf", out, "-o", os.path.join(d, "c.png"), "-o", os.path.join(d, "c.svg"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "c.png"))
            self.assert_svg(os.path.join(d, "c.svg"), ["production jobs"])
            csv_path = os.path.join(d, "timeline.csv")
            tgs_sim("pairs", "--timeline", csv_path, "--policies", "tgs")
            r = self.run_plot("timeline", "--sim", csv_path, "--real", harness_folder(d),
                              "-o", os.path.join(d, "t.png"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "t.png"))
            with open(os.path.join(d, "pairs.json"), "w") as f:
                f.write(tgs_sim("pairs", "--format", "json").stdout)
            r = self.run_plot("tradeoff", "--sim", os.path.join(d, "pairs.json"), "--real", Tradeoff.RESULTS,
                              "--scenario", "high-contention", "--real-scenario", "high",
                              "-o", os.path.join(d, "x.png"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "x.png"))

    def test_errors_and_help(self):
        r = self.run_plot("cdf", "nowhere", "-o", "x.png")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "tgs.plot: nowhere: no such file (expected a --out folder, jobs.csv or cdf.csv)\n")
        r = self.run_plot("timeline", "-o", "x.gif")
        self.assertEqual(r.returncode, 2)
        self.assertIn("tgs.plot: timeline: give sim, real or both", r.stderr)
        r = self.run_plot("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("cdf", r.stdout)
        self.assertIn("tradeoff", r.stdout)


if __name__ == "__main__":
    unittest.main()
