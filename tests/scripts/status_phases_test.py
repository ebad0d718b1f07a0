# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/status_phases.py: medians per run and phase, samples with the production job alone
as their own phase, samples without it left out, and a bad line named by file and line."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
sys.path.insert(0, os.path.dirname(__file__))
import byte_fuzz  # noqa: E402
import script_support  # noqa: E402
import status_phases  # noqa: E402


def sample(run, phase, budget, prod_bps, wait, opp_bps, opp_resident=None, with_opp=True, launch_us=None,
           band=0.03, seen=None, t=0.0, rate=100):
    jobs = [{"gpu": 0, "class": "production", "blocks_per_s": prod_bps, "sync_wait_fraction": wait,
             "launch_call_us": launch_us}]
    if with_opp:
        jobs.append({"gpu": 0, "class": "opportunistic", "blocks_per_s": opp_bps,
                     "resident_bytes": opp_resident, "launch_call_us": None})
    gpu = {"gpu": 0, "phase": phase, "budget_blocks": budget, "max_rate_blocks_per_s": rate, "dead_band": band}
    if seen is not None:  # tgs-node reports the rate its controller acted on (sample_blocks_per_s)
        gpu["sample_blocks_per_s"] = seen
    return {"run": run, "t": t, "gpus": [gpu], "jobs": jobs}


def run_cli(*args):
    """status_phases.py run as a user runs it, with ARGS; its exit code and output."""
    return script_support.run_script(status_phases.__file__, *args)


