# SPDX-License-Identifier: Apache-2.0
"""Pools the runs of one cell (SCENARIO/MODE) over several memory.sh calls.

One call holds two or three runs per mode, and on the H100 hosts a host-bound production job's
run median moved 10-15% from one run to the next, so a single call cannot tell 0.95 of alone
from 0.90. This script puts the runs of several calls that ran the same cell with the same
knobs side by side. Every run is normalized within its own call, two ways:

  call      to the median of the call's alone runs of that model (what memory.sh's summary does);
  paired    to the alone run of the same round (ORDER=interleaved calls only: round i ran the i-th
            alone runs right before the i-th run of every mode, so a machine that drifts during the
            call moves both alike); null for grouped calls.

For each normalization it reports the pooled median over all runs, the min-max spread, a
distribution-free confidence interval of the median (order statistics of the binomial: the
narrowest [x(k), x(n+1-k)] that covers the median with probability >= 0.95; with 5 runs or
fewer no such pair exists and the interval is the min-max with its own coverage), the runs'
standard deviation (what sizes a next measurement), the median of each call and its runs in round order.

    python3 bench/gpu/pool_memory.py SCENARIO/MODE CALL.json [CALL.json ...] [--json OUT.json] [--mixed]
                                     [--alone-from-window K] [--against MODE]

CALL.json is a memory.sh summary (gpu-memory.json); its runs are read from CALL-runs.jsonl
beside it (the name docs/results gives them) or, failing that, memory-runs.jsonl in the same
folder (a call's $OUT); CALL.json:MODE takes that call's runs of MODE for the cell (a
TGS_VARIANTS mode that ran what another call ran as plain tgs). The calls must name the same
production model for SCENARIO, and unless --mixed is given the same tgs-node flags for the cell,
the same budget and ALONE_SETTLE_S, MPS or not and under MPS the same MPS_OPP_PCT and
MPS_OPP_PRIORITY, and, for tgs modes, the same OPP_DELAY_S, TGS_SETTLE_S,
TGS_PRODUCTION_WINDOW_MS, PROFILE_WINDOWS and MAX_PROFILE_WINDOWS (memory.sh's defaults where a
command names none). With --json the pooled cell is written in the summary's shape
(scenarios/SCENARIO/modes/MODE), so merge_memory.py can file it beside single-call cells.

A host-bound production job can still speed up in an alone run's first windows, which memory.sh
measures WARMUP_S after the job's start, while a tgs run measures it WARMUP_S + TGS_SETTLE_S after
its start. --alone-from-window K takes each alone run's rate from its K-th window on (the later
baseline of an older call); memory.sh ALONE_SETTLE_S measures the alone runs later (a new call).
--against MODE compares the cell with another mode of the same interleaved calls round by round
(run i over run i of MODE: both saw the machine as it was then, and the alone baseline cancels),
with a sign test of whether either mode is the faster. MODE may be alone-mps (memory.sh MPS=1):
the cell against each job alone under MPS in the same round, so MPS's own cost cancels too.

--by-host-speed lists the calls by how fast the production job ran alone in them (the median of
the call's alone runs, it/s) and gives, over the calls, Spearman's rank correlation of that rate
with each call's median share of each job, with its permutation p (rank_stats.py). On the H100s a
host-bound production job ran 33-65 it/s alone from one machine to the next, and how much of the
GPU it leaves idle, so what an opportunistic job can take without slowing it, went with that: a
pooled median over such calls mixes regimes that this separates.
"""
import argparse
import json
import math
import os
import re
import shlex
import statistics
import sys

from memory_call import call_file, command_word, read_result_lines, window_rates
from rank_stats import spearman

CLASSES = ("production", "opportunistic")


def runs_path(summary_path: str) -> str:
    return call_file(summary_path, "-runs.jsonl", "memory-runs.jsonl")


def read_runs(path: str) -> tuple[dict, list[str]]:
    """label -> window rates (it/s) of every result with windows, and the problems met (read as
    memory.sh's summary reads the file, memory_call.py, so a pooled call counts the runs its own
    summary counted)."""
    records, problems = read_result_lines(path)
    out = {}
    for n, r in records:
        if not (isinstance(r, dict) and "label" in r and r.get("it_per_s")):
            continue
        w = window_rates(r)
        if w is None:
            raise ValueError(f"{path}:{n}: it_per_s of {r['label']!r} is not a list of rates >= 0")
        out[str(r["label"])] = w
    return out, problems


