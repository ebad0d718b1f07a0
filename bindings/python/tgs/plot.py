# SPDX-License-Identifier: Apache-2.0
"""Plots of tgs results, as PNG or SVG (by the file name), from Python results or from the files
tgs-sim and the GPU harness (bench/gpu/harness.py) write:

- cdf: the job completion time CDF of each policy and class of a cluster run (tgs.mixed,
  tgs.replay, or `tgs-sim mixed|replay --out DIR`);
- timeline: one pair over time, simulated (tgs.pairs(timeline=True), `tgs-sim pairs --timeline`)
  and real (a harness output folder: tgs-node status samples and the jobs' rate logs) on the
  same axes: both jobs' throughput relative to alone, the opportunistic budget, the controller's
  phase;
- tradeoff: each policy's production and opportunistic throughput for a pair, one point per
  policy, simulated (tgs.pairs, `tgs-sim pairs --format json|csv`) and real (a harness
  summary.json, or docs/results/*.json).

From a shell:

    python3 -m tgs.plot cdf OUT_DIR -o cdf.png
    python3 -m tgs.plot timeline --sim timeline.csv --real HARNESS_OUT --run 1/high/tgs -o t.svg
    python3 -m tgs.plot tradeoff --sim pairs.json --real docs/results/rate-control.json \\
        --scenario high-contention --real-scenario high -o tradeoff.png

Each function returns the matplotlib Figure (drawn without pyplot, so it never opens a window)
and writes it to `path` when given.
"""
import argparse
import csv
import json
import math
import os
import sys
import textwrap

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from . import InputError, rate_policies

CLASSES = ("production", "opportunistic")
#: tgs_rate_control's phases in Algorithm 1's order; other controllers' phases follow.
PHASES = ("profiling", "slow_start", "congestion_avoidance", "unthrottled")
_CLASS_COLORS = {"production": "tab:blue", "opportunistic": "tab:orange"}


# ------------------------------------------------------------------ shared

def policy_color(name, others=()):
    """One colour per policy in every plot: the registry's policies take tab10 in registry order;
    other names (a harness mode such as "alone-mps") take tab20's light shades in `others` order."""
    registry = list(rate_policies())
    if name in registry:
        return matplotlib.colormaps["tab10"].colors[registry.index(name) % 10]
    extra = [n for n in others if n not in registry]
    i = extra.index(name) if name in extra else len(extra)
    return matplotlib.colormaps["tab20"].colors[(2 * i + 1) % 20]


def _phase_colors(phases):
    known = [p for p in PHASES if p in phases] + sorted(p for p in phases if p not in PHASES)
    palette = matplotlib.colormaps["Set2"].colors
    return {p: palette[i % len(palette)] for i, p in enumerate(known)}


