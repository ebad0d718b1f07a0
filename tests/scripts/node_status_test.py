# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/node_status.py against a real tgs-node (no GPU, no job): the sampler writes a line a
second with the node's GPUs and jobs, stops on SIGTERM, and a node that does not answer gives
None. Usage: node_status_test.py TGS_NODE [unittest args]"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import node_status  # noqa: E402

NODE = ""


class NodeStatus(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "node.sock")
        self.node = subprocess.Popen([NODE, "--socket", self.sock, "--memory-policy", "tgs",
                                      "--memory-budget-mib", "1024", "--residency-split", "even"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 5
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(self.sock), "tgs-node did not start")

    def tearDown(self):
        self.node.terminate()
        self.node.wait(timeout=10)
        self.dir.cleanup()

    def test_status_answers_and_a_missing_node_gives_none(self):
        st = node_status.status(NODE, self.sock)
        self.assertIsNotNone(st)
        gpus, jobs = st
        self.assertEqual(jobs, [])
        self.assertIsNone(node_status.status(NODE, self.sock + ".missing"))

    def test_sampler_writes_a_line_a_second_until_sigterm(self):
        out = os.path.join(self.dir.name, "samples.jsonl")
        script = os.path.join(os.path.dirname(node_status.__file__), "node_status.py")
        p = subprocess.Popen([sys.executable, script, "sample", NODE, self.sock, out, "pair/tgs/1"])
        time.sleep(2.5)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=10), 0)
        lines = [json.loads(line) for line in open(out, encoding="utf-8")]
        self.assertGreaterEqual(len(lines), 2)
        self.assertLessEqual(len(lines), 4)
        for d in lines:
            self.assertEqual(d["run"], "pair/tgs/1")
            self.assertEqual(d["jobs"], [])
            self.assertIsInstance(d["gpus"], list)
        self.assertGreater(lines[-1]["t"], lines[0]["t"] + 0.5)

    def test_bad_usage_says_how(self):
        script = os.path.join(os.path.dirname(node_status.__file__), "node_status.py")
        p = subprocess.run([sys.executable, script, "sample", NODE], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage: node_status.py sample NODE SOCKET OUT LABEL", p.stderr)


if __name__ == "__main__":
    NODE = sys.argv.pop(1)
    unittest.main()
