#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Real-GPU comparison of sharing modes for two training pairs: each job alone, the production job
# alone under the interposer (overhead), plain co-execution, MPS with thread percentages, and TGS
# (tgs-node + libtgs-intercept.so). Every mode of every pair runs RUNS times as independent runs:
# fresh training processes each run, a fresh tgs-node per interposer / tgs run, and an MPS control
# daemon started and stopped around each MPS run. The runs interleave (run 1 of every pair and
# mode, then run 2, ...), so a call cut short by MAX_S still has every mode. One call builds what
# it needs and writes $OUT/gpu-rate-control.json, $OUT/runs.jsonl (one line per training process,
# with its run index "run"; "run_failed": true on the lines of a run in which a process failed),
# $OUT/node.log, $OUT/gpu-rate-control.log and $OUT/status-samples.jsonl (tgs-node status once a
# second during the tgs runs, bench/gpu/node_status.py; summarize it per run and rate-control phase
# with bench/gpu/status_phases.py).
#
# Run from anywhere on a machine with a GPU, CUDA, PyTorch + torchvision, CMake and ninja:
#   OUT=/some/dir bench/gpu/rate_control.sh
# Knobs (environment; the seconds are whole seconds):
#   PAIRS ("low high")  pairs to measure.
#   MODES ("alone interposer coexec tgs mps")  modes to run, a subset of these names (they always run
#     in this order). Normalized numbers need the alone mode in the same call.
#   RUNS (3)  independent runs of coexec, tgs and mps; ALONE_RUNS (RUNS) of the alone modes (alone:
#     each job alone, the production job then the opportunistic one; interposer: the production job
#     alone under the interposer).
#   WINDOWS (4) windows of WINDOW_S (5) seconds per run, WARMUP_S (20) before the first window,
#   TGS_SETTLE_S (30) more for TGS to profile and converge, MPS_PROD / MPS_OPP (100 / 50) thread
#   percentages, TGS_PRODUCTION_WINDOW_MS (1000), BATCH (64, where a pair names none).
#   PIN_CPUS (1)  1: each job runs on its own half of the CPUs local to the GPU (its PCI device's
#     local_cpulist in sysfs): the production job on the first half, the opportunistic one on the
#     second, in every mode (alone too, so a job's baseline runs where it runs shared). Jobs bound by
#     their Python loop otherwise move between cores and sockets from run to run, which moves their
#     rates by several percent. 0: no pinning. The halves are recorded in the summary.
#   TGS_NODE_FLAGS ("")  extra tgs-node flags for the tgs mode, split at spaces, e.g.
#     TGS_NODE_FLAGS="--rate-smoothing 0.8 --noise-band-multiple 2" (not the flags the script sets:
#     --socket, --production-window-ms, --profile-windows, --max-profile-windows, --log-level).
#   MAX_S (560)  no run starts that would end more than MAX_S seconds after the script started; its
#     length is estimated from the knobs (below, with SLACK_S (2) seconds per measurement for process
#     exit and node / MPS start and stop), or is the longest run of that mode so far where longer.
#     Skipped runs are warned about and listed under "skipped" in the summary. Once the measurements
#     have begun the summary is written on every exit (also after an error or SIGTERM; "complete":
#     false then). A training process still running 60 s after its last window should have ended, or
#     20 s after MAX_S, is killed; a run with a failed process is listed under "failed", left out of
#     the numbers, and makes the exit status 1.
#
# Runtime. One measurement takes M = WARMUP_S + WINDOWS * WINDOW_S seconds (+ SLACK_S); a run of
# one pair is alone (2 M: the two jobs one after the other), interposer, coexec and mps (M each) and
# tgs (M + TGS_SETTLE_S): 6 M + TGS_SETTLE_S, plus 6 x SLACK_S, plus the build once per call (a few
# seconds when $TGS_GPU_BUILD is already built, more on a fresh machine). The models do not matter:
# the windows are on the clock.
#   Defaults: M = 20 + 4 x 5 = 40 s; a run = 6 x 40 + 30 = 270 s (282 s with slack); RUNS=3 x 2 pairs
#     = 6 x 282 = 1692 s (~28 min). Under MAX_S=560 (with a built $TGS_GPU_BUILD) that keeps run 1 of
#     the low pair and most of run 1 of the high pair (282 + 282 = 564 > 560: its mps run is skipped).
#     Where no 600 s limit applies, raise MAX_S; under one, measure one pair per call, shorter:
#   PAIRS=high RUNS=3 WINDOWS=3 WINDOW_S=4 WARMUP_S=12 TGS_SETTLE_S=20 bench/gpu/rate_control.sh:
#     M = 12 + 3 x 4 = 24 s; a run = 6 x 24 + 20 = 164 s (176 s with slack); 3 runs = 492 s (528 s
#     with slack), plus the build: ~530 s with a built $TGS_GPU_BUILD. PAIRS=low: the same. A fresh
#     build longer than ~30 s makes MAX_S skip the last run's mps (and then tgs); ALONE_RUNS=2 saves
#     2 x 24 + 24 + 3 x 2 = 78 s.
# Machines without the fmt and CLI11 packages: put their headers in .deps/include (CLI/, fmt/) at
# the repository root; the build then uses them header-only.
#
# Safety: this script never changes clocks, power limits, compute mode or MIG, and never resets
# the GPU. It starts an MPS control daemon for each MPS run and always stops it again.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:-$repo/gpu-rate-control-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-rate-control.log") 2>&1

