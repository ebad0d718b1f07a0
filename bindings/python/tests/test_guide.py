# SPDX-License-Identifier: Apache-2.0
"""docs/python.md's worked example runs as written and prints what the page shows: it is run
from a scratch checkout (a docs folder, and the traces beside it at ../shared/traces)."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from support import SOURCE, philly

GUIDE = os.path.join(SOURCE, "docs", "python.md")


def example():
    """The worked example's code and the output the page shows for it."""
    with open(GUIDE, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    output = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    return code, output


class WorkedExample(unittest.TestCase):
    def test_runs_as_written(self):
        trace = philly("philly_jobs_pollux.csv")
        code, expected = example()
        with tempfile.TemporaryDirectory() as d:
            checkout = os.path.join(d, "checkout")
            os.makedirs(os.path.join(checkout, "docs"))
            os.makedirs(os.path.join(d, "shared"))
            os.symlink(os.path.dirname(os.path.abspath(trace)), os.path.join(d, "shared", "traces"))
            r = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, expected)
            figure = os.path.join(checkout, "docs", "python-replay-cdf.png")
            with open(figure, "rb") as f:
                drawn = f.read(24)
            with open(os.path.join(SOURCE, "docs", "python-replay-cdf.png"), "rb") as f:
                committed = f.read(24)
            self.assertEqual(drawn[:8], b"\x89PNG\r\n\x1a\n")
            self.assertEqual(drawn[16:24], committed[16:24], "the committed figure has the example's size")
        self.assertLess(os.path.getsize(os.path.join(SOURCE, "docs", "python-replay-cdf.png")), 100_000)


if __name__ == "__main__":
    unittest.main()
