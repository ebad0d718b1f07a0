# SPDX-License-Identifier: Apache-2.0
"""sim/scripts/gpu_results.py: the simulator's tables from the real-GPU results (Tables: the
committed tables are the script's output), its cell classification and the harness-row converter."""
import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "sim", "scripts"))
import gpu_results  # noqa: E402


def data_rows(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [r for r in csv.reader(line for line in f if not line.startswith("#"))]


class Tables(unittest.TestCase):
    def test_measured_pairs_are_the_scripts_output(self):
        rows, _ = gpu_results.measured_pairs(os.path.join(REPO, "docs", "results"))
        out = io.StringIO()
        gpu_results.write_pairs(rows, out)
        with open(os.path.join(REPO, "sim", "data", "measured_pairs.csv"), encoding="utf-8") as f:
            self.assertEqual(out.getvalue(), f.read())

    def test_job_facts_are_the_scripts_output(self):
        out = io.StringIO()
        gpu_results.write_facts(gpu_results.job_facts(os.path.join(REPO, "docs", "results")), out)
        with open(os.path.join(REPO, "sim", "data", "job_facts.csv"), encoding="utf-8") as f:
            self.assertEqual(out.getvalue(), f.read())

    def test_h100_and_h200_profiles_are_the_scripts_output(self):
        have = subprocess.run(["git", "-C", REPO, "cat-file", "-e", "5dbc452^{commit}"], capture_output=True)
        if have.returncode != 0:
            self.skipTest("the raw runs files' commit 5dbc452 is not in this clone (a shallow clone?)")
        expected = [[str(x) for x in r] for r in gpu_results.model_rows(os.path.join(REPO, "docs", "results"), "5dbc452")]
        committed = [r for r in data_rows(os.path.join(REPO, "sim", "data", "models.csv")) if r[1] != "a100-40gb"]
        self.assertEqual(committed[1:], expected)  # the header first


class Facts(unittest.TestCase):
    def facts(self, **kw):
        data = {"cells": [{"device": "NVIDIA H200", "mode": "priority-share-auto", "production_model": "resnet50_b256",
                           "opportunistic_model": "shufflenet_b128"},
                          {"device": "NVIDIA H200", "mode": "co-execution", "production_model": "mobilenet_v2_b64",
                           "opportunistic_model": "resnet50_b32"}],
                "production_host_wait_alone": {"what": "x", "resnet50_b256": [0.44, 0.6, 0.5], "mobilenet_v2_b64": [0.1]},
                "opportunistic_longest_span_ms": {"what": "x", "from_the_launch_calls_entry": [900.0],
                                                  "from_the_launch_calls_return": [120.0, 150.5]}}
        data.update(kw)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "mechanism-choice.json"), "w", encoding="utf-8") as f:
                json.dump(data, f)
            return gpu_results.job_facts(d)

    def test_a_wait_is_the_median_of_its_runs_and_a_span_the_longest_of_the_nodes_runs(self):
        rows = {r["model"]: r for r in self.facts()}
        self.assertEqual(sorted(rows), ["mobilenet", "resnet50-b256", "shufflenet-b128"])
        self.assertEqual(rows["resnet50-b256"]["production_gpu_wait"], "0.5")
        self.assertIn("median of 3 runs (0.44 to 0.6)", rows["resnet50-b256"]["production_gpu_wait_source"])
        # The spans of tgs-node's runs, timed from the launch call's return; not a job it did not run.
        self.assertEqual(rows["shufflenet-b128"]["opportunistic_longest_span_ms"], "150.5")
        self.assertEqual(rows["shufflenet-b128"]["production_gpu_wait"], "")
        self.assertNotIn("resnet50-b32", rows)
        for r in rows.values():
            self.assertEqual(r["gpu"], "h200-141gb")
            # tgs-sim's tables have no quoted fields: a source holds no comma.
            self.assertNotIn(",", r["production_gpu_wait_source"] + r["opportunistic_longest_span_source"])

    def test_spans_by_job_supersede_the_pooled_ones(self):
        span = {"what": "x", "from_the_launch_calls_return": [250.0],
                "by_job": {"what": "y", "shufflenet_b128": [12.8, 11.4], "mobilenet_v2_b64": [10.4]}}
        rows = {r["model"]: r for r in self.facts(opportunistic_longest_span_ms=span)}
        self.assertEqual(rows["shufflenet-b128"]["opportunistic_longest_span_ms"], "12.8")
        self.assertIn("the longest of 2 runs (11.4 to 12.8 ms)", rows["shufflenet-b128"]["opportunistic_longest_span_source"])
        self.assertEqual(rows["mobilenet"]["opportunistic_longest_span_ms"], "10.4")
        self.assertEqual(rows["mobilenet"]["production_gpu_wait"], "0.1")  # its wait as a production job stays
        with self.assertRaisesRegex(gpu_results.ResultsError, r"by_job\.shufflenet_b128: expected a list of numbers"):
            self.facts(opportunistic_longest_span_ms={**span, "by_job": {"shufflenet_b128": "long"}})

    def test_an_unknown_job_or_device_is_refused_by_name(self):
        with self.assertRaisesRegex(gpu_results.ResultsError, "job 'alexnet' has no simulator name"):
            self.facts(production_host_wait_alone={"alexnet": [0.5]})
        with self.assertRaisesRegex(gpu_results.ResultsError, "expected the cells of one GPU type"):
            self.facts(cells=[{"device": "NVIDIA A100", "mode": "priority-share-auto", "opportunistic_model": "x"}])