def save(fig, path):
    """Writes `fig` to `path`, PNG or SVG by the extension. SVG keeps its text as text."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in (".png", ".svg"):
        raise InputError(f"{path}: expected a file name ending in .png or .svg")
    if ext == ".svg":
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tgs"}):
            fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    else:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return path


def _finish(fig, path):
    if path is not None:
        save(fig, path)
    return fig


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None


def _read_jsonl(path):
    try:
        with open(path, encoding="utf-8") as f:
            lines = list(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not a JSON line: {e.msg}") from None
    return out


def _read_csv(path, required):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
            header = rows[0].keys() if rows else []
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    missing = [c for c in required if rows and c not in header]
    if missing:
        raise InputError(f"{path}:1: no column \"{missing[0]}\" (expected {', '.join(required)})")
    return rows


def _number(text, where):
    if text in ("", None):
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where}: expected a number, got \"{text}\"") from None


# ------------------------------------------------------------------ cdf

def _cdf_data(result):
    """{"workload", "policies", "jct": {(policy, class): sorted JCTs or None}, "points":
    {(policy, class): (quantiles, JCTs)}, "norm": {(policy, class): mean JCT / baseline's}}."""
    data = {"workload": "", "policies": [], "jct": {}, "points": {}, "norm": {}}

    def take_summary(rows):
        for s in rows:
            data["workload"] = data["workload"] or s.get("workload", "")
            for cls in CLASSES:
                data["norm"][(s["policy"], cls)] = s.get(f"{cls}_jct")

    def take_jobs(policy, cls, jct):
        key = (str(policy), str(cls))
        if key[0] not in data["policies"]:
            data["policies"].append(key[0])
        data["jct"].setdefault(key, []).append(float(jct))

    if isinstance(result, dict):
        if "jobs" not in result or "summary" not in result:
            raise InputError("cdf: expected the result of tgs.mixed or tgs.replay (with \"jobs\" and \"summary\")")
        take_summary(result["summary"])
        jobs = result["jobs"]
        for policy, cls, jct in zip(jobs["policy"], jobs["class"], jobs["jct_s"]):
            take_jobs(policy, cls, jct)
        data["workload"] = result.get("workload", data["workload"])
        for p in result.get("policies", []):
            if p not in data["policies"]:
                data["policies"].append(p)
    else:
        path = os.fspath(result)
        folder = path if os.path.isdir(path) else None
        if folder:
            summary = os.path.join(folder, "summary.json")
            if os.path.exists(summary):
                take_summary(_read_json(summary))
            path = os.path.join(folder, "jobs.csv")
            if not os.path.exists(path):
                path = os.path.join(folder, "cdf.csv")
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file (expected a --out folder, jobs.csv or cdf.csv)")
        with open(path, encoding="utf-8") as f:
            header = f.readline().strip().split(",")
        if "jct_s" in header and "job" in header:
            for n, row in enumerate(_read_csv(path, ("policy", "class", "jct_s")), 2):
                take_jobs(row["policy"], row["class"], _number(row["jct_s"], f"{path}:{n}"))
        else:
            for n, row in enumerate(_read_csv(path, ("policy", "class", "quantile", "jct_s")), 2):
                key = (row["policy"], row["class"])
                if key[0] not in data["policies"]:
                    data["policies"].append(key[0])
                q, x = data["points"].setdefault(key, ([], []))
                q.append(_number(row["quantile"], f"{path}:{n}"))
                x.append(_number(row["jct_s"], f"{path}:{n}"))
    data["jct"] = {k: np.sort(np.asarray(v)) for k, v in data["jct"].items()}
    return data


def _ecdf(sorted_values, points=600):
    """The empirical CDF at `points` ranks at most: a trace of 80,000 jobs draws the same curve
    from 600 of them (steps of 1/600 of the jobs), and its SVG stays small."""
    n = len(sorted_values)
    ranks = np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(int))
    return sorted_values[ranks], (ranks + 1) / n


def cdf(result, path=None, *, classes=CLASSES, policies=None, title=None):
    """The JCT CDF of each policy, one panel per job class (NSDI'23 Figure 6's comparison).

    `result` is what tgs.mixed or tgs.replay returned, or a `tgs-sim --out` folder (jobs.csv, else
    cdf.csv; summary.json for the title and the legend's normalized means), or one of those files.
    `policies` restricts and orders the lines. The legend gives each policy's mean JCT over the
    baseline's (exclusive), as tgs-sim's table does."""
    data = _cdf_data(result)
    shown = [p for p in (policies or data["policies"]) if p in data["policies"]]
    if policies and len(shown) < len(policies):
        missing = [p for p in policies if p not in data["policies"]]
        raise InputError(f"cdf: no results for {', '.join(missing)} (have: {', '.join(data['policies'])})")
    for cls in classes:
        if cls not in CLASSES:
            raise InputError(f"cdf: unknown class \"{cls}\" (known: {', '.join(CLASSES)})")
    fig = Figure(figsize=(4.6 * len(classes), 3.9), layout="constrained")
    axes = fig.subplots(1, len(classes), sharey=True, squeeze=False)[0]
    for ax, cls in zip(axes, classes):
        drawn = 0
        for policy in shown:
            norm = data["norm"].get((policy, cls))
            label = policy if norm is None else f"{policy} ({norm:.2f}x)"
            color = policy_color(policy, shown)
            jct = data["jct"].get((policy, cls))
            if jct is not None and len(jct):
                x, y = _ecdf(jct)
                ax.step(np.maximum(x, 1.0) / 3600, y, where="post", color=color, label=label, lw=1.6)
                drawn += 1
            elif (policy, cls) in data["points"]:
                q, x = data["points"][(policy, cls)]
                ax.step(np.maximum(x, 1.0) / 3600, q, where="post", color=color, label=label, lw=1.6)
                drawn += 1
        ax.set_xscale("log")
        ax.set_title(f"{cls} jobs")
        ax.set_xlabel("job completion time (hours, log scale)")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="major", alpha=0.3)
        if drawn:
            ax.legend(title="policy (mean JCT / exclusive)", fontsize="small", title_fontsize="small",
                      loc="lower right")
        else:
            ax.text(0.5, 0.5, f"no {cls} jobs", transform=ax.transAxes, ha="center", va="center")
    axes[0].set_ylabel("fraction of jobs")
    heading = title if title is not None else data["workload"]
    if heading:
        fig.suptitle("\n".join(textwrap.wrap(heading, 100)), fontsize="medium")
    return _finish(fig, path)


