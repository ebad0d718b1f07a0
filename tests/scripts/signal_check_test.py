# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/signal_check.py: each tgs run's job share beside the controller's two signals from
the same run's status samples, rank correlations with ties and a seeded permutation p, missed
losses and false alarms against the target, and bad input refused with a message."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import rank_stats  # noqa: E402
import signal_check  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import byte_fuzz  # noqa: E402


def status_sample(run, prod_bps, seen, r=100.0, wait=None, phase="congestion_avoidance"):
    """One sample of RUN: the production job launched PROD_BPS (waiting WAIT of its time) and the
    controller compared SEEN (None: an older node that did not report it) with R."""
    gpu = {"gpu": 0, "phase": phase, "budget_blocks": 10, "max_rate_blocks_per_s": r, "dead_band": 0.06}
    if seen is not None:
        gpu["sample_blocks_per_s"] = seen
    return {"run": run, "t": 0.0, "gpus": [gpu],
            "jobs": [{"gpu": 0, "class": "production", "blocks_per_s": prod_bps, "sync_wait_fraction": wait},
                     {"gpu": 0, "class": "opportunistic", "blocks_per_s": 5}]}


class SignalCheck(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def call(self, name, alone, pairs, signals, status_name=None, flags="--tgs-preset host-bound"):
        """NAME.json with its runs and status files: alone = {round: production it/s}, pairs =
        {round: production it/s}, signals = {round: (launched, corrected[, host speed]) over R = 100},
        each from three control samples (the last one is left out by status_phases, as a stopping
        sample); with a host speed, a profiling sample at 100 blocks/s without waits comes first,
        and the control samples wait for the share of their time that gives that speed."""
        summary = {"device": "GPU X", "driver": "1.0", "date": "2026-11-25T00:00:00Z", "gpu_serial": "S1",
                   "command": f'SCENARIOS="low" ORDER=interleaved TGS_NODE_FLAGS="{flags}" MODES="tgs" bench/gpu/memory.sh',
                   "ratio": 1.5,
                   "scenarios": {"low": {"production_model": "resnet50", "opportunistic_model": "dlrm", "budget_mib": 100,
                                         "footprint_mib": {"production": 20, "opportunistic": 130},
                                         "modes": {"alone": {}, "tgs": {}}}}}
        path = os.path.join(self.dir.name, name + ".json")
        with open(path, "w") as f:
            json.dump(summary, f)
        with open(os.path.join(self.dir.name, name + "-runs.jsonl"), "w") as f:
            for i, p in alone.items():
                f.write(json.dumps({"label": f"alone/resnet50/{i}", "it_per_s": [p]}) + "\n")
            f.write(json.dumps({"label": "alone/dlrm/1", "it_per_s": [100]}) + "\n")
            for i, p in pairs.items():
                f.write(json.dumps({"label": f"low/tgs/{i}/production", "it_per_s": [p]}) + "\n")
                f.write(json.dumps({"label": f"low/tgs/{i}/opportunistic", "it_per_s": [60]}) + "\n")
        with open(os.path.join(self.dir.name, status_name or name + "-status.jsonl"), "w") as f:
            for i, (launched, corrected, *host) in signals.items():
                seen = None if corrected is None else corrected * 100
                wait = None
                if host:  # host seconds per block 1/100 in profiling, 1/(100 host) in control
                    f.write(json.dumps(status_sample(f"low/tgs/{i}", 100, None, wait=0.0, phase="profiling")) + "\n")
                    wait = 1 - launched / host[0]
                for _ in range(2):
                    f.write(json.dumps(status_sample(f"low/tgs/{i}", launched * 100, seen, wait=wait)) + "\n")
                f.write(json.dumps(status_sample(f"low/tgs/{i}", 0.0, 0.0)) + "\n")  # the stopping sample
        return path

    def test_runs_join_their_own_status_samples_and_alone_round(self):
        a = self.call("a", {1: 40, 2: 20, 3: 30}, {1: 36, 2: 27, 3: 30},
                      {1: (0.90, 0.97), 2: (0.95, 0.96), 3: (1.00, 0.99)})
        out = signal_check.check("low/tgs", [a])
        runs = out["runs"]
        self.assertEqual([r["run"] for r in runs], ["low/tgs/1", "low/tgs/2", "low/tgs/3"])
        # Call-normalized to the alone median (30), paired to the same round's alone run.
        self.assertEqual([r["job"] for r in runs], [36 / 30, 27 / 30, 1.0])
        self.assertEqual([r["job_paired"] for r in runs], [36 / 40, 27 / 20, 1.0])
        # The stopping sample (launched 0) is left out, as status_phases --control does.
        self.assertAlmostEqual(runs[0]["launched"], 0.90)
        self.assertAlmostEqual(runs[0]["corrected"], 0.97)
        self.assertEqual(runs[0]["gpu"], "S1")
        self.assertEqual(runs[0]["status_file"], "a-status.jsonl")

    def test_correlations_misses_and_false_alarms(self):
        # Job shares 0.8, 0.9, 1.0, 1.1, 1.2: launched follows them in order, corrected against them.
        a = self.call("a", {1: 100}, {1: 80, 2: 90, 3: 100, 4: 110, 5: 120},
                      {1: (0.85, 0.99), 2: (0.90, 0.98), 3: (0.96, 0.97), 4: (0.97, 0.93), 5: (0.99, 0.92)})
        s = signal_check.check("low/tgs", [a])["signals"]
        launched, corrected = s["launched"]["job"], s["corrected"]["job"]
        self.assertAlmostEqual(launched["spearman"], 1.0)
        self.assertAlmostEqual(corrected["spearman"], -1.0)
        # Of the 5! orders only the identity and its reverse reach |rho| = 1: p near 2/120.
        self.assertLess(launched["permutation_p"], 0.05)
        self.assertEqual(launched["permutation_p"], corrected["permutation_p"])
        self.assertEqual(launched["job_below_target"], 2)
        # Launched said "slowed" (below 0.95) exactly where the job was: nothing missed, no alarm.
        self.assertEqual((launched["missed_loss"], launched["false_alarm"]), (0, 0))
        # Corrected read both losses as unslowed and raised two alarms on unslowed runs.
        self.assertEqual((corrected["missed_loss"], corrected["false_alarm"]), (2, 2))
        self.assertAlmostEqual(launched["median_abs_difference"], 0.05)
        # Only round 1 has its own alone run: the paired basis holds one run and no correlation.
        self.assertEqual(s["launched"]["job_paired"]["runs"], 1)
        self.assertIsNone(s["launched"]["job_paired"]["spearman"])

    def test_a_job_at_the_target_met_it(self):
        a = self.call("a", {1: 100}, {1: 95, 2: 90, 3: 99}, {1: (0.96, 0.94), 2: (0.95, 0.99), 3: (0.97, 0.97)})
        launched = signal_check.check("low/tgs", [a])["signals"]["launched"]["job"]
        self.assertEqual(launched["job_below_target"], 1)  # 0.90 only; 0.95 met the target
        self.assertEqual(launched["missed_loss"], 1)      # 0.90 beside a signal at the target
        self.assertEqual(launched["false_alarm"], 0)

    def test_ties_take_their_mean_rank_and_a_constant_side_gives_no_correlation(self):
        self.assertEqual(rank_stats.ranks([3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0])
        self.assertEqual(rank_stats.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]), (None, None))
        self.assertEqual(rank_stats.spearman([1.0, 2.0], [1.0, 2.0]), (None, None))
        # The same input gives the same p (seeded shuffles).
        x, y = [1.0, 3.0, 2.0, 5.0, 4.0, 6.0], [2.0, 1.0, 4.0, 3.0, 6.0, 5.0]
        self.assertEqual(rank_stats.spearman(x, y), rank_stats.spearman(x, y))

    def test_older_samples_without_the_corrected_rate(self):
        a = self.call("a", {1: 100}, {1: 90, 2: 100, 3: 110}, {1: (0.9, None), 2: (1.0, None), 3: (1.1, None)})
        s = signal_check.check("low/tgs", [a])["signals"]
        self.assertEqual(s["corrected"]["runs"], 0)
        self.assertEqual(s["host"]["runs"], 0)  # no waits reported, no profiling samples
        self.assertEqual(s["launched"]["runs"], 3)

    def test_host_speed_is_the_third_signal(self):
        # The host side ran at 0.9, 1.0 and 1.1 of its profiling speed per block; the job's shares
        # follow it, while the launched rate stays flat.
        a = self.call("a", {1: 100}, {1: 85, 2: 100, 3: 110},
                      {1: (0.85, 0.97, 0.9), 2: (0.85, 0.97, 1.0), 3: (0.85, 0.97, 1.1)})
        out = signal_check.check("low/tgs", [a])
        self.assertEqual([round(r["host"], 6) for r in out["runs"]], [0.9, 1.0, 1.1])
        host = out["signals"]["host"]["job"]
        self.assertAlmostEqual(host["spearman"], 1.0)
        self.assertEqual((host["job_below_target"], host["missed_loss"], host["false_alarm"]), (1, 0, 0))
        self.assertIsNone(out["signals"]["launched"]["job"]["spearman"])  # a constant signal orders nothing

    def test_status_samples_from_a_calls_out_folder(self):
        sub = os.path.join(self.dir.name, "out")
        os.mkdir(sub)
        self.dir_name, self.dir.name = self.dir.name, sub
        try:
            a = self.call("gpu-memory", {1: 100}, {1: 90}, {1: (0.9, 0.95)}, status_name="status-samples.jsonl")
        finally:
            self.dir.name = self.dir_name
        # gpu-memory-status.jsonl is not there: the folder's status-samples.jsonl is read.
        run = signal_check.check("low/tgs", [a])["runs"][0]
        self.assertEqual(run["status_file"], "status-samples.jsonl")
        self.assertAlmostEqual(run["corrected"], 0.95)

    def test_cli_prints_and_writes_json_and_refuses_bad_input(self):
        a = self.call("a", {1: 100}, {1: 80, 2: 90, 3: 100}, {1: (0.8, 0.96), 2: (0.9, 0.96), 3: (1.0, 0.96)})
        out_json = os.path.join(self.dir.name, "check.json")
        buf = io.StringIO()
        with redirect_stdout(buf):
            self.assertEqual(signal_check.main(["signal_check.py", "low/tgs", a, "--json", out_json]), 0)
        text = buf.getvalue()
        self.assertIn("launched  against the job", text)
        self.assertIn("Spearman +1.00", text)
        with open(out_json) as f:
            written = json.load(f)
        self.assertEqual(len(written["runs"]), 3)
        self.assertTrue(written["command"].startswith("python3 bench/gpu/signal_check.py low/tgs "))
        # A different flag string is a different cell unless --mixed.
        b = self.call("b", {1: 100}, {1: 90}, {1: (0.9, 0.95)}, flags="--dead-band 0.04")
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(signal_check.main(["signal_check.py", "low/tgs", a, b]), 2)
        self.assertIn("--mixed", err.getvalue())
        self.assertEqual(len(signal_check.check("low/tgs", [a, b], mixed=True)["runs"]), 4)
        # A missing status file and a bad target are refused with the reason.
        os.remove(os.path.join(self.dir.name, "b-status.jsonl"))
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(signal_check.main(["signal_check.py", "low/tgs", a, b, "--mixed"]), 2)
        self.assertIn("status-samples.jsonl", err.getvalue())
        with self.assertRaisesRegex(ValueError, "--target"):
            signal_check.check("low/tgs", [a], target=0)
        # A status file that is not status samples names its file and line.
        with open(os.path.join(self.dir.name, "a-status.jsonl"), "a") as f:
            f.write("{not json\n")
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(signal_check.main(["signal_check.py", "low/tgs", a]), 2)
        self.assertIn("a-status.jsonl:", err.getvalue())

    def test_fuzzed_status_and_runs_files_are_refused_never_crash(self):
        # Bytes of the status samples and the runs file replaced by JSON punctuation and digits,
        # and values of the status samples replaced by values of another type: every outcome is
        # a check or a ValueError/OSError/KeyError, which main() reports with exit status 2.
        import random
        a = self.call("a", {1: 100, 2: 90}, {1: 80, 2: 90}, {1: (0.8, 0.96), 2: (0.9, 0.97)})
        spath = os.path.join(self.dir.name, "a-status.jsonl")
        rpath = os.path.join(self.dir.name, "a-runs.jsonl")
        refused = byte_fuzz.fuzz_files([spath, rpath], lambda: signal_check.check("low/tgs", [a]), rounds=400, seed=11)
        self.assertGreater(refused, 0)
        with open(spath) as f:
            original = f.read()
        samples = [json.loads(line) for line in original.splitlines()]
        rng = random.Random(11)
        junk = ["x", -1, None, [], {}, True, 1e308]
        for _ in range(300):
            lines = json.loads(json.dumps(samples))
            line = rng.choice(lines)
            node = rng.choice([line, line["gpus"][0], rng.choice(line["jobs"])])
            node[rng.choice(list(node))] = rng.choice(junk)
            with open(spath, "w") as f:
                f.write("\n".join(json.dumps(x) for x in lines) + "\n")
            try:
                with redirect_stderr(io.StringIO()):
                    signal_check.check("low/tgs", [a])
            except (ValueError, OSError, KeyError):
                pass
        with open(spath, "w") as f:
            f.write(original)


if __name__ == "__main__":
    unittest.main()
