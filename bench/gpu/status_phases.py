# SPDX-License-Identifier: Apache-2.0
"""Summarize tgs-node status samples (memory.sh's status-samples.jsonl) per run and phase.

memory.sh samples `tgs-node status --json` once a second during its tgs runs and writes one JSON
line per sample: {"run": ..., "t": unix time, "gpus": [...], "jobs": [...]}. This reads such a
file and prints, for every run and every rate-control phase of GPU 0 while both a production and
an opportunistic job were registered (and as the phase "production-alone" while only the
production job was: the same job under the interposer with the GPU to itself), the number of
samples and the medians of (the phase "refreshing" is a reference refresh, tgs-node
--refresh-every-windows: the opportunistic job held for a few windows while R is measured again):
  budget       the opportunistic budget (blocks per budget window)
  R            the controller's maximum production rate (blocks/s)
  band         the dead band in force (with --noise-band-multiple: calibrated from the profiling
               windows; a production rate within it of R counts as unslowed)
  prod_bps     the production job's launched blocks per second
  sample_bps   the production rate the controller last compared with R, per second (with
               --sync-wait-correction the corrected rate; files from before tgs-node reported it: -)
  prod_wait    the production job's sync_wait_fraction (share of its time blocked on its GPU work)
  opp_bps      the opportunistic job's launched blocks per second
  opp_res_gib  the opportunistic job's resident bytes, GiB
  prod_launch_us, opp_launch_us  each job's mean time inside the driver's launch call (launch_call_us)

With --control it prints instead one line per run in which the controller left profiling, on
how it got where it settled. Its control samples are those in slow start or congestion avoidance;
samples of a refresh are not control samples (the opportunistic job is held in them). The run's
last sample in control or in a refresh is left out: it spans memory.sh stopping the jobs, so the
production job's rate in it is a partial second, down to 0.
  ss_n         samples in slow start
  ss_peak      the largest budget in slow start (20000, the initial budget, means the first
               control windows already ended it)
  ca_budget    the median budget over the run's last N samples in congestion avoidance (--last N, 10)
  ca_opp_bps   the opportunistic job's launched blocks/s, median over those samples
  prod_over_R  the production job's launched blocks/s over R, median over the control samples
  below_band   the share of control samples whose launched rate was below R by more than the dead
               band (the controller acts on its own sample, which with --sync-wait-correction is
               the corrected rate; older status samples hold the launched rate only)
  sample_over_R, sample_sd, sample_below
               the same for the rate the controller acted on (sample_bps): its median over R, its
               standard deviation over R (the noise the dead band has to cover; `tgs-sim pairs
               --observation-noise` models it), and the share below the band (-: not reported)
  host_speed   how fast the production job's host side ran per block in control, against
               profiling (the same job, the opportunistic job registered but held): the median
               host time per block, (1 - prod_wait) / prod_bps, over the profiling samples divided
               by that over the control samples. Below 1: each block took more host time in
               control, a slowdown the sync-wait correction reads as the job's own noise, whether
               the machine drifted or the opportunistic job slowed the host side (-: no profiling
               sample with a wait, or none in control)
  refresh_n    the refreshes seen in the run: runs of consecutive "refreshing" samples
  ctl_over_held
               the production job's loss beside the opportunistic job, measured within the run so
               that the job's drift between runs does not enter it: for each refresh, the median
               launched blocks/s over the control samples in the 10 s before it, over the median
               over the refresh's samples less its first (in which the opportunistic job's queued
               kernels drain); the median of that over the refreshes (-: no refresh with both)

With --refreshes it prints instead one line per refresh, the parts of ctl_over_held one by one:
  run, refresh the run and the refresh's number in it (a refresh cut short by the jobs' stop
               counts, as in refresh_n, with nothing measured)
  at_s         seconds from the run's first sample (its production job registered) to the
               refresh's first sample
  held_n       the refresh's samples that measure the held rate (all but its first)
  prod_before  the production job's launched blocks/s, median over the control samples in the 10 s
               before the refresh
  prod_held    the same over the held samples
  ctl_over_held  prod_before / prod_held
  opp_before   the opportunistic job's launched blocks/s over the same 10 s: what it ran at while
               costing the production job that much
  R_before, R_after  R in the last control sample before the refresh and the first after it (the
               refresh's move; -: none)

With --beside it prints instead one line per run that has both kinds of sample: the production
job's launched rate while the opportunistic job could run, against the same job's rate in the
same run while it was alone (in memory.sh's runs, the seconds before the opportunistic job
registered). This compares a fixed
share's or a controller's cost within one run, so that the drift of a host between runs does not
enter it; the alone samples are the job's first seconds, so they measure it younger than the
samples beside the opportunistic job do.
  alone_n, alone_bps, alone_wait
               the production-alone samples: their count, and the medians of the production job's
               launched blocks/s and of its sync_wait_fraction
  beside_n, beside_bps, beside_wait
               the same over the samples in which the opportunistic job was allowed to launch:
               every phase with both jobs registered except profiling and refreshing (which hold
               it), the run's last such sample (the jobs' stop, a partial second) left out
  beside_over_alone  beside_bps / alone_bps
  opp_bps      the opportunistic job's launched blocks/s, median over the beside samples
--beside takes several files (several calls): each line then names its file, and a last line
gives the median of beside_over_alone over all their runs, with its min-max (with --json, each
run's line has a "file" key).

Usage: python3 bench/gpu/status_phases.py FILE [--json] [--control [--last N] | --refreshes]
       python3 bench/gpu/status_phases.py FILE [FILE ...] --beside [--json]
"""
import argparse
import json
import os
import statistics
import sys

