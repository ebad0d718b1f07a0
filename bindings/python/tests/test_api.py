# SPDX-License-Identifier: Apache-2.0
"""The Python module's API: every function and class, and what each does with bad input."""
import copy
import math
import os
import tempfile
import unittest

import numpy as np

import tgs
from support import SIM_DATA, SOURCE, TRACE_DATA, tgs_sim


#: The registered rate controllers as messages list them.
KNOWN = ", ".join(tgs.rate_policies())


def arrival(now_s=0.0, window_s=0.0, production=0, opportunistic=0):
    return {"now_s": now_s, "window_s": window_s, "production": {"blocks_launched": production},
            "opportunistic": {"blocks_launched": opportunistic}}


class Registries(unittest.TestCase):
    def test_policy_names_come_from_the_registries(self):
        help_text = tgs_sim("pairs", "--help").stdout
        rate = tgs.rate_policies()
        self.assertEqual(rate[0], "tgs")
        self.assertIn("exclusive", rate)
        self.assertIn("--policies TEXT:{" + ",".join(rate) + "}", help_text.replace("\n", ""))
        self.assertEqual(tgs.memory_policies(), ["tgs", "hard-limit", "no-oversubscription", "unified-memory"])
        self.assertEqual(tgs.default_pair_policies(), ["tgs", "co-execution", "mps", "mig"])
        self.assertIn("tgs", tgs.default_cluster_policies())
        self.assertEqual(tgs.baseline_policy(), "exclusive")
        self.assertEqual([f["name"] for f in tgs.trace_formats()], ["philly-json", "philly-csv", "tgs-csv"])
        self.assertEqual(tgs.trace_formats()[1]["aliases"], ["pollux-csv"])

    def test_settings_are_the_flags_of_tgs_sim(self):
        rows = tgs.settings()
        help_text = tgs_sim("pairs", "--help").stdout
        for row in rows:
            self.assertIn(f"--{row['key']}", help_text, row)
        band = next(r for r in rows if r["key"] == "tgs.dead-band")
        self.assertEqual((band["family"], band["policy"], band["setting"], band["default"]),
                         ("rate", "tgs", "dead-band", 0.03))
        window = next(r for r in rows if r["key"] == "tgs.production-window-ms")
        self.assertEqual((window["unit"], window["default"]), ("ms", 5000.0))
        reserve = next(r for r in rows if r["key"] == "memory.tgs.reserve-mib")
        self.assertEqual((reserve["family"], reserve["unit"], reserve["default"]), ("memory", "MiB", 1024.0))

    def test_policy_traits(self):
        t = tgs.policy_traits("mps")
        self.assertEqual((t["enforced_by"], t["mechanism"], t["co_locates"]), ("hardware", "mps", True))
        self.assertEqual((t["fixed_block_budget"], tgs.policy_traits("token-bucket")["fixed_block_budget"]),
                         (False, True))
        with self.assertRaisesRegex(tgs.InputError, f'unknown policy "nope" \\(known: {KNOWN}\\)$'):
            tgs.policy_traits("nope")

    def test_errors_are_value_errors(self):
        self.assertTrue(issubclass(tgs.InputError, ValueError))
        self.assertTrue(issubclass(tgs.ConfigError, tgs.InputError))
        self.assertTrue(issubclass(tgs.TraceError, tgs.InputError))