# ------------------------------------------------------------------ timeline

def _sim_timeline(sim, policy, scenario):
    """The segments of one policy and scenario: {"start", "end", "production", "opportunistic",
    "budget", "phase", "scenario"}."""
    results = []
    if isinstance(sim, dict) and "results" in sim:
        results = sim["results"]
        if sim.get("timeline") is None:
            raise InputError("timeline: the pairs result has no timeline: run tgs.pairs(..., timeline=True)")
        sim = sim["timeline"]
    if isinstance(sim, dict):
        cols = {k: list(v) for k, v in sim.items()}
        where = "timeline"
    else:
        where = os.fspath(sim)
        rows = _read_csv(where, ("scenario", "policy", "start_s", "end_s", "production", "opportunistic",
                                 "opportunistic_budget_blocks"))
        cols = {k: [r.get(k, "") for r in rows] for k in (rows[0].keys() if rows else [])}
    policies = cols.get("policy", [])
    if policy not in policies:
        raise InputError(f"{where}: no segments of policy \"{policy}\" (have: {', '.join(dict.fromkeys(policies))})")
    scenarios = [s for s, p in zip(cols["scenario"], policies) if p == policy]
    scenario = scenario or scenarios[0]
    if scenario not in scenarios:
        raise InputError(f"{where}: no segments of {policy} in scenario \"{scenario}\" "
                         f"(have: {', '.join(dict.fromkeys(scenarios))})")
    keep = [i for i, (s, p) in enumerate(zip(cols["scenario"], policies)) if s == scenario and p == policy]

    def column(name, number=True):
        values = cols.get(name, [""] * len(policies))
        return np.array([_number(values[i], f"{where}: {name}") for i in keep]) if number else \
            [str(values[i]) for i in keep]
    pair = ""
    for x in results:
        if x.get("scenario") == scenario and x.get("policy") == policy:
            pair = f" ({x.get('production_model')}/{x.get('opportunistic_model')} on {x.get('gpu')})"
    return {"scenario": scenario, "pair": pair, "start": column("start_s"), "end": column("end_s"),
            "production": column("production"), "opportunistic": column("opportunistic"),
            "budget": column("opportunistic_budget_blocks"),
            "phase": column("phase", number=False) if "phase" in cols else None}


