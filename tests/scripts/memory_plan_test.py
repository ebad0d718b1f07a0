# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/memory.sh PLAN_ONLY=1, without a GPU: the order of the runs a call would make.
ORDER=grouped keeps every alone run before the modes; ORDER=interleaved makes round i's alone
runs and then run i of every mode, so drift of the machine during a call hits the modes alike;
ORDER=interleaved refuses the fault demonstration (it ends the last tgs run of a grouped call)."""
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "gpu", "memory.sh")


def plan(**knobs):
    """The plan lines of a PLAN_ONLY call (without "plan: "). MAX_S is large unless a test sets it,
    so that the order, not the time guard, is what the other tests see."""
    knobs.setdefault("MAX_S", "100000")
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, PLAN_ONLY="1", OUT=os.path.join(out, "out"), **knobs)
        proc = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
        wrote = os.path.exists(env["OUT"])
    lines = [line[len("plan: "):] for line in proc.stdout.splitlines() if line.startswith("plan: ")]
    if wrote:
        raise AssertionError("PLAN_ONLY=1 created its OUT folder; a plan writes nothing")
    return proc.returncode, lines, proc.stdout + proc.stderr


class MemoryPlan(unittest.TestCase):
    def test_grouped_runs_every_alone_run_first_and_ends_with_the_fault_demonstration(self):
        rc, runs, out = plan(SCENARIOS="low", RUNS="2", ALONE_RUNS="2", MODES="coexec-um tgs")
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs, ["alone/resnet50/1", "alone/resnet50/2", "alone/dlrm/1", "alone/dlrm/2",
                                "low/coexec-um/1", "low/coexec-um/2", "low/tgs/1",
                                "low/tgs/2 (then the fault demonstration)"])

    def test_interleaved_makes_rounds_and_the_dlrm_alone_runs_once(self):
        rc, runs, out = plan(ORDER="interleaved", FAULT_DEMO="0", SCENARIOS="low high", RUNS="3", ALONE_RUNS="2",
                             MODES="fixed hard-limit tgs", FIXED_BUDGETS="4000000 1000000000:50:16")
        self.assertEqual(rc, 0, out)
        low = ["alone/resnet50/1", "alone/dlrm/1", "low/hard-limit/1", "low/fixed-4000000/1",
               "low/fixed-1000000000-inflight-16/1", "low/tgs/1",
               "alone/resnet50/2", "alone/dlrm/2", "low/fixed-4000000/2", "low/fixed-1000000000-inflight-16/2",
               "low/tgs/2",
               "low/fixed-4000000/3", "low/fixed-1000000000-inflight-16/3", "low/tgs/3"]
        self.assertEqual(runs[:len(low)], low)
        high = runs[len(low):]
        self.assertEqual(high[:2], ["alone/bert_base/1", "high/hard-limit/1"])
        self.assertNotIn("alone/dlrm/1", high, "the DLRM job's alone runs serve every scenario of a call")
        self.assertEqual(len(high), len(low) - 2)

    def test_fewer_dlrm_alone_runs_leave_a_production_alone_run_in_every_round(self):
        rc, runs, out = plan(ORDER="interleaved", FAULT_DEMO="0", SCENARIOS="low", RUNS="3", ALONE_RUNS="3",
                             ALONE_DLRM_RUNS="1", MODES="tgs")
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs, ["alone/resnet50/1", "alone/dlrm/1", "low/tgs/1",
                                "alone/resnet50/2", "low/tgs/2", "alone/resnet50/3", "low/tgs/3"])
        rc, runs, out = plan(SCENARIOS="low", RUNS="1", ALONE_RUNS="2", ALONE_DLRM_RUNS="1", MODES="coexec-um")
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[:3], ["alone/resnet50/1", "alone/resnet50/2", "alone/dlrm/1"])
        self.assertNotIn("alone/dlrm/2", runs)
        for bad in ("0", "4", "x"):
            rc, runs, out = plan(ORDER="interleaved", FAULT_DEMO="0", ALONE_RUNS="3", ALONE_DLRM_RUNS=bad, MODES="tgs")
            self.assertEqual(rc, 2, f"ALONE_DLRM_RUNS={bad}: {out}")
            self.assertIn("ALONE_DLRM_RUNS", out)

    def test_interleaved_refuses_the_fault_demonstration(self):
        rc, runs, out = plan(ORDER="interleaved", MODES="tgs")
        self.assertEqual(rc, 2)
        self.assertEqual(runs, [])
        self.assertIn("set FAULT_DEMO=0", out)

    def test_tgs_variants_run_beside_tgs_with_their_flags(self):
        knobs = dict(SCENARIOS="low", RUNS="2", ALONE_RUNS="1", MODES="tgs",
                     TGS_VARIANTS="band=--noise-band-multiple 2 --rate-smoothing 0.5; slow=--additive-increase 0.0005")
        rc, runs, out = plan(**knobs)
        self.assertEqual(rc, 0, out)
        band, slow = " (+ --noise-band-multiple 2 --rate-smoothing 0.5)", " (+ --additive-increase 0.0005)"
        # Grouped: the variants before tgs, whose last run keeps the fault demonstration.
        self.assertEqual(runs, ["alone/resnet50/1", "alone/dlrm/1", "low/tgs-band/1" + band, "low/tgs-band/2" + band,
                                "low/tgs-slow/1" + slow, "low/tgs-slow/2" + slow, "low/tgs/1",
                                "low/tgs/2 (then the fault demonstration)"])
        rc, runs, out = plan(ORDER="interleaved", FAULT_DEMO="0", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs, ["alone/resnet50/1", "alone/dlrm/1", "low/tgs/1", "low/tgs-band/1" + band,
                                "low/tgs-slow/1" + slow, "low/tgs/2", "low/tgs-band/2" + band,
                                "low/tgs-slow/2" + slow])

    def test_bad_tgs_variants_are_named(self):
        for value, words in (("band", "entries are NAME=FLAGS (got 'band')"),
                             ("Band=--x", "'Band=--x': NAME is lower-case letters"),
                             ("a=--x; a=--y", "names 'a' twice")):
            rc, runs, out = plan(TGS_VARIANTS=value)
            self.assertEqual(rc, 2, value)
            self.assertEqual(runs, [])
            self.assertIn(words, out)

    def test_profile_windows_are_checked(self):
        rc, runs, out = plan(PROFILE_WINDOWS="8", MAX_PROFILE_WINDOWS="6")
        self.assertEqual((rc, runs), (2, []))
        self.assertIn("need 1 <= PROFILE_WINDOWS <= MAX_PROFILE_WINDOWS (got 8, 6)", out)
        rc, runs, out = plan(SCENARIOS="low", PROFILE_WINDOWS="10", MAX_PROFILE_WINDOWS="20")
        self.assertEqual(rc, 0, out)

    def test_alone_runs_can_be_measured_at_the_age_of_the_tgs_runs(self):
        rc, _, out = plan(SCENARIOS="low", WARMUP_S="15", PAIR_SETTLE_S="10", TGS_SETTLE_S="40")
        self.assertEqual(rc, 0, out)
        self.assertIn("ages (s from the production job's start to its first window): alone 15, pairs 25, tgs 55", out)
        rc, _, out = plan(SCENARIOS="low", WARMUP_S="15", TGS_SETTLE_S="40", ALONE_SETTLE_S="40")
        self.assertEqual(rc, 0, out)
        self.assertIn("alone 55, pairs 25, tgs 55", out)
        for bad in ("-5", "ten", " "):
            rc, runs, out = plan(ALONE_SETTLE_S=bad)
            self.assertEqual((rc, runs), (2, []), bad)
            self.assertIn("ALONE_SETTLE_S must be a whole number of seconds", out)

    def test_the_plan_keeps_the_time_guards_clock(self):
        # The knobs of a call whose last tgs run MAX_S=545 skipped on the H100 (it reached that run
        # at 472 s); at MAX_S=578 the same plan ran every run and ended at 524 s.
        knobs = dict(ORDER="interleaved", FAULT_DEMO="0", SCENARIOS="low", RUNS="2", ALONE_RUNS="2",
                     MODES="coexec-budget tgs", WARMUP_S="15", WINDOWS="3", WINDOW_S="5",
                     TGS_SETTLE_S="40", ALONE_SETTLE_S="40")
        rc, runs, out = plan(MAX_S="545", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[-2:], ["low/coexec-budget/2", "low/tgs/2 (skipped: it would end past MAX_S=545 s)"])
        # 40 s set-up, then runs of 71, 71, 41, 71, 71, 71 and 41 s.
        self.assertIn("plan ends about 477 s after the call's start (MAX_S=545 s;", out)
        self.assertIn("; 1 skipped", out)
        rc, runs, out = plan(MAX_S="578", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[-1], "low/tgs/2")
        self.assertIn("plan ends about 548 s", out)
        self.assertIn("; 0 skipped", out)
        # Grouped: the tgs runs that no longer fit are skipped together.
        rc, runs, out = plan(MAX_S="300", SCENARIOS="low", RUNS="3", ALONE_RUNS="2", MODES="coexec-um tgs")
        self.assertEqual(rc, 0, out)
        self.assertIn("low/tgs/1 and after (skipped: it would end past MAX_S=300 s)", runs)

    def test_a_call_that_leaves_a_mode_no_run_is_named_and_refused_before_the_build(self):
        # The knobs of an H100 call that ran its alone runs and then skipped both tgs runs.
        knobs = dict(ORDER="interleaved", FAULT_DEMO="0", SCENARIOS="low", RUNS="2", ALONE_RUNS="1",
                     MODES="tgs", WARMUP_S="15", WINDOWS="3", WINDOW_S="5", TGS_SETTLE_S="40",
                     ALONE_SETTLE_S="40", MAX_S="250")
        rc, runs, out = plan(**knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[-1], "MAX_S=250 s leaves no run of: tgs")
        rc, runs, out = plan(**dict(knobs, MAX_S="330"))
        self.assertEqual(rc, 0, out)
        self.assertNotIn("leaves no run", out, "one tgs run fits")
        # Only the modes with no run are named (fixed-500000-5ms fits), variants and fixed shares by
        # their run names.
        rc, runs, out = plan(**dict(knobs, MODES="fixed tgs", FIXED_BUDGETS="500000:5 1000000000",
                                    TGS_VARIANTS="band=--noise-band-multiple 2", MAX_S="260"))
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[-1], "MAX_S=260 s leaves no run of: fixed-1000000000 tgs-band tgs")
        # The real call refuses before it builds anything or looks for a GPU.
        with tempfile.TemporaryDirectory() as out_dir:
            env = dict(os.environ, OUT=os.path.join(out_dir, "out"), PLAN_ONLY="0", **knobs)
            proc = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
        said = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 2, said)
        self.assertIn("MAX_S=250 s leaves no run of: tgs (raise MAX_S or ask for fewer runs", said)
        self.assertNotIn("build", said)

    def test_a_later_rounds_alone_run_gives_way_to_the_rounds_first_run(self):
        # The knobs of two H100 calls whose second round ran its alone run under MPS and then had
        # no time left for its tgs run. Round 1 ends at 400 s by the plan (40 s set-up, then runs
        # of 71, 71, 147 and 71 s); an alone run of round 2 is made only where tgs/2 still fits
        # after it, and tgs/2 runs either way.
        knobs = dict(ORDER="interleaved", FAULT_DEMO="0", SCENARIOS="low", RUNS="2", ALONE_RUNS="2",
                     ALONE_DLRM_RUNS="1", MPS="1", MODES="tgs", WARMUP_S="15", WINDOWS="3", WINDOW_S="5",
                     TGS_SETTLE_S="40", ALONE_SETTLE_S="40")
        rc, runs, out = plan(MAX_S="590", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[4:], ["alone/resnet50/2",
                                    "low/alone-mps/2 (skipped: round 2's first run would not fit after it in MAX_S=590 s)",
                                    "low/tgs/2"])
        rc, runs, out = plan(MAX_S="500", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[4:], ["alone/resnet50/2 (skipped: round 2's first run would not fit after it in MAX_S=500 s)",
                                    "low/alone-mps/2 (skipped: round 2's first run would not fit after it in MAX_S=500 s)",
                                    "low/tgs/2"])
        # With time for everything nothing gives way; alone runs beyond RUNS have no run to wait for.
        rc, runs, out = plan(MAX_S="700", **knobs)
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs[4:], ["alone/resnet50/2", "low/alone-mps/2", "low/tgs/2"])
        rc, runs, out = plan(**dict(knobs, MPS="0", ALONE_DLRM_RUNS="3", RUNS="1", ALONE_RUNS="3", MAX_S="400"))
        self.assertEqual(rc, 0, out)
        self.assertEqual(runs, ["alone/resnet50/1", "alone/dlrm/1", "low/tgs/1", "alone/resnet50/2", "alone/dlrm/2",
                                "alone/resnet50/3 (skipped: it would end past MAX_S=400 s)",
                                "alone/dlrm/3 (skipped: it would end past MAX_S=400 s)"])

    def test_every_numeric_knob_is_checked_before_the_plan(self):
        for knob, words in (("MAX_S", "MAX_S must be a whole number of seconds (got '9m')"),
                            ("WINDOW_S", "WINDOW_S must be a whole number of seconds (got '9m')"),
                            ("FAULT_TIMEOUT_S", "FAULT_TIMEOUT_S must be a whole number of seconds"),
                            ("RUNS", "RUNS must be a whole number (got '9m')"),
                            ("WINDOWS", "WINDOWS must be a whole number")):
            rc, runs, out = plan(**{knob: "9m"})
            self.assertEqual((rc, runs), (2, []), knob)
            self.assertIn(words, out)
        rc, runs, out = plan(WINDOWS="0")
        self.assertEqual((rc, runs), (2, []))
        self.assertIn("need at least one measured window of at least 1 s (got WINDOWS=0", out)

    def test_the_opportunistic_jobs_mps_priority_is_set_only_when_asked_and_only_for_it(self):
        def mps_lines(**knobs):
            rc, runs, out = plan(MPS="1", MPS_OPP_PCT="50", MODES="tgs", RUNS="1", ALONE_RUNS="1",
                                 SCENARIOS="high", FAULT_DEMO="0", **knobs)
            self.assertEqual(rc, 0, out)
            self.assertEqual(runs, ["alone/bert_base/1", "alone/dlrm/1", "high/alone-mps/1", "high/tgs/1"])
            return [line for line in out.splitlines() if line.startswith("mps: ")]
        self.assertEqual(mps_lines(), [
            "mps: the production job, in a pair and in alone-mps: the daemon's defaults",
            "mps: the opportunistic job, in a pair and in alone-mps: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"])
        self.assertEqual(mps_lines(MPS_OPP_PRIORITY="1"), [
            "mps: the production job, in a pair and in alone-mps: the daemon's defaults",
            "mps: the opportunistic job, in a pair and in alone-mps: "
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_CLIENT_PRIORITY=1"])
        # Without MPS nothing is set, and nothing is printed.
        rc, _, out = plan(MODES="tgs", RUNS="1", ALONE_RUNS="1", SCENARIOS="high")
        self.assertEqual(rc, 0, out)
        self.assertNotIn("mps: ", out)

    def test_a_bad_or_pointless_mps_priority_is_refused(self):
        rc, runs, out = plan(MPS="1", MPS_OPP_PRIORITY="2")
        self.assertEqual((rc, runs), (2, []))
        self.assertIn("MPS_OPP_PRIORITY must be 0 (normal) or 1 (below normal) (got '2')", out)
        rc, runs, out = plan(MPS_OPP_PRIORITY="1")
        self.assertEqual((rc, runs), (2, []))
        self.assertIn("MPS_OPP_PRIORITY=1 needs MPS=1", out)

    def test_an_unknown_order_is_named(self):
        rc, _, out = plan(ORDER="sideways")
        self.assertEqual(rc, 2)
        self.assertIn("ORDER must be grouped or interleaved (got 'sideways')", out)


if __name__ == "__main__":
    unittest.main()