class Controllers(unittest.TestCase):
    def test_tgs_profiles_then_starts_slow(self):
        c = tgs.Controller("tgs")
        self.assertEqual((c.name, c.traits["adaptive"]), ("tgs", True))
        d = c.step(arrival())
        self.assertEqual(d["opportunistic_budget"], 0)  # held while R is profiled
        self.assertEqual(d["share"], {"kind": "time-sliced"})
        self.assertEqual((d["budget_window_s"], d["revisit_at_s"]), (0.05, 5.0))
        self.assertEqual(c.describe()["phase"], "profiling")
        t = 0.0
        while c.describe()["phase"] == "profiling" and t < 100:
            t += 5
            d = c.step(arrival(t, 5.0, production=100_000, opportunistic=0))
        self.assertEqual(c.describe()["phase"], "slow_start")
        self.assertEqual(d["opportunistic_budget"], 20_000)  # the released code's LIMIT_INITIALIZER

    def test_a_copy_steps_on_its_own(self):
        c = tgs.Controller("tgs")
        c.step(arrival())
        fork = copy.copy(c)
        for t in range(1, 10):
            fork.step(arrival(5.0 * t, 5.0, production=100_000))
        self.assertEqual(c.describe()["phase"], "profiling")
        self.assertNotEqual(fork.describe(), c.describe())
        self.assertEqual(copy.deepcopy(c).describe(), c.describe())

    def test_settings_by_name_in_the_flags_units(self):
        c = tgs.Controller("tgs", {"dead-band": 0.05, "production-window-ms": 1000})
        self.assertEqual((c.settings["dead-band"], c.settings["production-window-ms"]), (0.05, 1000.0))
        self.assertEqual(c.step(arrival())["revisit_at_s"], 1.0)
        b = tgs.Controller("token-bucket", {"budget-blocks": 5000, "budget-window-ms": 10})
        d = b.step(arrival())
        self.assertEqual((d["opportunistic_budget"], d["budget_window_s"]), (5000, 0.01))
        m = tgs.Controller("mps", {"production-threads": 0.6})
        self.assertEqual(m.step({})["share"], {"kind": "mps", "production_threads": 0.6, "opportunistic_threads": 0.7,
                                                   "opportunistic_below_normal": False})
        self.assertEqual(tgs.Controller("mig").step({})["share"]["kind"], "mig")

    def test_out_of_range_settings_raise_the_policys_own_message(self):
        # tgs-sim words the same setting the same way.
        cli = tgs_sim("pairs", "--policies", "tgs", "--tgs.dead-band", "2", check=False).stderr
        with self.assertRaises(tgs.ConfigError) as e:
            tgs.Controller("tgs", {"dead-band": 2})
        self.assertEqual(str(e.exception), "tgs_rate_control: dead_band must be in (0, 1), got 2")
        self.assertEqual(cli, f"tgs-sim: {e.exception}\n")

    def test_bad_settings_and_names(self):
        cases = [
            (("nope",), tgs.InputError, f'unknown policy "nope" \\(known: {KNOWN}\\)$'),
            (("tgs", {"dead-bnd": 0.1}), tgs.InputError,
             r'unknown setting "dead-bnd": tgs has the settings production-window-ms, '),
            (("exclusive", {"x": 1}), tgs.InputError, r'unknown setting "x": exclusive has no settings'),
            (("tgs", {"dead-band": "wide"}), tgs.InputError, r"dead-band: expected a number, got 'wide'"),
            (("tgs", {"dead-band": True}), tgs.InputError, r"dead-band: expected a number, got True"),
            (("tgs", {"profile-windows": 1.5}), tgs.InputError, r"profile-windows: expected an integer, got 1.5"),
            (("token-bucket", {"budget-blocks": -5}), tgs.InputError, r"budget-blocks: must not be negative, got -5"),
            (("tgs", ["dead-band"]), tgs.InputError, r"settings: expected a dict, got \['dead-band'\]"),
        ]
        for args, error, message in cases:
            with self.subTest(args=args), self.assertRaisesRegex(error, message):
                tgs.Controller(*args)

    def test_idle_harvest_reads_the_gpu_side_signals(self):
        # Its speed is blocks per busy second: between synchronisations when the job reports
        # them, else over the window.
        for synced, speed in ((True, 600 / 0.2), (False, 1000 / 0.5)):
            with self.subTest(synced=synced):
                c = tgs.Controller("idle-harvest")
                c.step({"now_s": 0, "window_s": 0, "production": {"blocks_launched": 0},
                        "opportunistic": {"blocks_launched": 0}})
                production = {"blocks_launched": 1000, "gpu_busy_s": 0.5}
                if synced:
                    production.update(synced_blocks=600, synced_gpu_busy_s=0.2)
                d = c.step({"now_s": 1, "window_s": 1, "production": production,
                            "opportunistic": {"blocks_launched": 10}})
                self.assertIsNone(d["fill_gaps"])  # held while it measures its reference
                state = c.describe()
                self.assertAlmostEqual(state["window_blocks_per_busy_s"], speed)
                self.assertAlmostEqual(state["production_busy_fraction"], 0.5)

    def test_idle_harvest_fills_gaps_once_it_harvests(self):
        c = tgs.Controller("idle-harvest")
        d = c.step({"now_s": 0, "window_s": 0, "production": {"blocks_launched": 0},
                    "opportunistic": {"blocks_launched": 0}})
        steady = {"blocks_launched": 1000, "gpu_busy_s": 0.25}
        for step in range(1, 100):
            if c.describe()["phase"] == "harvesting":
                break
            d = c.step({"now_s": step * 0.5, "window_s": 0.5, "production": steady,
                        "opportunistic": {"blocks_launched": 10}})
        state = c.describe()
        self.assertEqual(state["phase"], "harvesting")
        # Opportunistic launches also pass in the production job's gaps, behind the gate the state
        # report shows.
        self.assertEqual(d["fill_gaps"]["max_inflight"], state["max_inflight"])
        self.assertAlmostEqual(d["fill_gaps"]["holdoff_s"], state["holdoff_us"] * 1e-6)

    def test_bad_observations_name_the_key(self):
        c = tgs.Controller("tgs")
        cases = [
            ({"now": 0}, r'observation: unknown key "now" \(known: now_s, window_s, production, opportunistic\)'),
            ({"window_s": -1}, r"observation.window_s: must not be negative, got -1"),
            ({"production": {"blocks_launched": -1}}, r"observation.production.blocks_launched: must not be negative"),
            ({"production": {"blocks": 1}}, r'observation.production: unknown key "blocks"'),
            ({"production": 5}, r"observation.production: expected a dict, got 5"),
            ({"now_s": 1e12}, r"outside ±9e9 s"),
            ({"production": {"sync_wait_s": "x"}}, r"observation.production.sync_wait_s: expected a number"),
            ({"production": {"gpu_busy_s": -1}}, r"observation.production.gpu_busy_s: must not be negative"),
            ({"production": {"synced_blocks": 1.5}}, r"observation.production.synced_blocks: expected"),
            ([], r"observation: expected a dict, got \[\]"),
        ]
        for obs, message in cases:
            with self.subTest(obs=obs), self.assertRaisesRegex(tgs.InputError, message):
                c.step(obs)

    def test_every_registered_controller_steps_with_defaults(self):
        for name in tgs.rate_policies():
            c = tgs.Controller(name)
            d = c.step(arrival(production=1000, opportunistic=1000))
            self.assertIn(d["share"]["kind"], ("time-sliced", "mps", "mig", "exclusive-turn"), name)
            self.assertIsInstance(c.describe(), dict)
            self.assertEqual(repr(c), f'tgs.Controller("{name}")')


