# SPDX-License-Identifier: Apache-2.0
"""Merges summaries of several rate_control.sh calls into one table (docs/results/gpu-rate-control.json).

Each argument is SUMMARY.json, optionally followed by ':' and a comma-separated list of
PAIR/MODE cells to take from it (default: all of its cells); a cell named by a later argument
replaces the earlier one. Every cell keeps the file and command it came from, so each number
can be traced to the call that measured it (one device call cannot hold every mode of every pair
with several runs).

    python3 bench/gpu/merge_rate_control.py OUT.json high.json high-released.json:high/tgs
"""
import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_path, specs = argv[1], argv[2:]
    merged = {"pairs": {}, "sources": []}
    for spec in specs:
        path, _, cells = spec.partition(":")
        with open(path) as f:
            summary = json.load(f)
        wanted = {tuple(c.split("/")) for c in cells.split(",")} if cells else None
        source = {"file": path.rsplit("/", 1)[-1], "command": summary["command"], "date": summary["date"],
                  "device": summary["device"], "driver": summary["driver"]}
        merged["sources"].append(dict(source, cells=sorted("/".join(c) for c in wanted) if wanted else "all"))
        for pair, entry in summary["pairs"].items():
            cell_modes = dict(entry.get("modes", {}))
            if entry.get("interposer_overhead") is not None:
                cell_modes["interposer"] = {"interposer_overhead": entry["interposer_overhead"],
                                            "interposer_overhead_spread": entry.get("interposer_overhead_spread"),
                                            "runs": entry.get("interposer_runs")}
            for mode, cell in cell_modes.items():
                if wanted is not None and (pair, mode) not in wanted:
                    continue
                cell = dict(cell, source=source["file"])
                # Summaries from before rate_control.sh had RUNS hold one run per mode.
                cell.setdefault("runs", summary.get("runs", 1))
                cell["runs"] = cell["runs"] if cell["runs"] is not None else summary.get("runs", 1)
                merged["pairs"].setdefault(pair, {})[mode] = cell
    devices = {s["device"] for s in merged["sources"]}
    merged["device"] = devices.pop() if len(devices) == 1 else sorted(devices)
    merged["driver"] = merged["sources"][-1]["driver"]
    merged["date"] = max(s["date"] for s in merged["sources"])
    merged["command"] = "python3 bench/gpu/merge_rate_control.py " + " ".join([out_path] + specs)
    high_interposer = merged["pairs"].get("high", {}).get("interposer")
    merged["interposer_overhead"] = high_interposer["interposer_overhead"] if high_interposer else None
    with open(out_path, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    for pair, modes in sorted(merged["pairs"].items()):
        for mode, cell in sorted(modes.items()):
            if mode == "interposer":
                print(f"{pair:5} interposer overhead {cell['interposer_overhead']:.3f} ({cell['runs']} runs, {cell['source']})")
                continue
            p, o = cell.get("production"), cell.get("opportunistic")
            fmt = lambda x: "-" if x is None else f"{x:.3f}"
            print(f"{pair:5} {mode:7} production {fmt(p)} opportunistic {fmt(o)} ({cell.get('runs')} runs, {cell['source']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