class StatusPhases(unittest.TestCase):
    def write(self, lines):
        return script_support.temp_file(self, ".jsonl", lines)

    def test_medians_per_run_and_phase(self):
        path = self.write([
            {"run": "a", "t": 0.0, "gpus": [], "jobs": []},       # before the node knows a job
            {"run": "a", "t": 0.0, "gpus": [{"gpu": 0}],            # only the opportunistic job: left out
             "jobs": [{"gpu": 0, "class": "opportunistic", "blocks_per_s": 1}]},
            sample("a", "profiling", 0, 90, 0.0, 0, with_opp=False, launch_us=2.0),  # production alone
            sample("a", "profiling", 0, 94, 0.0, 0, with_opp=False, launch_us=None),
            sample("a", "profiling", 0, 100, 0.01, 0, 2**30, launch_us=3.0),
            sample("a", "profiling", 0, 110, 0.03, 0, 2**30, launch_us=5.0),
            sample("a", "congestion_avoidance", 10, 80, 0.1, 5, 2 * 2**30),
            sample("a", "congestion_avoidance", 30, 90, 0.2, 7, 2 * 2**30),
            sample("a", "congestion_avoidance", 20, 70, 0.3, 6, 2 * 2**30, band=0.09),
            "",
            sample("b", "profiling", 0, 50, 0.5, 0, None),
        ])
        table = status_phases.summarize(path)
        self.assertEqual([(e["run"], e["phase"], e["samples"]) for e in table],
                         [("a", "production-alone", 2), ("a", "profiling", 2), ("a", "congestion_avoidance", 3),
                          ("b", "profiling", 1)])
        alone = table[0]
        self.assertEqual(alone["prod_bps"], 92)
        self.assertEqual(alone["prod_launch_us"], 2.0)  # a sample that timed no launch does not count
        self.assertIsNone(alone["budget"])
        self.assertIsNone(alone["opp_bps"])
        self.assertEqual(table[1]["prod_bps"], 105)
        self.assertAlmostEqual(table[1]["prod_wait"], 0.02)
        self.assertEqual(table[1]["opp_res_gib"], 1.0)
        self.assertEqual(table[1]["prod_launch_us"], 4.0)
        self.assertIsNone(table[1]["opp_launch_us"])
        self.assertEqual(table[2]["budget"], 20)
        self.assertEqual(table[2]["band"], 0.03)  # the median of 0.03, 0.03, 0.09
        self.assertIsNone(alone["band"])  # no controller phase while the production job is alone
        self.assertEqual(table[2]["prod_bps"], 80)
        self.assertEqual(table[2]["opp_bps"], 6)
        self.assertEqual(table[2]["opp_res_gib"], 2.0)
        self.assertIsNone(table[3]["opp_res_gib"])

    def test_control_summary_per_run(self):
        path = self.write([
            sample("a", "profiling", 0, 100, 0.0, 0),
            sample("a", "slow_start", 20000, 99, 0.0, 1),
            sample("a", "slow_start", 30000, 98, 0.0, 2),
            sample("a", "congestion_avoidance", 20000, 90, 0.0, 3),   # 10% below R = 100: below the band
            sample("a", "congestion_avoidance", 21000, 104, 0.0, 4),  # above R: not below the band
            sample("a", "congestion_avoidance", 22000, 97, 0.0, 5),   # exactly at the band's edge
            sample("a", "congestion_avoidance", 90000, 0, 0.0, 0),    # the jobs being stopped: left out
            sample("b", "profiling", 0, 100, 0.0, 0),                 # never left profiling: no line
            sample("c", "slow_start", 20000, 50, 0.0, 1),
            sample("c", "congestion_avoidance", 13333, 100, 0.0, 9, band=0.2),
            sample("c", "congestion_avoidance", 13333, 10, 0.0, 9, band=0.2),
        ])
        a, c = status_phases.control(path, last=2)
        self.assertEqual((a["run"], a["ss_n"], a["ss_peak"]), ("a", 2, 30000))
        self.assertEqual(a["ca_budget"], 21500)  # the last two congestion-avoidance samples
        self.assertEqual(a["ca_opp_bps"], 4.5)
        self.assertAlmostEqual(a["prod_over_R"], 0.98)  # median of 0.99, 0.98, 0.90, 1.04, 0.97
        self.assertAlmostEqual(a["below_band"], 1 / 5)
        self.assertEqual((c["run"], c["ss_peak"], c["ca_budget"]), ("c", 20000, 13333))
        self.assertAlmostEqual(c["below_band"], 1 / 2)  # 50 is below 100 * (1 - 0.03); 100 is not
        out = run_cli(path, "--control")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ss_peak", out.stdout)
        self.assertEqual(len(out.stdout.splitlines()), 3)  # header, a, c
        bad = run_cli(path, "--control", "--last", "0")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--last must be at least 1", bad.stderr)

    def test_control_reads_the_rate_the_controller_acted_on(self):
        # The launched rate sits at R while the corrected rate the controller compares falls below
        # the band in one window of three: only the sample columns show it.
        path = self.write([
            sample("a", "slow_start", 20000, 100, 0.0, 1, seen=100),
            sample("a", "congestion_avoidance", 13333, 100, 0.0, 2, seen=90),
            sample("a", "congestion_avoidance", 14000, 100, 0.0, 3, seen=98),
            sample("a", "congestion_avoidance", 14000, 40, 0.0, 3, seen=0),  # spans the jobs' stop: left out
            sample("b", "slow_start", 20000, 100, 0.0, 1),  # a file from before the field: no value
            # (b's only control sample is also its last: a run of one sample keeps it)
        ])
        a, b = status_phases.control(path)
        self.assertEqual(a["below_band"], 0.0)
        self.assertAlmostEqual(a["sample_over_R"], 0.98)
        self.assertAlmostEqual(a["sample_below"], 1 / 3)
        self.assertAlmostEqual(a["sample_sd"], 0.0529, places=4)  # sd of 1.00, 0.90, 0.98
        self.assertIsNone(b["sample_over_R"])
        self.assertIsNone(b["sample_sd"])
        self.assertIsNone(b["sample_below"])
        self.assertEqual(b["ss_n"], 1)
        table = status_phases.summarize(path)
        self.assertEqual(table[1]["sample_bps"], 90)  # the phase table keeps every sample: 90, 98, 0
        out = run_cli(path, "--control")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("sample_sd", out.stdout)

    def test_host_speed_compares_host_time_per_block_in_control_with_profiling(self):
        path = self.write([
            sample("a", "profiling", 0, 90, 0.0, 0, with_opp=False),  # production alone: not profiling
            sample("a", "profiling", 0, 100, 0.0, 0),                 # host time per block 1/100
            sample("a", "profiling", 0, 100, 0.5, 0),                 # 0.5/100: median 0.75/100
            sample("a", "slow_start", 20000, 80, 0.2, 1),             # 0.8/80 = 1/100
            sample("a", "congestion_avoidance", 20000, 100, 0.0, 1),  # 1/100
            sample("a", "congestion_avoidance", 20000, 0, 0.0, 0),    # the stop: left out
            sample("b", "slow_start", 20000, 100, 0.1, 1),            # no profiling sample: no speed
            sample("c", "profiling", 0, 100, None, 0),                # no wait reported: no speed
            sample("c", "slow_start", 20000, 100, None, 1),
        ])
        a, b, c = status_phases.control(path)
        # 0.0075 s per block while profiling, 0.01 in control: the host side ran at 0.75 per block.
        self.assertAlmostEqual(a["host_speed"], 0.75)
        self.assertIsNone(b["host_speed"])
        self.assertIsNone(c["host_speed"])
        out = run_cli(path, "--control")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("host_speed", out.stdout)
        self.assertIn("0.750", out.stdout)

    def test_refreshes_are_not_control_samples_and_give_the_loss_within_the_run(self):
        def ca(run, t, prod):
            return sample(run, "congestion_avoidance", 1000, prod, 0.0, 5, t=t)

        def held(run, t, prod):
            return sample(run, "refreshing", 0, prod, 0.0, 0, t=t)

        path = self.write(
            [sample("a", "profiling", 0, 100, 0.0, 0, t=0)]
            + [ca("a", t, 10) for t in (1, 2)]                 # more than 10 s before the first refresh
            + [ca("a", t, 90) for t in range(3, 8)]
            + [ca("a", t, 100) for t in range(8, 13)]          # 10 s before it: median 95
            + [held("a", 13, 50), held("a", 14, 110), held("a", 15, 120)]  # first left out: 115
            + [ca("a", t, 80) for t in range(16, 20)]
            # 10 s before the second: 100 x 3 and 80 x 4 in control (median 80); the first
            # refresh's samples in between are not control samples.
            + [held("a", 20, 300), held("a", 21, 100), held("a", 22, 100)]
            + [ca("a", 23, 95)]
            + [held("a", 24, 0), held("a", 25, 200), held("a", 26, 200)]  # before: 80 x 4, 95
            + [ca("a", 27, 0)]                                 # the jobs' stop: left out
            # b's stop is in a refresh: its last control sample (60) stays in.
            + [ca("b", 0, 100), ca("b", 1, 100), ca("b", 2, 60), held("b", 3, 100)]
            # c's refresh has only its first sample: no held rate to compare with.
            + [ca("c", 0, 100), held("c", 1, 100), ca("c", 2, 100), ca("c", 3, 100)]
            + [ca("d", 0, 100), ca("d", 1, 90)])
        a, b, c, d = status_phases.control(path)
        self.assertEqual(a["refresh_n"], 3)
        # 95 / 115, 80 / 100 and 80 / 200: the median is the second.
        self.assertAlmostEqual(a["ctl_over_held"], 0.8)
        # The control samples alone (R = 100): 10 x 2, 90 x 5, 100 x 5, 80 x 4, 95; the refreshes'
        # rates (up to 300) and their budgets of 0 take no part.
        self.assertAlmostEqual(a["prod_over_R"], 0.90)
        self.assertAlmostEqual(a["below_band"], 12 / 17)  # all but the 100s
        self.assertEqual(a["ca_budget"], 1000)
        self.assertEqual((b["refresh_n"], b["ctl_over_held"]), (1, None))
        self.assertAlmostEqual(b["below_band"], 1 / 3)
        self.assertEqual((c["refresh_n"], c["ctl_over_held"]), (1, None))
        self.assertEqual((d["refresh_n"], d["ctl_over_held"]), (0, None))
        self.assertEqual(d["prod_over_R"], 1.0)  # its stop (90) left out, as before refreshes
        self.assertIn(("a", "refreshing", 9), [(e["run"], e["phase"], e["samples"]) for e in status_phases.summarize(path)])
        out = run_cli(path, "--control")
        self.assertEqual(out.returncode, 0, out.stderr)
        header, line_a, line_b = out.stdout.splitlines()[:3]
        self.assertEqual(header.split()[-2:], ["refresh_n", "ctl_over_held"])
        self.assertEqual(line_a.split()[-2:], ["3", "0.800"])
        self.assertEqual(line_b.split()[-2:], ["1", "-"])
        js = run_cli(path, "--control", "--json")
        self.assertEqual(js.returncode, 0, js.stderr)
        first = json.loads(js.stdout.splitlines()[0])
        self.assertEqual((first["refresh_n"], first["ctl_over_held"]), (3, 0.8))

    def test_refreshes_one_line_each_with_the_rates_compared_and_the_move_of_r(self):
        def ca(run, t, prod, opp, rate):
            return sample(run, "congestion_avoidance", 1000, prod, 0.0, opp, t=t, rate=rate)

        def held(run, t, prod, rate):
            return sample(run, "refreshing", 0, prod, 0.0, 0, t=t, rate=rate)

        path = self.write(
            [sample("a", "profiling", 0, 100, 0.0, 0, t=100, rate=None)]
            + [ca("a", t, 80, 40, 100) for t in range(101, 106)]      # 10 s before: 80, opp 40
            + [held("a", 106, 30, 100), held("a", 107, 90, 100), held("a", 108, 110, 100)]
            + [ca("a", 109, 85, 50, 95), ca("a", 115, 90, 5, 95)]    # only 115 within 10 s of 120
            + [held("a", 120, 100, 95)]                                # only its first sample
            + [ca("a", 121, 90, 5, 95)]                                # the jobs' stop
            + [held("b", 0, 50, 100), held("b", 1, 50, 100)]           # the stop in a refresh
            + [ca("c", 0, 100, 0, 100), ca("c", 1, 100, 0, 100)])      # no refresh
        a1, a2, b1 = status_phases.refresh_table(path)
        self.assertEqual((a1["run"], a1["refresh"], a1["at_s"], a1["held_n"]), ("a", 1, 6.0, 2))
        self.assertEqual((a1["prod_before"], a1["prod_held"], a1["opp_before"]), (80, 100, 40))
        self.assertAlmostEqual(a1["ctl_over_held"], 0.8)
        self.assertEqual((a1["R_before"], a1["R_after"]), (100, 95))
        self.assertEqual((a2["refresh"], a2["at_s"], a2["held_n"], a2["ctl_over_held"]), (2, 20.0, 0, None))
        self.assertEqual((a2["prod_before"], a2["opp_before"]), (90, 5))
        # R is the controller's state, not a rate: the stop sample's R counts.
        self.assertEqual((a2["R_before"], a2["R_after"]), (95, 95))
        self.assertEqual((b1["run"], b1["held_n"], b1["ctl_over_held"]), ("b", 0, None))  # its second sample is the stop
        self.assertEqual((b1["R_before"], b1["R_after"]), (None, None))
        # The same refreshes as --control counts, and its ctl_over_held the median of these.
        control = {e["run"]: e for e in status_phases.control(path)}
        self.assertEqual(control["a"]["refresh_n"], 2)
        self.assertAlmostEqual(control["a"]["ctl_over_held"], 0.8)
        self.assert_table_cli(path, "--refreshes",
                              ["run", "refresh", "at_s", "held_n", "prod_before", "prod_held", "ctl_over_held",
                               "opp_before", "R_before", "R_after"],
                              ["a", "1", "6.0", "2", "80", "100", "0.800", "40", "100", "95"], 4,
                              (0, "ctl_over_held", 0.8))

    def assert_table_cli(self, path, flag, header, first_row, n_lines, json_check):
        """FLAG's table: its header, first row and line count; JSON_CHECK (line, key, value) of its
        --json lines; and that FLAG with a second table (--control) is refused."""
        out = run_cli(path, flag)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[0].split(), header)
        self.assertEqual(lines[1].split(), first_row)
        self.assertEqual(len(lines), n_lines)
        line, key, value = json_check
        js = run_cli(path, flag, "--json")
        self.assertEqual(json.loads(js.stdout.splitlines()[line])[key], value)
        both = run_cli(path, flag, "--control")
        self.assertEqual(both.returncode, 2)
        self.assertIn("give one", both.stderr)

    def test_beside_compares_the_rate_beside_the_opportunistic_job_with_alone_in_the_same_run(self):
        def alone(run, t, prod, wait):
            return sample(run, "-", None, prod, wait, None, with_opp=False, t=t)

        path = self.write(
            [alone("fixed", 0, 100, 0.01), alone("fixed", 1, 120, 0.03), alone("fixed", 2, 110, 0.02)]
            + [sample("fixed", "-", 500, prod, 0.3, 70, t=t) for t, prod in ((3, 80), (4, 90), (5, 85))]
            + [sample("fixed", "-", 500, 10, 0.0, 1, t=6)]                          # the stop: left out
            + [alone("tgs", 0, 200, 0.1)]
            + [sample("tgs", "profiling", 0, 190, 0.1, 0, t=1),                   # held: neither
               sample("tgs", "slow_start", 20000, 150, 0.2, 30, t=2),
               sample("tgs", "refreshing", 0, 199, 0.1, 0, t=3),                  # held: neither
               sample("tgs", "congestion_avoidance", 9000, 170, 0.4, 50, t=4),
               sample("tgs", "congestion_avoidance", 9000, 0, 0.0, 0, t=5)]       # the stop
            + [sample("no-alone", "-", 500, 90, 0.0, 9, t=0), sample("no-alone", "-", 500, 90, 0.0, 9, t=1)]
            + [alone("no-beside", 0, 90, 0.0), sample("no-beside", "profiling", 0, 90, 0.0, 0, t=1)])
        fixed, tgs = status_phases.beside(path)  # the runs without both kinds of sample are left out
        self.assertEqual((fixed["run"], fixed["alone_n"], fixed["alone_bps"], fixed["alone_wait"]),
                         ("fixed", 3, 110, 0.02))
        self.assertEqual((fixed["beside_n"], fixed["beside_bps"], fixed["beside_wait"], fixed["opp_bps"]),
                         (3, 85, 0.3, 70))
        self.assertAlmostEqual(fixed["beside_over_alone"], 85 / 110)
        self.assertEqual((tgs["alone_n"], tgs["beside_n"], tgs["beside_bps"], tgs["opp_bps"]), (1, 2, 160, 40))
        self.assertAlmostEqual(tgs["beside_wait"], 0.3)
        self.assertAlmostEqual(tgs["beside_over_alone"], 0.8)
        self.assert_table_cli(path, "--beside",
                              ["run", "alone_n", "alone_bps", "alone_wait", "beside_n", "beside_bps", "beside_wait",
                               "beside_over_alone", "opp_bps"],
                              ["fixed", "3", "110", "0.020", "3", "85", "0.300", "0.773", "70"], 3,
                              (1, "beside_over_alone", 0.8))

    def test_beside_pools_the_runs_of_several_files(self):
        # Two calls' files: every run named by its file, and the median over all runs (0.8, 0.9
        # and 1.2 -> 0.9); the other tables read one file only.
        def run(name, alone_bps, beside_bps):
            return [sample(name, "-", None, alone_bps, 0.0, None, with_opp=False, t=0),
                    sample(name, "congestion_avoidance", 9000, beside_bps, 0.1, 5, t=1),
                    sample(name, "congestion_avoidance", 9000, 0, 0.0, 0, t=2)]   # the stop

        a = self.write(run("low/tgs/1", 100, 80) + run("low/tgs/2", 100, 120))
        b = self.write(run("high/tgs/1", 100, 90))
        out = run_cli(a, b, "--beside")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[0].split()[-1], "file")
        self.assertEqual([(line.split()[0], line.split()[-1]) for line in lines[1:4]],
                         [("low/tgs/1", os.path.basename(a)), ("low/tgs/2", os.path.basename(a)),
                          ("high/tgs/1", os.path.basename(b))])
        self.assertEqual(lines[4], "beside_over_alone over 3 runs of 2 files: median 0.900 (0.800-1.200)")
        js = [json.loads(line) for line in run_cli(a, b, "--beside", "--json").stdout.splitlines()]
        self.assertEqual([(e["file"], e["beside_over_alone"]) for e in js],
                         [(os.path.basename(a), 0.8), (os.path.basename(a), 1.2), (os.path.basename(b), 0.9)])
        one = run_cli(a, "--beside")  # one file: the table as before, no file column or median line
        self.assertEqual(len(one.stdout.splitlines()), 3)
        self.assertNotIn("file", one.stdout)
        for flag in ("--control", "--refreshes"):
            refused = run_cli(a, b, flag)
            self.assertEqual(refused.returncode, 2)
            self.assertIn("only --beside pools runs", refused.stderr)

    def test_mutated_samples_are_refused_or_read_never_crash(self):
        # Bytes of a valid file replaced by JSON punctuation and digits; every table either reads
        # the file or refuses it with a ValueError naming the line.
        path = self.write(
            [sample("a", "-", None, 100, 0.01, None, with_opp=False, t=0)]
            + [sample("a", "profiling", 0, 100, 0.0, 0, t=1), sample("a", "slow_start", 20000, 99, 0.1, 5, t=2)]
            + [sample("a", "congestion_avoidance", 9000, 90, 0.2, 7, t=t, seen=95) for t in range(3, 8)]
            + [sample("a", "refreshing", 0, 100, 0.0, 0, t=t) for t in (8, 9)]
            + [sample("a", "congestion_avoidance", 9000, 80, 0.2, 7, t=10)])

        def read_all():
            status_phases.summarize(path)
            status_phases.control(path)
            status_phases.refresh_table(path)
            status_phases.beside(path)

        refused = byte_fuzz.fuzz_files([path], read_all, rounds=600, seed=3, refusals=(ValueError,))
        self.assertGreater(refused, 0)

    def test_bad_line_is_named(self):
        path = self.write([sample("a", "profiling", 0, 1, 0.0, 0), "{not json"])
        out = run_cli(path)
        self.assertEqual(out.returncode, 2)
        self.assertIn(f"{path}:2: not a status sample", out.stderr)

    def test_json_output_one_line_per_group(self):
        path = self.write([sample("a", "profiling", 0, 1, 0.0, 0), sample("a", "slow_start", 5, 1, 0.0, 2)])
        out = run_cli(path, "--json")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual([e["phase"] for e in lines], ["profiling", "slow_start"])
        self.assertEqual(lines[1]["budget"], 5)


if __name__ == "__main__":
    unittest.main()