class Cells(unittest.TestCase):
    def cell(self, **kw):
        return {"scenario": "low", "production_model": "ResNet-50 b32", "device": "NVIDIA H100 80GB HBM3",
                "opportunistic_model": "DLRM-like b2048, 8 tables of 2 GiB, uniform lookups", "runs": 2,
                "production": {"median": 0.9}, "opportunistic": {"median": 0.1}, "source": "x.json", **kw}

    def test_released_tgs_keeps_its_settings(self):
        row, why = gpu_results.classify("memory", self.cell(mode="tgs", tgs_node_flags=(
            "--policy tgs --memory-policy tgs --memory-budget-mib 12171 --memory-reserve-mib 1024 "
            "--production-window-ms 1000 --profile-windows 3 --max-profile-windows 6")))
        self.assertIsNone(why)
        self.assertEqual((row["policy"], row["memory_policy"], row["budget_gib"]), ("tgs", "tgs", "11.8857"))
        self.assertIn("tgs.production-window-ms=1000", row["settings"])
        self.assertIn("memory.tgs.reserve-mib=1024", row["settings"])

    def test_an_extension_that_no_longer_exists_is_left_out_with_why(self):
        row, why = gpu_results.classify("memory", self.cell(mode="tgs", tgs_node_flags="--policy tgs --sync-wait-correction"))
        self.assertIsNone(row)
        self.assertIn("--sync-wait-correction", why)

    def test_the_ceiling_mode_is_an_idle_production_job(self):
        row, _ = gpu_results.classify("memory", self.cell(mode="opp-limited", tgs_node_flags=(
            "--policy co-execution --memory-policy tgs --memory-budget-mib 12171")))
        self.assertEqual((row["policy"], row["production_idle"], row["production"]), ("co-execution", 1, None))

    def test_idle_harvest_cells_run_tgs_nodes_default_policy(self):
        low = {"production_model": "MobileNet v2 b64", "opportunistic_model": "ShuffleNet v2 b64", "tgs_node_flags": None}
        row, why = gpu_results.classify("idle-harvest", self.cell(mode="idle-harvest", **low))
        self.assertIsNone(why)
        self.assertEqual((row["policy"], row["settings"]), ("idle-harvest", ""))
        row, _ = gpu_results.classify("idle-harvest", self.cell(mode="mps", setting="MPS 100%/50%", **low))
        self.assertEqual((row["policy"], row["settings"]),
                         ("mps", "mps.opportunistic-threads=0.5 mps.production-threads=1"))
        row, why = gpu_results.classify("idle-harvest", self.cell(mode="idle-harvest-sample-200us", **low))
        self.assertIsNone(row)
        self.assertIn("--activity-sample-us", why)
        row, why = gpu_results.classify("idle-harvest", self.cell(
            mode="idle-harvest", **{**low, "tgs_node_flags": "--policy idle-harvest --activity-sample-us 20"}))
        self.assertIsNone(row)
        self.assertIn("--activity-sample-us", why)

    def test_priority_sharing_cells_run_mps_priority_and_priority_share(self):
        high = {"production_model": "resnet50_b256", "opportunistic_model": "shufflenet_b128"}
        row, why = gpu_results.classify("priority-sharing", self.cell(
            mode="mps-priority", setting="MPS 100%/100%, priority 0/1", **high))
        self.assertIsNone(why)
        self.assertEqual((row["policy"], row["production_model"], row["settings"]), (
            "mps", "resnet50-b256",
            "mps.opportunistic-below-normal=1 mps.opportunistic-threads=1 mps.production-threads=1"))
        row, why = gpu_results.classify("priority-sharing", self.cell(
            mode="priority-share-tolerate5", setting="tgs-node --policy priority-share --mps managed "
            "--priority-share.tolerated-slowdown 0.05", **high))
        self.assertEqual((row["policy"], row["settings"]), ("priority-share", "priority-share.tolerated-slowdown=0.05"))
        for mode, said in (("mps-priority-cap25", "fixed launch cap"), ("interposer-priority-share", "single-job")):
            row, why = gpu_results.classify("priority-sharing", self.cell(mode=mode, setting="x", **high))
            self.assertIsNone(row)
            self.assertIn(said, why)
        row, why = gpu_results.classify("priority-sharing", self.cell(mode="mps-priority", setting="MPS", **high))
        self.assertIsNone(row)
        self.assertIn("not 'MPS P%/O%, priority 0/1'", why)

    def test_the_harness_bert_job_is_the_profiled_one(self):
        # bench/gpu/scenarios.toml's bert_base_b32 runs sequences of 128, named with or without it.
        self.assertEqual(gpu_results.model_name("BERT-base b32"), "bert-base")
        self.assertEqual(gpu_results.model_name("BERT-base b32 seq 128"), "bert-base")
        self.assertIsNone(gpu_results.model_name("BERT-base b32 seq 512"))

    def test_other_devices_and_models_are_refused(self):
        self.assertIsNone(gpu_results.classify("memory", self.cell(device="Tesla T4"))[0])
        self.assertIsNone(gpu_results.classify("memory", self.cell(production_model="AlexNet b8"))[0])


