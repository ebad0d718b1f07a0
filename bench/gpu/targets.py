# SPDX-License-Identifier: Apache-2.0
"""Sets pooled memory cells against the issue's two targets, one line per cell.

The memory scenarios ask that under tgs the production job keeps at least 0.95 of its alone
throughput and the opportunistic job at least 0.5, at the median over runs. Each setting's
evidence is a pool of calls (bench/gpu/pool_memory.py --json), filed in docs/results under its
own name; this reads any number of them and says, for every cell they hold, whether its pooled
medians meet each target, compared unrounded (0.9496 misses 0.95 even though it prints as
0.95), with each median's distribution-free interval, and how many of the cell's runs met both
targets in the run itself (a run's production and opportunistic shares come from the same run).

    python3 bench/gpu/targets.py POOLED.json [POOLED.json ...] [--production 0.95]
                                 [--opportunistic 0.5] [--markdown | --json]

Columns:
  file, cell        the pooled file and its SCENARIO/MODE (pool_memory.py's cell)
  production_model  the scenario's production job
  runs, calls, gpus runs and calls pooled, and how many distinct GPUs the calls name (a call
                    older than memory.sh's GPU serial names none: "+N unnamed"; "-": a pool
                    older than that count)
  production, opportunistic
                    the pooled medians (each run normalized to its call's alone runs) and their
                    intervals, low-high
  met               P and/or O for the targets each median meets; "-": neither
  both_in_run       runs that met both targets in the run itself, of the runs with both shares
                    ("-": a pool older than pool_memory.py's per-call runs)
  setting           what the cell ran: the MPS cap and priority, tgs-node's rate flags (tgs modes),
                    or "mixed: ..."
                    naming the knobs that differ between its calls (pool_memory.py --mixed)

--json prints one object per cell, with the unrounded values. A file that is not a
pool_memory.py --json file (no cell with calls in it) is refused with its name.
"""
import argparse
import json
import os
import sys


def die(msg: str) -> None:
    print(f"targets.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_pool(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        die(f"{path}: line {e.lineno}: not JSON: {e.msg}")
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), dict):
        die(f"{path}: no 'scenarios' object: not a pool_memory.py --json file")
    return data


def setting_of(mode: str, cell: dict) -> str:
    if cell.get("mixed_knobs"):
        return "mixed: " + ", ".join(str(k) for k in cell["mixed_knobs"])
    words = []
    if cell.get("MPS") == "1":
        words.append(f"MPS cap {cell.get('MPS_OPP_PCT', '100')}%")
        if cell.get("MPS_OPP_PRIORITY", "0") != "0":
            words.append(f"priority {cell['MPS_OPP_PRIORITY']}")
    if cell.get("tgs_node_flags") and mode.startswith("tgs"):  # the rate flags act on tgs modes only
        words.append(str(cell["tgs_node_flags"]))
    return "; ".join(words) or "-"


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_list(where: str, call: dict, key: str) -> list:
    runs = call.get(key) or []
    if not isinstance(runs, list) or not all(v is None or is_number(v) for v in runs):
        die(f"{where}: '{key}' is not a list of numbers and nulls")
    return runs


def interval(where: str, cell: dict, key: str):
    ci = cell.get(key)
    if ci is None:
        return None
    if not isinstance(ci, dict) or not is_number(ci.get("low")) or not is_number(ci.get("high")):
        die(f"{where}: '{key}' is not an interval with a number 'low' and 'high'")
    return ci


def runs_meeting_both(where: str, cell: dict, p_target: float, o_target: float) -> tuple:
    """(runs that met both targets, runs with both shares) over the cell's calls."""
    met = counted = 0
    if not any(isinstance(c, dict) and "production_runs" in c for c in cell["calls"]):
        return None, None  # pooled before pool_memory.py kept each call's runs
    for i, call in enumerate(cell["calls"], 1):
        if not isinstance(call, dict):
            die(f"{where}: call {i} is not an object")
        production = run_list(f"{where}: call {i}", call, "production_runs")
        opportunistic = run_list(f"{where}: call {i}", call, "opportunistic_runs")
        for p, o in zip(production, opportunistic):
            if p is None or o is None:
                continue
            counted += 1
            met += p >= p_target and o >= o_target
    return met, counted


