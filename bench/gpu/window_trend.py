#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How often a production job was still speeding up (or slowing down) across a run's windows.

memory.sh measures an alone run WARMUP_S after the job's start, a tgs run WARMUP_S + TGS_SETTLE_S
after it. A job that still speeds up after WARMUP_S makes the alone baseline low and every shared
mode look better. This script reads memory.sh runs files and, for the production model's runs,
compares each run's last window with its first (last / first), in three groups:

  first alone   the first alone run of its model in a call (the machine's first run of that model)
  later alone   the other alone runs of the production models
  shared        production jobs beside a co-runner (labels SCENARIO/MODE/INDEX/production)

and reports per group the runs, the median of last / first and how many rose or fell by more
than --threshold (default 0.10). If alone runs rise more often than shared ones fall, alone
baselines are measured too early (memory.sh ALONE_SETTLE_S; pool_memory.py --alone-from-window).

    python3 bench/gpu/window_trend.py RUNS.jsonl [RUNS.jsonl ...] [--threshold 0.1] [--json OUT.json]
"""
import argparse
import json
import statistics
import sys

from memory_call import read_result_lines, window_rates

GROUPS = ("first alone", "later alone", "shared")


def trends(paths: list[str], opportunistic_model: str = "dlrm") -> dict:
    """group -> list of last / first window ratios of the production models' runs."""
    out = {g: [] for g in GROUPS}
    for path in paths:
        records, problems = read_result_lines(path)
        for p in problems:
            print(f"window_trend: {p} (skipped)", file=sys.stderr)
        seen = set()
        for n, r in records:
            if not isinstance(r, dict) or not isinstance(r.get("label"), str):
                continue
            w, label, model = window_rates(r), r["label"], r.get("model")
            if w is None or not isinstance(model, str) or model == opportunistic_model or len(w) < 2 or w[0] <= 0:
                continue  # one window has no trend; a first window of 0 has no ratio
            if label.startswith("alone/"):
                out["later alone" if model in seen else "first alone"].append(w[-1] / w[0])
                seen.add(model)
            elif label.endswith("/production"):
                out["shared"].append(w[-1] / w[0])
    return out


def summarize(ratios: dict, threshold: float) -> dict:
    return {g: {"runs": len(v), "median": statistics.median(v) if v else None,
                "rose": sum(x > 1 + threshold for x in v), "fell": sum(x < 1 - threshold for x in v)}
            for g, v in ratios.items()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="memory.sh runs files (memory-runs.jsonl, docs/results/*-runs.jsonl)")
    ap.add_argument("--threshold", type=float, default=0.10, help="a rise or fall counts beyond this fraction")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv[1:])
    if not 0 < args.threshold < 1:
        print(f"window_trend: --threshold must be in (0, 1), got {args.threshold}", file=sys.stderr)
        return 2
    try:
        summary = summarize(trends(args.runs), args.threshold)
    except OSError as e:
        print(f"window_trend: {e}", file=sys.stderr)
        return 2
    pct = round(args.threshold * 100)
    print(f"{'group':12} {'runs':>5} {'last/first':>10} {f'rose >{pct}%':>12} {f'fell >{pct}%':>12}")
    for g, s in summary.items():
        med = "-" if s["median"] is None else f"{s['median']:.3f}"
        share = (lambda k: f"{s[k]} ({100 * s[k] / s['runs']:.0f}%)") if s["runs"] else (lambda k: "-")
        print(f"{g:12} {s['runs']:>5} {med:>10} {share('rose'):>12} {share('fell'):>12}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"threshold": args.threshold, "files": len(args.runs), "groups": summary}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
