#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The simulator's tables from real-GPU measurements: measured pairs, alone rates and profile rows.

Reads the result summaries of docs/results/*.json (cells: a pair, a sharing mode, its device and
each job's throughput over its alone runs) and the profile rows of `bench/gpu/harness.py profile`
(profile.json), and writes what tgs-sim reads:

  pairs      the cells a simulator policy can reproduce, as sim/data/measured_pairs.csv rows;
             every other cell is listed on stderr (or --skipped FILE) with the reason
  alone      each model's alone rate per GPU (median over the cells' alone runs): the measured
             iteration times of sim/data/models.csv
  repeats    the settings measured in more than one call, their spread, and the noise of one
             cell: the share of cells a perfect prediction of each setting would put within ±0.10;
             --predicted TABLE [--left-out]: how far tgs-sim's predictions follow the repeats
  jitter     each model's window-to-window spread alone, from the raw runs at a commit
  models     the H100/H200 rows of sim/data/models.csv: each profiled job's row from its profile
             (sim/data/gpu_profiles.csv), the others from the alone rates and stated rules
  profile    profile.json rows (or a profile table) as models.csv rows, each field marked measured;
             --update TABLE records them in the profile table instead
  facts      sim/data/job_facts.csv: what tgs-node measured of each job that its mechanism choice
             reads (docs/results/mechanism-choice.json), each value with where it came from

Standard library only. `python3 sim/scripts/gpu_results.py pairs > sim/data/measured_pairs.csv`
and `gpu_results.py facts > sim/data/job_facts.csv` rebuild the committed tables;
tests/scripts/gpu_results_test.py checks that they do.
"""
import argparse
import csv
import io
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOPICS = ("rate-control", "convergence", "memory", "sharing-targets", "mps", "idle-harvest", "pair-predictions",
          "priority-sharing")

# The GPU types of sim/data/gpus.csv, by the name nvidia-smi gives the card.
DEVICES = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA H200": "h200-141gb"}

# The simulator's model names for the jobs the results name (sim/data/models.csv). A name without
# a batch suffix is the batch the paper's A100 rows use (64; BERT-base 32).
MODELS = [
    (r"^ResNet-50 b256$", "resnet50-b256"), (r"^ResNet-50 b128$", "resnet50-b128"),
    (r"^ResNet-50 b64$", "resnet50"), (r"^ResNet-50 b32$", "resnet50-b32"),
    (r"^ShuffleNet v2 b128$", "shufflenet-b128"), (r"^ShuffleNet v2 b64$", "shufflenet"),
    (r"^MobileNet v2 b64$", "mobilenet"), (r"^BERT-base b32( seq 128)?$", "bert-base"),
    (r"^DLRM-like .*uniform lookups$", "dlrm"), (r"^DLRM-like .*power-law lookups", "dlrm-zipf"),
]
# The harness's job names (bench/gpu/scenarios.toml [jobs]) for `profile`.
HARNESS_JOBS = {"mobilenet_v2_b64": "mobilenet", "shufflenet_b64": "shufflenet",
                "resnet50_b256": "resnet50-b256", "shufflenet_b128": "shufflenet-b128",
                "resnet50_b32": "resnet50-b32", "resnet50_b64": "resnet50",
                "resnet50_b128": "resnet50-b128", "bert_base_b32": "bert-base", "dlrm": "dlrm",
                "dlrm_zipf": "dlrm-zipf"}

# The harness profile rows recorded so far (one per job and device); `models` takes their rows
# from here, `profile --update` adds to it. The raw profile.json files are not kept.
PROFILES = os.path.join(REPO, "sim", "data", "gpu_profiles.csv")
PROFILE_COLUMNS = ["job", "device", "driver", "date", "command", "windows", "it_per_s", "kernels_per_s",
                   "blocks_per_s", "utilization", "kernel_busy_fraction", "kernels_per_step", "gaps_per_step",
                   "jitter_p5", "jitter_p50", "jitter_p95", "footprint_bytes", "hot_set_bytes"]
PROFILE_TEXT = ("job", "device", "driver", "date", "command")
# A job whose steps touch less than this share of its footprint reads it sparsely (profile_row).
SPARSE_TOUCH = 0.5
TOLERANCE = 0.10  # the per-cell target of docs/simulator/predictions.md
# Options of a harness call that name the machine it ran on or the call's time budget, not what
# was measured: the recorded command leaves them out (--out names $OUT).
MACHINE_OPTIONS = {"--build": 1, "--no-build": 0, "--max-s": 1, "--free-mib": 1, "--data": 1}


# tgs-node flags that name a setting of today's policies, as tgs-sim's settings (policy.flag).
# Any other flag names an extension that no longer exists, so the cell is not reproducible.
TGS_FLAGS = {"--production-window-ms": "tgs.production-window-ms", "--profile-windows": "tgs.profile-windows",
             "--max-profile-windows": "tgs.max-profile-windows", "--budget-window-ms": None,
             "--fixed-budget-blocks": "token-bucket.budget-blocks"}
MEMORY_FLAGS = ("--memory-policy", "--memory-budget-mib", "--memory-reserve-mib", "--residency-split")

PAIRS_HEADER = ["scenario", "gpu", "production_model", "opportunistic_model", "policy", "memory_policy",
                "budget_gib", "production_idle", "settings", "production", "opportunistic", "runs", "source",
                "production_alone_it_per_s", "opportunistic_alone_it_per_s"]


class ResultsError(Exception):
    """Input that cannot be read: the message names the file and what was wrong."""


def model_name(text):
    """The simulator's name for a results' job description (or a harness job name), or None."""
    if text in HARNESS_JOBS:
        return HARNESS_JOBS[text]
    for pattern, name in MODELS:
        if text and re.search(pattern, text):
            return name
    return None


def median_of(cell, key):
    v = cell.get(key)
    return v.get("median") if isinstance(v, dict) else None


def read_topics(results_dir):
    out = []
    for topic in TOPICS:
        path = os.path.join(results_dir, f"{topic}.json")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ResultsError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
        if not isinstance(data.get("cells"), list):
            raise ResultsError(f"{path}: no 'cells' list")
        out += [(topic, n, c) for n, c in enumerate(data["cells"], 1)]
    return out


def flags_of(cell):
    text = cell.get("tgs_node_flags")
    return text.split() if isinstance(text, str) else []


def parse_flags(flags):
    """(policy, memory settings, sim settings, unknown flags) of a tgs-node command line."""
    policy, memory, settings, unknown = "tgs", {}, {}, []
    window = None
    i = 0
    while i < len(flags):
        flag, value = flags[i], flags[i + 1] if i + 1 < len(flags) else None
        if flag == "--policy":
            policy = value
        elif flag in MEMORY_FLAGS:
            memory[flag] = value
        elif flag == "--budget-window-ms":
            window = value
        elif flag in TGS_FLAGS and TGS_FLAGS[flag]:
            settings[TGS_FLAGS[flag]] = value
        else:
            unknown.append(flag)
            i += 1 if value is None or value.startswith("--") else 2
            continue
        i += 2
    if window is not None:
        settings[f"{policy}.budget-window-ms"] = window
    return policy, memory, settings, unknown


def alone_rate(cell, cls):
    """The job's alone rate (it/s) in the call that measured the cell: its host's speed that day."""
    alone = cell.get("alone_it_per_s")
    rate = alone.get(cls) if isinstance(alone, dict) else None
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def mps_threads(cell):
    """The opportunistic job's MPS thread share, and whether a client priority was set."""
    text = cell.get("mps") if isinstance(cell.get("mps"), str) else (cell.get("setting") or "")
    m = re.search(r"opportunistic job CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=(\d+)", text) \
        or re.search(r"^MPS \d+%/(\d+)%$", cell.get("setting") or "")  # "MPS 100%/50%": production/opportunistic
    pct = m.group(1) if m else ("50" if "50% threads" in (cell.get("setting") or "") else None)
    return pct, "PRIORITY" in text


def classify(topic, cell):
    """(row or None, reason it is not predicted)."""
    device = cell.get("device")
    if not isinstance(device, str) or device not in DEVICES:
        return None, "not one cell of one GPU type (a summary across devices or calls)"
    if "pooled" in str(cell.get("source", "")) or cell.get("calls"):
        return None, "a pool of calls whose cells are listed on their own"
    prod, opp = model_name(cell.get("production_model")), model_name(cell.get("opportunistic_model"))
    if prod is None or (cell.get("opportunistic_model") and opp is None):
        return None, "a job the simulator has no profile for"
    mode = cell.get("mode")
    policy, memory, settings, unknown = parse_flags(flags_of(cell))
    if cell.get("residency_split") == "in-order" and mode == "opp-limited" and opp == "dlrm-zipf":
        return None, "skewed lookups with the in-order residency split: the model streams a uniform share"
    if "weights-only" in str(cell.get("source", "")):
        return None, "the first version of the ceiling mode (the idle production job held only its weights)"
    pct, priority = mps_threads(cell)
    under_mps = isinstance(cell.get("mps"), str) or mode == "mps"
    # The priority-sharing topic: its modes name what ran (bench/gpu/scenarios.toml).
    setting = cell.get("setting") if isinstance(cell.get("setting"), str) else ""
    if mode == "mps-priority":
        m = re.match(r"^MPS (\d+)%/(\d+)%, priority 0/1$", setting)
        if not m:
            return None, f"an MPS priority cell whose setting is not 'MPS P%/O%, priority 0/1': {setting!r}"
        mode, under_mps, priority, pct = "mps", True, True, m.group(2)
    elif mode in ("priority-share", "priority-share-tolerate5"):
        node = setting.split()
        if node[:1] != ["tgs-node"] or "--policy" not in node or node[node.index("--policy") + 1] != "priority-share":
            return None, f"a priority-share cell whose setting is not its tgs-node command: {setting!r}"
        tolerated = node[node.index("--priority-share.tolerated-slowdown") + 1] \
            if "--priority-share.tolerated-slowdown" in node else None
        mode, priority = "priority-share", True
    elif mode == "mps-priority-cap25":
        return None, "a fixed launch cap under MPS priority: the simulator's token-bucket shares by time slicing"
    elif mode == "interposer-priority-share":
        return None, "the production job alone under tgs-node: a single-job measurement, not a pair"
    if priority and mode not in ("mps", "co-execution-budget", "priority-share"):
        return None, "an MPS client priority combined with a tgs-node policy the model runs without MPS"
    if "--max-inflight-launches" in unknown:
        return None, "a launch window (--max-inflight-launches), which the model does not have"
    row = {"scenario": f"{topic}-{cell.get('scenario')}", "gpu": DEVICES[device], "production_model": prod,
           "opportunistic_model": opp or "", "memory_policy": "", "budget_gib": "", "production_idle": 0,
           "settings": "", "production": median_of(cell, "production"),
           "opportunistic": median_of(cell, "opportunistic"), "runs": cell.get("runs"),
           "source": f"docs/results/{topic}.json ({cell.get('source') or cell.get('date')})",
           "production_alone_it_per_s": alone_rate(cell, "production"),
           "opportunistic_alone_it_per_s": alone_rate(cell, "opportunistic")}
    budget = memory.get("--memory-budget-mib")
    if memory.get("--memory-policy") == "tgs" and budget:
        row["memory_policy"] = "tgs"
        row["budget_gib"] = f"{int(budget) / 1024:.4f}"
        if memory.get("--memory-reserve-mib"):
            settings["memory.tgs.reserve-mib"] = memory["--memory-reserve-mib"]
    elif memory.get("--memory-policy") == "unified-memory":
        # Plain unified memory with no budget: both jobs fit the card, nothing is evicted.
        row["memory_policy"] = "unified-memory"
    if mode == "priority-share":
        row["policy"] = "priority-share"
        if tolerated is not None:
            settings["priority-share.tolerated-slowdown"] = tolerated
    elif mode == "mps" or (under_mps and mode in ("co-execution-budget",)):
        row["policy"] = "mps"
        settings.update({"mps.production-threads": "1", "mps.opportunistic-threads": f"{int(pct or 100) / 100:g}"})
        if priority:
            settings["mps.opportunistic-below-normal"] = "1"
    elif under_mps and mode == "alone-mps":
        return None, "each job alone under MPS: a single-job measurement, not a pair"
    elif under_mps:
        return None, "MPS combined with a tgs-node policy, which the model runs time-sliced"
    elif mode in ("co-execution", "co-execution-budget", "co-execution-um"):
        row["policy"] = "co-execution"
    elif mode == "opp-limited":
        row.update(policy="co-execution", production_idle=1, production=None)
    elif mode == "hard-limit":
        row.update(policy="tgs", memory_policy="hard-limit", opportunistic=None)
        settings.pop("memory.tgs.reserve-mib", None)
    elif mode == "fixed-share":
        if policy != "token-bucket" or unknown:
            return None, f"tgs-node flags the model does not have: {' '.join(unknown)}"
        row["policy"] = "token-bucket"
    elif mode == "idle-harvest":
        if unknown:
            return None, f"tgs-node flags the model does not have: {' '.join(unknown)}"
        row["policy"] = "idle-harvest"  # tgs-node's default policy and settings
    elif str(mode).startswith("idle-harvest-sample-"):
        return None, ("idle-harvest with tgs-node's GPU activity sampled at another period "
                      "(--activity-sample-us), which the model does not have")
    elif mode == "tgs":
        if policy != "tgs" or unknown:
            return None, f"a tgs extension that no longer exists ({' '.join(unknown) or policy})"
        if not flags_of(cell) and cell.get("tgs_node_defaults"):
            pass  # tgs-node's defaults: the released controller with its own windows
        row["policy"] = "tgs"
    else:
        return None, f"mode '{mode}' is not a sharing policy of the simulator"
    if row["production"] is None and row["opportunistic"] is None:
        return None, "no throughput recorded"
    row["settings"] = " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return row, None


def measured_pairs(results_dir):
    rows, skipped = [], []
    for topic, n, cell in read_topics(results_dir):
        row, why = classify(topic, cell)
        if row:
            rows.append(row)
        else:
            skipped.append((topic, n, cell.get("scenario"), cell.get("mode"), cell.get("device"), why))
    return rows, skipped


def fmt(v):
    return "" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def write_table(out, comment, header, rows, cell):
    """A generated CSV table: COMMENT (its '#' lines), HEADER, then CELL(row, column) per row."""
    out.write(comment)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([cell(r, k) for k in header])


def write_pairs(rows, out):
    comment = ("# Pairs measured on real GPUs that tgs-sim can reproduce, one row per cell of docs/results/*.json.\n"
               "# Generated by `python3 sim/scripts/gpu_results.py pairs`; do not edit by hand.\n"
               "# production/opportunistic: medians over runs of each job's rate over its alone rate; empty: that\n"
               "# job was not measured (idle, or refused). production_idle 1: the production job holds its memory\n"
               "# and launches nothing. settings: tgs-sim policy settings (flag=value) the cell ran with.\n"
               "# *_alone_it_per_s: each job's alone rate in the call that measured the cell (empty: not\n"
               "# recorded); the simulator runs the job at that host speed (docs/simulator/contention-model.md).\n")
    write_table(out, comment, PAIRS_HEADER, rows, lambda r, k: fmt(r[k]))


def setting_of(row):
    """What makes two cells the same setting: GPU, both jobs, the policies and their settings."""
    return tuple(str(row[k]) for k in PAIRS_HEADER[1:9])


def repeats(rows):
    """The cells measured more than once with the same pair, policy and settings (different calls):
    [(key, [production values], [opportunistic values])], the noise floor any prediction meets."""
    groups = {}
    for r in rows:
        groups.setdefault(setting_of(r), []).append(r)
    return [(k, [r["production"] for r in g if r["production"] is not None],
             [r["opportunistic"] for r in g if r["opportunistic"] is not None]) for k, g in groups.items() if len(g) > 1]


def predicted_table(path, left_out=False):
    """[(gpu, (production, opportunistic))] of a `tgs-sim predict --markdown` table (each prediction
    "value ± half-width of its interval"), in its order;
    LEFT_OUT: the predictions of the fits that left each pair out (`--leave-one-out`) instead."""
    def number(text):
        text = text.replace("**off**", "").split("±")[0].strip()  # the value without its interval
        return None if text in ("", "–", "-") else float(text)
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ResultsError(f"{path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) < 6 or cols[0] in ("gpu", "") or cols[0].startswith("-"):
            continue
        col = 7 if left_out else 5
        if col >= len(cols):
            raise ResultsError(f"{path}:{n}: no 'pair left out' prediction: make the table with --leave-one-out")
        try:
            p, o = cols[col].split("/")
            out.append((cols[0], (number(p), number(o))))
        except ValueError:
            raise ResultsError(f"{path}:{n}: expected a 'production / opportunistic' prediction, "
                               f"got {cols[col]!r}") from None
    return out


def repeat_noise(rows):
    """The noise of a measured cell: (pooled standard deviation of a throughput between calls of the same
    setting, its degrees of freedom, the share of throughputs and of cells a prediction equal to each
    setting's mean lands within TOLERANCE of, if that noise is normal)."""
    ss, dof = 0.0, 0
    for _, p, o in repeats(rows):
        for v in (p, o):
            if len(v) > 1:
                m = statistics.mean(v)
                ss += sum((x - m) ** 2 for x in v)
                dof += len(v) - 1
    if dof == 0:
        raise ResultsError("no setting measured more than once")
    sigma = (ss / dof) ** 0.5
    per_throughput = math.erf(TOLERANCE / (sigma * math.sqrt(2))) if sigma > 0 else 1.0
    return sigma, dof, per_throughput, per_throughput ** 2


def repeats_within(rows, predicted_path):
    """On the cells of settings measured more than once: how many cells (both throughputs) lie within
    TOLERANCE of (the mean of the same setting's other calls, the prediction, the prediction of the fit
    that left the pair out). The first is what knowing the setting, but not the call, gives."""
    mine, predicted = matched(rows, predicted_path)
    left_out = [p for _, p in predicted_table(predicted_path, left_out=True)]
    groups = {}
    for r, (_, pred), loo in zip(mine, predicted, left_out):
        groups.setdefault(setting_of(r), []).append((r, pred, loo))
    cells, counts = 0, [0, 0, 0]
    for group in groups.values():
        if len(group) < 2:
            continue
        for i, (r, pred, loo) in enumerate(group):
            inside, any_side = [True, True, True], False
            for side, key in ((0, "production"), (1, "opportunistic")):
                others = [g[0][key] for j, g in enumerate(group) if j != i and g[0][key] is not None]
                if r[key] is None or not others:
                    continue
                any_side = True
                for k, guess in enumerate((statistics.mean(others), pred[side], loo[side])):
                    inside[k] &= guess is not None and abs(r[key] - guess) <= TOLERANCE + 1e-9
            if any_side:
                cells += 1
                counts = [c + x for c, x in zip(counts, inside)]
    return cells, *counts


def matched(rows, predicted_path):
    """The measured rows of the table's GPUs, and the table's predictions, in the same order."""
    predicted = predicted_table(predicted_path)
    gpus = {g for g, _ in predicted}
    mine = [r for r in rows if r["gpu"] in gpus]
    if len(mine) != len(predicted):
        raise ResultsError(f"{predicted_path}: {len(predicted)} predictions for {len(mine)} measured cells of "
                           f"{', '.join(sorted(gpus))}: not this tree's table")
    return mine, predicted


def repeats_followed(rows, predicted_path):
    """How far predictions follow the spread of repeated settings: (throughputs, Pearson, Spearman) of
    each repeated cell's deviation from its setting's mean, predicted against measured."""
    mine, predicted = matched(rows, predicted_path)
    groups = {}
    for r, (_, pred) in zip(mine, predicted):
        groups.setdefault(setting_of(r), []).append((r, pred))
    measured_dev, predicted_dev = [], []
    for cells in groups.values():
        for side, key in ((0, "production"), (1, "opportunistic")):
            pairs = [(r[key], p[side]) for r, p in cells if r[key] is not None and p[side] is not None]
            if len(pairs) < 2:
                continue
            mm, pm = statistics.mean(m for m, _ in pairs), statistics.mean(p for _, p in pairs)
            measured_dev += [m - mm for m, _ in pairs]
            predicted_dev += [p - pm for _, p in pairs]
    if len(measured_dev) < 3:
        raise ResultsError(f"{predicted_path}: fewer than 3 repeated throughputs")

    def ranks(xs):
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        out = [0.0] * len(xs)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out
    return (len(measured_dev), statistics.correlation(measured_dev, predicted_dev),
            statistics.correlation(ranks(measured_dev), ranks(predicted_dev)))


def alone_rates(results_dir):
    """{(model, gpu): [it/s of each cell's alone runs]} from every cell that records them."""
    rates = {}
    for topic, n, cell in read_topics(results_dir):
        device = cell.get("device")
        if not isinstance(device, str) or device not in DEVICES or "pooled" in str(cell.get("source", "")):
            continue
        for cls in ("production", "opportunistic"):
            model, rate = model_name(cell.get(f"{cls}_model")), alone_rate(cell, cls)
            if model and rate is not None:
                rates.setdefault((model, DEVICES[device]), []).append(rate)
    return rates


def git_show(commit, path):
    r = subprocess.run(["git", "-C", REPO, "show", f"{commit}:{path}"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ResultsError(f"git show {commit}:{path}: {r.stderr.strip()}")
    return r.stdout


def runs_jitter(commit):
    """{(model, gpu): [relative deviation of each alone window from its run's median]} over the
    raw runs files kept at COMMIT (docs/results/*-runs.jsonl, before the results became summaries).
    A window below half its run's median is a job still starting and is left out."""
    listing = subprocess.run(["git", "-C", REPO, "ls-tree", "-r", "--name-only", commit, "docs/results/"],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        raise ResultsError(f"git ls-tree {commit}: {listing.stderr.strip()}")
    out = {}
    for path in listing.stdout.split():
        if not path.endswith("-runs.jsonl"):
            continue
        try:
            summary = json.loads(git_show(commit, path[: -len("-runs.jsonl")] + ".json"))
        except (ResultsError, json.JSONDecodeError):
            continue
        cells = summary.get("cells") if isinstance(summary, dict) else None
        devices = {c.get("device") for c in cells or [] if isinstance(c, dict)} or {summary.get("device")}
        devices = {d for d in devices if isinstance(d, str)}
        if len(devices) != 1 or next(iter(devices)) not in DEVICES:
            continue
        gpu = DEVICES[devices.pop()]
        for line in git_show(commit, path).splitlines():
            try:
                run = json.loads(line)
            except json.JSONDecodeError:
                continue
            label, rates = str(run.get("label", "")), run.get("it_per_s")
            if "alone" not in label.split("/") or not isinstance(rates, list):
                continue
            job = {"resnet50": "ResNet-50", "shufflenet_v2_x1_0": "ShuffleNet v2", "mobilenet_v2": "MobileNet v2",
                   "bert_base": "BERT-base", "dlrm": "DLRM-like"}.get(run.get("model"))
            if job is None:
                continue
            desc = (f"{job} b{run.get('batch')}" + (" seq 128" if job == "BERT-base" else "")
                    if job != "DLRM-like" else f"DLRM-like {'power-law' if 'zipf' in path else 'uniform'} lookups")
            model = model_name(desc)
            if model is None:
                continue
            steady = [r for r in rates if isinstance(r, (int, float)) and r > 0]
            mid = statistics.median(steady) if steady else 0
            steady = [r for r in steady if r >= 0.5 * mid]
            if len(steady) >= 2:
                m = statistics.median(steady)
                out.setdefault((model, gpu), []).extend((r - m) / m for r in steady)
    return out


# What the results give of each job besides its rate: footprints (GiB, from the memory calls'
# budgets (P + O) / 1.5 and the DLRM job's 16334 MiB, or a runs file's peak reserved bytes), and
# the interposer's counters for ResNet-50 b32 alone (tgs-node status at 5dbc452,
# gpu-memory-h100-zipf-c-low-1-status.jsonl: 46 M blocks/s, 33 k launches/s at about 40 it/s).
FOOTPRINT_GIB = {"resnet50-b256": 12.32, "resnet50-b128": 6.36, "resnet50": 3.35, "resnet50-b32": 1.88,
                 "shufflenet-b128": 1.81, "bert-base": 4.94, "dlrm": 15.95, "dlrm-zipf": 15.95}
MEASURED_COUNTS = {"resnet50-b32": (830, 1.15e6)}
BATCH = {"resnet50-b256": 256, "resnet50-b128": 128, "resnet50": 64, "resnet50-b32": 32,
         "shufflenet-b128": 128, "shufflenet": 64, "mobilenet": 64, "bert-base": 32, "dlrm": 2048,
         "dlrm-zipf": 2048, "gcn": 1, "gpt-350m": 8, "bert-base-b4": 4, "espnet2": 32}
# The A100 rows (sim/data/models.csv) the H100/H200 estimates start from, where nothing was measured.
A100 = {"mobilenet": (50, 0.40, 70000), "shufflenet": (45, 0.37, 60000), "gcn": (30, 0.30, 20000),
        "bert-base": (180, 0.85, 500000), "bert-base-b4": (40, 0.80, 90000), "gpt-350m": (400, 0.95, 900000),
        "espnet2": (120, 0.375, 80000), "resnet50": (100, 0.90, 400000)}
A100_FOOTPRINT = {"gcn": 2, "bert-base-b4": 6, "gpt-350m": 16, "espnet2": 8, "mobilenet": 4, "shufflenet": 3}


def model_rows(results_dir, commit, profiles=PROFILES):
    """The H100 and H200 rows of sim/data/models.csv: a model's harness profile row where PROFILES
    has one; otherwise measured fields where docs/results has them, the rest by the rules below,
    each marked (docs/simulator/profiles.md)."""
    profiled = {(r[0], r[1]): r for r in profile_rows([profiles], DEVICES)} if os.path.exists(profiles) else {}
    alone = {k: statistics.median(v) for k, v in alone_rates(results_dir).items()}
    spread = {k: (sum(x * x for x in v) / len(v)) ** 0.5 for k, v in runs_jitter(commit).items() if len(v) >= 6}
    rows = []
    for gpu in ("h100-80gb", "h200-141gb"):
        # ResNet-50's GPU time per sample from batch 256, where the job is GPU-bound (busy 0.97):
        # its GPU time grows with the batch, its host time does not (rule "resnet").
        anchor = 0.97 * 1e3 / alone[("resnet50-b256", gpu)] / 256
        # A model measured on no GPU of ours: its A100 iteration time times the median ratio of
        # the models measured on both (rule "a100-ratio").
        ratio = statistics.median(1e3 / alone[(m, gpu)] / A100[m][0] for m in A100 if (m, gpu) in alone)
        for model in BATCH:
            if (model, gpu) in profiled:
                rows.append(profiled[(model, gpu)])
                continue
            batch = BATCH[model]
            measured = (model, gpu) in alone
            it_ms = 1e3 / alone[(model, gpu)] if measured else A100[model][0] * ratio
            letters = ["m" if measured else "e"]
            if model.startswith("resnet50"):
                busy, b_l = min(0.97, anchor * batch / it_ms), "e"
            elif measured:
                busy, b_l = 0.5, "f"   # inferred by the global fit from the measured pairs
            else:
                busy, b_l = A100[model][1], "e"
            kernels, blocks = MEASURED_COUNTS.get(model, (None, None))
            if kernels is not None and gpu == "h100-80gb":
                k_l = bl_l = "m"
            elif model.startswith("resnet50"):
                # The same kernels with grids that grow with the batch (rule "resnet").
                kernels, blocks = MEASURED_COUNTS["resnet50-b32"][0], MEASURED_COUNTS["resnet50-b32"][1] * batch / 32
                k_l = bl_l = "e"
            elif model.startswith("dlrm"):
                kernels, blocks, k_l, bl_l = 300, 650000, "e", "f"
            else:
                # About three kernels (forward, input and weight gradient) per layer op; blocks as on
                # the A100 row (rule "a100").
                kernels, blocks, k_l, bl_l = 1000, A100.get(model, (0, 0, 500000))[2], "e", "e"
            # A host-bound job's GPU idles before most kernels; a GPU-bound one rarely (rule "gaps").
            gaps, g_l = kernels * (1 - busy), "e"
            jit = spread.get((model, gpu))
            jit, j_l = (jit, "m") if jit is not None else (0.06, "e")
            footprint = FOOTPRINT_GIB.get(model) or A100_FOOTPRINT.get(model, 2)
            f_l = "m" if model in FOOTPRINT_GIB else "e"
            # Dense models touch all their memory every step; the DLRM jobs touch the rows they look
            # up, which the global fit infers from their ceilings under the memory budget.
            hot, h_l = (0.9, "f") if model == "dlrm" else (0.05, "f") if model == "dlrm-zipf" else (footprint, "e")
            letters += [b_l, k_l, bl_l, g_l, j_l, "e", f_l, h_l]
            values = [it_ms, busy, kernels, blocks, gaps, jit, 0.5, footprint, hot]
            what = "measured alone rates (docs/results) and rules" if measured else "A100 row scaled"
            rows.append([model, gpu, batch] + [f"{v:.6g}" for v in values] + ["".join(letters), what])
    return rows


def reproducible_command(command):
    """The harness command of a profile row without this machine's paths: `... --out $OUT ...`."""
    words, out = shlex.split(command or ""), []
    i = 0
    while i < len(words):
        w = words[i]
        if w in MACHINE_OPTIONS:
            i += 1 + MACHINE_OPTIONS[w]
            continue
        out += ["--out", "$OUT"] if w == "--out" else [w]
        i += 2 if w == "--out" else 1
    return " ".join(out)


def profile_record(p, where):
    """The flat record (PROFILE_COLUMNS) of a harness profile.json row."""
    if not isinstance(p, dict):
        raise ResultsError(f"{where}: expected a JSON object (a harness profile row)")
    jitter, kstats = p.get("jitter") or {}, p.get("kernel_stats") or {}
    # The harness's busy_fraction is nvidia-smi's utilization where nvidia-smi answered, else the
    # kernel spans' share; the record keeps them apart.
    smi = str(p.get("busy_source", "")).startswith("nvidia-smi")
    return {"job": p.get("job"), "device": p.get("device"), "driver": p.get("driver"), "date": p.get("date"),
            "command": reproducible_command(p.get("command")), "windows": p.get("windows"),
            "it_per_s": p.get("it_per_s") or (1 / p["iteration_s"] if isinstance(p.get("iteration_s"), (int, float))
                                              and p["iteration_s"] > 0 else None),
            "kernels_per_s": p.get("kernels_per_s"), "blocks_per_s": p.get("blocks_per_s"),
            "utilization": p.get("busy_fraction") if smi else None,
            "kernel_busy_fraction": kstats.get("busy_fraction"), "kernels_per_step": kstats.get("kernels_per_step"),
            "gaps_per_step": kstats.get("gaps_per_step"), "jitter_p5": jitter.get("p5"),
            "jitter_p50": jitter.get("p50"), "jitter_p95": jitter.get("p95"),
            "footprint_bytes": p.get("footprint_bytes"), "hot_set_bytes": p.get("hot_set_bytes")}


def read_profile_table(path):
    """The records of a profile table (sim/data/gpu_profiles.csv), numbers as floats."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip() and not line.startswith("#")]
    except OSError as e:
        raise ResultsError(f"{path}: {e.strerror}") from None
    rows = list(csv.reader(line for _, line in lines))
    if not rows or rows[0] != PROFILE_COLUMNS:
        raise ResultsError(f"{path}: expected the header {','.join(PROFILE_COLUMNS)}")
    out = []
    for (n, _), row in zip(lines[1:], rows[1:]):
        if len(row) != len(PROFILE_COLUMNS):
            raise ResultsError(f"{path}:{n}: expected {len(PROFILE_COLUMNS)} fields, got {len(row)}")
        rec = dict(zip(PROFILE_COLUMNS, row))
        for k in PROFILE_COLUMNS:
            if k in PROFILE_TEXT:
                continue
            try:
                rec[k] = float(rec[k]) if rec[k] != "" else None
            except ValueError:
                raise ResultsError(f"{path}:{n}: {k}: expected a number, got {rec[k]!r}") from None
        out.append((f"{path}:{n}", rec))
    return out


def write_profile_table(records, out):
    comment = ("# Profile rows of `bench/gpu/harness.py profile JOB`, one per job and device: each job alone\n"
               "# under the interposer and tgs-node. Written by `python3 sim/scripts/gpu_results.py profile\n"
               "# --update sim/data/gpu_profiles.csv PROFILE.json...`; `gpu_results.py models` makes the\n"
               "# models.csv rows of these jobs from it (docs/simulator/profiles.md).\n"
               "# it_per_s: median of the 1 s windows' rates; kernels_per_s, blocks_per_s: medians of tgs-node's\n"
               "# counters; utilization: median of nvidia-smi's utilization.gpu; kernel_busy_fraction,\n"
               "# kernels_per_step, gaps_per_step: torch.profiler's kernel spans over 20 steps; jitter_p5..p95:\n"
               "# quantiles of the windows' rates over their median; footprint_bytes: peak reserved bytes;\n"
               "# hot_set_bytes: bytes a step touches.\n")
    # Numbers as Python writes them, so that reading the table back gives the same values.
    write_table(out, comment, PROFILE_COLUMNS, records,
                lambda rec, k: "" if rec[k] is None else rec[k] if k in PROFILE_TEXT
                else str(int(rec[k])) if float(rec[k]).is_integer() else repr(float(rec[k])))


def load_profiles(paths):
    """[(where, record)] from profile.json files and profile tables (.csv)."""
    out = []
    for path in paths:
        if path.endswith(".csv"):
            out += read_profile_table(path)
            continue
        try:
            with open(path, encoding="utf-8") as f:
                out.append((path, profile_record(json.load(f), path)))
        except (OSError, json.JSONDecodeError) as e:
            raise ResultsError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    return out


def profile_row(rec, where, gpu_names):
    """The models.csv row of one profile record: every field the profile measured is marked m."""
    job, device = rec.get("job"), rec.get("device")
    model, gpu = HARNESS_JOBS.get(job), gpu_names.get(device)
    if model is None or gpu is None:
        raise ResultsError(f"{where}: job {job!r} or device {device!r} has no simulator name "
                           f"(known jobs: {', '.join(HARNESS_JOBS)}; devices: {', '.join(gpu_names)})")
    rate = rec.get("it_per_s")
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise ResultsError(f"{where}: it_per_s: expected a positive number, got {rate!r}")
    num = lambda k: rec[k] if isinstance(rec.get(k), (int, float)) else None  # noqa: E731
    per_it = lambda k: num(k) / rate if num(k) is not None else None  # noqa: E731
    gib = lambda k: num(k) / 2**30 if num(k) is not None else None  # noqa: E731
    # The p5-p95 range of a normal distribution spans 3.29 standard deviations.
    sd = (num("jitter_p95") - num("jitter_p5")) / 3.29 if None not in (num("jitter_p5"), num("jitter_p95")) else None
    # The busy fraction is the kernel spans' share of the profiled steps' wall time, not nvidia-smi's
    # utilization: nvidia-smi counts a sample period busy if any kernel ran in it, so for a job of
    # short kernels with idle gaps between them it reads near the share of periods touched, not of
    # time busy (ResNet-50 b32 on the H100: 0.44 from nvidia-smi, 0.22 from the kernel spans). The
    # model's busy fraction is GPU time over wall time, what the spans measure. Kernels and gaps per
    # iteration come from the same spans, so the mean kernel and gap lengths agree with it; blocks
    # come from tgs-node's counters, the unit its launch budgets count.
    fields = [("iteration_ms", 1e3 / rate), ("busy_fraction", num("kernel_busy_fraction")),
              ("kernels_per_iteration", num("kernels_per_step")), ("blocks_per_iteration", per_it("blocks_per_s")),
              ("gaps_per_iteration", num("gaps_per_step")), ("jitter", sd),
              ("footprint_gib", gib("footprint_bytes")), ("hot_gib", gib("hot_set_bytes"))]
    missing = [k for k, v in fields if v is None]
    if missing:
        raise ResultsError(f"{where}: the profile lacks {', '.join(missing)}")
    # The harness runs a job on the whole GPU: its slice sensitivity stays the estimate (rule "slice").
    fields.insert(6, ("slice_sensitivity", 0.5))
    # The model streams a uniform share of the hot set from the part of the footprint that is not
    # resident. A job that touches most of its footprint per step (the dense models: 81-95%) reads
    # that part uniformly, so the bytes it touches are the model's hot set. A job that touches a
    # small part (the DLRM jobs' row lookups: 7-10%) reads it where its lookups fall: which rows
    # are resident decides what crosses the link (the skewed job's hot rows stay resident), so the
    # bytes touched only bound it from above. Its hot set stays fitted to the memory pairs (f),
    # starting from the measurement (docs/simulator/profiles.md, rule "sparse hot set").
    sparse = fields[-1][1] < SPARSE_TOUCH * fields[-2][1]
    source = f"bench/gpu/harness.py profile {job}; driver {rec.get('driver')}; {rec.get('date')}"
    return ([model, gpu, BATCH[model]] + [f"{v:.6g}" for _, v in fields]
            + ["mmmmmmem" + ("f" if sparse else "m"), source.replace(",", ";")])


def profile_rows(paths, gpu_names):
    """models.csv rows from harness profile rows (profile.json files or profile tables)."""
    return [profile_row(rec, where, gpu_names) for where, rec in load_profiles(paths)]


def update_profile_table(table, paths):
    """TABLE with the rows of PATHS added, each replacing the row of its job and device."""
    records = [rec for _, rec in read_profile_table(table)] if os.path.exists(table) else []
    for where, rec in load_profiles(paths):
        profile_row(rec, where, DEVICES)  # refuses a row the simulator cannot use, before writing
        records = [r for r in records if (r["job"], r["device"]) != (rec["job"], rec["device"])] + [rec]
    records.sort(key=lambda r: (r["device"], r["job"]))
    text = io.StringIO()
    write_profile_table(records, text)
    with open(table, "w", encoding="utf-8") as f:
        f.write(text.getvalue())
    return len(records)


# The columns of sim/data/job_facts.csv: the two facts of tgs::choice_facts that no profile has, each
# beside where it came from.
FACTS_HEADER = ["model", "gpu", "production_gpu_wait", "production_gpu_wait_source", "opportunistic_longest_span_ms",
                "opportunistic_longest_span_source"]


def job_facts(results_dir):
    """The job_facts.csv rows from docs/results/mechanism-choice.json: per job and GPU type, its host's
    wait for its GPU as a production job alone (the median of its runs: tgs-node reads the live value,
    and every run's is on the same side of the choice's threshold) and its longest kernel span as an
    opportunistic job (the longest of its runs, as tgs-node's job profile keeps it), each with its
    source. A job the file has neither fact of has no row: the simulator passes both empty."""
    path = os.path.join(results_dir, "mechanism-choice.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ResultsError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    cells = data.get("cells") if isinstance(data, dict) else None
    devices = {c.get("device") for c in cells or [] if isinstance(c, dict)}
    if len(devices) != 1 or next(iter(devices)) not in DEVICES:
        raise ResultsError(f"{path}: expected the cells of one GPU type of {', '.join(DEVICES)}, got {sorted(map(str, devices))}")
    gpu = DEVICES[devices.pop()]

    def numbers(values, what):
        if not isinstance(values, list) or not values or not all(isinstance(v, (int, float)) for v in values):
            raise ResultsError(f"{path}: {what}: expected a list of numbers, got {values!r}")
        return values

    def job_model(job, what):
        if job not in HARNESS_JOBS:
            raise ResultsError(f"{path}: {what}: job {job!r} has no simulator name (known: {', '.join(HARNESS_JOBS)})")
        return HARNESS_JOBS[job]

    rows = {}

    def row(model):
        return rows.setdefault(model, {k: "" for k in FACTS_HEADER} | {"model": model, "gpu": gpu})

    def per_job(obj, what):
        """(the job's row, its values) for each job of `obj` (job -> numbers, and a "what")."""
        if not isinstance(obj, dict):
            raise ResultsError(f"{path}: {what}: expected an object")
        for job, values in obj.items():
            if job != "what":
                yield row(job_model(job, what)), numbers(values, f"{what}.{job}")

    if not isinstance(data.get("production_host_wait_alone"), dict):
        raise ResultsError(f"{path}: no 'production_host_wait_alone' object")
    for r, values in per_job(data["production_host_wait_alone"], "production_host_wait_alone"):
        r["production_gpu_wait"] = f"{statistics.median(values):.4g}"
        r["production_gpu_wait_source"] = (f"docs/results/mechanism-choice.json production_host_wait_alone: median of "
                                           f"{len(values)} runs ({min(values):g} to {max(values):g})")
    span = data.get("opportunistic_longest_span_ms")
    if not isinstance(span, dict):
        raise ResultsError(f"{path}: no 'opportunistic_longest_span_ms' object")
    by_job = span.get("by_job")
    if by_job is not None:
        # Per job, as the timer counts them now: each job's longest, as its profile keeps it. They
        # supersede the pooled lists of the earlier timer, which counted its waits too.
        for r, values in per_job(by_job, "opportunistic_longest_span_ms.by_job"):
            r["opportunistic_longest_span_ms"] = f"{max(values):.4g}"
            r["opportunistic_longest_span_source"] = (
                f"docs/results/mechanism-choice.json opportunistic_longest_span_ms.by_job: the longest of "
                f"{len(values)} runs ({min(values):g} to {max(values):g} ms)")
        return [rows[m] for m in sorted(rows)]
    # The spans as tgs-node's earlier timer counted them, from the launch call's return: the file's
    # first call counted from its entry, which adds the call's own time.
    spans = numbers(span.get("from_the_launch_calls_return"), "opportunistic_longest_span_ms.from_the_launch_calls_return")
    # The spans are the opportunistic jobs' of the cells tgs-node ran (its modes priority-share-*),
    # not told apart by job in the file: each job gets the longest, the safe side.
    jobs = sorted({c.get("opportunistic_model") for c in cells
                   if str(c.get("mode", "")).startswith("priority-share") and c.get("opportunistic_model")})
    if not jobs:
        raise ResultsError(f"{path}: no cell of tgs-node (mode priority-share-*) names an opportunistic job")
    for job in jobs:
        r = row(job_model(job, "cells"))
        r["opportunistic_longest_span_ms"] = f"{max(spans):.4g}"
        r["opportunistic_longest_span_source"] = (
            f"docs/results/mechanism-choice.json opportunistic_longest_span_ms: the longest of {len(spans)} runs "
            f"({min(spans):g} to {max(spans):g} ms from the launch call's return; runs of {' and '.join(jobs)} "
            f"not told apart)")
    return [rows[m] for m in sorted(rows)]


def write_facts(rows, out):
    comment = ("# What tgs-node measured of each job on a GPU type that its choice of mechanism reads\n"
               "# (tgs::choice_facts) and no profile has. Generated by `python3 sim/scripts/gpu_results.py facts`\n"
               "# from docs/results/mechanism-choice.json; do not edit by hand.\n"
               "# production_gpu_wait: the fraction of its time the job's host waits for its GPU, as a production\n"
               "# job alone; opportunistic_longest_span_ms: its longest kernel span as an opportunistic job. Each\n"
               "# value's *_source says where it came from; empty: not measured, and `tgs-sim pairs` passes it\n"
               "# empty as tgs-node would.\n")
    write_table(out, comment, FACTS_HEADER, rows, lambda r, k: r[k])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(REPO, "docs", "results"), help="the result summaries")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pairs", help="measured_pairs.csv on stdout; the cells left out on stderr")
    p.add_argument("--skipped", help="write the cells left out, with why, to this file (Markdown table)")
    sub.add_parser("alone", help="each model's alone rate per GPU type")
    rp = sub.add_parser("repeats", help="cells measured more than once with the same setting, and their spread")
    rp.add_argument("--predicted", metavar="TABLE",
                    help="also: how far the predictions follow the repeats, from the Markdown table of "
                         "`tgs-sim predict --gpu G --markdown` (its cells in measured_pairs.csv's order)")
    rp.add_argument("--left-out", action="store_true",
                    help="with --predicted from `tgs-sim predict --leave-one-out`: also count the cells of repeated "
                         "settings within ±0.10 of the other calls' mean, of the prediction and of the prediction "
                         "with the pair left out")
    j = sub.add_parser("jitter", help="each model's window-to-window spread alone, from the raw runs at a commit")
    j.add_argument("--commit", default="5dbc452", help="where the raw runs files were kept (5dbc452)")
    mo = sub.add_parser("models", help="the H100 and H200 rows of models.csv: profile rows, else results and rules")
    mo.add_argument("--commit", default="5dbc452", help="where the raw runs files were kept (5dbc452)")
    mo.add_argument("--profiles", default=PROFILES, help="the harness profile table (sim/data/gpu_profiles.csv)")
    pr = sub.add_parser("profile", help="models.csv rows from harness profile rows (profile.json files or tables)")
    pr.add_argument("files", nargs="+", help="profile.json files of `bench/gpu/harness.py profile`, or .csv tables")
    pr.add_argument("--update", metavar="TABLE",
                    help="add the rows to this profile table (sim/data/gpu_profiles.csv) instead, each replacing "
                         "the row of its job and device")
    sub.add_parser("facts", help="job_facts.csv on stdout: what tgs-node measured of each job for its mechanism choice")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "facts":
            write_facts(job_facts(args.results), sys.stdout)
        elif args.cmd == "pairs":
            rows, skipped = measured_pairs(args.results)
            write_pairs(rows, sys.stdout)
            text = io.StringIO()
            text.write("| topic | cell | scenario | mode | device | why not predicted |\n|---|---|---|---|---|---|\n")
            for s in skipped:
                text.write("| " + " | ".join(str(x) for x in s) + " |\n")
            if args.skipped:
                with open(args.skipped, "w", encoding="utf-8") as f:
                    f.write(text.getvalue())
            print(f"gpu_results: {len(rows)} cells predicted, {len(skipped)} not", file=sys.stderr)
        elif args.cmd == "alone":
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(["model", "gpu", "iteration_ms", "alone_it_per_s", "cells"])
            for (model, gpu), v in sorted(alone_rates(args.results).items()):
                w.writerow([model, gpu, f"{1e3 / statistics.median(v):.2f}", f"{statistics.median(v):.2f}", len(v)])
        elif args.cmd == "repeats" and args.predicted:
            rows = measured_pairs(args.results)[0]
            n, pearson, spearman = repeats_followed(rows, args.predicted)
            print(f"{n} throughputs of settings measured more than once: their deviations from their setting's "
                  f"mean, predicted against measured: Pearson {pearson:.2f}, Spearman {spearman:.2f}")
            if args.left_out:
                cells, others, fit, loo = repeats_within(rows, args.predicted)
                print(f"{cells} cells of those settings within ±{TOLERANCE:.2f} on each throughput: of the mean of "
                      f"the setting's other calls {others}, of the prediction {fit}, of the prediction with the "
                      f"pair left out {loo}")
        elif args.cmd == "repeats":
            spreads = []
            for key, p, o in repeats(measured_pairs(args.results)[0]):
                spread = max([max(v) - min(v) for v in (p, o) if v] or [0.0])
                spreads.append(spread)
                print(f"{' '.join(x for x in key if x not in ('', '0'))}: production {p}, opportunistic {o}, "
                      f"spread {spread:.2f}")
            if spreads:
                spreads.sort()
                print(f"{len(spreads)} settings measured more than once; the spread between calls: median "
                      f"{statistics.median(spreads):.2f}, largest {spreads[-1]:.2f}; "
                      f"{sum(x > 0.2 for x in spreads)} above 0.20")
                sigma, dof, per_throughput, per_cell = repeat_noise(measured_pairs(args.results)[0])
                print(f"a cell's standard deviation between calls: {sigma:.3f} (pooled, {dof} degrees of "
                      f"freedom); a prediction equal to each setting's mean would lie within ±{TOLERANCE:.2f} of "
                      f"one measurement for {per_throughput:.0%} of throughputs and {per_cell:.0%} of cells")
        elif args.cmd == "models":
            w = csv.writer(sys.stdout, lineterminator="\n")
            for row in model_rows(args.results, args.commit, args.profiles):
                w.writerow(row)
        elif args.cmd == "jitter":
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(["model", "gpu", "jitter", "windows"])
            for (model, gpu), v in sorted(runs_jitter(args.commit).items()):
                # The root mean square of the deviations from each run's median: the relative
                # standard deviation of one window's rate.
                w.writerow([model, gpu, f"{(sum(x * x for x in v) / len(v)) ** 0.5:.4f}", len(v)])
        elif args.update:
            n = update_profile_table(args.update, args.files)
            print(f"gpu_results: {args.update}: {n} profile rows", file=sys.stderr)
        else:
            w = csv.writer(sys.stdout, lineterminator="\n")
            for row in profile_rows(args.files, DEVICES):
                w.writerow(row)
        return 0
    except ResultsError as e:
        print(f"gpu_results: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
