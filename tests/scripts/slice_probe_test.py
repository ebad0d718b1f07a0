# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/slice_probe.py without a GPU: its plan, the summary of recorded runs, pooling over calls,
the per-launch costs it derives, and clear errors on bad records."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(REPO, "bench", "gpu", "slice_probe.py")
sys.path.insert(0, os.path.join(REPO, "bench", "gpu"))
import slice_probe  # noqa: E402


def job(name, it_per_s, busy, kernel_us=20.0):
    return {"job": name, "iterations": 1, "seconds": 1.0, "it_per_s": it_per_s, "kernel_us": kernel_us,
            "kernels_per_iteration": 100, "busy_fraction": busy}


# A GPU-bound job at 300 it/s and a light one at 100 it/s (10,000 launches/s, busy 0.3); together
# the light one runs at 0.8 (it waits 1/0.8 - 1 = 0.25 s per s over 10,000 launches: 25 us each) and
# the busy one at 0.6, so 1 - 0.6 - 0.8 x 0.3 = 0.16 of the GPU is unused: 20 us per light launch.
RECORDS = [{"run": "alone/busy", "jobs": [job("busy", 300, 1.0)]},
           {"run": "alone/light", "jobs": [job("light", 100, 0.3)]},
           {"run": "pair/busy+light", "jobs": [job("busy", 180, 1.0), job("light", 80, 0.3)]}]


class Summary(unittest.TestCase):
    def test_rates_over_alone_and_launch_costs(self):
        s = slice_probe.summarize(RECORDS)
        self.assertEqual(s["pairs"], [{"production": "busy", "opportunistic": "light",
                                       "production_ratio": 0.6, "opportunistic_ratio": 0.8}])
        self.assertEqual(s["jobs"]["light"]["kernel_launches_per_s"], 10000)
        wait, unused = slice_probe.launch_costs(s)["busy + light"]
        self.assertAlmostEqual(wait, 25.0)
        self.assertAlmostEqual(unused, 20.0)

    def test_two_light_jobs_have_no_launch_cost_to_derive(self):
        records = [{"run": "alone/light", "jobs": [job("light", 100, 0.3)]},
                   {"run": "pair/light+light", "jobs": [job("light", 95, 0.3), job("light", 97, 0.3)]}]
        self.assertEqual(slice_probe.launch_costs(slice_probe.summarize(records)), {})

    def test_calls_pool_into_medians_with_their_range(self):
        other = json.loads(json.dumps(RECORDS))
        other[2]["jobs"][0]["it_per_s"] = 150  # 0.5 in the second call
        pooled = slice_probe.pool([slice_probe.summarize(RECORDS), slice_probe.summarize(other)])
        pair = pooled["pairs"][0]
        self.assertEqual(pair["runs"], 2)
        self.assertAlmostEqual(pair["production_ratio"], 0.55)
        self.assertEqual(pair["production_range"], [0.5, 0.6])
        self.assertIn("2 calls", slice_probe.table(pooled))

    def test_a_pair_without_its_alone_runs_is_an_error(self):
        with self.assertRaisesRegex(slice_probe.ProbeError, "no alone run of light"):
            slice_probe.summarize(RECORDS[:1] + RECORDS[2:])


class Command(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_plan_lists_each_job_of_the_grid_alone_and_every_pair(self):
        r = self.run_script("run", "--plan")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{5 + len(slice_probe.GRIDS['basic'])} runs", r.stdout)  # 5 jobs alone
        self.assertIn("pair/busy+light", r.stdout)
        self.assertNotIn("light-burst", r.stdout)
        r = self.run_script("run", "--plan", "--grid", "queue")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("alone/light-burst", r.stdout)
        self.assertIn(f"{8 + len(slice_probe.GRIDS['queue'])} runs", r.stdout)
        self.assertNotIn("busy-long", r.stdout)

    def test_a_bursty_jobs_profile_has_a_gap_per_burst(self):
        summary = {"jobs": {"light-burst": {"it_per_s": 50.0, "busy_fraction": 0.25}}}
        row = slice_probe.model_rows(summary, "h100-80gb")[0].split(",")
        self.assertEqual((row[0], row[3], row[5], row[7]), ("probe-light-burst", "20.0000", "100", "10"))

    def test_summarize_reads_records_and_names_a_bad_line(self):
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "runs.jsonl")
            with open(good, "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in RECORDS))
            r = self.run_script("summarize", good)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("0.60 / 0.80", r.stdout)
            r = self.run_script("summarize", "--json", good)
            self.assertEqual(json.loads(r.stdout)["launch_costs_us"]["busy + light"], {"wait": 25.0, "unused": 20.0})
            bad = os.path.join(d, "bad.jsonl")
            with open(bad, "w", encoding="utf-8") as f:
                f.write(json.dumps(RECORDS[0]) + "\n{not json\n")
            r = self.run_script("summarize", bad)
            self.assertEqual(r.returncode, 2)
            self.assertIn("bad.jsonl:2: not JSON", r.stderr)
            r = self.run_script("summarize", os.path.join(d, "missing.jsonl"))
            self.assertEqual(r.returncode, 2)
            self.assertIn("missing.jsonl", r.stderr)

    def test_a_job_refuses_settings_that_are_no_job(self):
        r = self.run_script("job", "--kernel-us", "0", "--host-us", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--kernel-us", r.stderr)
        r = self.run_script("job", "--kernel-us", "5", "--host-us", "1", "--burst", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--burst", r.stderr)


if __name__ == "__main__":
    unittest.main()