WINDOWS=${WINDOWS:-4}
WINDOW_S=${WINDOW_S:-5}
WARMUP_S=${WARMUP_S:-20}
TGS_SETTLE_S=${TGS_SETTLE_S:-30}
MPS_PROD=${MPS_PROD:-100}
MPS_OPP=${MPS_OPP:-50}
TGS_PRODUCTION_WINDOW_MS=${TGS_PRODUCTION_WINDOW_MS:-1000}
BATCH=${BATCH:-64}
RUNS=${RUNS:-3}
ALONE_RUNS=${ALONE_RUNS:-$RUNS}
TGS_NODE_FLAGS=${TGS_NODE_FLAGS:-}
MAX_S=${MAX_S:-560}
PIN_CPUS=${PIN_CPUS:-1}
SLACK_S=${SLACK_S:-2}
PAIRS=${PAIRS:-low high}
all_modes="alone interposer coexec tgs mps"
MODES=${MODES:-$all_modes}
BUILD=${TGS_GPU_BUILD:-/tmp/tgs-gpu-build}

# Low contention: a small production model that leaves the GPU idle between its kernels.
# High contention: ResNet-50 production with ShuffleNet opportunistic (as in the TGS paper), at a
# batch that makes ResNet-50 GPU-bound on an H100/H200 (at 64 its Python loop is the bottleneck).
all_pairs=("low mobilenet_v2:64 shufflenet_v2_x1_0:64" "high resnet50:256 shufflenet_v2_x1_0:128")

for k in WINDOWS WINDOW_S WARMUP_S TGS_SETTLE_S RUNS ALONE_RUNS MAX_S SLACK_S PIN_CPUS; do
  [[ ${!k} =~ ^[0-9]+$ ]] || { echo "$k must be a whole number (got '${!k}')"; exit 2; }
done
for m in $MODES; do
  case " $all_modes " in *" $m "*) ;; *) echo "unknown mode '$m' in MODES (known: $all_modes)"; exit 2 ;; esac
done
modes=()  # the selected modes, in the script's order
for m in $all_modes; do case " $MODES " in *" $m "*) modes+=("$m") ;; esac; done
pair_names=()
for p in "${all_pairs[@]}"; do pair_names+=("${p%% *}"); done
for p in $PAIRS; do
  case " ${pair_names[*]} " in *" $p "*) ;; *) echo "unknown pair '$p' in PAIRS (known: ${pair_names[*]})"; exit 2 ;; esac
done
read -r -a node_flags <<< "$TGS_NODE_FLAGS"