def _real_timeline(real, run):
    """A harness run: status samples (budget, phase) and, with the harness's summary, the jobs'
    window rates over their alone rates; times since the opportunistic job registered."""
    path = os.fspath(real)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    status = os.path.join(path, "status-samples.jsonl") if os.path.isdir(path) else path
    samples = _read_jsonl(status)
    for n, s in enumerate(samples, 1):
        if not isinstance(s, dict) or not isinstance(s.get("jobs"), list) or not isinstance(s.get("gpus"), list):
            raise InputError(f"{status}:{n}: not a tgs-node status sample (expected run, t, gpus, jobs)")

    def classes(s):
        return {j.get("class"): j for j in s["jobs"] if isinstance(j, dict) and j.get("gpu", 0) == 0}
    runs = list(dict.fromkeys(str(s.get("run")) for s in samples))
    if run is None:
        both = [r for r in runs if any(str(s.get("run")) == r and len(classes(s)) == 2 for s in samples)]
        if not both:
            raise InputError(f"{status}: no run with both jobs registered at tgs-node")
        run = both[0]
    mine = [s for s in samples if str(s.get("run")) == run]
    if not mine:
        raise InputError(f"{status}: no samples of run \"{run}\" (have: {', '.join(runs)})")
    arrivals = [s["t"] - j["up_s"] for s in mine for c, j in classes(s).items()
                if c == "opportunistic" and isinstance(j.get("up_s"), (int, float))]
    t0 = min(arrivals) if arrivals else mine[0]["t"]
    out = {"run": run, "t": [], "budget": [], "phase": [], "rates": {}, "note": None}
    for s in mine:
        if len(classes(s)) < 2:
            continue  # the controller's numbers mean something with both jobs only
        gpu = next((g for g in s["gpus"] if isinstance(g, dict) and g.get("gpu", 0) == 0), {})
        out["t"].append(s["t"] - t0)
        budget = gpu.get("budget_blocks")
        out["budget"].append(float(budget) if isinstance(budget, (int, float)) else math.nan)
        out["phase"].append(str(gpu.get("phase", "")))
    # The jobs' rates over their alone rates, as the harness normalizes its cells.
    windows, summary, runs_file = (os.path.join(folder, n) for n in ("windows.jsonl", "summary.json", "runs.jsonl"))
    if all(os.path.exists(p) for p in (windows, summary, runs_file)):
        baseline = _read_json(summary).get("baseline_it_per_s", {})
        record = next((r for r in _read_jsonl(runs_file) if str(r.get("run")) == run), {})
        for cls in CLASSES:
            job = (record.get("jobs", {}).get(cls) or {}).get("job")
            if not baseline.get(job):
                out["note"] = f"GPU rates not shown: no alone rate of {job or cls} in {summary}"
                continue
            points = [(w["t"] - t0, w["line"]["iter_per_s"] / baseline[job]) for w in _read_jsonl(windows)
                      if str(w.get("run")) == run and w.get("class") == cls
                      and isinstance((w.get("line") or {}).get("iter_per_s"), (int, float))]
            out["rates"][cls] = np.array(points).reshape(-1, 2)
    else:
        out["note"] = "GPU rates not shown: no windows.jsonl, runs.jsonl and summary.json beside the samples"
    out["t"], out["budget"] = np.array(out["t"]), np.array(out["budget"])
    return out


def _phase_strip(ax, y, starts, ends, phases, colors):
    for phase in dict.fromkeys(phases):
        if not phase:
            continue
        bars = [(a, b - a) for a, b, p in zip(starts, ends, phases) if p == phase and b > a]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=colors[phase])


