# SPDX-License-Identifier: Apache-2.0
"""Checks whether the rate the controller acts on tracks what the production job loses.

The controller sees blocks per second, not iterations: it compares the production job's rate (or,
with --sync-wait-correction, that rate corrected for the job's own host-side noise) with R, and
throttles the opportunistic job when it falls below the dead band. The targets are about the job's
iterations. This script puts the two side by side, run by run, for the tgs runs of memory.sh calls:

  job        the production job's iterations per second as a share of alone: normalized to its
             call's alone median (memory.sh's summary), and "paired" to the alone run of the same
             round where the call made one (ORDER=interleaved with ALONE_RUNS=RUNS)
  launched   the production job's launched blocks/s over R, median over the run's control samples
             (status_phases.py --control's prod_over_R)
  corrected  the rate the controller compared with its band over R (sample_over_R: with the
             sync-wait correction the corrected rate; null in samples from before tgs-node
             reported it)
  host       the production job's host-side speed per block in control against profiling
             (status_phases.py --control's host_speed: below 1, each block took more host time
             with the opportunistic job running); not a rate the controller acts on, but the part
             of a slowdown that the sync-wait correction sets aside as the job's own noise

Per signal, over the runs that have it: Spearman's rank correlation with the job's share (ties
get their mean rank) and a two-sided permutation p-value (10,000 shuffles with a fixed seed, so the
same files give the same p); the median absolute difference; and, against the target (0.95 by
default), the runs where the signal missed a loss (job below the target, signal at or above it)
and the runs where it raised a false alarm (job at or above, signal below). The job's share is
itself a comparison with other runs, so machine drift between runs weakens every correlation; the
signals compare the job with its own first minute in the same run.

    python3 bench/gpu/signal_check.py SCENARIO/MODE CALL.json[:MODE] ... [--target 0.95] [--json OUT.json] [--mixed]

CALL.json is a memory.sh summary; its runs are read as pool_memory.py reads them, and its status
samples from CALL-status.jsonl beside it (the name docs/results gives them) or status-samples.jsonl
in the same folder (a call's $OUT). CALL.json:MODE takes that call's runs of MODE. The calls must
name the same production model, and unless --mixed is given the same tgs-node flags and knobs.
"""
import argparse
import json
import os
import shlex
import statistics
import sys

import pool_memory
import status_phases
from memory_call import call_file
from rank_stats import spearman

SIGNALS = {"launched": "prod_over_R", "corrected": "sample_over_R", "host": "host_speed"}


def status_path(summary_path: str) -> str:
    return call_file(summary_path, "-status.jsonl", "status-samples.jsonl")


def check(cell: str, calls: list[str], target: float = 0.95, mixed: bool = False) -> dict:
    if not 0 < target <= 2:
        raise ValueError(f"--target must be in (0, 2] (got {target})")
    pooled = pool_memory.pool(cell, calls, mixed=mixed)  # refuses calls that are not one cell
    scen, cell_mode = cell.split("/")
    per_call = pooled["scenarios"][scen]["modes"][cell_mode]["calls"]
    runs = []
    for arg, entry in zip(calls, per_call):
        path, own_mode = pool_memory.split_call(arg)
        mode = own_mode or cell_mode
        spath = status_path(path)
        control = {e["run"]: e for e in status_phases.control(spath)}
        paired = entry.get("production_paired_runs") or [None] * len(entry["rounds"])
        for i, share, pshare in zip(entry["rounds"], entry["production_runs"], paired):
            label = f"{scen}/{mode}/{i}"
            c = control.get(label, {})
            runs.append({"call": entry["file"], "run": label, "gpu": entry["gpu"], "job": share, "job_paired": pshare,
                         **{name: c.get(key) for name, key in SIGNALS.items()},
                         "status_file": os.path.basename(spath)})
    signals = {}
    for name in SIGNALS:
        have = [r for r in runs if r[name] is not None]
        out = {"runs": len(have)}
        for basis in ("job", "job_paired"):
            pairs = [(r[basis], r[name]) for r in have if r[basis] is not None]
            rho, p = spearman([j for j, _ in pairs], [s for _, s in pairs]) if pairs else (None, None)
            out[basis] = {
                "runs": len(pairs), "spearman": rho, "permutation_p": p,
                "median_abs_difference": statistics.median(abs(j - s) for j, s in pairs) if pairs else None,
                "missed_loss": sum(j < target <= s for j, s in pairs),
                "false_alarm": sum(s < target <= j for j, s in pairs),
                "job_below_target": sum(j < target for j, _ in pairs),
            }
        signals[name] = out
    return {"cell": cell, "target": target, "model": pooled["scenarios"][scen]["production_model"],
            "calls": len(calls), "gpus_named": pooled["scenarios"][scen]["modes"][cell_mode]["gpus_named"],
            "runs": runs, "signals": signals}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cell", help="SCENARIO/MODE, e.g. low/tgs")
    ap.add_argument("calls", nargs="+", help="memory.sh summaries; CALL.json:MODE takes that call's runs of MODE")
    ap.add_argument("--target", type=float, default=0.95,
                    help="the production target a signal is checked against (default 0.95)")
    ap.add_argument("--json", help="write the runs and the per-signal numbers here")
    ap.add_argument("--mixed", action="store_true", help="check calls whose tgs-node flags or knobs differ")
    args = ap.parse_args(argv[1:])
    try:
        out = check(args.cell, args.calls, target=args.target, mixed=args.mixed)
    except (OSError, ValueError, KeyError) as e:
        print(f"signal_check: {e}", file=sys.stderr)
        return 2
    out["command"] = "python3 bench/gpu/signal_check.py " + " ".join(
        shlex.quote(a) for a in [args.cell, *args.calls] + (["--target", str(args.target)] if args.target != 0.95 else [])
        + (["--json", args.json] if args.json else []) + (["--mixed"] if args.mixed else []))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
            f.write("\n")

    def fx(x, spec=".2f"):
        return "-" if x is None else format(x, spec)
    print(f"{args.cell} ({out['model']}): {len(out['runs'])} runs in {out['calls']} calls on {out['gpus_named']} GPUs "
          f"named; target {args.target}")
    print(f"  {'call':44} {'run':14} {'job':>5} {'paired':>6} {'launched':>8} {'corrected':>9} {'host':>6}")
    for r in out["runs"]:
        print(f"  {r['call']:44} {r['run']:14} {fx(r['job']):>5} {fx(r['job_paired']):>6} "
              f"{fx(r['launched'], '.3f'):>8} {fx(r['corrected'], '.3f'):>9} {fx(r['host'], '.3f'):>6}")
    for name, s in out["signals"].items():
        for basis, label in (("job", "job"), ("job_paired", "paired job")):
            b = s[basis]
            if not b["runs"]:
                continue
            print(f"  {name:9} against the {label:10}: {b['runs']:>2} runs, Spearman {fx(b['spearman'], '+.2f')} "
                  f"(permutation p {fx(b['permutation_p'], '.3f')}), median |difference| "
                  f"{fx(b['median_abs_difference'], '.3f')}; job below {args.target} in {b['job_below_target']}: "
                  f"signal missed {b['missed_loss']}, false alarms {b['false_alarm']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