def fair_binomial_cdf(n: int, k: int) -> float:
    """P(Binom(n, 1/2) <= k): the order-statistic interval and the sign test both rest on it."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n


def median_ci(values: list[float], level: float = 0.95):
    """[x(k), x(n+1-k)] with the largest k whose coverage of the median is >= level, and that
    coverage; with too few values for the level, min-max and its coverage."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None

    def coverage(k):  # P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binom(n, 1/2) <= k - 1)
        return 1.0 - 2.0 * fair_binomial_cdf(n, k - 1)

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return {"low": xs[k - 1], "high": xs[n - k], "coverage": round(coverage(k), 4)}


# memory.sh's knobs that shape a tgs run's controller (its defaults when a call's command names
# none: calls before a knob existed ran with its default). Two tgs cells that differ in one are
# not the same measurement: a later arrival profiles a warmed-up production job, more profiling
# windows calibrate R and the band on more of its noise.
TGS_RUN_KNOBS = {"OPP_DELAY_S": "5", "TGS_SETTLE_S": "20", "TGS_PRODUCTION_WINDOW_MS": "1000",
                 "PROFILE_WINDOWS": "3", "MAX_PROFILE_WINDOWS": "6"}
# The knobs that shape every cell's normalization: how long after its start an alone run is
# measured (a job still speeding up makes a later-measured cell look better).
RUN_KNOBS = {"ALONE_SETTLE_S": "0"}
# Under MPS (memory.sh MPS=1) the two jobs share the SMs instead of time-slicing them, and the
# opportunistic job's SM cap and client priority set how: every mode of a call runs under them.
# memory.sh names MPS_OPP_PCT whenever MPS=1 and MPS_OPP_PRIORITY only when it is 1. A call
# without MPS=1 has no MPS settings: its cell names none, as before MPS existed.
MPS_KNOBS = {"MPS": "1", "MPS_OPP_PCT": "100", "MPS_OPP_PRIORITY": "0"}


def cell_knobs(summary: dict, scenario: dict, mode: str) -> dict:
    """What must match for runs of two calls to be one cell: tgs-node's flags (a TGS_VARIANTS
    mode's own, else the call's), the scenario's budget, the knobs of RUN_KNOBS, under MPS those of
    MPS_KNOBS and, for tgs modes, those of TGS_RUN_KNOBS."""
    own = scenario["modes"][mode].get("tgs_node_flags") if isinstance(scenario["modes"][mode], dict) else None
    knobs = {"tgs_node_flags": own if isinstance(own, str) else command_word(summary["command"], "TGS_NODE_FLAGS") or "",
             "budget_mib": scenario.get("budget_mib")}
    tables = (RUN_KNOBS, TGS_RUN_KNOBS) if mode == "tgs" or mode.startswith("tgs-") else (RUN_KNOBS,)
    if command_word(summary["command"], "MPS") == "1":
        tables += (MPS_KNOBS,)
    for table in tables:
        knobs |= {k: command_word(summary["command"], k) or d for k, d in table.items()}
    return knobs


def shown(value) -> str:
    """A knob's value in a refusal: quoted, or "unset" where that call's cell has no such knob."""
    return "unset" if value is None else repr(value)


def alone_rate(path: str, label: str, windows: list, from_window: int) -> float:
    """An alone run's rate: the median of its windows from the from_window-th on (1: all of them,
    as memory.sh's summary takes it; later: leaves out windows in which the job still sped up)."""
    if len(windows) < from_window:
        raise ValueError(f"{path}: {label} has {len(windows)} windows, --alone-from-window {from_window} leaves none")
    return statistics.median(windows[from_window - 1:])


def split_call(arg: str) -> tuple[str, str | None]:
    """CALL.json or CALL.json:MODE (that call's runs of MODE stand for the cell: a TGS_VARIANTS
    mode of one call that ran the flags another call ran as plain tgs)."""
    path, sep, mode = arg.rpartition(":")
    if sep and path.endswith(".json") and re.fullmatch(r"[\w.-]+", mode):
        return path, mode
    return arg, None