class MemoryPolicies(unittest.TestCase):
    GIB = 1 << 30

    def test_hard_limit_refuses_what_exceeds_the_limit(self):
        m = tgs.MemoryPolicy("hard-limit", {"production-fraction": 0.5})
        d = m.step({"capacity_bytes": 40 * self.GIB,
                    "request": {"requester": "opportunistic", "size_bytes": 30 * self.GIB}})
        self.assertEqual(d["verdict"], "deny_out_of_memory")
        d = m.step({"capacity_bytes": 40 * self.GIB,
                    "request": {"requester": "opportunistic", "size_bytes": 10 * self.GIB}})
        self.assertEqual(d["verdict"], "grant_device")
        # Each class is told its own half of the card.
        self.assertEqual((d["production_view_bytes"], d["opportunistic_view_bytes"]), (20 * self.GIB, 20 * self.GIB))
        self.assertEqual(m.settings["production-fraction"], 0.5)
        self.assertEqual(m.paging, "none")
        self.assertEqual(m.describe(), {})

    def test_tgs_puts_opportunistic_memory_in_unified_memory(self):
        m = tgs.MemoryPolicy("tgs", {"reserve-mib": 0})
        d = m.step({"capacity_bytes": 40 * self.GIB,
                    "production": {"allocated_bytes": 30 * self.GIB, "resident_bytes": 30 * self.GIB},
                    "request": {"requester": "opportunistic", "size_bytes": 20 * self.GIB}})
        self.assertEqual(d["verdict"], "grant_managed")
        self.assertEqual((m.paging, tgs.MemoryPolicy("unified-memory").paging), ("policy-eviction", "driver-demand"))
        self.assertEqual(d["opportunistic_resident_limit_bytes"], 10 * self.GIB)
        self.assertTrue(d["production_pinned"])
        self.assertIsNone(d["revisit_at_s"])
        self.assertIsNone(d["production_view_bytes"])  # the budget less what the others hold
        self.assertEqual(copy.copy(m).settings, {"reserve-mib": 0.0})

    def test_bad_input(self):
        with self.assertRaisesRegex(tgs.ConfigError, r"memory policy: unknown name 'nope' \(known: tgs, hard-limit"):
            tgs.MemoryPolicy("nope")
        m = tgs.MemoryPolicy("no-oversubscription")
        with self.assertRaisesRegex(tgs.InputError,
                                    r'observation.request.requester: expected "production" or "opportunistic", '
                                    r'got "admin"'):
            m.step({"request": {"requester": "admin"}})
        with self.assertRaisesRegex(tgs.InputError, r"observation.capacity_bytes: expected an integer, got 1.5"):
            m.step({"capacity_bytes": 1.5})
        with self.assertRaisesRegex(tgs.InputError, r"unknown setting \"reserve\": tgs has the settings reserve-mib"):
            tgs.MemoryPolicy("tgs", {"reserve": 1})