def timeline(sim=None, real=None, path=None, *, policy="tgs", scenario=None, run=None, xlim=None, title=None):
    """One pair over time, simulated and real on the same axes: both jobs' throughput relative to
    alone, the opportunistic budget (thread blocks per budget window; the controller holds the job
    at 0 and leaves it unthrottled where the line stops) and the controller's phase.

    `sim` is what tgs.pairs(timeline=True) returned, its "timeline" columns, or a `tgs-sim pairs
    --timeline` CSV; `policy` and `scenario` (default: the first) pick its segments. `real` is a
    harness output folder (status-samples.jsonl, with windows.jsonl, runs.jsonl and summary.json
    for the rates) or a status-samples.jsonl file; `run` picks the run (default: the first with
    both jobs at tgs-node). Time 0 is the opportunistic job's arrival: both jobs start together in
    the simulation; on the GPU, when tgs-node registered the opportunistic job. `xlim` (start, end)
    in seconds zooms in; beside a real run the default is that run's span."""
    if sim is None and real is None:
        raise InputError("timeline: give sim, real or both")
    s = _sim_timeline(sim, policy, scenario) if sim is not None else None
    r = _real_timeline(real, run) if real is not None else None
    phases = set(s["phase"] or []) if s else set()
    phases |= set(r["phase"]) if r else set()
    phases.discard("")
    colors = _phase_colors(phases)

    fig = Figure(figsize=(9, 6.8), layout="constrained")
    ax_rate, ax_budget, ax_phase = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2, 1.1]})
    if s:
        edges = np.append(s["start"], s["end"][-1:]) if len(s["start"]) else np.array([0.0])
        for cls in CLASSES:
            if len(s["start"]):
                ax_rate.stairs(s[cls], edges, baseline=None, color=_CLASS_COLORS[cls], lw=1.8,
                               label=f"{cls} (sim)")
        ax_budget.stairs(s["budget"], edges, baseline=None, color="tab:green", lw=1.6, label="sim")
    if r:
        for cls, points in r["rates"].items():
            if len(points):
                ax_rate.plot(points[:, 0], points[:, 1], ls="--", marker="o", ms=3.5, lw=1,
                             color=_CLASS_COLORS[cls], alpha=0.8, label=f"{cls} (GPU)")
        if len(r["t"]):
            ax_budget.plot(r["t"], r["budget"], ls="none", marker="x", ms=5, color="tab:red", label="GPU (tgs-node)")
        if r["note"]:
            ax_rate.text(0.01, 0.03, r["note"], transform=ax_rate.transAxes, fontsize="x-small", color="0.35")
    ax_rate.set_ylabel("throughput / alone")
    ax_rate.set_ylim(0, 1.15)
    ax_rate.grid(True, alpha=0.3)
    if ax_rate.get_legend_handles_labels()[0]:
        ax_rate.legend(fontsize="small", ncols=2, loc="center right")
    ax_budget.set_yscale("symlog", linthresh=1000)
    budgets = np.concatenate([s["budget"] if s else [], r["budget"] if r else []])
    if np.isfinite(budgets).any():
        ax_budget.set_ylim(0, max(np.nanmax(budgets) * 2, 2000))
    ax_budget.set_ylabel("opportunistic budget\n(blocks per window)")
    ax_budget.grid(True, alpha=0.3)
    if ax_budget.get_legend_handles_labels()[0]:
        ax_budget.legend(fontsize="small", loc="lower right")

    rows = []
    if s and s["phase"] is not None:
        rows.append(("sim", s["start"], s["end"], s["phase"]))
    if r and len(r["t"]):
        t = r["t"]
        step = np.median(np.diff(t)) if len(t) > 1 else 1.0
        rows.append(("GPU", t, np.append(t[1:], t[-1] + step), r["phase"]))
    for y, (name, starts, ends, ph) in enumerate(reversed(rows)):
        _phase_strip(ax_phase, y, starts, ends, ph, colors)
    ax_phase.set_yticks(range(len(rows)), [n for n, *_ in reversed(rows)])
    ax_phase.set_ylim(-0.6, max(len(rows), 1) - 0.4)
    ax_phase.set_xlabel("time since the opportunistic job arrived (s)")
    if xlim is None and s and r and len(r["t"]):
        # Beside a GPU run, the simulated pair is shown over the run's span (a simulated run is
        # usually far longer), so the two can be compared at one scale.
        xlim = (min(r["t"][0], 0.0) - 5.0, r["t"][-1] + 5.0)
    if xlim is not None:
        ax_phase.set_xlim(*xlim)
    if colors:
        ax_phase.legend(handles=[Patch(color=c, label=p.replace("_", " ")) for p, c in colors.items()],
                        fontsize="small", ncols=min(4, len(colors)), loc="upper center",
                        bbox_to_anchor=(0.5, -0.55), title="controller phase", title_fontsize="small")
    else:
        ax_phase.text(0.5, 0.5, "the policy reports no phase", transform=ax_phase.transAxes,
                      ha="center", va="center", fontsize="small")
    if title is None:
        parts = []
        if s:
            parts.append(f"simulated: {policy}, {s['scenario']}{s['pair']}")
        if r:
            parts.append(f"GPU: run {r['run']}")
        title = "; ".join(parts)
    fig.suptitle(title, fontsize="medium")
    return _finish(fig, path)


# ------------------------------------------------------------------ tradeoff

# The columns of `tgs-sim pairs --format csv` that are words, not numbers.
_PAIRS_TEXT_COLUMNS = ("scenario", "policy", "production_model", "opportunistic_model", "gpu", "memory_policy",
                       "node_auto_mechanism", "node_auto_reason", "node_mps_mechanism", "node_mps_reason",
                       "node_unmeasured", "extrapolated")


def _sim_points(sim, scenario):
    if isinstance(sim, dict) and "results" in sim:
        records = sim["results"]
        where = "pairs"
    elif isinstance(sim, list):
        records, where = sim, "pairs"
    else:
        where = os.fspath(sim)
        if where.endswith(".csv"):
            records = [{k: (v if k in _PAIRS_TEXT_COLUMNS else _number(v, f"{where}: {k}")) for k, v in row.items()}
                       for row in _read_csv(where, ("scenario", "policy", "production", "opportunistic"))]
        else:
            records = _read_json(where)
    if not isinstance(records, list) or not all(isinstance(x, dict) for x in records):
        raise InputError(f"{where}: expected tgs-sim pairs records (a JSON array of objects)")
    scenarios = list(dict.fromkeys(x.get("scenario") for x in records))
    if not scenarios:
        raise InputError(f"{where}: no pairs")
    scenario = scenario or scenarios[0]
    if scenario not in scenarios:
        raise InputError(f"{where}: no scenario \"{scenario}\" (have: {', '.join(map(str, scenarios))})")
    return scenario, [x for x in records if x.get("scenario") == scenario]