def sign_test(ratios: list[float]) -> dict:
    """How many ratios lie above 1 and the two-sided sign test of "neither mode is faster": ties
    (exactly 1) are left out, p = min(1, 2 * the smaller binomial tail)."""
    above = sum(r > 1 for r in ratios)
    n = above + sum(r < 1 for r in ratios)

    p = min(1.0, 2 * min(1.0 - fair_binomial_cdf(n, above - 1), fair_binomial_cdf(n, above))) if n else None
    return {"above": above, "untied": n, "sign_p": p}


def card_of(summary: dict) -> str | None:
    """The card that ran a call: its serial, else its UUID (memory.sh records both; summaries
    written before it did name none)."""
    for k in ("gpu_serial", "gpu_uuid"):
        if isinstance(summary.get(k), str) and summary[k]:
            return summary[k]
    return None


def by_host_speed(per_call: list) -> dict:
    """The calls in order of the production job's alone rate (it/s, slowest first), each with its
    median shares, and over the calls the rank correlation of that rate with each job's median."""
    rows = sorted(({"file": e["file"], **({"mode": e["mode"]} if "mode" in e else {}), "gpu": e["gpu"],
                    "production_alone_it_per_s": e["production_alone_it_per_s"],
                    **{c: e[c] for c in CLASSES}} for e in per_call),
                  key=lambda r: r["production_alone_it_per_s"])
    out = {"calls": rows}
    for c in CLASSES:
        pairs = [(r["production_alone_it_per_s"], r[c]) for r in rows if r[c] is not None]
        rho, p = spearman([a for a, _ in pairs], [v for _, v in pairs])
        out[c + "_spearman"], out[c + "_permutation_p"] = rho, p
        out[c + "_ranked_calls"] = len(pairs)  # a call whose runs printed nothing has no median
    return out