# A knob value as the command line gives it (single-quoted where it has spaces or is empty).
q() {
  case $1 in
    '' | *[!A-Za-z0-9_.,:/+=-]*) printf "'%s'" "${1//\'/\'\\\'\'}" ;;
    *) printf '%s' "$1" ;;
  esac
}
command="PAIRS=$(q "$PAIRS") MODES=$(q "${modes[*]}") RUNS=$RUNS ALONE_RUNS=$ALONE_RUNS WINDOWS=$WINDOWS"
command+=" WINDOW_S=$WINDOW_S WARMUP_S=$WARMUP_S TGS_SETTLE_S=$TGS_SETTLE_S MPS_PROD=$MPS_PROD MPS_OPP=$MPS_OPP"
command+=" TGS_PRODUCTION_WINDOW_MS=$TGS_PRODUCTION_WINDOW_MS BATCH=$BATCH TGS_NODE_FLAGS=$(q "$TGS_NODE_FLAGS")"
command+=" MAX_S=$MAX_S SLACK_S=$SLACK_S PIN_CPUS=$PIN_CPUS bench/gpu/rate_control.sh"


work=$(mktemp -d /tmp/tgs-gpu-XXXXXX)
socket=$work/node.sock
runs=$OUT/runs.jsonl
run_log=$work/run-log  # one line per run: PAIR MODE RUN done|failed|skipped AT_S SECONDS
: > "$runs"
: > "$OUT/node.log"
samples=$OUT/status-samples.jsonl
: > "$samples"
sampler_pid=""
: > "$run_log"
export PYTHONUNBUFFERED=1
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

node_pid=""
mps_started=0
measuring=0  # set once the measurements begin: from then on every exit writes the summary
complete=0   # set when every planned run was either done or skipped
train_pids=()
train_outs=()

# The summary of what runs.jsonl holds: gpu-rate-control.json and a table.
# shellcheck disable=SC2317  # summarize and cleanup run from the EXIT trap
summarize() {
  local device driver
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || true
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1) || true
  DEVICE="${device:-unknown}" DRIVER="${driver:-unknown}" STARTED="$started" RUNS_FILE="$runs" \
  RUN_LOG="$run_log" JSON_OUT="$OUT/gpu-rate-control.json" COMMAND="$command" RUNS="$RUNS" \
  ALONE_RUNS="$ALONE_RUNS" MODES="${modes[*]}" TGS_NODE_FLAGS="$TGS_NODE_FLAGS" MAX_S="$MAX_S" \
  WINDOWS="$WINDOWS" WINDOW_S="$WINDOW_S" ELAPSED_S="$SECONDS" COMPLETE="$complete" \
  CPUS_PRODUCTION="$cpus_production" CPUS_OPPORTUNISTIC="$cpus_opportunistic" summarize_python
}