FIELDS = ("budget", "R", "band", "prod_bps", "sample_bps", "prod_wait", "opp_bps", "opp_res_gib", "prod_launch_us", "opp_launch_us")


def median_or_none(values: list):
    """The median of VALUES, or None for none: every table prints "-" for a median of nothing."""
    return statistics.median(values) if values else None


def median_of(samples: list, key: str):
    """The median of KEY over the SAMPLES (values) that have it, or None."""
    return median_or_none([v[key] for v in samples if v.get(key) is not None])


def rows(path: str):
    """(run, phase, values) per sample with both classes present; errors name file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                sample = parse(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError, StopIteration) as e:
                raise ValueError(f"{path}:{lineno}: not a status sample ({type(e).__name__}: {e})") from None
            if sample is not None:
                yield sample


def number(v):
    """A JSON number, or None where the node reported none (null); anything else is an error."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected a number, got {v!r}")
    return v


def parse(d: dict):
    """(run, phase, values) of one sample, or None while GPU 0 has no production job. Values hold
    the FIELDS a sample has and its time "t" (unix seconds)."""
    gpus, jobs, run = d["gpus"], d["jobs"], str(d["run"])
    if not gpus:
        return None
    by_class = {j["class"]: j for j in jobs if j.get("gpu", 0) == 0}
    p, o = by_class.get("production"), by_class.get("opportunistic")
    if p is None:
        return None
    if o is None:
        return run, "production-alone", {
            "t": number(d.get("t")),
            "prod_bps": number(p.get("blocks_per_s")),
            "prod_wait": number(p.get("sync_wait_fraction")),
            "prod_launch_us": number(p.get("launch_call_us")),
        }
    g = next(g for g in gpus if g.get("gpu", 0) == 0)
    resident = number(o.get("resident_bytes"))
    return run, str(g.get("phase", "?")), {
        "t": number(d.get("t")),
        "budget": number(g.get("budget_blocks")),
        "R": number(g.get("max_rate_blocks_per_s")),
        "band": number(g.get("dead_band")),
        "prod_bps": number(p.get("blocks_per_s")),
        "sample_bps": number(g.get("sample_blocks_per_s")),
        "prod_wait": number(p.get("sync_wait_fraction")),
        "opp_bps": number(o.get("blocks_per_s")),
        "opp_res_gib": resident / 2**30 if resident is not None else None,
        "prod_launch_us": number(p.get("launch_call_us")),
        "opp_launch_us": number(o.get("launch_call_us")),
    }