def pool(cell: str, calls: list[str], mixed: bool = False, alone_from_window: int = 1,
         against: str | None = None, with_by_round: bool = False, with_host_speed: bool = False) -> dict:
    m = re.fullmatch(r"([\w.-]+)/([\w.-]+)", cell)
    if not m:
        raise ValueError(f"bad cell '{cell}' (want SCENARIO/MODE)")
    scen, cell_mode = m.groups()
    if not calls:
        raise ValueError("name at least one call")
    if alone_from_window < 1:
        raise ValueError(f"--alone-from-window counts from 1 (got {alone_from_window})")
    if against is not None and not re.fullmatch(r"[\w.-]+", against):
        raise ValueError(f"bad --against mode '{against}'")
    per_call, values, sources = [], {c: [] for c in CLASSES}, []
    versus = {c: [] for c in CLASSES}  # round by round: the cell's rate over AGAINST's
    by_round = {c: {} for c in CLASSES}  # run i of every call (call-normalized): drift within calls
    paired = {c: [] for c in CLASSES}
    prod_model, scenario0, all_knobs = None, None, []
    for arg in calls:
        path, own_mode = split_call(arg)
        mode = own_mode or cell_mode
        # The plain alone runs normalize every cell; alone-mps (each job alone under MPS, against
        # those plain runs) is a cell like any other.
        if mode == "alone":
            raise ValueError(f"'{arg}': the alone runs are the normalization, not a cell to pool")
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
        if not isinstance(summary, dict) or not isinstance(summary.get("scenarios"), dict) or \
                not all(isinstance(summary.get(k), str) for k in ("command", "date", "device", "driver")):
            raise ValueError(f"{path}: not a memory.sh summary (scenarios, command, date, device, driver)")
        scenario = summary["scenarios"].get(scen)
        if not isinstance(scenario, dict) or not isinstance(scenario.get("modes"), dict) or \
                mode not in scenario["modes"]:
            raise ValueError(f"{path}: no cell {scen}/{mode}")
        model = scenario.get("production_model")
        if not isinstance(model, str):
            raise ValueError(f"{path}: {scen} names no production model")
        knobs = cell_knobs(summary, scenario, mode)
        all_knobs.append(knobs)
        first = all_knobs[0]
        if prod_model is None:
            prod_model, scenario0 = model, scenario
        elif model != prod_model:
            raise ValueError(f"{path}: {scen} ran {model}, an earlier call {prod_model}: not the same cell")
        elif knobs != first and not mixed:
            diff = ", ".join(f"{k} {shown(knobs.get(k))} (first call: {shown(first.get(k))})"
                             for k in first | knobs if knobs.get(k) != first.get(k))
            raise ValueError(f"{path}: {scen}/{mode} ran with {diff}; pass --mixed to pool it anyway")
        rpath = runs_path(path)
        windows, problems = read_runs(rpath)
        rates = {k: statistics.median(w) for k, w in windows.items()}
        for p in problems:
            print(f"pool_memory: {p} (skipped)", file=sys.stderr)
        interleaved = command_word(summary["command"], "ORDER") == "interleaved"
        models = {"production": model, "opportunistic": scenario.get("opportunistic_model", "dlrm")}
        if not isinstance(models["opportunistic"], str):
            raise ValueError(f"{path}: {scen}'s opportunistic_model is not a name")
        alone = {c: {int(hit.group(1)): alone_rate(rpath, k, w, alone_from_window) for k, w in windows.items()
                     if (hit := re.fullmatch(rf"alone/{re.escape(models[c])}/(\d+)", k))} for c in CLASSES}
        alone = {c: {i: v for i, v in alone[c].items() if v > 0} for c in CLASSES}  # 0 it/s normalizes nothing
        alone_med = {c: statistics.median(alone[c].values()) if alone[c] else None for c in CLASSES}
        idx = sorted({int(hit.group(1)) for k in rates
                      if (hit := re.fullmatch(rf"{re.escape(scen)}/{re.escape(mode)}/(\d+)/(?:production|opportunistic)", k))})
        entry = {"file": os.path.basename(path), **({"mode": mode} if own_mode else {}),
                 "date": summary.get("date"), "gpu": card_of(summary), "command": summary.get("command"),
                 "runs_file": os.path.basename(rpath), "order": "interleaved" if interleaved else "grouped",
                 "runs": len(idx), "rounds": idx, "skipped_lines": problems}
        if against is not None and not interleaved:
            raise ValueError(f"{path}: --against pairs round i of two modes, and this call is not interleaved")
        if against is not None and against not in scenario["modes"]:
            raise ValueError(f"{path}: no cell {scen}/{against} to compare {scen}/{mode} against")
        for c in CLASSES:
            if alone_med[c] is None:
                raise ValueError(f"{rpath}: no alone runs of {models[c]} to normalize {scen}/{mode} to")
            got = [(i, rates.get(f"{scen}/{mode}/{i}/{c}")) for i in idx]
            # A job that printed nothing counts 0, as memory.sh's summary counts it.
            norm = [(r or 0.0) / alone_med[c] for _, r in got]
            values[c] += norm
            for position, v in enumerate(norm, 1):
                by_round[c].setdefault(position, []).append(v)
            entry[c] = statistics.median(norm) if norm else None
            entry[c + "_runs"] = norm  # in round order: the per-run tables of docs/results
            entry[c + "_alone_it_per_s"] = alone_med[c]
            if interleaved:
                # In round order beside _runs; null for a round without its own alone run.
                entry[c + "_paired_runs"] = [(r or 0.0) / alone[c][i] if alone[c].get(i) else None for i, r in got]
                pv = [x for x in entry[c + "_paired_runs"] if x is not None]
                paired[c] += pv
                entry[c + "_paired"] = statistics.median(pv) if pv else None
            if against is not None:
                # Both runs of a round share the machine's state at that time, and the alone
                # baseline cancels: r / q is the one mode's rate over the other's.
                vs = [(r or 0.0) / q for i, r in got if (q := rates.get(f"{scen}/{against}/{i}/{c}"))]
                versus[c] += vs
                entry[c + "_against"] = statistics.median(vs) if vs else None
        per_call.append(entry)
        sources.append(summary)
    if not values["production"]:
        raise ValueError(f"{cell}: the calls hold no runs of it")
    all_paired = all(e["order"] == "interleaved" for e in per_call)
    # The knobs every call shares describe the cell; with --mixed, the ones that differ are named.
    shared = {k: v for k, v in all_knobs[0].items() if all(k in kn and kn[k] == v for kn in all_knobs)}
    differing = sorted(set().union(*all_knobs) - shared.keys())
    cards = {e["gpu"] for e in per_call if e["gpu"]}
    out = {"runs": len(values["production"]), "calls": per_call, **shared,
           "gpus_named": len(cards), "calls_naming_no_gpu": sum(1 for e in per_call if not e["gpu"]),
           **({"alone_from_window": alone_from_window} if alone_from_window > 1 else {}),
           **({"mixed_knobs": differing} if differing else {})}
    for c in CLASSES:
        v = values[c]
        out[c] = statistics.median(v)
        out[c + "_spread"] = [min(v), max(v)]
        out[c + "_ci"] = median_ci(v)
        # The runs' standard deviation: what sizes the next measurement (runs needed to tell a
        # difference d at one-sided 5% with 80% power: about (2.5 * sd / d) ** 2).
        out[c + "_sd"] = statistics.stdev(v) if len(v) > 1 else None
        pv = paired[c] if all_paired else []
        out[c + "_paired"] = statistics.median(pv) if pv else None
        out[c + "_paired_spread"] = [min(pv), max(pv)] if pv else None
        out[c + "_paired_ci"] = median_ci(pv) if pv else None
    if with_by_round:
        out["by_round"] = {c: [{"position": i, "runs": len(v), "median": statistics.median(v),
                                "spread": [min(v), max(v)]} for i, v in sorted(by_round[c].items())]
                           for c in CLASSES}
    if with_host_speed:
        out["by_host_speed"] = by_host_speed(per_call)
    if against is not None:
        if not versus["production"]:
            raise ValueError(f"{cell}: no round holds runs of both {cell_mode} and {against}")
        out["against"] = {"mode": against}
        for c in CLASSES:
            vs = versus[c]
            out["against"] |= {c: statistics.median(vs), c + "_spread": [min(vs), max(vs)], c + "_rounds": len(vs),
                               **{c + "_" + k: v for k, v in sign_test(vs).items()}}
    devices = sorted({s["device"] for s in sources})
    drivers = sorted({s["driver"] for s in sources})
    return {"device": devices[0] if len(devices) == 1 else devices,
            "driver": drivers[0] if len(drivers) == 1 else drivers,
            "date": max(s["date"] for s in sources), "ratio": sources[0].get("ratio"),
            "scenarios": {scen: {k: scenario0.get(k) for k in ("production_model", "opportunistic_model",
                                                                "budget_mib", "footprint_mib")}
                          | {"modes": {cell_mode: out}}}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cell", help="SCENARIO/MODE, e.g. low/tgs")
    ap.add_argument("calls", nargs="+", help="memory.sh summaries (gpu-memory.json) of the calls to pool; "
                    "CALL.json:MODE takes that call's runs of MODE for the cell")
    ap.add_argument("--json", help="write the pooled cell here, in the summary's shape")
    ap.add_argument("--mixed", action="store_true",
                    help="pool calls whose tgs-node flags or budget differ (refused otherwise)")
    ap.add_argument("--against", metavar="MODE",
                    help="also compare the cell round by round with MODE of the same calls (interleaved calls: "
                    "run i of the cell over run i of MODE, which cancels the alone baseline), with a sign test")
    ap.add_argument("--by-round", action="store_true",
                    help="also pool the runs by their place in their call (run 1 of every call, run 2, ...), "
                    "normalized to their call's alone runs: a call with one alone run at its start puts any "
                    "drift of the machine during the call into its later runs")
    ap.add_argument("--by-host-speed", action="store_true",
                    help="also list the calls by the production job's alone rate and give the rank correlation "
                    "of that rate with each call's median share, over the calls")
    ap.add_argument("--alone-from-window", type=int, default=1, metavar="K",
                    help="normalize to the alone runs' windows K.. only (default 1: all, as memory.sh's "
                    "summary does); shows how much a cell's number rests on alone runs that were still "
                    "speeding up in their first windows")
    args = ap.parse_args(argv[1:])
    try:
        pooled = pool(args.cell, args.calls, mixed=args.mixed, alone_from_window=args.alone_from_window,
                      against=args.against, with_by_round=args.by_round, with_host_speed=args.by_host_speed)
    except (OSError, ValueError, KeyError) as e:
        print(f"pool_memory: {e}", file=sys.stderr)
        return 2
    pooled["command"] = "python3 bench/gpu/pool_memory.py " + " ".join(
        shlex.quote(a) for a in ([args.cell] + args.calls + (["--json", args.json] if args.json else [])
                                 + (["--mixed"] if args.mixed else [])
                                 + ([f"--alone-from-window={args.alone_from_window}"]
                                    if args.alone_from_window > 1 else [])
                                 + ([f"--against={args.against}"] if args.against else [])
                                 + (["--by-round"] if args.by_round else [])
                                 + (["--by-host-speed"] if args.by_host_speed else [])))
    scen, mode = args.cell.split("/")
    cell = pooled["scenarios"][scen]["modes"][mode]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(pooled, f, indent=2)
            f.write("\n")

    def fx(x):
        return "-" if x is None else f"{x:.2f}"

    def ci(c):
        return "-" if not c else f"{c['low']:.2f}-{c['high']:.2f} ({c['coverage'] * 100:.0f}%)"
    cards = f" on {cell['gpus_named']} GPUs" if cell["gpus_named"] else ""
    if cell["calls_naming_no_gpu"]:
        cards += f" ({cell['calls_naming_no_gpu']} of them name no GPU)"
    print(f"{args.cell}: {cell['runs']} runs in {len(cell['calls'])} calls{cards}"
          + (f", alone runs from window {args.alone_from_window} on" if args.alone_from_window > 1 else ""))
    print(f"  {'call':44} {'runs':>4} {'production':>10} {'paired':>7} {'opportunistic':>13} {'paired':>7}")
    for e in cell["calls"]:
        name = e["file"] + (":" + e["mode"] if "mode" in e else "") + (f" [GPU {e['gpu']}]" if e["gpu"] else "")
        print(f"  {name:44} {e['runs']:>4} {fx(e['production']):>10} {fx(e.get('production_paired')):>7} "
              f"{fx(e['opportunistic']):>13} {fx(e.get('opportunistic_paired')):>7}")
        print("    runs (production / opportunistic): "
              + ", ".join(f"{fx(p)} / {fx(o)}" for p, o in zip(e["production_runs"], e["opportunistic_runs"])))
    for c in CLASSES:
        print(f"  {c:13} pooled median {fx(cell[c])} (min-max {fx(cell[c + '_spread'][0])}-"
              f"{fx(cell[c + '_spread'][1])}, median CI {ci(cell[c + '_ci'])}, sd {fx(cell[c + '_sd'])}); "
              f"paired {fx(cell[c + '_paired'])} (CI {ci(cell[c + '_paired_ci'])})")
    if "by_round" in cell:
        for c in CLASSES:
            print(f"  {c:13} by place in the call: " + ", ".join(
                f"run {r['position']} {fx(r['median'])} ({r['runs']} runs, {fx(r['spread'][0])}-{fx(r['spread'][1])})"
                for r in cell["by_round"][c]))
    if "by_host_speed" in cell:
        h = cell["by_host_speed"]
        print("  by the production job's alone rate (it/s), slowest first:")
        for r in h["calls"]:
            name = r["file"] + (":" + r["mode"] if "mode" in r else "")
            print(f"    {r['production_alone_it_per_s']:7.1f}  {name:52} {fx(r['production']):>10} "
                  f"{fx(r['opportunistic']):>13}")
        for c in CLASSES:
            rho, p = h[c + "_spearman"], h[c + "_permutation_p"]
            print(f"  {c:13} against the alone rate over {h[c + '_ranked_calls']} calls: Spearman "
                  + ("-" if rho is None else f"{rho:+.2f}, permutation p {p:.4f}"))
    if "against" in cell:
        a = cell["against"]
        print(f"  round by round over {a['mode']}:")
        for c in CLASSES:
            p = "-" if a[c + "_sign_p"] is None else f"{a[c + '_sign_p']:.2f}"
            print(f"  {c:13} median {fx(a[c])} (min-max {fx(a[c + '_spread'][0])}-{fx(a[c + '_spread'][1])}, "
                  f"{a[c + '_rounds']} rounds, {a[c + '_above']} of {a[c + '_untied']} above 1, sign test p {p})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
