# SPDX-License-Identifier: Apache-2.0
"""How time slicing shares a GPU between two processes, measured with synthetic jobs.

A probe job launches spin kernels of a set length (`torch.cuda._sleep`) with a set host time
between launches (a busy wait), and synchronizes once per iteration of --kernels launches: a
training job's shape with its busy fraction and kernel length under control. `run` runs each job
of the grid alone, then each pair of the grid as two processes on the same GPU with no MPS (the
driver's time slicing), both measuring over the same seconds, and writes each job's rate in the
pair over its rate alone (docs/results/time-slicing.md). No PyTorch is needed for --plan or
`summarize`.

  python3 bench/gpu/slice_probe.py run --out $OUT            # the basic grid (about 3 minutes)
  python3 bench/gpu/slice_probe.py run --grid queue --out $OUT  # light jobs beside shallow queues
  python3 bench/gpu/slice_probe.py run --plan                # the runs, nothing started
  python3 bench/gpu/slice_probe.py summarize A/runs.jsonl B/runs.jsonl  # medians over calls
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  the machine facts and CPU halves the harness uses

# name: (kernel length us, host time us after every `burst` launches, burst). Python's own launch
# cost adds about 5 us of host time per launch; each job's busy fraction alone is measured, not
# assumed.
JOBS = {
    "busy": (30, 0, 1),
    "medium": (20, 15, 1),
    "light": (20, 70, 1),
    "light-short": (5, 15, 1),
    "busy-long": (100, 10, 1),
    # The queue grid: co-runners whose queue drains after each kernel, at rising busy fractions, and
    # a light job whose launches come in bursts of ten.
    "q50": (20, 38, 1),
    "q70": (20, 26, 1),
    "q85": (20, 20, 1),
    "light-burst": (20, 700, 10),
}
# (production, opportunistic). basic: a busy job beside light ones of long and short kernels, the
# same jobs beside their own kind, and the mirror of the first pair. queue: a light job beside
# co-runners that keep shallow queues at rising busy fractions, and launches in bursts.
GRIDS = {
    "basic": [("busy", "light"), ("busy", "light-short"), ("busy", "medium"), ("medium", "light"),
              ("medium", "medium"), ("light", "light"), ("busy", "busy"), ("busy-long", "light"),
              ("light", "busy"), ("light", "light-short")],
    "queue": [("q50", "light"), ("q70", "light"), ("q85", "light"), ("medium", "light"), ("busy", "light"),
              ("q50", "light-short"), ("q70", "light-short"), ("medium", "light-short"),
              ("busy", "light-burst"), ("q70", "light-burst"), ("q50", "q50"), ("q70", "q70")],
}
PAIRS = GRIDS["basic"]
KERNELS_PER_ITERATION = 100


class ProbeError(Exception):
    """Bad input or a failed run: the message says which and why."""


def spin_until(deadline_ns: int) -> None:
    while time.perf_counter_ns() < deadline_ns:
        pass


def job_main(args) -> int:
    """One probe job: calibrate, wait for the common start, measure, print one JSON line."""
    import torch  # only the job itself needs PyTorch

    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.cuda.init()
    # Cycles per microsecond of the spin kernel, timed with CUDA events.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles_per_us = 20_000_000 / (start.elapsed_time(end) * 1e3)
    cycles = max(1, int(args.kernel_us * cycles_per_us))
    # The kernel's length as launched back to back (no host time between launches).
    start.record()
    for _ in range(200):
        torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    kernel_us = start.elapsed_time(end) * 1e3 / 200
    host_ns = int(args.host_us * 1e3)

    def iteration():
        for i in range(args.kernels):
            torch.cuda._sleep(cycles)
            if host_ns and (i + 1) % args.burst == 0:
                spin_until(time.perf_counter_ns() + host_ns)
        torch.cuda.synchronize()

    print(json.dumps({"event": "ready"}), flush=True)
    while time.time() < args.start_at:  # both jobs of a pair warm up, then measure together
        iteration()
    t0, n = time.perf_counter(), 0
    stop = t0 + args.seconds
    while time.perf_counter() < stop:
        iteration()
        n += 1
    wall = time.perf_counter() - t0
    it_per_s = n / wall
    print(json.dumps({"event": "result", "iterations": n, "seconds": wall, "it_per_s": it_per_s,
                      "kernel_us": kernel_us, "kernels_per_iteration": args.kernels,
                      "busy_fraction": min(1.0, args.kernels * kernel_us * 1e-6 * it_per_s)}), flush=True)
    return 0


def plan(seconds: float, warmup: float, grid: str = "basic"):
    """[(label, [job names])]: each job of the grid alone, then each pair."""
    pairs = GRIDS[grid]
    names = list(dict.fromkeys(n for pair in pairs for n in pair))
    runs = [(f"alone/{j}", [j]) for j in names]
    runs += [(f"pair/{p}+{o}", [p, o]) for p, o in pairs]
    return runs, len(runs) * (seconds + warmup + 4)


def run_one(label, names, args, cpus):
    start_at = time.time() + args.warmup + 4  # 4 s for PyTorch and CUDA to start
    procs = []
    for name, cpu in zip(names, cpus):
        kernel_us, host_us, burst = JOBS[name]
        cmd = [sys.executable, os.path.abspath(__file__), "job", "--kernel-us", str(kernel_us), "--host-us",
               str(host_us), "--burst", str(burst), "--kernels", str(KERNELS_PER_ITERATION), "--seconds", str(args.seconds),
               "--start-at", f"{start_at:.3f}", "--cpu", str(cpu)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for name, p in zip(names, procs):
        try:
            out, err = p.communicate(timeout=args.seconds + args.warmup + 60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise ProbeError(f"{label}: {name} did not finish") from None
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        res = [r for r in lines if r.get("event") == "result"]
        if p.returncode != 0 or not res:
            raise ProbeError(f"{label}: {name} exited {p.returncode}: {err.strip()[-400:]}")
        results.append({"job": name, **{k: v for k, v in res[0].items() if k != "event"}})
    return {"run": label, "jobs": results}


def summarize(records):
    """The summary of `run`'s records: each job alone, and each pair's rates over alone."""
    alone = {}
    for r in records:
        if r["run"].startswith("alone/"):
            j = r["jobs"][0]
            alone[j["job"]] = j
    pairs = []
    for r in records:
        if not r["run"].startswith("pair/"):
            continue
        if len(r["jobs"]) != 2:
            raise ProbeError(f"{r['run']}: expected two jobs, got {len(r['jobs'])}")
        p, o = r["jobs"]
        for j in (p, o):
            if j["job"] not in alone:
                raise ProbeError(f"{r['run']}: no alone run of {j['job']}")
        pairs.append({"production": p["job"], "opportunistic": o["job"],
                      "production_ratio": round(p["it_per_s"] / alone[p["job"]]["it_per_s"], 4),
                      "opportunistic_ratio": round(o["it_per_s"] / alone[o["job"]]["it_per_s"], 4)})
    jobs = {name: {"kernel_us": round(j["kernel_us"], 2), "host_us_set": JOBS.get(name, (None, None, 1))[1],
                   "burst": JOBS.get(name, (None, None, 1))[2],
                   "it_per_s": round(j["it_per_s"], 2), "busy_fraction": round(j["busy_fraction"], 4),
                   "kernel_launches_per_s": round(j["it_per_s"] * j["kernels_per_iteration"])}
            for name, j in alone.items()}
    return {"jobs": jobs, "pairs": pairs}


def launch_costs(summary):
    """What one launch of a light job costs beside a GPU-bound one (busy fraction >= 0.99 alone): the
    light job's wait per launch, (1/x - 1) / its launches per second alone, and the GPU time neither
    job used, per launch of the light job in the pair. {pair label: (wait_us, dead_us)}."""
    out = {}
    for p in summary["pairs"]:
        for busy, light, xb, xl in ((p["production"], p["opportunistic"], p["production_ratio"], p["opportunistic_ratio"]),
                                    (p["opportunistic"], p["production"], p["opportunistic_ratio"], p["production_ratio"])):
            jb, jl = summary["jobs"][busy], summary["jobs"][light]
            if jb["busy_fraction"] < 0.99 or jl["busy_fraction"] > 0.5 or xl <= 0:
                continue
            launches = jl["kernel_launches_per_s"]
            wait = (1 / xl - 1) / launches
            dead = (1 - xb * jb["busy_fraction"] - xl * jl["busy_fraction"]) / (launches * xl)
            out[f"{p['production']} + {p['opportunistic']}"] = (round(wait * 1e6, 1), round(dead * 1e6, 1))
    return out


def pool(summaries):
    """Several calls' summaries as one: per job and pair, the median over calls with min and max."""
    if not summaries:
        raise ProbeError("nothing to pool")
    jobs = {}
    for name in summaries[0]["jobs"]:
        have = [s["jobs"][name] for s in summaries if name in s["jobs"]]
        jobs[name] = {k: round(statistics.median(h[k] for h in have), 4) for k in have[0] if k != "host_us_set"}
        jobs[name]["host_us_set"] = have[0]["host_us_set"]
    pairs = []
    for p in summaries[0]["pairs"]:
        same = [q for s in summaries for q in s["pairs"]
                if (q["production"], q["opportunistic"]) == (p["production"], p["opportunistic"])]
        row = {"production": p["production"], "opportunistic": p["opportunistic"], "runs": len(same)}
        for side in ("production_ratio", "opportunistic_ratio"):
            vals = [q[side] for q in same]
            row[side] = round(statistics.median(vals), 4)
            row[side.replace("ratio", "range")] = [min(vals), max(vals)]
        pairs.append(row)
    return {"jobs": jobs, "pairs": pairs}