# The summary itself, from the environment summarize sets (also used by SUMMARIZE_FROM).
summarize_python() {
  python3 - <<'EOF'
import json, math, os, statistics

def load_rows(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows

# (pair, mode, class) -> {run: median of that run's windows}; lines of failed runs are left out.
# A job alone that finished its warm-up after the shared start (ready_late_s > 0: model set-up can
# take longer than WARMUP_S) trained in none or part of its first windows: in the alone and
# interposer modes those windows are left out (a run with no full window is listed under
# "not_ready"), so the baselines are clean. In shared modes every window counts: there a late
# start may be the co-runner's doing (a throttled job finishes its warm-up late), so it counts
# against the job.
window_s_env = float(os.environ["WINDOW_S"])
per_run = {}
not_ready = []
for r in load_rows(os.environ["RUNS_FILE"]):
    if r.get("run_failed") or not r.get("it_per_s"):
        continue
    pair, mode, cls = r["label"].split("/")
    late = float(r.get("ready_late_s") or 0.0)
    baseline = mode in ("alone", "interposer")
    full = r["it_per_s"][math.ceil(late / window_s_env - 1e-9):] if late > 0 and baseline else r["it_per_s"]
    if not full:
        not_ready.append({"label": r["label"], "run": r.get("run", 1), "ready_late_s": late})
        continue
    per_run.setdefault((pair, mode, cls), {})[r.get("run", 1)] = statistics.median(full)

def values(key):
    return sorted(per_run.get(key, {}).values())

def median(v):
    return statistics.median(v) if v else None

def spread(v):
    return [min(v), max(v)] if v else None

def normalized(key, ref):
    """Median over runs and [min, max] over runs of each run's median window / ref."""
    v = values(key)
    if not v or not ref:
        return None, None
    n = [x / ref for x in v]
    return median(n), spread(n)

run_log = [line.split() for line in open(os.environ["RUN_LOG"]) if line.strip()]
skipped = [{"pair": p, "mode": m, "run": int(r), "at_s": int(at), "estimated_s": int(est)}
           for p, m, r, st, at, est in run_log if st == "skipped"]
failed = [{"pair": p, "mode": m, "run": int(r)} for p, m, r, st, at, took in run_log if st == "failed"]
modes = os.environ["MODES"].split()
windows, window_s = int(os.environ["WINDOWS"]), float(os.environ["WINDOW_S"])

result = {"device": os.environ["DEVICE"], "driver": os.environ["DRIVER"], "date": os.environ["STARTED"],
          "command": os.environ["COMMAND"], "runs": int(os.environ["RUNS"]),
          "alone_runs": int(os.environ["ALONE_RUNS"]), "modes": modes,
          "tgs_node_flags": os.environ["TGS_NODE_FLAGS"], "max_s": int(os.environ["MAX_S"]),
          "elapsed_s": int(os.environ["ELAPSED_S"]), "complete": os.environ["COMPLETE"] == "1",
          "windows_per_run": windows, "window_s": window_s,
          "cpus": {"production": os.environ.get("CPUS_PRODUCTION") or None,
                   "opportunistic": os.environ.get("CPUS_OPPORTUNISTIC") or None},
          "pairs": {}}
table = []
for pair in sorted({k[0] for k in per_run} | {line[0] for line in run_log}):
    pa, oa = values((pair, "alone", "production")), values((pair, "alone", "opportunistic"))
    prod_alone, opp_alone = median(pa), median(oa)
    entry = {"production_alone_it_per_s": prod_alone, "opportunistic_alone_it_per_s": opp_alone,
             "production_alone_spread_it_per_s": spread(pa), "opportunistic_alone_spread_it_per_s": spread(oa),
             "production_alone_runs": len(pa), "opportunistic_alone_runs": len(oa), "modes": {}}
    inter = values((pair, "interposer", "production"))
    overheads = [1 - x / prod_alone for x in inter] if prod_alone else []
    entry["interposer_it_per_s"] = median(inter)
    entry["interposer_overhead"] = median(overheads)
    entry["interposer_overhead_spread"] = spread(overheads)
    entry["interposer_runs"] = len(inter)
    for mode in (m for m in ("coexec", "mps", "tgs") if m in modes):
        pk, ok = (pair, mode, "production"), (pair, mode, "opportunistic")
        p, p_spread = normalized(pk, prod_alone)
        o, o_spread = normalized(ok, opp_alone)
        entry["modes"][mode] = {
            "production": p, "opportunistic": o,
            "production_runs": len(values(pk)), "opportunistic_runs": len(values(ok)),
            "production_spread": p_spread, "opportunistic_spread": o_spread,
            "runs": len(set(per_run.get(pk, {})) | set(per_run.get(ok, {}))),
            "production_it_per_s": median(values(pk)), "opportunistic_it_per_s": median(values(ok))}
        table.append((pair, mode, p, p_spread, o, o_spread, entry["modes"][mode]["runs"]))
    result["pairs"][pair] = entry
    if "interposer" in modes:
        table.append((pair, "interposer overhead", entry["interposer_overhead"],
                      entry["interposer_overhead_spread"], None, None, len(overheads)))
high = result["pairs"].get("high", {})
result["interposer_overhead"] = high.get("interposer_overhead")
result["interposer_overhead_note"] = (
    "the high pair's (ResNet-50 batch 256, GPU-bound): median over runs of 1 - (the run's median window "
    "under the interposer) / (median over runs of the alone runs' median windows); the low pair's jobs are "
    "CPU-bound and their rates move by several percent between windows")
result["runs_note"] = (
    f"each mode ran as independent runs (fresh processes; a fresh tgs-node or MPS daemon per run); a run's "
    f"value is the median of its {windows} windows of {window_s:g} s; production / opportunistic are medians "
    f"over runs of those values normalized to the median over runs of the job's alone runs, *_spread is "
    f"[min, max] over runs, runs / *_runs count runs; in the alone and interposer modes windows that began "
    f"before the job had finished its warm-up (ready_late_s) are left out")
result["not_ready"] = not_ready
result["skipped"] = skipped
result["failed"] = failed
with open(os.environ["JSON_OUT"], "w") as f:
    json.dump(result, f, indent=2)

fmt = lambda x: "-" if x is None else f"{x:.3f}"
cell = lambda x, s: fmt(x) if s is None else f"{fmt(x)} [{fmt(s[0])}, {fmt(s[1])}]"
print(f"\n{result['device']}, driver {result['driver']}: throughput normalized to each job alone "
      f"(median over runs [min, max over runs]; a run is the median of its windows)")
print(f"command: {result['command']}")
print(f"{'pair':6} {'mode':20} {'production':>24} {'opportunistic':>24} {'runs':>4}")
for pair, mode, p, ps, o, os_, n in table:
    print(f"{pair:6} {mode:20} {cell(p, ps):>24} {cell(o, os_):>24} {n:>4}")
for s in skipped:
    print(f"WARNING: skipped {s['pair']} / {s['mode']} run {s['run']} (MAX_S={result['max_s']}: at "
          f"{s['at_s']} s it needed ~{s['estimated_s']} s)")
for s in not_ready:
    print(f"WARNING: {s['label']} run {s['run']} was not ready for any full window (ready {s['ready_late_s']:.1f} s late)")
for s in failed:
    print(f"WARNING: failed {s['pair']} / {s['mode']} run {s['run']} (left out of the summary)")
if not result["complete"]:
    print("WARNING: the script stopped before its last run; the summary is partial")
print(f"summary: {os.environ['JSON_OUT']} ({result['elapsed_s']} s)")
EOF
}

# SUMMARIZE_FROM=DIR: no GPU work, only the summary again from DIR/runs.jsonl and DIR/gpu-rate-control.json
# of an earlier call (its command, device, date and knobs), into $OUT (e.g. after a change of the
# summary's rules, or to re-read a recorded result: docs/results/).
if [ -n "${SUMMARIZE_FROM:-}" ]; then
  old=$SUMMARIZE_FROM/gpu-rate-control.json
  if [ ! -f "$old" ] || [ ! -f "$SUMMARIZE_FROM/runs.jsonl" ]; then
    echo "SUMMARIZE_FROM needs runs.jsonl and gpu-rate-control.json"
    exit 2
  fi
  get() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print(" ".join(v) if isinstance(v, list) else ("" if v is None else v))' "$old" "$1"; }
  getc() { python3 -c 'import json,sys; v=(json.load(open(sys.argv[1])).get("cpus") or {}).get(sys.argv[2]); print(v or "")' "$old" "$1"; }
  run_log=$(mktemp)
  trap 'rm -f "$run_log"' EXIT
  DEVICE=$(get device) DRIVER=$(get driver) STARTED=$(get date) RUNS_FILE="$SUMMARIZE_FROM/runs.jsonl" \
  RUN_LOG="$run_log" JSON_OUT="$OUT/gpu-rate-control.json" COMMAND="$(get command)" RUNS="$(get runs)" \
  ALONE_RUNS="$(get alone_runs)" MODES="$(get modes)" TGS_NODE_FLAGS="$(get tgs_node_flags)" MAX_S="$(get max_s)" \
  WINDOWS="$(get windows_per_run)" WINDOW_S="$(get window_s)" ELAPSED_S="$(get elapsed_s)" COMPLETE=1 \
  CPUS_PRODUCTION="$(getc production)" CPUS_OPPORTUNISTIC="$(getc opportunistic)" summarize_python
  exit
fi

# shellcheck disable=SC2317
cleanup() {
  local rc=$? p
  set +e
  trap - EXIT
  for p in "${train_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${train_pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ -n "$sampler_pid" ]; then kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null; fi
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null; fi
  if [ "$mps_started" = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
  if [ "$measuring" = 1 ]; then summarize || echo "WARNING: the summary could not be written"; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The CPUs local to GPU 0, split in two halves (bench/gpu/gpu_cpus.py).
cpus_production="" cpus_opportunistic=""
if [ "$PIN_CPUS" = 1 ]; then
  read -r cpus_production cpus_opportunistic < <(python3 "$repo/bench/gpu/gpu_cpus.py" --halves) || true
  if [ -z "$cpus_opportunistic" ]; then
    echo "WARNING: PIN_CPUS=1 but the GPU's local CPUs could not be split in two: no pinning"
    cpus_production=""
  else
    echo "== CPUs: production $cpus_production, opportunistic $cpus_opportunistic"
  fi
fi

echo "== build (against the real libcuda; no CUDA toolkit headers needed)"
. "$repo/bench/gpu/build_backend.sh"
build_backend
echo "== built at ${SECONDS} s; $command"

# start_node [FLAG...]: a fresh tgs-node on $socket with the script's flags and these.
start_node() {
  rm -f "$socket"
  "$node" --socket "$socket" --production-window-ms "$TGS_PRODUCTION_WINDOW_MS" --profile-windows 3 \
    --max-profile-windows 6 --log-level info "$@" >> "$OUT/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do
    [ -S "$socket" ] && return 0
    kill -0 "$node_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "tgs-node did not start (flags: $* ); the end of node.log:"
  tail -5 "$OUT/node.log"
  node_pid=""
  exit 1
}
stop_node() {
  "$node" status --socket "$socket" >> "$OUT/node.log" 2>&1 || true
  kill "$node_pid"; wait "$node_pid" 2>/dev/null || true
  node_pid=""
}

# A bad TGS_NODE_FLAGS fails now, not in every tgs run.
case " ${modes[*]} " in
  *" tgs "*)
    if [ ${#node_flags[@]} -gt 0 ]; then
      echo "== flag check: tgs-node ${node_flags[*]}" >> "$OUT/node.log"
      start_node "${node_flags[@]}"; stop_node
    fi ;;
esac

# train LABEL MODEL[:BATCH] START [ENV=VALUE...]: one training process in the background, its
# output in its own file (measure adds the run index). It is killed if it runs 60 s past the end of
# its last window, and in any case 20 s after MAX_S.
train() {
  local label=$1 model=${2%%:*} start=$3 batch=$BATCH limit out
  if [[ $2 == *:* ]]; then batch=${2##*:}; fi
  shift 3
  limit=$(( start - $(date +%s) + WINDOWS * WINDOW_S + 60 ))
  if (( limit > MAX_S + 20 - SECONDS )); then limit=$(( MAX_S + 20 - SECONDS )); fi
  if (( limit < 10 )); then limit=10; fi
  out=$work/proc-${#train_outs[@]}.out
  local pin=()
  case $label in
    */production) [ -n "$cpus_production" ] && pin=(taskset -c "$cpus_production") ;;
    */opportunistic) [ -n "$cpus_opportunistic" ] && pin=(taskset -c "$cpus_opportunistic") ;;
  esac
  timeout --foreground -k 5 "$limit" "${pin[@]}" env "$@" python3 "$repo/bench/gpu/train.py" --model "$model" \
    --batch "$batch" --start-at "$start" --windows "$WINDOWS" --window-s "$WINDOW_S" --label "$label" > "$out" &
  train_pids+=("$!")
  train_outs+=("$out")
}
# Waits for the training processes started so far; fails if any of them failed.
wait_jobs() {
  local p rc failed=0
  for p in "${train_pids[@]}"; do
    rc=0; wait "$p" || rc=$?
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "a training process ran past its time limit and was killed"
    elif [ "$rc" != 0 ]; then echo "a training process failed (exit $rc)"; fi
    if [ "$rc" != 0 ]; then failed=1; fi
  done
  train_pids=()
  return "$failed"
}

# measure PAIR MODE PROD_MODEL OPP_MODEL RUN: one independent run; sets run_ok (0 if a training
# process failed; such a run is kept in runs.jsonl with "run_failed": true).
measure() {
  local pair=$1 mode=$2 prod=$3 opp=$4 run=$5 start f tag
  run_ok=1
  train_pids=(); train_outs=()
  start=$(( $(date +%s) + WARMUP_S ))
  echo "== $pair / $mode / run $run (at ${SECONDS} s)"
  case $mode in
    alone)
      train "$pair/alone/production" "$prod" "$start"; wait_jobs || run_ok=0
      start=$(( $(date +%s) + WARMUP_S ))
      train "$pair/alone/opportunistic" "$opp" "$start"; wait_jobs || run_ok=0 ;;
    interposer)
      echo "== $pair / interposer / run $run" >> "$OUT/node.log"
      start_node
      train "$pair/interposer/production" "$prod" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=production TGS_JOB_NAME="$prod"
      wait_jobs || run_ok=0
      stop_node ;;
    coexec)
      train "$pair/coexec/production" "$prod" "$start"
      train "$pair/coexec/opportunistic" "$opp" "$start"; wait_jobs || run_ok=0 ;;
    mps)
      export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d
      mps_started=1
      train "$pair/mps/production" "$prod" "$start" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$MPS_PROD"
      train "$pair/mps/opportunistic" "$opp" "$start" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$MPS_OPP"
      wait_jobs || run_ok=0
      echo quit | nvidia-cuda-mps-control
      mps_started=0
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    tgs)
      echo "== $pair / tgs / run $run (extra flags: ${node_flags[*]:-none})" >> "$OUT/node.log"
      start_node "${node_flags[@]}"
      python3 "$repo/bench/gpu/node_status.py" sample "$node" "$socket" "$samples" "$pair/tgs/$run" &
      sampler_pid=$!
      start=$(( start + TGS_SETTLE_S ))
      train "$pair/tgs/production" "$prod" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=production TGS_JOB_NAME="$prod"
      train "$pair/tgs/opportunistic" "$opp" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=opportunistic TGS_JOB_NAME="$opp"
      wait_jobs || run_ok=0
      kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true
      sampler_pid=""
      stop_node ;;
  esac
  tag="\"run\": $run, "
  if [ "$run_ok" != 1 ]; then tag+="\"run_failed\": true, "; fi
  for f in "${train_outs[@]}"; do sed -n "s/^{/{$tag/p" "$f" >> "$runs"; done
  train_outs=()
}

