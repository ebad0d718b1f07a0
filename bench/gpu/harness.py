#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real-GPU harness of tgs: runs pairs of training jobs under sharing modes and analyses them.

Pairs, jobs, modes and tgs-node flags are data (scenarios.toml; --data merges more). A call builds
libtgs-intercept.so and tgs-node, runs rounds of every pair and mode, stops all it started (an MPS
daemon gets `quit`, also on error; clocks, power, compute mode and MIG are never touched) and writes
summary.json (cells normalized to the call's alone runs), call.json, runs.jsonl, windows.jsonl,
status-samples.jsonl, node.log, jobs.log to --out ($OUT); a table last (bench/gpu/README.md).
Placeholders: the [settings] keys, python, here, build, socket, class, job and budget_mib.
"""
import argparse
import contextlib
import datetime
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLASSES = ("production", "opportunistic")
# production_own: the production job's rate over its own before its co-runner started in the same
# run (the windows that found it steady), which leaves out a host-bound job's drift between runs.
METRICS = ("production", "opportunistic", "convergence_s", "recovery_s", "production_own")
# Per run beside the metrics, with no statistics: how the node had the opportunistic job share
# ("mps-client (measured-safe)"; none without a node, or in a summary older than the field).
RUN_NOTES = ("mechanism",)
CALL_KEYS = ("device", "driver", "date", "command", "complete", "cpus", "budgets", "skipped")
CELL_KEY = ("scenario", "production_model", "opportunistic_model", "mode", "setting")


class HarnessError(Exception):
    """Bad input or a machine that cannot run the call: the message says what and where."""


class RunFailed(Exception):
    """One run cannot go on (a job died): the call goes on with the next run."""


# ------------------------------------------------------------------ data

def load_data(paths: list) -> dict:
    """The data files merged in order (a later file's table entries replace an earlier's), checked."""
    data = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                d = tomllib.load(f)
        except OSError as e:
            raise HarnessError(f"{path}: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise HarnessError(f"{path}: {e}") from None
        for k, v in d.items():
            data[k] = {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
    for section in ("settings", "node", "interposer", "mps", "job_defaults", "jobs", "modes", "pairs"):
        if not isinstance(data.get(section), dict):
            raise HarnessError(f"{', '.join(paths)}: no [{section}] table")
    for name, m in data["modes"].items():
        if m.get("jobs") not in ("each", "production", "both"):
            raise HarnessError(f"mode '{name}': jobs must be each, production or both, not {m.get('jobs')!r}")
        if "mps" in m and not all(isinstance(m["mps"].get(c), int) and 1 <= m["mps"][c] <= 100 for c in CLASSES):
            raise HarnessError(f"mode '{name}': mps needs production and opportunistic thread percentages in 1..100")
        if "mps" in m and not all(m["mps"].get("priority", {}).get(c, 0) in (0, 1) for c in CLASSES):
            raise HarnessError(f"mode '{name}': an MPS client priority is 0 (normal) or 1 (below normal)")
    data["jobs"] = {name: {**data["job_defaults"], **job} for name, job in data["jobs"].items()}
    for name, p in data["pairs"].items():
        for c in CLASSES:
            if p.get(c) not in data["jobs"]:
                raise HarnessError(f"pair '{name}': {c} job {p.get(c)!r} is not in [jobs] ({', '.join(data['jobs'])})")
        for m in p.get("modes", []):
            if m not in data["modes"]:
                raise HarnessError(f"pair '{name}': unknown mode '{m}' (known: {', '.join(data['modes'])})")
    return data


def fill(value, ctx: dict, where: str):
    """VALUE with its {placeholders} filled in from CTX (lists and tables too)."""
    if isinstance(value, list):
        return [fill(v, ctx, where) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ctx, where) for k, v in value.items()}
    try:
        return value.format_map(ctx) if isinstance(value, str) else value
    except (KeyError, ValueError, IndexError) as e:
        raise HarnessError(f"{where}: cannot fill {value!r}: unknown placeholder {e}") from None


def parse_sets(items: list, known: dict) -> dict:
    """--set KEY=VALUE items (a TOML value, else a string), KEY one of the [settings]."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in known:
            raise HarnessError(f"--set {item!r}: want KEY=VALUE with KEY one of {', '.join(known)}")
        try:
            out[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = text
    return out


def setting_of(mode: dict, flags) -> str:
    """What a mode ran, in words: its tgs-node flags (FLAGS, filled in) and MPS percentages."""
    words = [] if flags is None else [shlex.join(["tgs-node"] + flags)]
    if "mps" in mode:
        priority = mode["mps"].get("priority", {})
        words.append(f"MPS {mode['mps']['production']}%/{mode['mps']['opportunistic']}%"
                     + (f", priority {priority.get('production', 0)}/{priority.get('opportunistic', 0)}" if priority else ""))
    return "; ".join(words) or "-"


def read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise HarnessError(f"{path}: {getattr(e, 'strerror', None) or e}") from None


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def json_lines(text: str) -> list:
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def read_jsonl(path: str) -> list:
    """Every JSON object of a file, one per line; a line that is not one names file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                out += [json.loads(line)] if line.strip() else []
            except json.JSONDecodeError as e:
                raise HarnessError(f"{path}:{n}: not JSON ({e.msg})") from None
    return out


# ------------------------------------------------------------------ analysis (no GPU, no processes)

def stats(values: list):
    """{median, min, max} of the numbers among VALUES, or None without any."""
    v = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return {"median": statistics.median(v), "min": min(v), "max": max(v)} if v else None


def is_steady(rates: list, k: int, tolerance: float, window_s: float) -> bool:
    """Whether the median of the last K window rates agrees with the median of the K before, within
    TOLERANCE of the larger plus one iteration per window (a rate's step: a job at 0-1 iterations
    per window is steady, one still speeding up is not)."""
    if k < 1 or len(rates) < 2 * k:
        return False
    before, last = statistics.median(rates[-2 * k:-k]), statistics.median(rates[-k:])
    return abs(last - before) <= tolerance * max(before, last) + 1.0 / window_s


def rate_in(windows: list, a: float, b: float):
    """The mean rate of the (t, rate) WINDOWS that ended in (A, B], or None: a job's iterations over
    the span, its windows being of one length. Not their median: a window counts whole iterations,
    so a job at 17.4 it/s has windows of 17 and 18 and a median of either, a step of 6% where a
    cell must resolve a few percent."""
    v = [r for t, r in windows if a < t <= b]
    return statistics.fmean(v) if v else None


def convergence(windows: list, arrival: float, final, target: float, hold: int):
    """Seconds from ARRIVAL to the first of HOLD windows in a row at TARGET x FINAL, or None."""
    if not final or final <= 0:
        return None
    after = [(t, r) for t, r in windows if t > arrival]
    return next((after[i][0] - arrival for i in range(len(after) - hold + 1)
                 if all(r >= target * final for _, r in after[i:i + hold])), None)


def recovery(windows: list, resume: float, before, target: float):
    """Seconds from RESUME to the first window at TARGET x BEFORE (the rate before the idle phase)."""
    return next((t - resume for t, r in windows if t > resume and r >= target * before), None) if before else None


def median_ci(values: list, level: float = 0.95):
    """The distribution-free interval [x(k), x(n+1-k)] of the median with the largest k whose
    coverage is at least LEVEL (with 5 values or fewer: min-max and its own coverage)."""
    xs = sorted(x for x in values if x is not None)
    n = len(xs)
    cover = lambda k: 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n  # noqa: E731
    k = 1
    while k + 1 <= (n + 1) // 2 and cover(k + 1) >= level:
        k += 1
    return {"low": xs[k - 1], "high": xs[n - k], "coverage": round(cover(k), 4)} if n else None


def job_results(run: dict, windows: dict, samples: list) -> dict:
    """Per class of one run: its rate over the measured windows, convergence_s (the opportunistic
    job in a mode with a node, from its registration) and recovery_s (after an idle phase)."""
    out = {}
    for cls, j in run["jobs"].items():
        w = windows.get((run["run"], cls), [])
        # A job with no window in its measurement was held before its first step: it made nothing.
        rate = (rate_in(w, *j["measure"]) or 0.0) if j.get("measure") else None
        res = out[cls] = {"job": j["job"], "rate": rate, "steady": j.get("steady"), "convergence_s": None}
        if cls == "opportunistic" and run.get("node"):
            # The node's choice at the job's registration: its first sample that names one.
            res["mechanism"] = next((f"{x['mechanism']} ({x.get('mechanism_reason')})" for s in samples
                                     if s.get("run") == run["run"] for x in s.get("jobs", [])
                                     if x.get("class") == cls and x.get("mechanism")), None)
        if cls == "opportunistic" and run.get("node") and rate is not None:
            reg = [s["t"] - x["up_s"] for s in samples if s.get("run") == run["run"]
                   for x in s.get("jobs", []) if x.get("class") == cls and isinstance(x.get("up_s"), (int, float))]
            until = [x for x in w if x[0] <= j["measure"][1]]
            res["convergence_s"] = convergence(until, min(reg, default=j["started"]), rate, run["convergence_target"],
                                               run["steady_windows"])
        res["recovery_s"] = recovery(w, j["resume"], rate, run["recovery_target"]) if "resume" in j else None
    other, prod = run["jobs"].get("opportunistic", {}).get("started"), run["jobs"].get("production", {})
    if other and out.get("production", {}).get("rate") is not None and other < prod["measure"][0]:  # both ran
        before = [r for t, r in windows.get((run["run"], "production"), []) if t <= other]
        before = before[-2 * run.get("steady_windows", 3):]
        own = statistics.median(before) if before else None
        out["production"]["own"] = out["production"]["rate"] / own if own else None
    return out


def summarize(out_dir: str, print_table: bool = True) -> dict:
    """The call in OUT_DIR (call.json, runs.jsonl, windows.jsonl, status-samples.jsonl) as cells
    normalized to its own baseline runs; writes summary.json and prints the table."""
    call = read_json(os.path.join(out_dir, "call.json"))
    runs = read_jsonl(os.path.join(out_dir, "runs.jsonl"))
    windows = {}
    for line in read_jsonl(os.path.join(out_dir, "windows.jsonl")):
        if isinstance(rate := line["line"].get("iter_per_s"), (int, float)):
            windows.setdefault((line["run"], line["class"]), []).append((line["t"], rate))
    status = os.path.join(out_dir, "status-samples.jsonl")
    samples = read_jsonl(status) if os.path.exists(status) else []
    results = {r["run"]: job_results(r, windows, samples) for r in runs if not r.get("failed")}
    baseline = {}
    for r in runs:
        for res in results.get(r["run"], {}).values() if r["mode"] == call["baseline"] else []:
            baseline.setdefault(res["job"], []).extend([res["rate"]] if res["rate"] else [])
    baseline = {job: statistics.median(v) for job, v in baseline.items() if v}
    cells, warnings = [], list(call["warnings"])
    for key in dict.fromkeys((r["pair"], r["mode"], r["setting"]) for r in runs if r["run"] in results):
        these = [results[r["run"]] for r in runs if (r["pair"], r["mode"], r["setting"]) == key and r["run"] in results]
        jobs = call["pairs"][key[0]]
        per_run = {m: [] for m in METRICS + RUN_NOTES}
        for res in these:
            per_run["mechanism"].append(res.get("opportunistic", {}).get("mechanism"))
            for cls in CLASSES:
                rate, base = res.get(cls, {}).get("rate"), baseline.get(jobs[cls])
                per_run[cls].append(rate / base if rate is not None and base else None)
                if cls in res and not base:
                    warnings.append(f"{key[0]}/{key[1]}: no {call['baseline']} run of {jobs[cls]} to normalize to")
            per_run["convergence_s"].append(res.get("opportunistic", {}).get("convergence_s"))
            per_run["recovery_s"].append(res["production"]["recovery_s"])
            per_run["production_own"].append(res["production"].get("own"))
        cells.append({"scenario": key[0], "production_model": jobs["production"],
                      "opportunistic_model": jobs["opportunistic"] if call["modes"][key[1]] != "production" else None,
                      "mode": key[1], "setting": key[2], **{k: call[k] for k in CALL_KEYS[:4]},
                      "runs": len(these), **{m: stats(per_run[m]) for m in METRICS},
                      "unsteady_runs": sum(any(j["steady"] is False for j in res.values()) for res in these),
                      "per_run": per_run})
    summary = {**{k: call[k] for k in CALL_KEYS}, "baseline_it_per_s": baseline,
               "failed": [{"run": r["run"], "why": r["failed"]} for r in runs if r.get("failed")],
               "warnings": list(dict.fromkeys(warnings)), "cells": cells}
    write_json(os.path.join(out_dir, "summary.json"), summary)
    if print_table:
        table(summary)
    return summary


def print_rows(rows: list) -> None:
    """ROWS (the first a header) in aligned columns; floats to 4 significant digits, None as '-'."""
    text = [["-" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(text[0]))]
    for r in text:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())


def table(summary: dict) -> None:
    """The short table of a summary or pool, printed last."""
    shown = lambda s, d=2: "-" if not s else f"{s['median']:.{d}f} ({s['min']:.{d}f}-{s['max']:.{d}f})"  # noqa: E731
    print(f"\n{summary['device']}, driver {summary['driver'] or '-'}: each job's rate over its alone rate "
          "(median over runs (min-max)); seconds to converge and to recover")
    print_rows([("scenario", "mode", "production", "opportunistic", "convergence_s", "recovery_s", "runs")]
               + [(c["scenario"], c["mode"], shown(c["production"]), shown(c["opportunistic"]),
                   shown(c["convergence_s"], 1), shown(c["recovery_s"], 1), c["runs"]) for c in summary["cells"]])
    for w in ([f"skipped {s['run']}: {s['why']}" for s in summary.get("skipped", [])]
              + [f"failed {s['run']}: {s['why']} (left out)" for s in summary.get("failed", [])]
              + summary.get("warnings", [])
              + ["the call stopped before its last run; the summary is partial"] * (summary.get("complete") is False)):
        print(f"WARNING: {w}")


def pool(paths: list, device: str = None) -> dict:
    """The cells of several summaries (or pools) with the same scenario, jobs, mode and setting,
    pooled run by run (each run stays normalized to its own call's alone runs); with DEVICE, only
    the cells measured on that device alone."""
    groups = {}
    for path in paths:
        if not os.path.exists(path) and ":" in path:  # FILE:KEY, a pool kept inside a results JSON
            file, _, key = path.rpartition(":")
            s = read_json(file)
            if not isinstance(s, dict) or key not in s:
                raise HarnessError(f"{file}: no key '{key}'")
            s = s[key]
        else:
            s = read_json(path)
        if not isinstance(s, dict) or not isinstance(s.get("cells"), list):
            raise HarnessError(f"{path}: no 'cells' list: not a harness summary or pool")
        for c in s["cells"]:
            if not isinstance(c, dict) or not isinstance(c.get("per_run"), dict):
                raise HarnessError(f"{path}: a cell without per_run values")
            if device and set(c["device"] if isinstance(c.get("device"), list) else [c.get("device")]) != {device}:
                continue
            groups.setdefault(tuple(c.get(k) for k in CELL_KEY), []).append(c)
    cells = []
    for key, cs in groups.items():
        per_run = {m: [x for c in cs for x in c["per_run"].get(m, [None] * c["runs"])] for m in METRICS + RUN_NOTES}
        joined = lambda k: sorted({str(x) for c in cs for x in (c[k] if isinstance(c[k], list) else [c[k]]) if x})
        cells.append({**dict(zip(CELL_KEY, key)), "device": joined("device"), "driver": joined("driver"),
                      "date": max(c["date"] for c in cs), "command": joined("command"),
                      "calls": sum(c.get("calls", 1) for c in cs), "runs": sum(c["runs"] for c in cs),
                      **{m: stats(per_run[m]) for m in METRICS}, **{f"{c}_ci": median_ci(per_run[c]) for c in CLASSES},
                      "per_run": per_run})
    return {"device": ", ".join(sorted({d for c in cells for d in c["device"]})),
            "driver": ", ".join(sorted({d for c in cells for d in c["driver"]})),
            "command": "python3 bench/gpu/harness.py pool " + shlex.join(paths), "cells": cells}


def targets(cells: list, production: float, opportunistic: float) -> list:
    """Per cell: whether its medians meet the targets (compared unrounded) and how many runs met both."""
    out = []
    for c in cells:
        p, o = ((c.get(k) or {}).get("median") for k in CLASSES)
        both = [(a, b) for a, b in zip(c["per_run"]["production"], c["per_run"]["opportunistic"])
                if a is not None and b is not None]
        out.append({"scenario": c["scenario"], "mode": c["mode"], "setting": c["setting"], "production": p,
                    "opportunistic": o, "production_met": p is not None and p >= production,
                    "opportunistic_met": o is not None and o >= opportunistic,
                    "runs_meeting_both": sum(a >= production and b >= opportunistic for a, b in both),
                    "runs_with_both": len(both)})
    return out


def bootstrap_ci(values: list, level: float = 0.95, draws: int = 4000):
    """The percentile bootstrap interval of the median over VALUES (runs drawn with replacement, a
    fixed seed so that a table is reproducible), or None with fewer than two values."""
    xs = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if len(xs) < 2:
        return None
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(draws))
    tail = (1.0 - level) / 2.0
    return {"low": meds[int(tail * (draws - 1))], "high": meds[math.ceil((1.0 - tail) * (draws - 1))]}


SHARES = CLASSES + ("production_own",)


def start_of(mechanism) -> str | None:
    """Whether a run was its opportunistic job's first start on its node, from the node's choice:
    a job whose kernels the node had never timed had no profile, which only a first start lacks
    (a call carries the node's job profiles from run to run). None: no choice on record."""
    if not isinstance(mechanism, str):
        return None
    return "first start" if "(kernels-unmeasured)" in mechanism else "next start"


def recorded_command(argv: list, out: str = None) -> str:
    """The call as its results record it: the machine's own output folder, $OUT where it is set,
    written as $OUT, so a recorded command names no path of the machine that ran it."""
    command = "python3 bench/gpu/harness.py " + shlex.join(argv)
    out = (out or "").rstrip("/")
    return command if not out else re.sub(re.escape(out) + r"(?=/|\s|$)", "$OUT", command)


def dominance(cells: list, default: str, targets: dict, least: dict) -> list:
    """Per pair of CELLS (pooled runs; one mode's cells with other settings, such as a memory
    budget that followed the measured footprints, are pooled too): each mode's medians and
    bootstrap intervals, and the verdict on the DEFAULT mode: the modes that beat it on both jobs
    beyond the intervals, whether its medians meet TARGETS, and whether every cell has the runs of
    LEAST (the default's and co-execution's, the others', and how many other modes). Where the
    node recorded its choice per run, the default's runs are also shown split into its jobs' first
    and next starts (start_of): rows "DEFAULT, first start" and "DEFAULT, next start", which take
    no part in the verdict."""
    pairs = {}
    new = lambda: {"per_run": {k: [] for k in SHARES}, "settings": [], "runs": 0}  # noqa: E731
    for c in cells:
        if c["mode"] == "alone":
            continue
        m = pairs.setdefault(c["scenario"], {}).setdefault(c["mode"], new())
        m["runs"] += c["runs"]
        m["settings"] += [c["setting"]] * (c["setting"] not in m["settings"])
        for k in SHARES:
            m["per_run"][k] += [x for x in c["per_run"].get(k, []) if x is not None]
        if c["mode"] != default:
            continue
        for i, mechanism in enumerate(c["per_run"].get("mechanism") or []):
            if (start := start_of(mechanism)) is None:
                continue
            part = pairs[c["scenario"]].setdefault(f"{default}, {start}", {**new(), "part_of": default})
            part["runs"] += 1
            for k in SHARES:
                x = (c["per_run"].get(k) or [])[i:i + 1]
                part["per_run"][k] += [v for v in x if v is not None]
    out = []
    for scenario, modes in pairs.items():
        for m in modes.values():
            for k in SHARES:
                m[k] = {"median": statistics.median(m["per_run"][k]) if m["per_run"][k] else None,
                        "ci": bootstrap_ci(m["per_run"][k])}
        d = modes.get(default)
        beats = lambda m: all(m[k]["ci"] and d[k]["ci"] and m[k]["ci"]["low"] > d[k]["ci"]["high"]  # noqa: E731
                              for k in CLASSES)
        want = targets["opportunistic"].get(scenario)
        own = {n: m for n, m in modes.items() if "part_of" not in m}  # the modes themselves, not the parts
        few = sorted(name for name, m in own.items()
                     if m["runs"] < least["default" if name in (default, "co-execution") else "others"])
        few += ["co-execution (none)"] * ("co-execution" not in modes)
        others = sum(m["runs"] >= least["others"] for n, m in own.items() if n not in (default, "co-execution"))
        few += [f"{least['modes'] - others} more mode(s) beside co-execution"] * (others < least["modes"])
        met = None
        if d and d["production"]["median"] is not None and d["opportunistic"]["median"] is not None:
            low = (d["production"]["ci"] or {}).get("low")
            met = (d["production"]["median"] >= targets["production"] and low is not None
                   and low >= targets["production_low"] and (want is None or d["opportunistic"]["median"] >= want))
        out.append({"scenario": scenario, "default": default, "opportunistic_target": want, "modes": modes,
                    "beaten_by": sorted(n for n, m in own.items() if d and n != default and beats(m)),
                    "default_measured": d is not None, "targets_met": met, "too_few_runs": few})
    return out


def dominance_table(rows: list, markdown: bool) -> None:
    """The dominance verdicts, one line per pair and mode (a Markdown table with MARKDOWN)."""
    shown = lambda x: "-" if x["median"] is None else (  # noqa: E731
        f"{x['median']:.2f}" + (f" ({x['ci']['low']:.2f}-{x['ci']['high']:.2f})" if x["ci"] else ""))
    lines = [("pair", "mode", "production", "opportunistic", "runs", "production over its own start", "verdict")]
    for r in rows:
        verdict = ("default not measured" if not r["default_measured"] else
                   ("beaten by " + ", ".join(r["beaten_by"]) if r["beaten_by"] else "not beaten")
                   + ("; targets met" if r["targets_met"] else "; targets not met")
                   + (f"; too few runs: {', '.join(r['too_few_runs'])}" if r["too_few_runs"] else ""))
        order = sorted(r["modes"], key=lambda n: (n != r["default"], "part_of" not in r["modes"][n], n))
        for i, name in enumerate(order):
            m = r["modes"][name]
            lines.append((r["scenario"] if i == 0 else "", name + " (default)" * (name == r["default"]),
                          shown(m["production"]), shown(m["opportunistic"]), str(m["runs"]), shown(m["production_own"]),
                          verdict if i == 0 else ""))
    if markdown:
        print("| " + " | ".join(lines[0]) + " |\n|" + "---|" * len(lines[0]))
        for x in lines[1:]:
            print("| " + " | ".join(x) + " |")
    else:
        print_rows(lines)


def phases(samples: list) -> list:
    """tgs-node status samples per run and controller phase (the phase "production-alone" while
    only the production job is registered): medians of the budget, both jobs' blocks/s, the
    production job's sync wait, and of every number the controller reports about itself (its
    `controller` object: R and the last sample for tgs, the speeds and the gate for
    idle-harvest), and how the node had the opportunistic job share (its mechanism and reason)."""
    groups, mechanisms = {}, {}
    for n, s in enumerate(samples, 1):
        try:  # the GPU of the production job (a call on another GPU than 0: run --gpu)
            on = next((j.get("gpu", 0) for j in s["jobs"] if j["class"] == "production"), 0)
            jobs = {j["class"]: j for j in s["jobs"] if j.get("gpu", 0) == on}
            gpu = next((g for g in s["gpus"] if g.get("gpu", 0) == on), {})
            run = str(s["run"])
        except (KeyError, TypeError, AttributeError) as e:
            raise HarnessError(f"status sample {n}: not a status sample ({type(e).__name__}: {e})") from None
        if "production" not in jobs:
            continue
        p, o = jobs["production"], jobs.get("opportunistic")
        g = gpu if o else {}  # the controller's numbers mean something with both jobs only
        controller = g.get("controller") if isinstance(g.get("controller"), dict) else {}
        row = {"budget": g.get("budget_blocks"), "prod_bps": p.get("blocks_per_s"),
               "prod_wait": p.get("sync_wait_fraction"), "opp_bps": (o or {}).get("blocks_per_s")}
        row.update({k: v for k, v in controller.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        key = (run, g.get("phase", "?") if o else "production-alone")
        groups.setdefault(key, []).append(row)
        if o and o.get("mechanism"):
            said = f"{o['mechanism']} ({o.get('mechanism_reason')})" + (", held" if o.get("held") else "")
            if said not in mechanisms.setdefault(key, []):
                mechanisms[key].append(said)
    first = ("budget", "prod_bps", "prod_wait", "opp_bps")  # then the controller's own, by name
    keys = sorted({k for vs in groups.values() for v in vs for k in v}, key=lambda k: (k not in first, k))
    return [{"run": run, "phase": phase, "samples": len(vs),
             **{k: (stats([v.get(k) for v in vs]) or {}).get("median") for k in keys},
             **({"mechanism": "; ".join(mechanisms[(run, phase)])} if (run, phase) in mechanisms else {})}
            for (run, phase), vs in groups.items()]


# ------------------------------------------------------------------ the machine

def nvidia_smi(fields: list, gpu: int = 0):
    """GPU GPU's answers to an nvidia-smi query (a query: it changes nothing), or None without one.
    GPU is nvidia-smi's index, which CUDA_VISIBLE_DEVICES does not renumber."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
                            "-i", str(gpu)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in r.stdout.splitlines()[0].split(",")] if r.returncode == 0 and r.stdout.strip() else []
    return dict(zip(fields, values)) if len(values) == len(fields) else None


def parse_cpulist(spec: str) -> list:
    """A sysfs / taskset CPU list ("0-3,8") as CPU numbers."""
    cpus = []
    for part in filter(None, spec.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def read_cpulist(path: str) -> list:
    try:
        with open(path) as f:
            return parse_cpulist(f.read())
    except (OSError, ValueError):
        return []


def parts(cpus: list, siblings_of, n: int) -> list:
    """CPUS in N parts of whole cores (a core's hardware threads share its units and caches, so
    parts that split one would let one job's host side slow another's), the earlier parts no
    larger than the later; in order where SIBLINGS_OF does not place every CPU or there are fewer
    cores than parts."""
    cores = {}
    for c in cpus:
        sib = [x for x in siblings_of(c) if x in cpus]
        if c not in sib:
            cores = {}
            break
        cores.setdefault(min(sib), []).append(c)
    units = [cores[k] for k in sorted(cores)] if len(cores) >= n else [[c] for c in cpus]
    ends = [len(units) * i // n for i in range(n + 1)]
    return [sorted(sum(units[a:b], [])) for a, b in zip(ends, ends[1:])]


def halves(cpus: list, siblings_of) -> tuple:
    """CPUS in two halves of whole cores, the first the smaller (parts)."""
    return tuple(parts(cpus, siblings_of, 2))


def siblings(cpu: int) -> list:
    return read_cpulist(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")


def gpu_local_cpus(bus_id) -> list:
    """The CPUs local to the GPU of BUS_ID that this process may use (sysfs local_cpulist of its PCI
    device; else every CPU this process may use)."""
    allowed, local = os.sched_getaffinity(0), []
    if bus_id:  # nvidia-smi prints an 8-digit PCI domain in upper case; sysfs names use 4, lower case
        domain, _, rest = bus_id.lower().partition(":")
        local = read_cpulist(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/local_cpulist")
    return [c for c in local if c in allowed] or sorted(allowed)


def gpu_cpu_halves(bus_id, part: tuple = (1, 1)):
    """The CPUs local to the GPU, or the PART = (i, n)-th of n parts of them where n calls share
    them (run --gpus), in two halves, one per job; None with fewer than two."""
    cpus = parts(gpu_local_cpus(bus_id), siblings, part[1])[part[0] - 1]
    a, b = halves(cpus, siblings)
    return {"production": ",".join(map(str, a)), "opportunistic": ",".join(map(str, b))} if len(cpus) > 1 else None


def backend_build_steps(build: str) -> list:
    """The commands that build libtgs-intercept.so and tgs-node for a call: CI runs exactly these
    (`harness.py build`, ctest scripts.harness-build), so the harness's build cannot break unseen.
    The harness never runs tgs-node under systemd, and GPU machines often lack libsystemd's headers:
    its tgs-node is built without them everywhere, so CI builds what a GPU call builds."""
    deps = os.path.join(REPO, ".deps", "include")
    return [["cmake", "-S", REPO, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DTGS_BUILD_SIM=OFF",
             "-DTGS_BUILD_TESTS=OFF", "-DTGS_BUILD_BENCH=OFF", "-DTGS_BUILD_PYTHON=OFF", "-DTGS_WITH_LIBSYSTEMD=OFF"]
            + [f"-DTGS_HEADER_DEPS={deps}"] * os.path.isdir(deps),
            ["cmake", "--build", build, "--target", "tgs-intercept", "tgs-node"]]


def build_backend(build: str, log: str) -> None:
    """libtgs-intercept.so and tgs-node against the machine's libcuda (no CUDA toolkit needed);
    without fmt and CLI11 packages their headers go in .deps/include at the repository root."""
    steps = backend_build_steps(build)
    with open(log, "a", encoding="utf-8") as f:
        for cmd in steps:
            if (rc := subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode) != 0:
                raise HarnessError(f"{shlex.join(cmd)} failed (exit {rc}); see {log}")


def terminate(proc, wait_s: float) -> int:
    """SIGTERM, and SIGKILL after WAIT_S; the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


class Sink:
    """A JSON-lines file that several threads append to."""

    def __init__(self, path: str) -> None:
        self.f, self.lock = open(path, "w", encoding="utf-8"), threading.Lock()

    def write(self, obj: dict) -> None:
        with self.lock:
            self.f.write(json.dumps(obj) + "\n")
            self.f.flush()


class Job:
    """A training process whose stdout lines are stamped with the harness's clock on arrival."""

    def __init__(self, argv: list, env: dict, cls: str, name: str, run: str, sink: Sink, errors, pin) -> None:
        self.cls, self.name, self.run, self.sink, self.lines = cls, name, run, sink, []
        print(f"==== {run} {cls} ({name}): {shlex.join(argv)}", file=errors, flush=True)
        self.started = time.time()
        try:
            self.proc = subprocess.Popen((["taskset", "-c", pin] if pin else []) + argv, env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=errors, bufsize=1)
        except OSError as e:
            raise RunFailed(f"cannot start the {cls} job: {e}") from None
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        for text in self.proc.stdout:
            t = time.time()
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                line = {"text": text.rstrip()}
            self.lines.append((t, line))
            self.sink.write({"run": self.run, "class": self.cls, "t": t, "line": line})

    def windows(self, since: float = 0.0) -> list:
        return [(t, x["iter_per_s"]) for t, x in list(self.lines)
                if t > since and isinstance(x, dict) and isinstance(x.get("iter_per_s"), (int, float))]

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RunFailed(f"the {self.cls} job ({self.name}) exited with status {self.proc.returncode}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a job stopped for its idle phase must see SIGTERM
        rc = terminate(self.proc, 20)
        self.reader.join(5)
        return rc


class Node:
    """A tgs-node for one run, and a thread that appends its status to SINK once a second."""

    def __init__(self, argv: list, status: list, socket: str, log, sink: Sink, run: str, gpu_util) -> None:
        print(f"==== {run}: {shlex.join(argv)}", file=log, flush=True)
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.done, deadline = threading.Event(), time.time() + 10
        while not os.path.exists(socket):
            if self.proc.poll() is not None or time.time() > deadline:
                terminate(self.proc, 5)
                raise RunFailed(f"tgs-node did not start (flags: {shlex.join(argv[1:])}); see node.log")
            time.sleep(0.05)
        self.thread = threading.Thread(target=self.sample, args=(status, sink, run, gpu_util), daemon=True)
        self.thread.start()

    def sample(self, status: list, sink: Sink, run: str, gpu_util) -> None:
        """GPU_UTIL: the nvidia-smi index of the GPU whose utilization each sample adds, or None."""
        while not self.done.is_set():
            t = time.time()
            with contextlib.suppress(OSError, subprocess.SubprocessError, json.JSONDecodeError):
                r = subprocess.run(status, capture_output=True, text=True, timeout=5)
                lines = json_lines(r.stdout) if r.returncode == 0 else []
                if lines:
                    s = {"run": run, "t": t, "gpus": [x for x in lines if "gpu" in x and "job" not in x],
                         "jobs": [x for x in lines if "job" in x]}
                    if gpu_util is not None:
                        s["gpu_utilization"] = (nvidia_smi(["utilization.gpu"], gpu_util) or {}).get("utilization.gpu")
                    sink.write(s)
            self.done.wait(max(0.05, 1.0 - (time.time() - t)))

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RunFailed(f"tgs-node exited with status {self.proc.returncode}; see node.log")

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)
        terminate(self.proc, 10)


@contextlib.contextmanager
def mps_daemon(control: str, work: str):
    """An MPS control daemon private to this run (its own pipe and log folders), always told to
    quit again, also on error; yields the environment its clients need."""
    env = {f"CUDA_MPS_{k.upper()}_DIRECTORY": os.path.join(work, f"mps-{k}") for k in ("pipe", "log")}
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    try:
        subprocess.run([control, "-d"], env={**os.environ, **env}, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise RunFailed(f"{control} -d: {e}") from None
    try:
        yield env
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([control], input="quit\n", env={**os.environ, **env}, text=True, capture_output=True,
                           timeout=30)
        for _ in range(20):  # the server exits after its clients: the next run starts afresh
            if subprocess.run(["pgrep", "-u", str(os.getuid()), "-f", "nvidia-cuda-mps-server"],
                              capture_output=True).returncode != 0:
                break
            time.sleep(0.5)


# ------------------------------------------------------------------ a call

class Call:
    """One call of run or profile: its settings, output files and what it knows of the machine."""

    def __init__(self, args, data: dict) -> None:
        self.args, self.data, self.t0, self.nodes = args, data, time.time(), 0
        self.gpu = args.gpu if args.gpu is not None else 0  # nvidia-smi's index
        self.sets = parse_sets(args.set or [], data["settings"])
        self.out = os.path.abspath(args.out)
        self.skipped, self.warnings, self.budgets, self.footprints, self.longest = [], [], {}, {}, {}

    def settings(self, pair: dict, mode: dict = None) -> dict:
        return {**self.data["settings"], **pair.get("settings", {}), **(mode or {}).get("settings", {}), **self.sets}

    def open(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="tgs-harness-")  # sockets and MPS pipes: a short path (108 bytes)
        self.runs, self.windows, self.samples = (Sink(os.path.join(self.out, n))
                                                 for n in ("runs.jsonl", "windows.jsonl", "status-samples.jsonl"))
        self.node_log, self.job_log = (open(os.path.join(self.out, n), "w") for n in ("node.log", "jobs.log"))
        facts = nvidia_smi(["name", "driver_version", "memory.free", "pci.bus_id"], self.gpu) or {}
        if self.args.gpu is not None:
            # Everything the call starts sees that GPU alone. By its index, in PCI order as nvidia-smi
            # and NVML count: the interposer registers a job on the GPU its CUDA_VISIBLE_DEVICES
            # names by index, and tgs-node finds that GPU's processes and MPS daemon through NVML.
            os.environ.update(CUDA_VISIBLE_DEVICES=str(self.args.gpu), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        self.free_mib = self.args.free_mib or float(facts.get("memory.free") or 0) or None
        self.device, self.driver = facts.get("name", "no GPU (nvidia-smi not found)"), facts.get("driver_version")
        self.cpus = None if self.args.no_pin else gpu_cpu_halves(facts.get("pci.bus_id"), self.args.cpu_part)
        if not self.args.no_pin and self.cpus is None:
            self.warnings.append("fewer than two CPUs to split: the jobs ran unpinned")

    def context(self, pair_name: str, socket: str = "", mode: dict = None) -> dict:
        return {**self.settings(self.data["pairs"][pair_name], mode), "python": sys.executable, "here": HERE,
                "build": os.path.abspath(self.args.build), "socket": socket,
                **({"budget_mib": self.budgets[pair_name]["budget_mib"]} if pair_name in self.budgets else {})}

    def footprint_mib(self, name: str, ctx: dict) -> float:
        """A job's footprint: its data's footprint_mib, else its peak reserved bytes over 3 steps alone."""
        job = self.data["jobs"][name]
        if name not in self.footprints and "footprint_mib" not in job:
            argv = job["program"] + job.get("args", []) + job["footprint_args"]
            r = subprocess.run(fill(argv, {**ctx, "class": "production", "job": name}, f"job '{name}'"),
                               capture_output=True, text=True, timeout=300)
            peak = [x["peak_reserved_bytes"] for x in json_lines(r.stdout) if "peak_reserved_bytes" in x]
            if not peak:
                raise HarnessError(f"job '{name}': no footprint (exit {r.returncode}): {r.stderr[-500:]}")
            self.footprints[name] = math.ceil(peak[0] / 2**20)
        return self.footprints.setdefault(name, float(job.get("footprint_mib", 0)))

    def memory_budget(self, pair_name: str) -> None:
        """The pair's tgs-node budget from its jobs' footprints, refused where it is not well below the card."""
        pair = self.data["pairs"][pair_name]
        p, o = (self.footprint_mib(pair[c], self.context(pair_name)) for c in CLASSES)
        budget, free = math.ceil((p + o) / self.settings(pair)["memory_ratio"]), self.free_mib
        if not free:
            raise HarnessError(f"pair '{pair_name}': the card's free memory is unknown (no nvidia-smi): --free-mib")
        if budget >= 0.5 * free or p + o >= 0.8 * free:
            raise HarnessError(f"pair '{pair_name}': budget {budget} MiB (must be below {0.5 * free:.0f}) or both "
                               f"jobs' {p + o:.0f} MiB (below {0.8 * free:.0f}) too large for {free:.0f} MiB free")
        self.budgets[pair_name] = {"budget_mib": budget, "production_mib": p, "opportunistic_mib": o}

    def start_job(self, run: str, cls: str, name: str, ctx: dict, env: dict) -> Job:
        c = {**ctx, "class": cls, "job": name}
        argv = fill(self.data["jobs"][name]["program"] + self.data["jobs"][name].get("args", []), c, f"job '{name}'")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **fill(env, c, "interposer env")}
        return Job(argv, env, cls, name, run, self.windows, self.job_log, self.cpus and self.cpus[cls])

    def execute(self, spec: dict) -> dict:
        """One run of a pair in a mode; returns its record (also written to runs.jsonl)."""
        pair, mode = self.data["pairs"][spec["pair"]], self.data["modes"][spec["mode"]]
        s, run, kind = self.settings(pair, mode), spec["run"], mode["jobs"]
        self.nodes += 1
        socket = os.path.join(self.work, f"node-{self.nodes}.sock")
        ctx = self.context(spec["pair"], socket, mode)
        record = {**spec, "started": time.time(), "jobs": {}, "failed": None, "steady_windows": s["steady_windows"],
                  "convergence_target": s["convergence_target"], "recovery_target": s["recovery_target"]}
        nodes = []  # a node that dies ends the run, as a job that dies does

        def sleep(seconds: float, jobs: list) -> None:
            end = time.time() + seconds
            while time.time() < end:
                for j in jobs + nodes:
                    j.check()
                time.sleep(min(0.2, max(0.0, end - time.time())))

        # No wait past --max-s: a job that never settles must not take the call past its device time.
        deadline = self.t0 + self.args.max_s - s["windows"] * s["window_s"] - 5

        def wait_steady(jobs: list, since: float) -> None:
            end = min(time.time() + s["steady_timeout_s"], deadline)
            while True:
                steady = {j.cls: is_steady([r for _, r in j.windows(since)], s["steady_windows"], s["tolerance"],
                                           s["window_s"]) for j in jobs}
                if all(steady.values()) or time.time() >= end:
                    for j in jobs:
                        record["jobs"][j.cls].update(steady=steady[j.cls], steady_at=time.time())
                    return
                sleep(0.2, jobs)

        def idle_phase(jobs: list, before) -> None:
            prod, (pause, resume) = jobs[0], self.data["jobs"][jobs[0].name]["pause_signals"]
            prod.proc.send_signal(signal.Signals[pause])
            record["jobs"]["production"]["pause"] = time.time()
            sleep(s["idle_s"], jobs)
            prod.proc.send_signal(signal.Signals[resume])
            t = record["jobs"]["production"]["resume"] = time.time()
            end = min(t + s["recovery_timeout_s"], deadline)
            while time.time() < end and recovery(prod.windows(t), t, before, s["recovery_target"]) is None:
                sleep(0.2, jobs)

        try:
            # In a memory pair every tgs-node gets the pair's budget ([node] memory_flags).
            memory = self.data["node"]["memory_flags"] if pair.get("memory") else []
            flags = fill(mode["node_flags"] + memory, ctx, f"mode '{spec['mode']}'") if "node_flags" in mode else None
            record.update(node=flags is not None, setting=setting_of(mode, flags))
            with contextlib.ExitStack() as stack:
                env = dict(self.data["interposer"]["env"]) if flags is not None else {}
                if "mps" in mode:
                    env |= stack.enter_context(mps_daemon(self.data["mps"]["control"], self.work))
                if flags is not None:
                    # What the call's earlier nodes remembered of each opportunistic job (its longest
                    # kernel, its memory; read under --opportunistic-mechanism auto) is this node's
                    # too, as one node's across its jobs' runs: a job's first run in the call is its
                    # first start, the later ones are chosen from its profile.
                    kept, own = os.path.join(self.work, "job-profiles"), socket + ".profiles"
                    if os.path.exists(kept):
                        shutil.copy2(kept, own)
                    stack.callback(lambda: os.path.exists(own) and shutil.copy2(own, kept))
                    argv = fill([self.data["node"]["binary"]] + self.data["node"]["flags"], ctx, "[node]") + flags
                    node = Node(argv, [argv[0]] + fill(self.data["node"]["status"], ctx, "[node] status"), socket,
                                self.node_log, self.samples, run, spec.get("gpu_util"))
                    stack.callback(node.stop)
                    nodes.append(node)
                # Each job alone one after the other, or the production job and then the other.
                for classes in [[c] for c in CLASSES] if kind == "each" else [CLASSES[:2 if kind == "both" else 1]]:
                    with contextlib.ExitStack() as running:
                        jobs = []
                        for cls in classes:
                            mps = {} if "mps" not in mode else {
                                self.data["mps"]["percentage_env"]: str(mode["mps"][cls]),
                                self.data["mps"]["priority_env"]: str(mode["mps"].get("priority", {}).get(cls, 0))}
                            jobs.append(j := self.start_job(run, cls, pair[cls], ctx, env | mps))
                            record["jobs"][cls] = {"job": pair[cls], "started": j.started}
                            running.callback(lambda j=j: record["jobs"][j.cls].update(exit=j.stop()))
                            wait_steady(jobs, j.started)  # the newcomer, and the others again since its arrival
                        a = time.time()
                        sleep(s["windows"] * s["window_s"] + 0.1, jobs)
                        for j in jobs:
                            record["jobs"][j.cls]["measure"] = [a, time.time()]
                        if s["idle_s"] > 0 and kind == "both":
                            idle_phase(jobs, rate_in(jobs[0].windows(), a, time.time()))
        except (RunFailed, HarnessError) as e:
            record["failed"] = str(e)
        record["ended"] = time.time()
        self.runs.write(record)
        return record

    def metadata(self, complete: bool, specs: list) -> None:
        write_json(os.path.join(self.out, "call.json"), {
            "device": self.device, "driver": self.driver, "command": self.args.command, "complete": complete,
            "date": datetime.datetime.fromtimestamp(self.t0, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cpus": self.cpus, "budgets": self.budgets, "baseline": self.data["settings"]["baseline"],
            "gpu": self.gpu, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pairs": {sp["pair"]: {c: self.data["pairs"][sp["pair"]][c] for c in CLASSES} for sp in specs},
            "modes": {sp["mode"]: self.data["modes"][sp["mode"]]["jobs"] for sp in specs},
            "skipped": self.skipped, "warnings": self.warnings, "data": self.data})


def estimate(s: dict, mode: dict) -> float:
    """The seconds one run should take (the plan and the time guard; the wait is for steady state)."""
    one = s["startup_s"] + s["windows"] * s["window_s"] + 3
    if mode["jobs"] == "both":
        one += s["startup_s"] + (s["settle_s"] if "node_flags" in mode else 0)
        one += s["idle_s"] + 5 * s["window_s"] if s["idle_s"] > 0 else 0
    return 2 * one if mode["jobs"] == "each" else one


def plan(args, data: dict) -> list:
    """The runs of a call in order: rounds of every selected pair and its modes."""
    pairs = args.pairs.split(",") if args.pairs else ["high"]
    wanted = args.modes.split(",") if args.modes else None
    for kind, names in (("pairs", pairs), ("modes", wanted or [])):
        for n in (n for n in names if n not in data[kind]):
            raise HarnessError(f"--{kind}: unknown {kind[:-1]} '{n}' (known: {', '.join(data[kind])})")
    rounds = int(parse_sets(args.set or [], data["settings"]).get("rounds", data["settings"]["rounds"]))
    return [{"run": f"{r}/{p}/{m}", "round": r, "pair": p, "mode": m} for r in range(1, rounds + 1)
            for p in pairs for m in (wanted or data["pairs"][p].get("modes", []))]


def cpu_part(text: str) -> tuple:
    """--cpu-part I/N as (I, N), 1 <= I <= N."""
    i, _, n = text.partition("/")
    try:
        part = (int(i), int(n))
    except ValueError:
        part = (0, 0)
    if not 1 <= part[0] <= part[1]:
        raise argparse.ArgumentTypeError(f"'{text}' is not I/N with 1 <= I <= N")
    return part


def interrupt(signum, frame):
    for sig in (signal.SIGTERM, signal.SIGINT):  # once: the clean-up must not be interrupted in turn
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt()


def cmd_run(args, data: dict, specs: list, profile: bool = False) -> int:
    call = Call(args, data)
    modes = [data["modes"][sp["mode"]] for sp in specs]
    est = {sp["run"]: estimate(call.settings(data["pairs"][sp["pair"]], m), m) for sp, m in zip(specs, modes)}
    if args.plan:
        print_rows([("run", "estimated_s")] + [(sp["run"], round(est[sp["run"]])) for sp in specs])
        print(f"{len(specs)} runs, about {sum(est.values()):.0f} s, plus the build "
              f"(--max-s {args.max_s:g} skips the runs that would end later)")
        return 0
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    call.open()
    call.metadata(False, specs)
    complete = False
    try:
        if not args.no_build:
            print(f"== build into {args.build}", flush=True)
            build_backend(args.build, os.path.join(call.out, "build.log"))
        refused = {}
        for p in dict.fromkeys(sp["pair"] for sp in specs if data["pairs"][sp["pair"]].get("memory")):
            try:
                call.memory_budget(p)
                print(f"== {p}: {call.budgets[p]}", flush=True)
            except (HarnessError, OSError, ValueError, subprocess.SubprocessError) as e:
                refused[p] = str(e)
        for sp in specs:
            need = max(est[sp["run"]], call.longest.get(sp["mode"], 0))
            if sp["pair"] in refused:
                call.skipped.append({"run": sp["run"], "why": refused[sp["pair"]]})
            elif time.time() - call.t0 + need > args.max_s:
                call.skipped.append({"run": sp["run"], "why": f"~{need:.0f} s would end past --max-s {args.max_s:g}"})
            else:
                print(f"== [{time.time() - call.t0:4.0f} s] {sp['run']}", flush=True)
                rec = call.execute({**sp, "gpu_util": call.gpu if profile else None})
                call.longest[sp["mode"]] = max(call.longest.get(sp["mode"], 0), rec["ended"] - rec["started"])
                if rec["failed"]:
                    print(f"   failed: {rec['failed']}", flush=True)
        complete = True
    except KeyboardInterrupt:
        call.warnings.append("interrupted: the runs after the last one recorded did not run")
    finally:
        call.metadata(complete, specs)
        shutil.rmtree(call.work, ignore_errors=True)
    summary = summarize(call.out, print_table=not profile)
    if profile:
        return profile_row(call, summary)
    print(f"summary: {os.path.join(call.out, 'summary.json')} ({time.time() - call.t0:.0f} s)")
    return 0 if complete and not summary["failed"] else 1


def gpu_shares(args, gpus: list) -> list:
    """Per GPU of GPUS (nvidia-smi indexes): its pairs (those of --pairs dealt out in turn) and its
    part of its local CPUs, shared with the other GPUs whose local CPUs are the same."""
    pairs = args.pairs.split(",") if args.pairs else ["high"]
    if len(set(gpus)) != len(gpus) or len(pairs) < len(gpus):
        raise HarnessError(f"--gpus {args.gpus}: each GPU once, and at least one pair per GPU ({len(pairs)} given)")
    local = [tuple(gpu_local_cpus((nvidia_smi(["pci.bus_id"], g) or {}).get("pci.bus_id"))) for g in gpus]
    return [{"gpu": g, "pairs": pairs[k::len(gpus)],
             "cpu_part": (local[:k + 1].count(local[k]), local.count(local[k]))} for k, g in enumerate(gpus)]


def cmd_run_gpus(args, data: dict) -> int:
    """run --gpus: one call per GPU at once, each a child harness on its GPU and its own CPUs with
    its share of the pairs, writing to OUT/gpu<N> (each normalized to its own alone runs); the
    binaries are built once, here. A SIGTERM or SIGINT reaches every child, which cleans up."""
    try:
        gpus = [int(g) for g in args.gpus.split(",")]
    except ValueError:
        raise HarnessError(f"--gpus {args.gpus}: not a comma-separated list of GPU indexes") from None
    shares, out, t0 = gpu_shares(args, gpus), os.path.abspath(args.out), time.time()
    # What every child is told as this call was; each gets its own GPU, CPUs, pairs, output and time.
    rest = [x for d in args.data or [] for x in ("--data", d)] + [x for v in args.set or [] for x in ("--set", v)]
    rest += (["--modes", args.modes] if args.modes else []) + ["--no-pin"] * args.no_pin
    rest += ["--free-mib", f"{args.free_mib:g}"] if args.free_mib else []
    ones = [argparse.Namespace(**{**vars(args), "pairs": ",".join(sh["pairs"])}) for sh in shares]
    specs = [plan(one, data) for one in ones]  # unknown pairs and modes are refused before anything starts
    for sh, one, sp in zip(shares, ones, specs):
        print(f"== GPU {sh['gpu']}: pairs {one.pairs}, CPU part {sh['cpu_part'][0]}/{sh['cpu_part'][1]}", flush=True)
        if args.plan:
            cmd_run(one, data, sp)
    if args.plan:
        return 0
    os.makedirs(out, exist_ok=True)
    if not args.no_build:
        print(f"== build into {args.build}", flush=True)
        build_backend(args.build, os.path.join(out, "build.log"))
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    children = []
    try:
        for sh in shares:
            child_out = os.path.join(out, f"gpu{sh['gpu']}")
            os.makedirs(child_out, exist_ok=True)
            cmd = [sys.executable, os.path.abspath(__file__), "run", "--gpu", str(sh["gpu"]), "--cpu-part",
                   "{}/{}".format(*sh["cpu_part"]), "--pairs", ",".join(sh["pairs"]), "--out", child_out, "--no-build",
                   "--build", args.build, "--max-s", f"{max(0.0, args.max_s - (time.time() - t0)):.0f}"] + rest
            with open(os.path.join(out, f"gpu{sh['gpu']}.log"), "w") as log:
                children.append((sh, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
        codes = [proc.wait() for _, proc in children]
    except KeyboardInterrupt:
        for _, proc in children:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait() for _, proc in children]
    for (sh, _), rc in zip(children, codes):
        path = os.path.join(out, f"gpu{sh['gpu']}", "summary.json")
        print(f"\n== GPU {sh['gpu']} (exit {rc}; its output: gpu{sh['gpu']}.log)")
        if os.path.exists(path):
            table(read_json(path))
    paths = [p for p in (os.path.join(out, f"gpu{sh['gpu']}", "summary.json") for sh, _ in children)
             if os.path.exists(p)]
    if paths:  # the GPUs' cells in one file (each run normalized to its own GPU's alone runs)
        write_json(os.path.join(out, "summary.json"), pool(paths))
    print(f"summaries: {' '.join(paths)}, pooled in {os.path.join(out, 'summary.json')} ({time.time() - t0:.0f} s)")
    return max(codes, default=0)


def profile_row(call: Call, summary: dict) -> int:
    """The profile of one job from its run: rates, launches and blocks/s, busy fraction, jitter, memory."""
    rec = (read_jsonl(os.path.join(call.out, "runs.jsonl")) or [{}])[-1]
    if rec.get("failed") or "measure" not in rec.get("jobs", {}).get("production", {}):
        print(f"profile: the run did not measure: {rec.get('failed')}", file=sys.stderr)
        return 1
    a, b = rec["jobs"]["production"]["measure"]
    lines = read_jsonl(os.path.join(call.out, "windows.jsonl"))
    rates = [x["line"]["iter_per_s"] for x in lines if a < x["t"] <= b and "iter_per_s" in x["line"]]
    end = next((x["line"] for x in reversed(lines) if x["line"].get("event") == "end"), {})
    samples = [s for s in read_jsonl(os.path.join(call.out, "status-samples.jsonl")) if a < s["t"] <= b]
    prod = [x for s in samples for x in s["jobs"] if x.get("class") == "production"]
    of = lambda k: (stats([x.get(k) for x in prod]) or {}).get("median")  # noqa: E731
    util = [float(u) / 100 for s in samples if (u := str(s.get("gpu_utilization"))).replace(".", "").isdigit()]
    kernels = next((x["line"] for x in reversed(lines) if x["line"].get("event") == "kernels"), None)
    busy, busy_source = ((statistics.median(util), "nvidia-smi utilization.gpu") if util
                         else ((kernels or {}).get("busy_fraction"), "torch.profiler kernel spans"))
    med = statistics.median(rates) if rates else None
    q = statistics.quantiles([r / med for r in rates], n=20, method="inclusive") if med and len(rates) > 1 else None
    row = {"job": rec["jobs"]["production"]["job"], "device": call.device, "driver": call.driver,
           "date": summary["cells"][0]["date"], "command": call.args.command, "it_per_s": med,
           "iteration_s": 1 / med if med else None, "windows": len(rates), "kernels_per_s": of("launches_per_s"),
           "blocks_per_s": of("blocks_per_s"), "busy_fraction": busy,
           "busy_source": None if busy is None else busy_source,
           "jitter": {"p5": q[0], "p50": q[9], "p95": q[18]} if q else None,
           "footprint_bytes": end.get("peak_reserved_bytes"), "hot_set_bytes": end.get("hot_set_bytes"),
           "kernel_stats": kernels}
    write_json(os.path.join(call.out, "profile.json"), row)
    print(json.dumps(row))
    return 0


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="subcommand")
    runner = argparse.ArgumentParser(add_help=False)
    runner.add_argument("--data", action="append", help="data files, merged in order (default: scenarios.toml here)")
    runner.add_argument("--set", action="append", metavar="KEY=VALUE", help="a [settings] value, e.g. windows=8")
    runner.add_argument("--out", default=os.environ.get("OUT", "/tmp/tgs-gpu-out"), help="output folder ($OUT)")
    runner.add_argument("--build", default="/tmp/tgs-gpu-build", help="build folder of tgs-node and the interposer")
    runner.add_argument("--no-build", action="store_true", help="use the binaries already in --build")
    runner.add_argument("--plan", action="store_true", help="print the runs and their estimated time; run nothing")
    runner.add_argument("--max-s", type=float, default=540, help="no run starts that would end later than this (540)")
    runner.add_argument("--free-mib", type=float, help="the card's free memory where nvidia-smi cannot tell")
    runner.add_argument("--no-pin", action="store_true", help="do not pin the jobs to halves of the GPU's local CPUs")
    runner.add_argument("--gpu", type=int, help="the GPU to run on (nvidia-smi's index; default 0): what the call "
                        "starts sees it alone")
    runner.add_argument("--cpu-part", type=cpu_part, default=(1, 1), metavar="I/N",
                        help="use the I-th of N parts (whole cores) of the GPU's local CPUs (run --gpus sets it)")
    r = sub.add_parser("run", parents=[runner], help="pairs under sharing modes (--plan: list the runs, run nothing)")
    r.add_argument("--pairs", help="comma-separated pairs (default high)")
    r.add_argument("--modes", help="comma-separated modes instead of each pair's own list")
    r.add_argument("--gpus", help="comma-separated GPUs (nvidia-smi indexes): one call per GPU at once, the pairs "
                   "dealt out among them in turn, each writing to OUT/gpu<N>")
    p = sub.add_parser("profile", parents=[runner], help="one job alone under the interposer + tgs-node: a profile row")
    p.add_argument("job", help="a job of the data's [jobs]")
    p.add_argument("--mode", default="interposer", help="the mode to profile it in (interposer)")
    sub.add_parser("summarize", help="a call's summary again from its raw files").add_argument("dir")
    pl = sub.add_parser("pool", help="the cells of several summaries pooled, with an interval of the median")
    pl.add_argument("files", nargs="+", help="summaries or pools")
    pl.add_argument("--json", help="write the pooled cells here")
    t = sub.add_parser("targets", help="which cells meet a production and an opportunistic target")
    t.add_argument("files", nargs="+", help="summaries or pools")
    t.add_argument("--production", type=float, default=0.95, help="the production target (0.95)")
    t.add_argument("--opportunistic", type=float, default=0.5, help="the opportunistic target (0.5)")
    dm = sub.add_parser("dominance", help="per pair, whether any mode beats the default on both jobs beyond the "
                        "intervals, and whether the default meets its targets")
    dm.add_argument("files", nargs="+", help="summaries or pools (FILE:KEY: the pool under KEY of a results JSON)")
    dm.add_argument("--default", default="priority-share", help="the default's mode (priority-share)")
    dm.add_argument("--data", action="append", help="data files with [targets] (default: scenarios.toml here)")
    dm.add_argument("--device", help="only the cells measured on this device (as nvidia-smi names it)")
    dm.add_argument("--json", help="write the pooled cells and the verdicts here")
    dm.add_argument("--markdown", action="store_true", help="print a Markdown table")
    b = sub.add_parser("build", help="only the build a run or profile call makes (what CI checks)")
    b.add_argument("--build", default="/tmp/tgs-gpu-build", help="build folder of tgs-node and the interposer")
    b.add_argument("--log", help="the build's output (default: BUILD/harness-build.log)")
    ph = sub.add_parser("phases", help="tgs-node status samples per run and controller phase")
    ph.add_argument("file", help="a status-samples.jsonl, or a call's output folder that holds one")
    ph.add_argument("--json", action="store_true", help="one JSON line per run and phase")
    args = ap.parse_args(argv)
    args.command = recorded_command(argv, os.environ.get("OUT"))
    try:
        data = (load_data(args.data or [os.path.join(HERE, "scenarios.toml")])
                if args.cmd in ("run", "profile", "dominance") else {})
        if args.cmd == "run" and args.gpus:
            if args.gpu is not None or args.cpu_part != (1, 1):
                raise HarnessError("--gpus sets each call's --gpu and --cpu-part: give neither with it")
            return cmd_run_gpus(args, data)
        if args.cmd == "run":
            return cmd_run(args, data, plan(args, data))
        if args.cmd == "profile":
            if args.job not in data["jobs"] or args.mode not in data["modes"]:
                raise HarnessError(f"profile: unknown job '{args.job}' or mode '{args.mode}'")
            data["pairs"]["profile"] = {"production": args.job, "opportunistic": args.job}
            job = data["jobs"][args.job]  # a train.py job also measures its kernels and idle gaps
            job["args"] = job.get("args", []) + ["--kernel-stats-steps", "20"] * ("train.py" in str(job["program"]))
            # The profile's windows, after --set (a --set windows=N still wins, as in any run).
            sets = parse_sets(args.set or [], data["settings"])
            data["settings"]["windows"] = sets.get("profile_windows", data["settings"]["profile_windows"])
            spec = {"run": f"1/profile/{args.mode}", "round": 1, "pair": "profile", "mode": args.mode}
            return cmd_run(args, data, [spec], True)
        if args.cmd == "build":
            os.makedirs(args.build, exist_ok=True)
            log = args.log or os.path.join(args.build, "harness-build.log")
            build_backend(args.build, log)
            print(f"built tgs-intercept and tgs-node in {args.build} (log: {log})")
        elif args.cmd == "summarize":
            summarize(args.dir)
        elif args.cmd == "pool":
            pooled = pool(args.files)
            if args.json:
                write_json(args.json, pooled)
            table(pooled)
        elif args.cmd == "dominance":
            t = data.get("targets")
            if not isinstance(t, dict) or not all(isinstance(t.get(k), (int, float)) for k in ("production",
                                                                                             "production_low")):
                raise HarnessError("dominance: the data has no [targets] with production and production_low")
            t = {**t, "opportunistic": t.get("opportunistic", {})}
            pooled = pool(args.files, args.device)
            if "," in pooled["device"]:
                raise HarnessError(f"dominance: cells of several devices ({pooled['device']}): choose one with --device")
            rows = dominance(pooled["cells"], args.default, t, {"default": t.get("runs_default", 3),
                                                                "others": t.get("runs_others", 2),
                                                                "modes": t.get("modes_others", 2)})
            if not rows:
                raise HarnessError("dominance: no cell but alone runs in " + " ".join(args.files))
            if args.json:
                write_json(args.json, {**pooled, "command": args.command, "targets": t, "verdicts": rows})
            print(f"{pooled['device']}, driver {pooled['driver'] or '-'}: each job's rate over its alone rate, median "
                  "(95% bootstrap interval over runs); the default beaten: another mode above both its intervals")
            dominance_table(rows, args.markdown)
        elif args.cmd == "targets":
            rows = targets(pool(args.files)["cells"], args.production, args.opportunistic)
            print_rows([("scenario", "mode", "production", "opportunistic", "met", "both_in_run", "setting")] + [
                (e["scenario"], e["mode"], e["production"], e["opportunistic"],
                 "".join(m for m, ok in (("P", e["production_met"]), ("O", e["opportunistic_met"])) if ok) or "-",
                 f"{e['runs_meeting_both']}/{e['runs_with_both']}", e["setting"]) for e in rows])
            met = sum(e["production_met"] and e["opportunistic_met"] for e in rows)
            print(f"targets: production >= {args.production:g}, opportunistic >= {args.opportunistic:g} (medians, "
                  f"unrounded); {met} of {len(rows)} cells meet both")
        else:
            path = os.path.join(args.file, "status-samples.jsonl") if os.path.isdir(args.file) else args.file
            if not os.path.isfile(path):
                raise HarnessError(f"phases: no status samples at {path}")
            rows = phases(read_jsonl(path))
            for e in rows if args.json else []:
                print(json.dumps(e))
            if rows and not args.json:
                print_rows([list(rows[0])] + [list(e.values()) for e in rows])
        return 0
    except HarnessError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