def _real_cells(real, scenario):
    paths = [real] if isinstance(real, (str, os.PathLike)) else list(real)
    cells = []
    for p in paths:
        doc = _read_json(p)
        if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
            raise InputError(f"{p}: no \"cells\" list: not a harness summary or a docs/results summary")
        for c in doc["cells"]:
            if isinstance(c, dict) and isinstance(c.get("production"), dict) \
                    and isinstance(c.get("opportunistic"), dict):
                cells.append({**c, "source": os.path.basename(os.fspath(p))})
    scenarios = list(dict.fromkeys(c.get("scenario") for c in cells))
    if scenario is None:
        if len(scenarios) > 1:
            raise InputError(f"tradeoff: the real cells hold several scenarios ({', '.join(map(str, scenarios))}): "
                             "name one with real_scenario")
        scenario = scenarios[0] if scenarios else None
    if scenario not in scenarios:
        raise InputError(f"tradeoff: no real cells of scenario \"{scenario}\" with both jobs "
                         f"(have: {', '.join(map(str, scenarios))})")
    return scenario, [c for c in cells if c.get("scenario") == scenario]


def tradeoff(sim=None, real=None, path=None, *, scenario=None, real_scenario=None, title=None):
    """Each policy's production and opportunistic throughput (relative to alone) for one pair: a
    point per policy, simulated (round), measured on a GPU (square, with the min-max over runs)
    and, where tgs-sim has one, the measured cell it reproduces (diamond: the paper's, or ours on
    a GPU, as its measured_source says).

    `sim` is what tgs.pairs returned, its "results" list, or `tgs-sim pairs --format json|csv`
    output; `scenario` picks the pair (default: the first). `real` is a harness summary.json or a
    docs/results/*.json (or a list of them); `real_scenario` picks its cells (needed when they hold
    several scenarios: the harness calls the pairs "high" and "low")."""
    if sim is None and real is None:
        raise InputError("tradeoff: give sim, real or both")
    sim_scenario, records = _sim_points(sim, scenario) if sim is not None else (None, [])
    real_name, cells = _real_cells(real, real_scenario) if real is not None else (None, [])
    names = list(dict.fromkeys([x["policy"] for x in records] + [c["mode"] for c in cells]))

    fig = Figure(figsize=(6.4, 5.6), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [1, 0], color="0.7", lw=1, ls="--", zorder=0)
    measured = []  # the measured cells' sources, in order
    for x in records:
        color = policy_color(x["policy"], names)
        ax.scatter(x["production"], x["opportunistic"], s=70, color=color, edgecolor="black", lw=0.6, zorder=3)
        ax.annotate(x["policy"], (x["production"], x["opportunistic"]), xytext=(6, 5),
                    textcoords="offset points", fontsize="small", color=color)
        mp, mo = x.get("measured_production"), x.get("measured_opportunistic")
        if isinstance(mp, (int, float)) and isinstance(mo, (int, float)) and not (math.isnan(mp) or math.isnan(mo)):
            ax.scatter(mp, mo, s=45, marker="D", facecolor="none", edgecolor=color, lw=1.3, zorder=2)
            measured.append(x.get("measured_source") or "")
    for c in cells:
        color = policy_color(c["mode"], names)
        p, o = c["production"], c["opportunistic"]
        ax.errorbar(p["median"], o["median"],
                    xerr=[[p["median"] - p.get("min", p["median"])], [p.get("max", p["median"]) - p["median"]]],
                    yerr=[[o["median"] - o.get("min", o["median"])], [o.get("max", o["median"]) - o["median"]]],
                    fmt="s", ms=7, color=color, mec="black", mew=0.6, elinewidth=0.8, capsize=2, zorder=3)
        ax.annotate(c["mode"], (p["median"], o["median"]), xytext=(6, -10), textcoords="offset points",
                    fontsize="small", color=color)
    ax.set_xlim(-0.02, 1.1)
    ax.set_ylim(-0.02, 1.1)
    ax.set_xlabel("production throughput / alone")
    ax.set_ylabel("opportunistic throughput / alone")
    ax.grid(True, alpha=0.3)
    marks = [Line2D([], [], color="0.7", lw=1, ls="--", label="production + opportunistic = 1")]
    if records:
        marks.append(Line2D([], [], ls="none", marker="o", mfc="0.6", mec="black", ms=8, label="simulated (tgs-sim)"))
    if cells:
        marks.append(Line2D([], [], ls="none", marker="s", mfc="0.6", mec="black", ms=7,
                            label="GPU (median, min-max over runs)"))
    if measured:
        sources = ", ".join(x for x in dict.fromkeys(measured) if x)
        marks.append(Line2D([], [], ls="none", marker="D", mfc="none", mec="0.3", ms=7,
                            label=f"measured ({sources})" if sources else "measured"))
    # Below the axes: inside, the legend covered the points near (1, 1) that matter most.
    ax.legend(handles=marks, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2)
    if title is None:
        parts = []
        if records:
            first = records[0]
            pair = f"{first.get('production_model')}/{first.get('opportunistic_model')}"
            parts.append(f"simulated: {sim_scenario} ({pair} on {first.get('gpu')})")
        if cells:
            parts.append(f"GPU: {real_name} ({cells[0].get('production_model')}/{cells[0].get('opportunistic_model')})")
        title = "\n".join(parts)
    ax.set_title(title, fontsize="medium")
    return _finish(fig, path)