def table(summary):
    lines = ["pair (production + opportunistic)   busy alone     rate over alone"]
    for p in summary["pairs"]:
        bp, bo = summary["jobs"][p["production"]]["busy_fraction"], summary["jobs"][p["opportunistic"]]["busy_fraction"]
        spread = ""
        if "production_range" in p:
            spread = (f"   ({p['production_range'][0]:.2f}-{p['production_range'][1]:.2f} / "
                      f"{p['opportunistic_range'][0]:.2f}-{p['opportunistic_range'][1]:.2f}, {p['runs']} calls)")
        lines.append(f"{p['production'] + ' + ' + p['opportunistic']:<35} {bp:.2f} / {bo:.2f}    "
                     f"{p['production_ratio']:.2f} / {p['opportunistic_ratio']:.2f}{spread}")
    costs = launch_costs(summary)
    if costs:
        lines.append("")
        lines.append("a light job beside a GPU-bound one, per launch of the light job: its wait, and GPU time unused")
        for label, (wait, dead) in costs.items():
            lines.append(f"{label:<35} wait {wait:.1f} us, unused {dead:.1f} us")
    return "\n".join(lines)


def run_main(args) -> int:
    runs, estimate = plan(args.seconds, args.warmup, args.grid)
    if args.plan:
        for label, names in runs:
            print(f"{label:<28} {' + '.join(names)}")
        print(f"{len(runs)} runs, about {estimate:.0f} s")
        return 0
    if not args.out:
        raise ProbeError("run: --out DIR is required (or --plan)")
    os.makedirs(args.out, exist_ok=True)
    # Each job on the first CPU of its half of the GPU's local CPUs, as the harness splits them.
    facts = harness.nvidia_smi(["name", "driver_version", "pci.bus_id"]) or {}
    halves = harness.gpu_cpu_halves(facts.get("pci.bus_id"))
    pinned = [int(halves[c].split(",")[0]) for c in ("production", "opportunistic")] if halves else [None, None]
    records = []
    t0 = time.time()
    with open(os.path.join(args.out, "runs.jsonl"), "w", encoding="utf-8") as f:
        for label, names in runs:
            if time.time() - t0 + args.seconds + args.warmup + 4 > args.max_s:
                print(f"skip {label}: past --max-s", file=sys.stderr)
                continue
            rec = run_one(label, names, args, pinned)
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(label, " ".join(f"{j['job']} {j['it_per_s']:.1f} it/s busy {j['busy_fraction']:.2f}"
                                   for j in rec["jobs"]), flush=True)
    summary = summarize(records)
    summary.update(device=f"{facts.get('name', 'unknown')}, {facts.get('driver_version', 'unknown')}",
                   seconds=args.seconds, kernels_per_iteration=KERNELS_PER_ITERATION)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(table(summary))
    return 0