def summarize(path: str) -> list:
    groups, samples = {}, {}
    for run, phase, values in rows(path):
        g = groups.setdefault((run, phase), {k: [] for k in FIELDS})
        samples[(run, phase)] = samples.get((run, phase), 0) + 1
        for k in FIELDS:
            if values.get(k) is not None:
                g[k].append(values[k])
    out = []
    for (run, phase), g in groups.items():  # insertion order: runs, then phases as first seen
        entry = {"run": run, "phase": phase, "samples": samples[(run, phase)]}
        for k in FIELDS:
            entry[k] = median_or_none(g[k])
        out.append(entry)
    return out


CONTROL_PHASES = ("slow_start", "congestion_avoidance")
REFRESH_PHASE = "refreshing"
# ctl_over_held compares a refresh with the control samples of this many seconds before it: with
# one sample a second, about ten, and near enough for the machine not to have drifted.
BEFORE_REFRESH_S = 10.0


def over_r(samples: list, key: str):
    """The production rate `key` over R in each sample that has both, and the share of those
    below R by more than the dead band (None without any)."""
    rel, below = [], 0
    for _, v in samples:
        r, x = v["R"], v.get(key)
        if r and x is not None:
            rel.append(x / r)
            below += x < r * (1.0 - (v["band"] or 0.0))
    return rel, (below / len(rel) if rel else None)


def refreshes(sequence: list, stop: int) -> list:
    """The refreshes of a run's samples SEQUENCE ((phase, values) in order, every phase): one
    list per run of consecutive refreshing samples, of (index in SEQUENCE, values), the sample at
    index STOP (the jobs' stop) left out."""
    out, current = [], None
    for i, (phase, v) in enumerate(sequence):
        if phase != REFRESH_PHASE:
            current = None
            continue
        if current is None:
            current = []
            out.append(current)
        if i != stop:
            current.append((i, v))
    return out


def around_refresh(sequence: list, stop: int, refresh: list):
    """The samples that ctl_over_held compares for one REFRESH (an entry of refreshes()): the
    values of the control samples in the BEFORE_REFRESH_S seconds before it, and the production
    job's launched rates in it less its first sample (in which the opportunistic job's queued
    kernels drain, as the controller discards its first held window). ([], []) for a refresh
    without a time."""
    if not refresh or refresh[0][1].get("t") is None:
        return [], []
    start, t0 = refresh[0][0], refresh[0][1]["t"]
    before = [v for i, (phase, v) in enumerate(sequence[:start])
              if phase in CONTROL_PHASES and i != stop and v.get("t") is not None
              and t0 - BEFORE_REFRESH_S <= v["t"] < t0 and v.get("prod_bps") is not None]
    held = [v["prod_bps"] for _, v in refresh[1:] if v.get("prod_bps") is not None]
    return before, held


def refresh_ratio(before: list, held: list):
    """The median production rate BEFORE (values) over the median HELD rate, or None."""
    if before and held and statistics.median(held) > 0:
        return statistics.median([v["prod_bps"] for v in before]) / statistics.median(held)
    return None


def control_over_held(sequence: list, stop: int, held_runs: list):
    """ctl_over_held (see the module doc) of a run's samples SEQUENCE, or None; HELD_RUNS is
    refreshes(SEQUENCE, STOP)."""
    ratios = [r for r in (refresh_ratio(*around_refresh(sequence, stop, refresh)) for refresh in held_runs)
              if r is not None]
    return median_or_none(ratios)


def sequences(path: str) -> dict:
    """Each run's samples in order, (phase, values), every phase; runs in the file's order."""
    out = {}
    for run, phase, v in rows(path):
        out.setdefault(run, []).append((phase, v))
    return out


