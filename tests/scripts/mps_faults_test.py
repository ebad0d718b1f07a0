# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/mps_faults.py without a GPU: its case names, its summary of recorded cases, and a clear
error on a bad case before anything starts."""
import os
import subprocess
import sys
import unittest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(REPO, "bench", "gpu", "mps_faults.py")
sys.path.insert(0, os.path.join(REPO, "bench", "gpu"))
import mps_faults  # noqa: E402


class Cases(unittest.TestCase):
    def test_kernel_cases_carry_their_length(self):
        self.assertEqual(mps_faults.parse_case("kill-in-kernel-2000"), ("kill-in-kernel", 2000.0))
        self.assertEqual(mps_faults.parse_case("term-in-kernel-30"), ("term-in-kernel", 30.0))
        self.assertEqual(mps_faults.parse_case("illegal-address"), ("illegal-address", 0.0))

    def test_a_device_assert_is_a_case(self):
        self.assertEqual(mps_faults.parse_case("device-assert"), ("device-assert", 0.0))

    def test_the_nodes_mechanism_is_read_from_its_log(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("tgs-node [    1.000] info  job 2 registered: pid 41 uid 0 opportunistic (request) on GPU 0 "
                    "(opportunistic), mps-client (measured-safe)\n")
            f.write("tgs-node [    1.500] info  job 3 registered: pid 77 uid 0 production (request) on GPU 0 (production), "
                    "an MPS client\n")
            f.write("tgs-node [    2.000] info  job 4 registered: pid 4242 uid 0 opportunistic (request) on GPU 0 "
                    "(opportunistic), time-sliced (kernels-unmeasured)\n")
        try:
            self.assertEqual(mps_faults.node_mechanism_of(f.name, 4242), "time-sliced (kernels-unmeasured)")
            self.assertEqual(mps_faults.node_mechanism_of(f.name, 41), "mps-client (measured-safe)")
            self.assertIsNone(mps_faults.node_mechanism_of(f.name, 77), "a production job has no mechanism")
            self.assertIsNone(mps_faults.node_mechanism_of(f.name, 4))
            self.assertIsNone(mps_faults.node_mechanism_of(f.name + ".missing", 4242))
        finally:
            os.unlink(f.name)

    def test_bad_cases_are_refused(self):
        for bad in ("kill-in-kernel", "kill-in-kernel-0", "kill-in-kernel-x", "illegal-address-5", "reboot"):
            with self.assertRaises(Exception, msg=bad):
                mps_faults.parse_case(bad)

    def test_the_command_refuses_a_bad_case_before_it_starts(self):
        r = subprocess.run([sys.executable, SCRIPT, "run", "--out", os.devnull + "-unused", "--cases",
                            "kill-queued,kill-in-kernel-soon"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown case 'kill-in-kernel-soon'", r.stderr)


class StuckClients(unittest.TestCase):
    """What the probe records of a client that does not end: a stopped one must read as stopped."""

    def test_a_stopped_process_reads_as_stopped_and_a_sleeping_one_as_sleeping(self):
        import signal
        import time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            time.sleep(0.3)
            sleeping = mps_faults.process_state(child.pid)
            self.assertTrue(sleeping["State"].startswith("S"), sleeping)
            self.assertEqual(sleeping["threads"][0]["tid"], child.pid)
            self.assertEqual(sleeping["threads"][0]["comm"], os.path.basename(sys.executable)[:15])
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(0.3)
            stopped = mps_faults.process_state(child.pid)
            self.assertTrue(stopped["State"].startswith("T"), stopped)
            self.assertEqual(stopped["threads"][0]["stat"], "T")
        finally:
            child.kill()
            child.wait()

    def test_a_process_that_has_ended_says_so(self):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        self.assertIn("error", mps_faults.process_state(child.pid))

    def test_a_stuck_client_is_killed_and_its_python_stack_read(self):
        import argparse
        code = ("import faulthandler, signal, time, json; faulthandler.register(signal.SIGUSR1, all_threads=True); "
                "print(json.dumps({'pid': 1}), flush=True); time.sleep(60)")
        client = mps_faults.Client([sys.executable, "-c", code], dict(os.environ))
        self.assertTrue(client.wait_for("pid", 30))
        seen = mps_faults.diagnose(client, argparse.Namespace(node=None, out=os.devnull))
        self.assertTrue(any('File "<string>", line 1' in line for line in seen["python_stack"]), seen)
        self.assertEqual(seen["process"]["pid"], client.proc.pid)
        self.assertEqual((seen["node_said"], seen["node_status"]), ([], []), "no node, nothing from it")
        self.assertTrue(client.end())
        self.assertIsNotNone(client.proc.poll())


class Summary(unittest.TestCase):
    def test_counts_survivals_and_distinct_errors(self):
        died = {"alive": False, "progress": False, "survived": False, "error": "illegal memory access"}
        lived = {"alive": True, "progress": True, "survived": True}
        records = [{"case": "a", "production": died, "new_client_ok": True},
                   {"case": "a", "production": died, "new_client_ok": False},
                   {"case": "b", "production": lived, "new_client_ok": True},
                   {"case": "c", "skipped": "past --max-s 10"}]
        cases = mps_faults.summarize(records)["cases"]
        self.assertEqual(cases["a"], {"runs": 2, "production_survived": 0, "new_client_ok": 1,
                                      "errors": ["illegal memory access"]})
        self.assertEqual(cases["b"]["production_survived"], 1)
        self.assertNotIn("c", cases, "a skipped case has no run")

    def test_the_mechanisms_the_node_chose_are_listed_per_case(self):
        lived = {"alive": True, "progress": True, "survived": True}
        records = [{"case": "k", "production": lived, "mechanism": "time-sliced (kernels-unmeasured)"},
                   {"case": "k", "production": lived, "mechanism": "time-sliced (kernels-unmeasured)"},
                   {"case": "j", "production": lived}]
        cases = mps_faults.summarize(records)["cases"]
        self.assertEqual(cases["k"]["mechanisms"], ["time-sliced (kernels-unmeasured)"])
        self.assertNotIn("mechanisms", cases["j"], "no node, no mechanism")

    def test_production_state_needs_progress_and_no_error(self):
        class Fake:
            def __init__(self, lines, code):
                self.lines, self.proc = lines, type("P", (), {"poll": lambda self: code})()

            def seen(self, key, since=0.0):
                return [o for t, o in self.lines if t >= since and key in o]
        still = Fake([(1.0, {"iters": 8}), (2.0, {"iters": 8})], None)
        self.assertFalse(mps_faults.production_state(still, 0.0)["survived"], "no progress")
        moving = Fake([(1.0, {"iters": 8}), (2.0, {"iters": 16})], None)
        self.assertTrue(mps_faults.production_state(moving, 0.0)["survived"])
        failed = Fake([(1.0, {"iters": 8}), (2.0, {"iters": 16}), (2.5, {"error": "x"})], 1)
        self.assertFalse(mps_faults.production_state(failed, 0.0)["survived"])


if __name__ == "__main__":
    unittest.main()