# ------------------------------------------------------------------ command line

def _seconds_pair(text):
    try:
        start, end = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START,END in seconds, got \"{text}\"") from None
    if not start < end:
        raise argparse.ArgumentTypeError(f"expected START < END, got \"{text}\"")
    return start, end


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m tgs.plot", description=__doc__.split("\n\nFrom a shell")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="plot", required=True, metavar="{cdf,timeline,tradeoff}")

    def outputs(p):
        p.add_argument("-o", "--output", action="append", required=True, metavar="FILE",
                       help="Write the plot here (.png or .svg); give it twice for both")
        p.add_argument("--title", help="Title instead of the one made from the data")

    p = sub.add_parser("cdf", help="JCT CDF per policy and class of a cluster run",
                       description="The JCT CDF of each policy, one panel per class, from a tgs-sim "
                                   "mixed|replay --out folder (or its jobs.csv or cdf.csv).")
    p.add_argument("source", help="A tgs-sim --out folder, jobs.csv or cdf.csv")
    p.add_argument("--policies", help="Policies to draw, comma-separated (default: all)")
    p.add_argument("--classes", default=",".join(CLASSES), help="Classes, comma-separated (default: %(default)s)")
    outputs(p)

    p = sub.add_parser("timeline", help="A pair over time, simulated and real",
                       description=textwrap.dedent(timeline.__doc__).split("\n\n", 1)[0])
    p.add_argument("--sim", help="A tgs-sim pairs --timeline CSV")
    p.add_argument("--real", help="A harness output folder, or its status-samples.jsonl")
    p.add_argument("--policy", default="tgs", help="The simulated policy (default: %(default)s)")
    p.add_argument("--scenario", help="The simulated scenario (default: the first of the policy)")
    p.add_argument("--run", help="The harness run, e.g. 1/high/tgs (default: the first with both jobs)")
    p.add_argument("--xlim", type=_seconds_pair, metavar="START,END", help="Seconds shown, e.g. -10,120")
    outputs(p)

    p = sub.add_parser("tradeoff", help="Production vs opportunistic throughput, a point per policy",
                       description=textwrap.dedent(tradeoff.__doc__).split("\n\n", 1)[0])
    p.add_argument("--sim", help="tgs-sim pairs --format json (or csv) output")
    p.add_argument("--real", action="append", help="A harness summary.json or docs/results/*.json (repeatable)")
    p.add_argument("--scenario", help="The simulated scenario (default: the first)")
    p.add_argument("--real-scenario", help="The scenario of the real cells (e.g. high)")
    outputs(p)

    args = parser.parse_args(argv)
    try:
        if args.plot == "cdf":
            fig = cdf(args.source, classes=args.classes.split(","),
                      policies=args.policies.split(",") if args.policies else None, title=args.title)
        elif args.plot == "timeline":
            fig = timeline(args.sim, args.real, policy=args.policy, scenario=args.scenario, run=args.run,
                           xlim=args.xlim, title=args.title)
        else:
            fig = tradeoff(args.sim, args.real, scenario=args.scenario, real_scenario=args.real_scenario,
                           title=args.title)
        for out in args.output:
            save(fig, out)
    except InputError as e:
        print(f"tgs.plot: {e}", file=sys.stderr)
        return 2
    for out in args.output:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