class Traces(unittest.TestCase):
    def test_every_format_is_read(self):
        for name, fmt, jobs in (("pollux.csv", None, 6), ("pollux.csv", "pollux-csv", 6),
                                ("job_stream.csv", "tgs-csv", 4), ("pass_attempts.json", None, None),
                                ("cluster_job_log.json", "philly-json", None)):
            with self.subTest(name=name, fmt=fmt):
                t = tgs.read_trace(os.path.join(TRACE_DATA, name), format=fmt)
                if jobs is not None:
                    self.assertEqual(len(t), jobs)
                self.assertGreater(len(t), 0)
                self.assertEqual(t.source, os.path.join(TRACE_DATA, name))
                self.assertEqual(set(t.jobs), {"id", "name", "submit_s", "duration_s", "gpus", "class", "model",
                                               "batch_size", "iterations", "vc", "attempts", "queueing_delay_s",
                                               "outcome", "source_line"})
                self.assertEqual(t.stats["rows_kept"], len(t))
                self.assertEqual(list(t.jobs["id"]), list(range(len(t))))
                self.assertEqual(repr(t), f"<tgs.Trace {t.source}: {len(t)} jobs>")

    def test_job_stream_columns(self):
        t = tgs.read_trace(os.path.join(TRACE_DATA, "job_stream.csv"), format="job-stream")
        self.assertEqual(t.origin, "2024-03-01 09:00:00")
        j = t.jobs
        self.assertEqual(list(j["name"]), ["train-a", "eval", "train-b", "sweep, lr=0.1"])
        self.assertEqual(list(j["class"]), ["production", "", "opportunistic", "opportunistic"])
        self.assertEqual(j["submit_s"][2], 12.5)
        self.assertTrue(math.isnan(j["duration_s"][2]))
        self.assertEqual(j["iterations"][2], 5000)
        self.assertEqual(j["model"][1], 'gpt2 "small"')

    def test_malformed_traces_raise_trace_errors_with_file_and_line(self):
        bad = os.path.join(SIM_DATA, "bad.csv")
        with self.assertRaises(tgs.TraceError) as e:
            tgs.read_trace(bad)
        self.assertEqual((e.exception.file, e.exception.line), (bad, 3))
        self.assertRegex(str(e.exception),
                         r'bad.csv:3: column "duration": expected a non-negative number of seconds, got "-5.0"')
        t = tgs.read_trace(bad, skip_malformed=True)
        self.assertEqual((len(t), t.stats["rows_skipped"]), (2, 1))
        with self.assertRaisesRegex(tgs.TraceError, r"nope.csv: cannot open"):
            tgs.read_trace("nope.csv")
        with self.assertRaisesRegex(tgs.InputError,
                                    r"format: xml not in \{philly-json,philly-csv,pollux-csv,tgs-csv,job-stream\}"):
            tgs.read_trace(bad, format="xml")

    def test_parse_and_write_round_trip(self):
        t = tgs.parse_trace("submit_s,gpus,duration_s\n0,1,60\n5,2,30\n", "tgs-csv", source="inline")
        self.assertEqual((len(t), t.source), (2, "inline"))
        text = tgs.write_trace(t)
        again = tgs.parse_trace(text, "tgs-csv")
        self.assertEqual(list(again.jobs["duration_s"]), [60.0, 30.0])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "jobs.csv")
            self.assertIsNone(tgs.write_trace(t, path))
            self.assertEqual(len(tgs.read_trace(path, format="tgs-csv")), 2)
            with self.assertRaisesRegex(tgs.InputError, r"write_trace: cannot write"):
                tgs.write_trace(t, os.path.join(d, "no", "such", "folder.csv"))
        with self.assertRaisesRegex(tgs.TraceError, r"inline:2: "):
            tgs.parse_trace("submit_s,gpus,duration_s\n0,0,60\n", "tgs-csv", source="inline")

    def test_make_trace_from_lists_and_records(self):
        columns = {"submit_s": [0, 60.25, 1e-3], "gpus": [1, 2, 1], "duration_s": [3600, None, 10],
                   "iterations": [None, 500, None], "class": ["production", "opportunistic", None],
                   "model": ["resnet50", "gcn", "bert-base"], "name": ["a", "b, c", 'd "e"']}
        t = tgs.make_trace(columns)
        self.assertEqual(len(t), 3)
        self.assertEqual(list(t.jobs["name"]), ["a", "d \"e\"", "b, c"])  # sorted by submission
        self.assertEqual(list(t.jobs["submit_s"]), [0.0, 0.001, 60.25])
        records = [dict(zip(columns, row)) for row in zip(*columns.values())]
        self.assertEqual(list(tgs.make_trace(records).jobs["gpus"]), list(t.jobs["gpus"]))

    def test_make_trace_errors_name_the_row(self):
        with self.assertRaises(tgs.TraceError) as e:
            tgs.make_trace({"submit_s": [0, 5], "gpus": [1, 0], "duration_s": [1, 1]}, source="mine")
        self.assertRegex(str(e.exception), r'^mine: row 1: column "gpus": ')
        self.assertEqual(e.exception.row, 1)
        with self.assertRaisesRegex(tgs.InputError, r'make_trace: unknown column "gpu" \(known: submit_s, gpus'):
            tgs.make_trace({"submit_s": [0], "gpu": [1]})
        with self.assertRaisesRegex(tgs.InputError, r"make_trace: the columns differ in length"):
            tgs.make_trace({"submit_s": [0, 1], "gpus": [1]})
        with self.assertRaisesRegex(tgs.InputError, r"row 0: column \"name\": a line break"):
            tgs.make_trace({"submit_s": [0], "gpus": [1], "duration_s": [1], "name": ["a\nb"]})
        with self.assertRaisesRegex(tgs.InputError, r"expected a pandas DataFrame"):
            tgs.make_trace(42)

    def test_make_trace_from_a_dataframe(self):
        try:
            import pandas as pd
        except ImportError:
            self.skipTest("pandas is not installed (Debian: python3-pandas)")
        df = pd.DataFrame({"submit_s": [0.0, 30.0], "gpus": [1, 1], "duration_s": [600.0, np.nan],
                           "iterations": pd.array([pd.NA, 100], dtype="Int64"),
                           "class": ["production", "opportunistic"], "model": ["resnet50", "gcn"]})
        t = tgs.make_trace(df, source="frame")
        self.assertEqual((len(t), t.source), (2, "frame"))
        self.assertEqual(t.jobs["iterations"][1], 100)
        back = pd.DataFrame(t.jobs)
        self.assertEqual(list(back["model"]), ["resnet50", "gcn"])
        r = tgs.replay(t, cluster="1x2", policies=["tgs"])
        self.assertEqual(r["summary"][0]["production_jobs"] + r["summary"][0]["opportunistic_jobs"], 2)


