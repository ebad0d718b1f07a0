#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# TGS's convergence on a real GPU with the paper's constants (5 s production windows, 5 profiling
# windows): per pair, the production job trains alone for ARRIVE_S seconds, the opportunistic
# job arrives, the production job pauses at PAUSE_AT for PAUSE_S seconds and resumes. Both print
# per-second progress; the summary gives each job's throughput under tgs relative to alone, and
# the times to steady state after the arrival, after the pause and after the resume.
# Writes $OUT/convergence.jsonl and $OUT/gpu-convergence.json and prints a table.
# Usage: OUT=/some/dir bench/gpu/convergence.sh   (GPU machine; see rate_control.sh for .deps)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:-$repo/gpu-convergence-out}
mkdir -p "$OUT"
# RATE_SMOOTHING (0, the released code's alpha) smooths the production rate tgs-node sees.
ARRIVE_S=${ARRIVE_S:-25}
PAUSE_AT=${PAUSE_AT:-110}
PAUSE_S=${PAUSE_S:-45}
TOTAL_S=${TOTAL_S:-185}
PAIRS=${PAIRS:-"high:resnet50:256:shufflenet_v2_x1_0:128 low:mobilenet_v2:64:shufflenet_v2_x1_0:64"}
BUILD=${TGS_GPU_BUILD:-/tmp/tgs-gpu-build}
work=$(mktemp -d /tmp/tgs-conv-XXXXXX)
socket=$work/node.sock
node_pid=""
cleanup() { [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
. "$repo/bench/gpu/build_backend.sh"
build_backend
: > "$OUT/convergence.jsonl"
for spec in $PAIRS; do
  IFS=: read -r pair prod pb opp ob <<< "$spec"
  "$node" --socket "$socket" --log-level info --rate-smoothing "${RATE_SMOOTHING:-0}" \
    > "$OUT/convergence-node-$pair.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.05; done
  start=$(( $(date +%s) + 15 ))
  common=(LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket")
  env "${common[@]}" TGS_JOB_CLASS=production TGS_JOB_NAME="$prod" python3 bench/gpu/train.py \
    --model "$prod" --batch "$pb" --start-at "$start" --timeline-s "$TOTAL_S" --pause-at "$PAUSE_AT" \
    --pause-s "$PAUSE_S" --label "$pair/production" >> "$OUT/convergence.jsonl" &
  p1=$!
  sleep $(( start - $(date +%s) + ARRIVE_S - 10 ))  # the opportunistic job loads ~10 s before it runs
  env "${common[@]}" TGS_JOB_CLASS=opportunistic TGS_JOB_NAME="$opp" python3 bench/gpu/train.py \
    --model "$opp" --batch "$ob" --start-at "$start" --timeline-s "$TOTAL_S" \
    --label "$pair/opportunistic" >> "$OUT/convergence.jsonl" &
  p2=$!
  wait "$p1" "$p2"
  kill "$node_pid"; wait "$node_pid" 2>/dev/null || true; node_pid=""
done
ARRIVE_S=$ARRIVE_S PAUSE_AT=$PAUSE_AT PAUSE_S=$PAUSE_S TOTAL_S=$TOTAL_S IN="$OUT/convergence.jsonl" \
JSON_OUT="$OUT/gpu-convergence.json" DEVICE="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)" python3 - <<'PY'
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ["IN"]) if l.startswith("{")]
arrive, pause_at, pause_s, total = (float(os.environ[k]) for k in ("ARRIVE_S", "PAUSE_AT", "PAUSE_S", "TOTAL_S"))
def series(r):  # seconds -> iterations in that second
    return {r["first_second"] + i: c for i, c in enumerate(r["per_second"])}
def mean(s, a, b):
    v = [s.get(t, 0) for t in range(int(a), int(b))]
    return statistics.mean(v) if v else 0.0
def first_time(s, a, b, pred, hold=3):  # first t in [a, b) where pred holds for `hold` seconds
    for t in range(int(a), int(b) - hold):
        if all(pred(s.get(t + k, 0)) for k in range(hold)):
            return t - a
    return None
out = {"device": os.environ["DEVICE"], "driver": os.environ["DRIVER"],
       "command": f"ARRIVE_S={arrive:.0f} PAUSE_AT={pause_at:.0f} PAUSE_S={pause_s:.0f} TOTAL_S={total:.0f} RATE_SMOOTHING={os.environ.get('RATE_SMOOTHING', '0')} bench/gpu/convergence.sh",
       "pairs": {}}
for pair in sorted({r["label"].split("/")[0] for r in rows}):
    p = series(next(r for r in rows if r["label"] == f"{pair}/production"))
    o_row = next(r for r in rows if r["label"] == f"{pair}/opportunistic")
    o = series(o_row)
    arrive = o_row["loop_start_s"]  # it starts launching kernels (TGS holds it while profiling)
    prod_alone = mean(p, 5, arrive)
    steady_from, steady_to = pause_at - 30, pause_at
    prod_shared = mean(p, steady_from, steady_to)
    opp_alone = mean(o, pause_at + pause_s - 15, pause_at + pause_s)  # unthrottled while production idles
    opp_shared = mean(o, steady_from, steady_to)
    resumed = pause_at + pause_s
    res = {
        "opportunistic_arrival_s": arrive, "opportunistic_first_step_s": o_row["first_second"],
        "production_alone_it_per_s": prod_alone, "opportunistic_alone_it_per_s": opp_alone,
        "production": prod_shared / prod_alone if prod_alone else None,
        "opportunistic": opp_shared / opp_alone if opp_alone else None,
        "seconds_to_steady_after_arrival": first_time(o, arrive, pause_at, lambda c: c >= 0.9 * opp_shared) if opp_shared else None,
        "seconds_to_gpu_after_pause": first_time(o, pause_at, resumed, lambda c: c >= 0.9 * opp_alone),
        "seconds_to_throttle_after_resume": first_time(o, resumed, total, lambda c: c <= max(opp_shared * 1.5, 0.5 * opp_alone)),
    }
    out["pairs"][pair] = res
json.dump(out, open(os.environ["JSON_OUT"], "w"), indent=2)
f = lambda x: "-" if x is None else (f"{x:.3f}" if isinstance(x, float) and x < 10 else f"{x}")
print(f"\n{out['device']}: tgs with the paper's constants")
print(f"{'pair':5} {'production':>10} {'opportunistic':>13} {'steady after arrival (s)':>25} {'GPU after pause (s)':>20} {'throttled after resume (s)':>27}")
for pair, r in out["pairs"].items():
    print(f"{pair:5} {f(r['production']):>10} {f(r['opportunistic']):>13} {f(r['seconds_to_steady_after_arrival']):>25} {f(r['seconds_to_gpu_after_pause']):>20} {f(r['seconds_to_throttle_after_resume']):>27}")
PY