class Repeats(unittest.TestCase):
    ROWS = [{"gpu": "h100-80gb", "production_model": "a", "opportunistic_model": "b", "policy": "co-execution",
             "memory_policy": "", "budget_gib": "", "production_idle": 0, "settings": "", "production": p,
             "opportunistic": o} for p, o in ((0.9, 0.5), (0.7, 0.63), (0.8, 0.41))] + [
            {"gpu": "h100-80gb", "production_model": "c", "opportunistic_model": "b", "policy": "mps",
             "memory_policy": "", "budget_gib": "", "production_idle": 0, "settings": "", "production": 1.0,
             "opportunistic": 0.2}]

    def table(self, predictions):
        f = tempfile.NamedTemporaryFile("w", suffix=".md", delete=False)
        self.addCleanup(os.unlink, f.name)
        f.write("| gpu | production / opportunistic | policy | settings | measured | predicted | error |\n"
                "|---|---|---|---|---|---|---|\n")
        for p, o in predictions:
            f.write(f"| h100-80gb | x / y | co-execution |  | 0 / 0 | {p} / {o} **off** | 0 / 0 |\n")
        f.close()
        return f.name

    def test_predictions_that_follow_the_repeats_correlate(self):
        # The three repeats move as predicted (up to scale); the cell measured once counts for nothing.
        n, pearson, spearman = gpu_results.repeats_followed(
            self.ROWS, self.table([(0.95, 0.55), (0.75, 0.68), (0.85, 0.46), (0.1, 0.1)]))
        self.assertEqual(n, 6)
        self.assertAlmostEqual(pearson, 1.0)
        self.assertAlmostEqual(spearman, 1.0)
        _, pearson, _ = gpu_results.repeats_followed(
            self.ROWS, self.table([(0.7, 0.6), (0.9, 0.5), (0.8, 0.7), (1.0, 0.2)]))
        self.assertLess(pearson, 0)

    def loo_table(self, predictions, left_out):
        f = tempfile.NamedTemporaryFile("w", suffix=".md", delete=False)
        self.addCleanup(os.unlink, f.name)
        f.write("| gpu | production / opportunistic | policy | settings | measured | predicted | error | "
                "pair left out: predicted | error |\n|---|---|---|---|---|---|---|---|---|\n")
        for (p, o), (lp, lo) in zip(predictions, left_out):
            f.write(f"| h100-80gb | x / y | co-execution |  | 0 / 0 | {p} ± 0.02 / {o} ± 0.05 | 0 / 0 | {lp} ± 0.03 / {lo} | "
                    "0 / 0 **off** |\n")
        f.close()
        return f.name

    def test_the_noise_of_repeated_settings_bounds_any_prediction(self):
        # Production 0.9/0.7/0.8 and opportunistic 0.5/0.63/0.41, two degrees of freedom each.
        sigma, dof, per_throughput, per_cell = gpu_results.repeat_noise(self.ROWS)
        self.assertEqual(dof, 4)
        ss = sum((x - 0.8) ** 2 for x in (0.9, 0.7, 0.8)) + sum((x - 1.54 / 3) ** 2 for x in (0.5, 0.63, 0.41))
        self.assertAlmostEqual(sigma, (ss / 4) ** 0.5)
        self.assertAlmostEqual(per_throughput, math.erf(0.10 / (sigma * math.sqrt(2))))
        self.assertAlmostEqual(per_cell, per_throughput ** 2)
        with self.assertRaisesRegex(gpu_results.ResultsError, "no setting measured more than once"):
            gpu_results.repeat_noise(self.ROWS[3:])

    def test_cells_within_the_tolerance_of_the_other_calls_and_of_the_predictions(self):
        # The other calls' means, (0.75, 0.52), (0.85, 0.455) and (0.8, 0.565), miss every cell by 0.15 or
        # more on one side; the predictions miss the third cell, those with the pair left out the second.
        cells, others, fit, loo = gpu_results.repeats_within(
            self.ROWS, self.loo_table([(0.9, 0.5), (0.7, 0.63), (0.8, 0.2), (0.1, 0.1)],
                                      [(0.85, 0.55), (0.5, 0.63), (0.8, 0.41), (1.0, 0.2)]))
        self.assertEqual((cells, others, fit, loo), (3, 0, 2, 2))
        with self.assertRaisesRegex(gpu_results.ResultsError, "make the table with --leave-one-out"):
            gpu_results.repeats_within(self.ROWS, self.table([(1, 1)] * 4))

    def test_a_table_of_another_tree_is_refused(self):
        with self.assertRaisesRegex(gpu_results.ResultsError, "3 predictions for 4 measured cells"):
            gpu_results.repeats_followed(self.ROWS, self.table([(1, 1)] * 3))