def stop_index(sequence: list, counts=lambda phase: phase in CONTROL_PHASES or phase == REFRESH_PHASE):
    """The index of a run's last sample whose phase COUNTS (the jobs' stop, a partial second), or
    None. By default the last sample in control or in a refresh, the tables of the controller;
    --beside counts every phase with both jobs registered."""
    marks = [i for i, (phase, _) in enumerate(sequence) if counts(phase)]
    return max(marks) if marks else None


def refresh_table(path: str) -> list:
    """One entry per refresh (see --refreshes in the module doc), runs and refreshes in order."""
    out = []
    for run, sequence in sequences(path).items():
        stop = stop_index(sequence)
        if stop is None:
            continue
        t_start = next((v["t"] for _, v in sequence if v.get("t") is not None), None)
        for n, refresh in enumerate(refreshes(sequence, stop), 1):
            before, held = around_refresh(sequence, stop, refresh)
            first = refresh[0][0] if refresh else stop
            last = refresh[-1][0] if refresh else stop
            after = next((v for phase, v in sequence[last + 1:] if phase in CONTROL_PHASES), None)
            t0 = refresh[0][1].get("t") if refresh else None
            r_before = next((v["R"] for phase, v in reversed(sequence[:first]) if phase in CONTROL_PHASES), None)
            out.append({
                "run": run,
                "refresh": n,
                "at_s": t0 - t_start if t0 is not None and t_start is not None else None,
                "held_n": len(held),
                "prod_before": median_of(before, "prod_bps"),
                "prod_held": median_or_none(held),
                "ctl_over_held": refresh_ratio(before, held),
                "opp_before": median_of(before, "opp_bps"),
                "R_before": r_before,
                "R_after": after["R"] if after is not None else None,
            })
    return out


def control(path: str, last: int = 10) -> list:
    """One entry per run with control samples (slow start or congestion avoidance), in run order."""
    out = []
    for run, sequence in sequences(path).items():
        indexed = [i for i, (phase, _) in enumerate(sequence) if phase in CONTROL_PHASES]
        if not indexed:
            continue
        # A run's last sample with both jobs registered spans memory.sh stopping them: the
        # production job's rate in it is a partial second (down to 0), not the controller's noise.
        # Left out here, where a standard deviation and a share below the band are taken, which
        # one such sample distorts (it tripled sample_sd in two runs). The per-phase table keeps
        # it: a median moves by at most one neighbour, and the numbers docs/results quotes from
        # that table were taken with every sample (without it, 292 of its 967 phase medians there
        # move by more than 0.5%, each quoted number to be checked again first). The stop is the
        # run's last sample in control or in a refresh, so a file without refreshes loses its last
        # control sample, as it always did.
        stop = stop_index(sequence)
        samples = [sequence[i] for i in indexed if i != stop] or [sequence[i] for i in indexed]
        held_runs = refreshes(sequence, stop)
        ss = [v["budget"] for phase, v in samples if phase == "slow_start" and v["budget"] is not None]
        ca = [v for phase, v in samples if phase == "congestion_avoidance"][-last:]
        launched, below = over_r(samples, "prod_bps")
        seen, seen_below = over_r(samples, "sample_bps")
        host_profiling = host_time_per_block([v for phase, v in sequence if phase == "profiling"])
        host_control = host_time_per_block([v for _, v in samples])
        out.append({
            "run": run,
            "ss_n": sum(1 for phase, _ in samples if phase == "slow_start"),
            "ss_peak": max(ss) if ss else None,
            "ca_budget": median_of(ca, "budget"),
            "ca_opp_bps": median_of(ca, "opp_bps"),
            "prod_over_R": median_or_none(launched),
            "below_band": below,
            "sample_over_R": median_or_none(seen),
            "sample_sd": statistics.stdev(seen) if len(seen) > 1 else None,
            "sample_below": seen_below,
            "host_speed": host_profiling / host_control if host_profiling and host_control else None,
            "refresh_n": len(held_runs),
            "ctl_over_held": control_over_held(sequence, stop, held_runs),
        })
    return out