# estimate MODE: the seconds one run of MODE is expected to take (from the knobs, or the longest
# run of that mode so far where that was longer).
declare -A longest=()
estimate() {
  local m=$(( WARMUP_S + WINDOWS * WINDOW_S + SLACK_S )) e
  case $1 in
    alone) e=$(( 2 * m )) ;;
    tgs) e=$(( m + TGS_SETTLE_S )) ;;
    *) e=$m ;;
  esac
  if (( ${longest[$1]:-0} > e )); then e=${longest[$1]}; fi
  echo "$e"
}

measuring=1
any_failed=0
max_runs=$(( RUNS > ALONE_RUNS ? RUNS : ALONE_RUNS ))
for (( r = 1; r <= max_runs; r++ )); do
  for p in "${all_pairs[@]}"; do
    read -r pair prod opp <<< "$p"
    case " $PAIRS " in *" $pair "*) ;; *) continue ;; esac
    for mode in "${modes[@]}"; do
      case $mode in alone | interposer) n=$ALONE_RUNS ;; *) n=$RUNS ;; esac
      (( r <= n )) || continue
      est=$(estimate "$mode")
      if (( SECONDS + est > MAX_S )); then
        echo "WARNING: skipping $pair / $mode run $r: at ${SECONDS} s it would need ~${est} s, past MAX_S=$MAX_S"
        echo "$pair $mode $r skipped $SECONDS $est" >> "$run_log"
        continue
      fi
      t0=$SECONDS
      measure "$pair" "$mode" "$prod" "$opp" "$r"
      took=$(( SECONDS - t0 ))
      if (( took > ${longest[$mode]:-0} )); then longest[$mode]=$took; fi
      if [ "$run_ok" = 1 ]; then st="done"; else st="failed"; any_failed=1; fi
      echo "$pair $mode $r $st $t0 $took" >> "$run_log"
    done
  done
done
complete=1
# The summary is written on exit (cleanup); a failed run makes the exit status 1.
exit "$any_failed"
