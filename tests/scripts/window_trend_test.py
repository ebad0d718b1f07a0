# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/window_trend.py: last / first window of the production models' runs, grouped into a
call's first alone run of each model, its later alone runs and production jobs beside a
co-runner; the opportunistic model, single windows and bad lines are left out."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import window_trend  # noqa: E402


class WindowTrend(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def runs(self, name, lines):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            for line in lines:
                f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        return path

    def test_runs_are_grouped_and_compared_last_to_first(self):
        a = self.runs("a-runs.jsonl", [
            {"label": "alone/resnet50/1", "model": "resnet50", "it_per_s": [20, 25, 30]},  # first: 1.5
            {"label": "alone/dlrm/1", "model": "dlrm", "it_per_s": [100, 200]},             # left out
            {"label": "alone/resnet50/2", "model": "resnet50", "it_per_s": [30, 31, 29]},  # later: 29/30
            {"label": "alone/bert_base/1", "model": "bert_base", "it_per_s": [10, 8]},     # first: 0.8
            {"label": "low/tgs/1/production", "model": "resnet50", "it_per_s": [30, 32]},  # shared: 1.07
            {"label": "low/tgs/1/opportunistic", "model": "dlrm", "it_per_s": [1, 9]},     # left out
            {"label": "low/tgs/2/production", "model": "resnet50", "it_per_s": [30]},      # one window
            {"label": "low/tgs/3/production", "model": "resnet50", "it_per_s": [0, 30]},   # no ratio
            "not a result line",
            '{"label": "alone/resnet50/9", "it_per_s": [1,',
        ])
        b = self.runs("b-runs.jsonl", [{"label": "alone/resnet50/1", "model": "resnet50", "it_per_s": [40, 36]}])
        with redirect_stderr(io.StringIO()) as err:
            got = window_trend.trends([a, b])
        self.assertIn("a-runs.jsonl:10: not JSON", err.getvalue())  # a torn line is reported, not fatal
        self.assertEqual(sorted(got["first alone"]), [0.8, 0.9, 1.5])  # b's first run is b's own first
        self.assertEqual(got["later alone"], [29 / 30])
        self.assertEqual(got["shared"], [32 / 30])
        s = window_trend.summarize(got, 0.1)
        self.assertEqual(s["first alone"], {"runs": 3, "median": 0.9, "rose": 1, "fell": 1})
        self.assertEqual((s["shared"]["rose"], s["later alone"]["fell"]), (0, 0))  # within 10% both

    def test_values_of_the_wrong_type_are_skipped_never_crash(self):
        bad = [{"label": 3, "model": "resnet50", "it_per_s": [1, 2]},
               {"label": "alone/x/1", "model": ["resnet50"], "it_per_s": [1, 2]},
               {"label": "alone/x/1", "model": {"a": 1}, "it_per_s": [1, 2]},
               {"label": "alone/x/1", "model": "x", "it_per_s": "fast"},
               {"label": "alone/x/1", "model": "x", "it_per_s": [1, "2"]},
               {"label": "alone/x/1", "model": "x", "it_per_s": [1, -2]},
               {"label": "alone/x/1", "model": "x", "it_per_s": [True, 2.0]},
               [1, 2], "x", None, 7]
        a = self.runs("a-runs.jsonl", [json.dumps(x) if not isinstance(x, dict) else x for x in bad])
        got = window_trend.trends([a])
        self.assertEqual(got, {"first alone": [], "later alone": [], "shared": []})

    def test_main_prints_the_groups_and_writes_json(self):
        a = self.runs("a-runs.jsonl", [{"label": "alone/resnet50/1", "model": "resnet50", "it_per_s": [20, 30]}])
        out_json = os.path.join(self.dir.name, "trend.json")
        with redirect_stdout(io.StringIO()) as out:
            rc = window_trend.main(["window_trend.py", a, "--json", out_json])
        self.assertEqual(rc, 0)
        self.assertIn("first alone", out.getvalue())
        self.assertIn("1 (100%)", out.getvalue())
        data = json.load(open(out_json))
        self.assertEqual((data["files"], data["groups"]["first alone"]["rose"], data["groups"]["shared"]["runs"]),
                         (1, 1, 0))

    def test_bad_input_is_refused_with_a_message(self):
        with redirect_stderr(io.StringIO()) as err:
            self.assertEqual(window_trend.main(["window_trend.py", os.path.join(self.dir.name, "missing.jsonl")]), 2)
        self.assertIn("missing.jsonl", err.getvalue())
        a = self.runs("a-runs.jsonl", [])
        with redirect_stderr(io.StringIO()) as err:
            self.assertEqual(window_trend.main(["window_trend.py", a, "--threshold", "1.5"]), 2)
        self.assertIn("--threshold must be in (0, 1), got 1.5", err.getvalue())


if __name__ == "__main__":
    unittest.main()