# Phases in which the controller holds the opportunistic job (no budget): the production job in
# them runs as if alone, so they are neither alone samples nor samples beside it.
HELD_PHASES = ("profiling", REFRESH_PHASE)


def beside(path: str) -> list:
    """One entry per run with production-alone samples and samples beside the opportunistic job
    (see --beside in the module doc), in run order."""
    out = []
    for run, sequence in sequences(path).items():
        alone = [v for phase, v in sequence if phase == "production-alone"]
        stop = stop_index(sequence, lambda phase: phase != "production-alone")
        shared = [v for i, (phase, v) in enumerate(sequence)
                  if i != stop and phase != "production-alone" and phase not in HELD_PHASES]
        if not alone or not shared:
            continue
        alone_bps, beside_bps = median_of(alone, "prod_bps"), median_of(shared, "prod_bps")
        out.append({
            "run": run,
            "alone_n": len(alone),
            "alone_bps": alone_bps,
            "alone_wait": median_of(alone, "prod_wait"),
            "beside_n": len(shared),
            "beside_bps": beside_bps,
            "beside_wait": median_of(shared, "prod_wait"),
            "beside_over_alone": beside_bps / alone_bps if alone_bps and beside_bps is not None else None,
            "opp_bps": median_of(shared, "opp_bps"),
        })
    return out