class Runs(unittest.TestCase):
    def test_pairs(self):
        p = tgs.pairs(policies="tgs,mps")
        self.assertEqual(len(p["results"]), 8)  # four scenarios, two policies
        self.assertIsNone(p["timeline"])
        r = p["results"][0]
        self.assertEqual((r["scenario"], r["policy"], r["memory_policy"]), ("low-contention", "tgs", "tgs"))
        self.assertAlmostEqual(r["production"], r["measured_production"], delta=0.05)
        self.assertEqual(r["measured_source"], "NSDI'23 Figure 5")
        # tgs-node's choice for the pair, as tgs-sim's JSON has it: nothing measured on the A100.
        choice = r["node_choice"]
        self.assertEqual(choice["unmeasured"], ["production_gpu_wait", "opportunistic_longest_span_ms"])
        self.assertEqual((choice["auto"]["mechanism"], choice["auto"]["reason"]), ("time-sliced", "kernels-unmeasured"))
        self.assertEqual((choice["mps"]["mechanism"], choice["mps"]["reason"]), ("mps-client", "operator-mps"))
        self.assertGreater(choice["auto"]["production"], 0.8)
        self.assertIsNone(choice["facts"]["production_gpu_wait"])
        self.assertEqual(choice["facts"]["capacity_gib"], 40.0)
        custom = tgs.pairs(production="resnet50", opportunistic="dlrm", policies=["tgs"], timeline=True,
                           settings={"tgs.dead-band": 0.15}, observation_noise=0.07, duration=120, warmup=30)
        tl = custom["timeline"]
        self.assertEqual(custom["results"][0]["scenario"], "custom")
        self.assertEqual(tl["end_s"][-1], 120.0)
        self.assertTrue(np.all(tl["end_s"] > tl["start_s"]))
        self.assertIn("profiling", set(tl["phase"]))

    def test_pairs_bad_input(self):
        cases = [
            (dict(policies=["nope"]), "^--policies: nope not in \\{" + ",".join(tgs.rate_policies()) + "\\}$"),
            (dict(memory_policy="nope"), r"^--memory-policy: nope not in \{tgs,hard-limit"),
            (dict(duration=0.5), r"^--duration: Value 0.5 not in range 1.000000 to 10000000.000000$"),
            (dict(observation_noise=2), r"^--observation-noise: Value 2 not in range 0.000000 to 1.000000$"),
            (dict(memory_budget_gib=0), r"^--memory-budget-gib: Value 0 not in range"),
            (dict(production="resnet50"), r"^--production and --opportunistic go together$"),
            (dict(duration=30), r"^--warmup \(60 s\) must be shorter than --duration \(30 s\)$"),
            (dict(policies=["mps"], settings={"tgs.dead-band": 0.1}),
             r"^tgs.dead-band is a setting of tgs, which this run does not use$"),
            (dict(settings={"memory.hard-limit.production-fraction": 0.6}),
             r"^memory.hard-limit.production-fraction is a setting of hard-limit, which this run does not use$"),
            (dict(settings={"tgs.dead-band": 2}, policies=["tgs"]),
             r"^tgs_rate_control: dead_band must be in \(0, 1\), got 2$"),
            (dict(settings={"nope.x": 1}), r'^unknown setting "nope.x": no policy "nope" \(known: tgs,'),
            (dict(settings={"tgs": 1}), r'^unknown setting "tgs": expected <policy>.<setting>'),
            (dict(production="nope", opportunistic="gcn"),
             r'^unknown model "nope" on gpu "a100-40gb" \(known: resnet50'),
            (dict(gpu="h100"), r'^no measured scenarios on gpu "h100"'),
            (dict(seed=-1), r'^--seed: expected a non-negative integer \(digits only\), got "-1"$'),
            (dict(model="default"), r"^model: expected a tgs.Model, got 'default'$"),
            (dict(policies=5), r"^--policies: expected a list of names, got 5$"),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(tgs.InputError, message):
                tgs.pairs(**kwargs)

    def test_mixed_results_and_files(self):
        seen = []
        with tempfile.TemporaryDirectory() as d:
            r = tgs.mixed(production_jobs=10, opportunistic_jobs=10, policies=["tgs"], out=d,
                          progress=lambda policy, done: seen.append((policy, done)))
            self.assertEqual(sorted(os.listdir(d)), ["cdf.csv", "jobs.csv", "summary.csv", "summary.json",
                                                     "utilization.csv"])
        self.assertEqual(r["policies"], ["exclusive", "tgs"])
        self.assertEqual(r["cluster"], "1x2:a100-40gb")
        self.assertEqual(r["workload"], "mixed stream: 10 production + 10 opportunistic jobs on 1x2:a100-40gb")
        self.assertEqual(r["summary"][0]["production_jct"], 1.0)
        self.assertEqual(len(r["jobs"]["jct_s"]), 40)
        np.testing.assert_allclose(r["jobs"]["jct_s"], r["jobs"]["end_s"] - r["jobs"]["submit_s"])
        self.assertEqual(len(r["cdf"]["quantile"]), 2 * 2 * 100)
        self.assertEqual({p for p, _ in seen}, {"exclusive", "tgs"})
        self.assertTrue(all(0 <= done <= 1 for _, done in seen))

    def test_runs_in_threads_give_what_runs_in_turn_give(self):
        from concurrent.futures import ThreadPoolExecutor
        kwargs = [dict(seed=s, policies=["tgs", "mps"]) for s in (1, 2, 3, 4)]
        strip = lambda r: [{k: v for k, v in x.items() if k != "wall_s"} for x in r["summary"]]  # noqa: E731
        in_turn = [strip(tgs.mixed(**k)) for k in kwargs]
        with ThreadPoolExecutor(max_workers=2) as pool:
            at_once = list(pool.map(lambda k: strip(tgs.mixed(**k)), kwargs))
        self.assertEqual(in_turn, at_once)

    def test_a_progress_callback_can_stop_a_run(self):
        def stop(policy, done):
            raise KeyboardInterrupt
        with self.assertRaises(KeyboardInterrupt):
            tgs.mixed(progress=stop)
        with self.assertRaisesRegex(tgs.InputError, r"progress: expected a callable"):
            tgs.mixed(progress=5)

    def test_mixed_bad_input(self):
        cases = [
            (dict(production_jobs=-1), r"^--production-jobs: Value -1 not in range 0 to 1000000$"),
            (dict(interarrival_minutes=0),
             r"^--interarrival-minutes: Value 0 not in range 0.000001 to 1000000.000000$"),
            (dict(cluster="2by8"), r"^--cluster: expected NODESxGPUS\[:TYPE\]"),
            (dict(cluster="1x2:h900"), r'^--cluster: unknown GPU type "h900" \(known: a100-40gb'),
            (dict(policies=["tgs"], settings={"mps.production-threads": 0.5}),
             r"^mps.production-threads is a setting of mps, which this run does not use$"),
            (dict(lookahead=-1), r"^--lookahead: must not be negative, got -1$"),
            (dict(seed="1"), r'^--seed: expected a non-negative integer \(digits only\), got "1"$'),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(tgs.InputError, message):
                tgs.mixed(**kwargs)

    def test_replay_a_file_or_a_trace(self):
        path = os.path.join(TRACE_DATA, "pollux.csv")
        a = tgs.replay(path, cluster="1x8", policies=["tgs"], label_seed=3)
        b = tgs.replay(tgs.read_trace(path), cluster="1x8", policies=["tgs"], label_seed=3)
        strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]  # noqa: E731
        self.assertEqual(strip(a["summary"]), strip(b["summary"]))
        self.assertEqual(a["trace_stats"]["rows_kept"], 6)
        self.assertRegex(a["workload"], r"^replay of .*pollux.csv \(6 jobs, 50% production, label seed 3\) on 1x8$")
        skipped = tgs.replay(os.path.join(SIM_DATA, "bad.csv"), skip_malformed=True, cluster="1x2", policies=["tgs"])
        self.assertEqual(skipped["trace_stats"]["rows_skipped"], 1)

    def test_replay_bad_input(self):
        pollux = os.path.join(TRACE_DATA, "pollux.csv")
        cases = [
            ((pollux,), dict(trace_format="foo"), r"^--trace-format: foo not in \{philly-json,philly-csv,"),
            (("nope.csv",), {}, r"^--trace: File does not exist: nope.csv$"),
            ((pollux,), dict(production_share=2), r"^--production-share: Value 2 not in range 0.000000 to 1.000000$"),
            ((os.path.join(TRACE_DATA, "too_large_job.csv"),), dict(cluster="4x8"),
             r"too_large_job.csv:3: job 1 needs 4096 GPUs but --cluster 4x8 has 32$"),
            ((pollux,), dict(label_models=["alexnet"], cluster="1x8"),
             r'^--label-models: no profile for model "alexnet" on gpu "a100-40gb"'),
            ((tgs.read_trace(pollux),), dict(trace_format="philly-csv"),
             r"^trace_format and skip_malformed apply to a trace file; this trace is already read$"),
            ((os.path.join(SIM_DATA, "bad.csv"),), {}, r"bad.csv:3: column \"duration\""),
        ]
        for args, kwargs, message in cases:
            with self.subTest(args=args, kwargs=kwargs), self.assertRaisesRegex(tgs.InputError, message):
                tgs.replay(*args, **kwargs)

    def test_models(self):
        m = tgs.Model()
        self.assertIn("a100-40gb", m.gpus)
        self.assertIn("resnet50", m.models("a100-40gb"))
        self.assertIn("resnet50", {p["model"] for p in m.profiles()})
        self.assertEqual(m.fit()["from_cache"], True)
        self.assertTrue(m.fit()["parameters"])
        cells = m.predict(gpu="h100-80gb")
        self.assertEqual({c["gpu"] for c in cells}, {"h100-80gb"})
        self.assertNotIn("left_out_production", cells[0])
        self.assertIn("within", m.predict(gpu="h100-80gb", format="table"))
        with self.assertRaisesRegex(tgs.InputError, r'^format: expected None, "table" or "markdown", got "json"$'):
            m.predict(format="json")
        with self.assertRaisesRegex(tgs.InputError, r'^--gpu: unknown gpu "h900"$'):
            m.predict(gpu="h900")
        custom = tgs.Model(measurements=os.path.join(SOURCE, "sim", "data", "paper_pairs.csv"))
        self.assertEqual(tgs.pairs(model=custom, policies=["tgs"])["results"][0]["policy"], "tgs")
        with self.assertRaisesRegex(tgs.InputError, r"unknown_model_pairs.csv:2: no profile for model \"alexnet\""):
            tgs.Model(measurements=os.path.join(SIM_DATA, "unknown_model_pairs.csv"))


if __name__ == "__main__":
    unittest.main()