def cells(path: str, data: dict, p_target: float, o_target: float) -> list:
    out = []
    for scenario, scen in sorted(data["scenarios"].items()):
        if not isinstance(scen, dict) or not isinstance(scen.get("modes", {}), dict):
            die(f"{path}: scenario '{scenario}' has no 'modes' object")
        for mode, cell in sorted(scen.get("modes", {}).items()):
            if not isinstance(cell, dict) or not isinstance(cell.get("calls"), list):
                continue
            where = f"{path}: {scenario}/{mode}"
            for key in ("production", "opportunistic", "runs"):
                if not is_number(cell.get(key)):
                    die(f"{where}: no number '{key}'")
            for key in ("gpus_named", "calls_naming_no_gpu"):
                if cell.get(key) is not None and not isinstance(cell[key], int):
                    die(f"{where}: '{key}' is not a whole number")
            if not isinstance(cell.get("mixed_knobs", []), list):
                die(f"{where}: 'mixed_knobs' is not a list")
            both, counted = runs_meeting_both(where, cell, p_target, o_target)
            out.append({
                "file": os.path.basename(path),
                "cell": f"{scenario}/{mode}",
                "production_model": scen.get("production_model"),
                "device": data.get("device"),
                "runs": cell["runs"],
                "calls": len(cell["calls"]),
                "gpus_named": cell.get("gpus_named"),
                "calls_naming_no_gpu": cell.get("calls_naming_no_gpu"),
                "production": cell["production"],
                "production_ci": interval(where, cell, "production_ci"),
                "opportunistic": cell["opportunistic"],
                "opportunistic_ci": interval(where, cell, "opportunistic_ci"),
                "production_met": cell["production"] >= p_target,
                "opportunistic_met": cell["opportunistic"] >= o_target,
                "runs_meeting_both": both,
                "runs_with_both_shares": counted,
                "setting": setting_of(mode, cell),
            })
    if not out:
        die(f"{path}: no cell with pooled calls: not a pool_memory.py --json file")
    return out


def shown(median: float, ci) -> str:
    if not ci:
        return f"{median:.2f}"
    return f"{median:.2f} ({ci['low']:.2f}-{ci['high']:.2f})"


def row(e: dict) -> list:
    if e["gpus_named"] is None:
        gpus = "-"  # pooled before pool_memory.py counted the calls' GPUs
    else:
        gpus = str(e["gpus_named"]) + (f" +{e['calls_naming_no_gpu']} unnamed" if e["calls_naming_no_gpu"] else "")
    both = "-" if e["runs_meeting_both"] is None else f"{e['runs_meeting_both']}/{e['runs_with_both_shares']}"
    met = "".join(m for m, ok in (("P", e["production_met"]), ("O", e["opportunistic_met"])) if ok) or "-"
    return [e["file"], e["cell"], str(e["production_model"] or "?"), str(e["runs"]), str(e["calls"]), gpus,
            shown(e["production"], e["production_ci"]), shown(e["opportunistic"], e["opportunistic_ci"]),
            met, both, e["setting"]]


HEADER = ["file", "cell", "production_model", "runs", "calls", "gpus", "production", "opportunistic", "met",
          "both_in_run", "setting"]


def main() -> None:
    parser = argparse.ArgumentParser(description="pooled memory cells against the production and "
                                                 "opportunistic targets")
    parser.add_argument("files", nargs="+", help="pool_memory.py --json files")
    parser.add_argument("--production", type=float, default=0.95, help="the production target (default 0.95)")
    parser.add_argument("--opportunistic", type=float, default=0.5,
                        help="the opportunistic target (default 0.5)")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="a markdown table")
    form.add_argument("--json", action="store_true", help="one JSON object per cell, unrounded")
    args = parser.parse_args()
    for name in ("production", "opportunistic"):
        v = getattr(args, name)
        if not 0 < v <= 10:
            parser.error(f"--{name} must be a share above 0 (got {v})")

    table = [e for path in args.files for e in cells(path, read_pool(path), args.production, args.opportunistic)]
    if args.json:
        for e in table:
            print(json.dumps(e))
        return
    rows = [row(e) for e in table]
    if args.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(r[i]) for r in [HEADER] + rows) for i in range(len(HEADER))]
        for r in [HEADER] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"targets: production >= {args.production:g}, opportunistic >= {args.opportunistic:g} "
          f"(pooled medians, unrounded); {sum(e['production_met'] and e['opportunistic_met'] for e in table)} "
          f"of {len(table)} cells meet both")


if __name__ == "__main__":
    main()