def host_time_per_block(samples: list):
    """The median over SAMPLES of the production job's host seconds per launched block,
    (1 - sync_wait_fraction) / blocks_per_s; None without a sample that has both."""
    h = [(1.0 - v["prod_wait"]) / v["prod_bps"] for v in samples
         if (v.get("prod_bps") or 0) > 0 and v.get("prod_wait") is not None]
    return median_or_none(h)


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="file",
                        help="status samples, one JSON object per line (memory.sh); with --beside, one or "
                             "more calls' files, and with several the median over all their runs")
    parser.add_argument("--json", action="store_true", help="print one JSON line per run and phase")
    parser.add_argument("--control", action="store_true",
                        help="one line per run: how the controller grew and where it settled")
    parser.add_argument("--last", type=int, default=10,
                        help="with --control: congestion-avoidance samples the settled values take (10)")
    parser.add_argument("--refreshes", action="store_true",
                        help="one line per reference refresh: the production rate before it and in it")
    parser.add_argument("--beside", action="store_true",
                        help="one line per run: the production rate beside the opportunistic job against alone")
    args = parser.parse_args()
    if args.last < 1:
        parser.error("--last must be at least 1")
    if args.control + args.refreshes + args.beside > 1:
        parser.error("--control, --refreshes and --beside are different tables: give one")
    several = len(args.files) > 1
    if several and not args.beside:
        parser.error("several files: only --beside pools runs over calls; give the other tables one file")
    path = args.files[0]
    try:
        if args.beside:
            # Several calls' runs side by side, each named by its file, so one command gives the
            # median over all of them (the priority question spans calls on three machines).
            table = [({"file": os.path.basename(f)} if several else {}) | e for f in args.files for e in beside(f)]
        elif args.refreshes:
            table = refresh_table(path)
        elif args.control:
            table = control(path, args.last)
        else:
            table = summarize(path)
    except (OSError, ValueError) as e:
        print(f"status_phases: {e}", file=sys.stderr)
        return 2
    if args.json:
        for entry in table:
            print(json.dumps(entry))
        return 0
    if args.beside:
        print(f"{'run':<24} {'alone_n':>7} {'alone_bps':>11} {'alone_wait':>10} {'beside_n':>8} {'beside_bps':>11} "
              f"{'beside_wait':>11} {'beside_over_alone':>17} {'opp_bps':>11}" + ("  file" if several else ""))
        for e in table:
            print(f"{e['run']:<24} {e['alone_n']:>7} {fmt(e['alone_bps'], '11.0f'):>11} {fmt(e['alone_wait'], '10.3f'):>10} "
                  f"{e['beside_n']:>8} {fmt(e['beside_bps'], '11.0f'):>11} {fmt(e['beside_wait'], '11.3f'):>11} "
                  f"{fmt(e['beside_over_alone'], '17.3f'):>17} {fmt(e['opp_bps'], '11.0f'):>11}"
                  + (f"  {e['file']}" if several else ""))
        if several:
            ratios = [e["beside_over_alone"] for e in table if e["beside_over_alone"] is not None]
            print(f"beside_over_alone over {len(ratios)} runs of {len(args.files)} files: median "
                  + (f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-"))
        return 0
    if args.refreshes:
        print(f"{'run':<20} {'refresh':>7} {'at_s':>6} {'held_n':>6} {'prod_before':>11} {'prod_held':>11} "
              f"{'ctl_over_held':>13} {'opp_before':>11} {'R_before':>11} {'R_after':>11}")
        for e in table:
            print(f"{e['run']:<20} {e['refresh']:>7} {fmt(e['at_s'], '6.1f'):>6} {e['held_n']:>6} "
                  f"{fmt(e['prod_before'], '11.0f'):>11} {fmt(e['prod_held'], '11.0f'):>11} "
                  f"{fmt(e['ctl_over_held'], '13.3f'):>13} {fmt(e['opp_before'], '11.0f'):>11} "
                  f"{fmt(e['R_before'], '11.0f'):>11} {fmt(e['R_after'], '11.0f'):>11}")
        return 0
    if args.control:
        print(f"{'run':<20} {'ss_n':>4} {'ss_peak':>9} {'ca_budget':>9} {'ca_opp_bps':>11} {'prod_over_R':>11} "
              f"{'below_band':>10} {'sample_over_R':>13} {'sample_sd':>9} {'sample_below':>12} {'host_speed':>10} "
              f"{'refresh_n':>9} {'ctl_over_held':>13}")
        for e in table:
            print(f"{e['run']:<20} {e['ss_n']:>4} {fmt(e['ss_peak'], '9.0f'):>9} {fmt(e['ca_budget'], '9.0f'):>9} "
                  f"{fmt(e['ca_opp_bps'], '11.0f'):>11} {fmt(e['prod_over_R'], '11.3f'):>11} "
                  f"{fmt(e['below_band'], '10.2f'):>10} {fmt(e['sample_over_R'], '13.3f'):>13} "
                  f"{fmt(e['sample_sd'], '9.3f'):>9} {fmt(e['sample_below'], '12.2f'):>12} "
                  f"{fmt(e['host_speed'], '10.3f'):>10} {e['refresh_n']:>9} {fmt(e['ctl_over_held'], '13.3f'):>13}")
        return 0
    print(f"{'run':<16} {'phase':<22} {'n':>3} {'budget':>9} {'R':>11} {'band':>6} {'prod_bps':>11} {'sample_bps':>11} "
          f"{'prod_wait':>9} {'opp_bps':>11} {'opp_res_gib':>11} {'prod_launch_us':>14} {'opp_launch_us':>13}")
    for e in table:
        print(f"{e['run']:<16} {e['phase']:<22} {e['samples']:>3} {fmt(e['budget'], '9.0f'):>9} "
              f"{fmt(e['R'], '11.0f'):>11} {fmt(e['band'], '6.3f'):>6} {fmt(e['prod_bps'], '11.0f'):>11} "
              f"{fmt(e['sample_bps'], '11.0f'):>11} "
              f"{fmt(e['prod_wait'], '9.3f'):>9} {fmt(e['opp_bps'], '11.0f'):>11} "
              f"{fmt(e['opp_res_gib'], '11.2f'):>11} {fmt(e['prod_launch_us'], '14.2f'):>14} "
              f"{fmt(e['opp_launch_us'], '13.2f'):>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