PROFILE = {"job": "resnet50_b256", "device": "NVIDIA H100 80GB HBM3", "driver": "580", "date": "d",
           "command": "python3 bench/gpu/harness.py profile resnet50_b256 --no-build --build /tmp/b --out /x/y "
                      "--max-s 420 --set profile_windows=20",
           "it_per_s": 1 / 0.066, "iteration_s": 0.066, "windows": 30, "kernels_per_s": 15000, "blocks_per_s": 1.4e8,
           "busy_fraction": 0.9, "busy_source": "nvidia-smi utilization.gpu",
           "jitter": {"p5": 0.95, "p50": 1.0, "p95": 1.05}, "footprint_bytes": 13 * 2**30, "hot_set_bytes": 12 * 2**30,
           "kernel_stats": {"busy_fraction": 0.97, "kernels_per_step": 990, "gaps_per_step": 40}}


class Profiles(unittest.TestCase):
    def write(self, t, row, name="profile.json"):
        path = os.path.join(t, name)
        with open(path, "w") as f:
            json.dump(row, f)
        return path

    def test_a_harness_profile_row_becomes_a_measured_table_row(self):
        with tempfile.TemporaryDirectory() as t:
            row = gpu_results.profile_rows([self.write(t, PROFILE)], gpu_results.DEVICES)[0]
        # The busy fraction is the kernel spans' (0.97), not nvidia-smi's utilization (0.9).
        self.assertEqual([str(x) for x in row[:5]], ["resnet50-b256", "h100-80gb", "256", "66", "0.97"])
        self.assertEqual(row[5:8], ["990", "9.24e+06", "40"])
        self.assertAlmostEqual(float(row[8]), 0.1 / 3.29, places=4)  # p5-p95 over 3.29 standard deviations
        self.assertEqual(row[12], "mmmmmmemm")  # slice sensitivity: not measured alone on a whole GPU

    def test_a_sparse_jobs_hot_set_stays_fitted(self):
        # Touching 1 GiB of a 16 GiB footprint per step: which part is resident decides the traffic.
        sparse = {**PROFILE, "footprint_bytes": 16 * 2**30, "hot_set_bytes": 2**30}
        with tempfile.TemporaryDirectory() as t:
            row = gpu_results.profile_rows([self.write(t, sparse)], gpu_results.DEVICES)[0]
        self.assertEqual((row[11], row[12]), ("1", "mmmmmmemf"))  # the measurement is the fit's start

    def test_the_recorded_table_gives_the_rows_its_profiles_give(self):
        other = {**PROFILE, "job": "dlrm", "it_per_s": 187.96598597163992, "windows": 29,
                 "kernel_stats": {"busy_fraction": 0.43895984800349735, "kernels_per_step": 140.0, "gaps_per_step": 140}}
        with tempfile.TemporaryDirectory() as t:
            files = [self.write(t, PROFILE), self.write(t, other, "dlrm.json")]
            table = os.path.join(t, "profiles.csv")
            self.assertEqual(gpu_results.update_profile_table(table, files), 2)
            self.assertEqual(gpu_results.update_profile_table(table, files[1:]), 2)  # replaces its own row
            self.assertEqual(sorted(gpu_results.profile_rows([table], gpu_results.DEVICES)),
                             sorted(gpu_results.profile_rows(files, gpu_results.DEVICES)))
            records = [r for _, r in gpu_results.read_profile_table(table)]
        self.assertEqual(records[1]["command"],
                         "python3 bench/gpu/harness.py profile resnet50_b256 --out $OUT --set profile_windows=20")
        self.assertEqual((records[1]["utilization"], records[1]["kernel_busy_fraction"]), (0.9, 0.97))

    def test_a_bad_profile_table_line_is_named(self):
        with tempfile.TemporaryDirectory() as t:
            table = os.path.join(t, "profiles.csv")
            with open(table, "w") as f:
                f.write("# comment\n" + ",".join(gpu_results.PROFILE_COLUMNS) + "\n" + "a," * 5 + "30,x" + ",1" * 11 + "\n")
            with self.assertRaisesRegex(gpu_results.ResultsError, "profiles.csv:3: it_per_s: expected a number"):
                gpu_results.read_profile_table(table)

    def test_every_recorded_profile_is_its_models_row(self):
        rows = {(r[0], r[1]): r for r in data_rows(os.path.join(REPO, "sim", "data", "models.csv"))}
        for row in gpu_results.profile_rows([gpu_results.PROFILES], gpu_results.DEVICES):
            self.assertEqual(rows[(row[0], row[1])], [str(x) for x in row])

    def test_a_profile_without_kernel_stats_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as t:
            path = os.path.join(t, "p.json")
            with open(path, "w") as f:
                json.dump({"job": "dlrm", "device": "NVIDIA H200", "it_per_s": 200}, f)
            with self.assertRaisesRegex(gpu_results.ResultsError, "p.json: the profile lacks busy_fraction"):
                gpu_results.profile_rows([path], gpu_results.DEVICES)


if __name__ == "__main__":
    unittest.main()