def read_runs(path):
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ProbeError(f"{path}:{n}: not JSON: {e.msg}") from None
                    if not isinstance(rec, dict) or not isinstance(rec.get("run"), str) \
                            or not isinstance(rec.get("jobs"), list):
                        raise ProbeError(f"{path}:{n}: expected a run record with 'run' and 'jobs'")
                    records.append(rec)
    except OSError as e:
        raise ProbeError(f"{path}: {e.strerror}") from None
    return records


def summarize_main(args) -> int:
    summaries = [summarize(read_runs(path)) for path in args.runs]
    summary = summaries[0] if len(summaries) == 1 else pool(summaries)
    if args.json:
        summary["launch_costs_us"] = {k: {"wait": w, "unused": d} for k, (w, d) in launch_costs(summary).items()}
    print(json.dumps(summary, indent=1) if args.json else table(summary))
    return 0


def model_rows(summary, gpu):
    """models.csv rows (tgs-sim --models) of the probe jobs as measured alone: one 1-block kernel per
    launch, an idle gap after each launch of a job with host time, no jitter, a few MiB."""
    rows = []
    for name, j in summary["jobs"].items():
        _, host_us, burst = JOBS.get(name, (0, 0, 1))
        launches = summary.get("kernels_per_iteration", KERNELS_PER_ITERATION)
        rows.append(",".join(str(x) for x in (
            f"probe-{name}", gpu, 1, f"{1e3 / j['it_per_s']:.4f}", f"{min(1.0, j['busy_fraction']):.4f}", launches,
            launches, launches // burst if host_us > 0 else 1, 0, 1, 0.01, 0.01, "mmmmmmemm",
            "bench/gpu/slice_probe.py (a synthetic job alone)")))
    return rows


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job", help="one probe job (run starts these)")
    j.add_argument("--kernel-us", type=float, required=True, help="length of each spin kernel")
    j.add_argument("--host-us", type=float, required=True, help="host busy time after each launch")
    j.add_argument("--kernels", type=int, default=KERNELS_PER_ITERATION, help="launches per iteration")
    j.add_argument("--burst", type=int, default=1, help="launches between host waits (1)")
    j.add_argument("--seconds", type=float, default=6.0, help="measured seconds")
    j.add_argument("--start-at", type=float, default=0.0, help="Unix time at which to start measuring")
    j.add_argument("--cpu", type=int, help="pin the job to this CPU")
    r = sub.add_parser("run", help="the grid: each job alone, then each pair")
    r.add_argument("--out", help="folder for runs.jsonl and summary.json")
    r.add_argument("--seconds", type=float, default=6.0, help="measured seconds per run (6)")
    r.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring (2)")
    r.add_argument("--max-s", type=float, default=540.0, help="start no run that would end later (540)")
    r.add_argument("--plan", action="store_true", help="list the runs and their time; run nothing")
    r.add_argument("--grid", choices=sorted(GRIDS), default="basic",
                   help="basic: busy and light jobs; queue: light jobs beside shallow queues, bursts (basic)")
    s = sub.add_parser("summarize", help="the summary of runs.jsonl files (several: medians over the calls)")
    s.add_argument("runs", nargs="+", help="runs.jsonl of `run`, one per call")
    s.add_argument("--json", action="store_true", help="JSON instead of a table")
    m = sub.add_parser("models", help="models.csv rows of the probe jobs, to simulate the same pairs (tgs-sim --models)")
    m.add_argument("runs", nargs="+", help="runs.jsonl of `run`, one per call (medians over calls)")
    m.add_argument("--gpu", default="h100-80gb", help="the GPU type the rows describe (h100-80gb)")
    args = ap.parse_args(argv)
    if args.cmd == "job" and (args.kernel_us <= 0 or args.host_us < 0 or args.kernels < 1 or args.seconds <= 0
                            or args.burst < 1):
        ap.error("job: --kernel-us and --seconds must be above 0, --host-us at least 0, --kernels and --burst at "
                 "least 1")
    try:
        if args.cmd == "models":
            summaries = [summarize(read_runs(path)) for path in args.runs]
            print("\n".join(model_rows(summaries[0] if len(summaries) == 1 else pool(summaries), args.gpu)))
            return 0
        return {"job": job_main, "run": run_main, "summarize": summarize_main}[args.cmd](args)
    except ProbeError as e:
        print(f"slice_probe: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
