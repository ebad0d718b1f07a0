# SPDX-License-Identifier: Apache-2.0
"""Merges summaries of several memory.sh calls into one table (docs/results/gpu-memory.json).

One device call cannot hold every mode of every scenario with several runs, and the calls differ
in their knobs (the production job's batch, the budget ratio, tgs-node's flags). Each argument
after OUT.json is

    SUMMARY.json:CELL[,CELL...]      CELL = SCENARIO/MODE[=NAME/MODE_NAME]

taking SCENARIO/MODE of that summary and filing it as NAME/MODE_NAME (default: the same names).
Every cell keeps its file, the call's command and tgs-node flags, the budget and footprints of
its scenario and its own normalization (each call's cells are normalized to that call's alone
runs), so each number can be traced to the call that measured it. A cell named twice is an
error.

    python3 bench/gpu/merge_memory.py OUT.json a.json:low/tgs=resnet50-b32/tgs-sync-wait b.json:high/alone
"""
import json
import re
import sys

from memory_call import command_word

CELL_FIELDS = ("runs", "production", "production_spread", "production_it_per_s", "opportunistic",
               "opportunistic_spread", "opportunistic_it_per_s", "production_missing_runs",
               "opportunistic_missing_runs", "production_ready_late_max_s", "opportunistic_ready_late_max_s",
               # A cell pool_memory.py pooled over calls: the same-round normalization, the
               # median's order-statistic intervals and the calls' own medians.
               *(c + k for c in ("production", "opportunistic")
                 for k in ("_paired", "_paired_spread", "_ci", "_paired_ci", "_sd")), "calls")


def node_flags(command: str) -> str:
    """The TGS_NODE_FLAGS of a memory.sh command line ('' when it had none)."""
    return command_word(command, "TGS_NODE_FLAGS") or ""


def parse_cell(text: str):
    m = re.fullmatch(r"([\w.-]+)/([\w.-]+)(?:=([\w.-]+)/([\w.-]+))?", text)
    if not m:
        raise ValueError(f"bad cell '{text}' (want SCENARIO/MODE or SCENARIO/MODE=NAME/MODE_NAME)")
    scen, mode, name, mode_name = m.groups()
    return (scen, mode), (name or scen, mode_name or mode)


def merge(out_path: str, specs: list[str]) -> dict:
    merged = {"scenarios": {}, "sources": []}
    for spec in specs:
        path, sep, cells = spec.partition(":")
        if not sep or not cells:
            raise ValueError(f"'{spec}': name the cells to take (SUMMARY.json:SCENARIO/MODE,...)")
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
        flags = node_flags(summary["command"])
        source = {"file": path.rsplit("/", 1)[-1], "command": summary["command"], "date": summary["date"],
                  "device": summary["device"], "driver": summary["driver"], "cells": []}
        for text in cells.split(","):
            (scen, mode), (name, mode_name) = parse_cell(text)
            scenario = summary.get("scenarios", {}).get(scen)
            if scenario is None or mode not in scenario.get("modes", {}):
                raise ValueError(f"{path}: no cell {scen}/{mode}")
            target = merged["scenarios"].setdefault(name, {"modes": {}})
            if mode_name in target["modes"]:
                raise ValueError(f"{name}/{mode_name} is named twice (second time from {path})")
            cell = {k: scenario["modes"][mode][k] for k in CELL_FIELDS if k in scenario["modes"][mode]}
            # A TGS_VARIANTS mode carries its own flags; every other cell has the call's.
            cell.update(source=source["file"], scenario_in_source=scen,
                        tgs_node_flags=scenario["modes"][mode].get("tgs_node_flags", flags),
                        budget_mib=scenario.get("budget_mib"), ratio=summary.get("ratio"),
                        footprint_mib=scenario.get("footprint_mib"),
                        production_model=scenario.get("production_model"),
                        opportunistic_model=scenario.get("opportunistic_model"))
            target["modes"][mode_name] = cell
            source["cells"].append(f"{scen}/{mode}={name}/{mode_name}")
        merged["sources"].append(source)
    devices = {s["device"] for s in merged["sources"]}
    merged["device"] = devices.pop() if len(devices) == 1 else sorted(devices)
    drivers = {s["driver"] for s in merged["sources"]}
    merged["driver"] = drivers.pop() if len(drivers) == 1 else sorted(drivers)
    merged["date"] = max(s["date"] for s in merged["sources"])
    merged["command"] = "python3 bench/gpu/merge_memory.py " + " ".join([out_path] + specs)
    merged["note"] = ("production / opportunistic: medians over runs of each run's median window, normalized to "
                      "the alone runs of the cell's own call (a cell pooled over calls, pool_memory.py: each run to its "
                      "own call's); *_spread: [min, max] over runs")
    return {k: merged[k] for k in ("device", "driver", "date", "command", "note", "scenarios", "sources")}


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        merged = merge(argv[1], argv[2:])
    except (OSError, ValueError, KeyError) as e:
        print(f"merge_memory: {e}", file=sys.stderr)
        return 2
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"
    for name, scenario in merged["scenarios"].items():
        for mode, cell in scenario["modes"].items():
            print(f"{name:28} {mode:22} production {fmt(cell.get('production')):>5} "
                  f"opportunistic {fmt(cell.get('opportunistic')):>5} ({cell.get('runs')} runs, {cell['source']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
