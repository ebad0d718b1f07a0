#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Real-GPU comparison of sharing modes for two training pairs: each job alone, the production job
# alone under the interposer (overhead), plain co-execution, MPS with thread percentages, and TGS
# (tgs-node + libtgs-intercept.so). One call builds what it needs and writes
# $OUT/gpu-rate-control.json, $OUT/runs.jsonl, $OUT/node.log and $OUT/gpu-rate-control.log.
#
# Run from anywhere on a machine with a GPU, CUDA, PyTorch + torchvision, CMake and ninja:
#   OUT=/some/dir bench/gpu/rate_control.sh
# Knobs (environment): WINDOWS (4) windows of WINDOW_S (5) seconds per run, WARMUP_S (20) before
# the first window, TGS_SETTLE_S (30) more for TGS to profile and converge, MPS_PROD / MPS_OPP
# (100 / 50) thread percentages, TGS_PRODUCTION_WINDOW_MS (1000), BATCH (64, where a pair names none), PAIRS ("low high").
# Machines without the fmt and CLI11 packages: put their headers in .deps/include (CLI/, fmt/) at
# the repository root; the build then uses them header-only.
#
# Safety: this script never changes clocks, power limits, compute mode or MIG, and never resets
# the GPU. It starts an MPS control daemon for the MPS runs and always stops it again.
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
BUILD=${TGS_GPU_BUILD:-/tmp/tgs-gpu-build}
work=$(mktemp -d /tmp/tgs-gpu-XXXXXX)
socket=$work/node.sock
runs=$OUT/runs.jsonl
: > "$runs"
: > "$OUT/node.log"
export PYTHONUNBUFFERED=1
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

node_pid=""
mps_started=0
cleanup() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  if [ "$mps_started" = 1 ]; then echo quit | nvidia-cuda-mps-control || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== build (against the real libcuda; no CUDA toolkit headers needed)"
. "$repo/bench/gpu/build_backend.sh"
build_backend

start_node() {
  "$node" --socket "$socket" --production-window-ms "$TGS_PRODUCTION_WINDOW_MS" --profile-windows 3 \
    --max-profile-windows 6 --log-level info >> "$OUT/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do [ -S "$socket" ] && return 0; sleep 0.05; done
  echo "tgs-node did not start"; exit 1
}
stop_node() {
  "$node" status --socket "$socket" >> "$OUT/node.log" 2>&1 || true
  kill "$node_pid"; wait "$node_pid" 2>/dev/null || true
  node_pid=""
}

# train LABEL MODEL[:BATCH] START [ENV=VALUE...]: one training process in the background.
train() {
  local label=$1 model=${2%%:*} start=$3 batch=$BATCH
  [[ $2 == *:* ]] && batch=${2##*:}
  shift 3
  env "$@" python3 "$repo/bench/gpu/train.py" --model "$model" --batch "$batch" --start-at "$start" \
    --windows "$WINDOWS" --window-s "$WINDOW_S" --label "$label" >> "$runs" &
}

# measure PAIR MODE PROD_MODEL OPP_MODEL
measure() {
  local pair=$1 mode=$2 prod=$3 opp=$4
  local start
  start=$(( $(date +%s) + WARMUP_S ))
  echo "== $pair / $mode"
  case $mode in
    alone)
      train "$pair/alone/production" "$prod" "$start"; wait_jobs
      start=$(( $(date +%s) + WARMUP_S ))
      train "$pair/alone/opportunistic" "$opp" "$start"; wait_jobs ;;
    interposer)
      start_node
      train "$pair/interposer/production" "$prod" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=production TGS_JOB_NAME="$prod"
      wait_jobs; stop_node ;;
    coexec)
      train "$pair/coexec/production" "$prod" "$start"
      train "$pair/coexec/opportunistic" "$opp" "$start"; wait_jobs ;;
    mps)
      export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
      nvidia-cuda-mps-control -d
      mps_started=1
      train "$pair/mps/production" "$prod" "$start" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$MPS_PROD"
      train "$pair/mps/opportunistic" "$opp" "$start" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$MPS_OPP"
      wait_jobs
      echo quit | nvidia-cuda-mps-control
      mps_started=0
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    tgs)
      start_node
      start=$(( start + TGS_SETTLE_S ))
      train "$pair/tgs/production" "$prod" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=production TGS_JOB_NAME="$prod"
      train "$pair/tgs/opportunistic" "$opp" "$start" LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
        TGS_JOB_CLASS=opportunistic TGS_JOB_NAME="$opp"
      wait_jobs; stop_node ;;
  esac
}
# Waits for the training processes only (the node runs on between them).
wait_jobs() {
  local pids
  pids=$(jobs -p)
  for p in $pids; do
    [ "$p" = "$node_pid" ] && continue
    wait "$p" || { echo "a training process failed"; exit 1; }
  done
}

# Low contention: a small production model that leaves the GPU idle between its kernels.
# High contention: ResNet-50 production with ShuffleNet opportunistic (as in the TGS paper), at a
# batch that makes ResNet-50 GPU-bound on an H100/H200 (at 64 its Python loop is the bottleneck).
all_pairs=("low mobilenet_v2:64 shufflenet_v2_x1_0:64" "high resnet50:256 shufflenet_v2_x1_0:128")
for p in "${all_pairs[@]}"; do
  read -r pair prod opp <<< "$p"
  case " ${PAIRS:-low high} " in *" $pair "*) ;; *) continue ;; esac
  for mode in alone interposer coexec tgs mps; do measure "$pair" "$mode" "$prod" "$opp"; done
done

device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
DEVICE="$device" DRIVER="$driver" STARTED="$started" RUNS="$runs" JSON_OUT="$OUT/gpu-rate-control.json" \
COMMAND="WINDOWS=$WINDOWS WINDOW_S=$WINDOW_S WARMUP_S=$WARMUP_S TGS_SETTLE_S=$TGS_SETTLE_S MPS_PROD=$MPS_PROD MPS_OPP=$MPS_OPP TGS_PRODUCTION_WINDOW_MS=$TGS_PRODUCTION_WINDOW_MS BATCH=$BATCH bench/gpu/rate_control.sh" \
python3 - <<'EOF'
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ["RUNS"]) if l.strip().startswith("{")]
rate = {}
for r in rows:
    pair, mode, cls = r["label"].split("/")
    rate[(pair, mode, cls)] = r["it_per_s"]
def med(key):
    v = rate.get(key)
    return statistics.median(v) if v else None
result = {"device": os.environ["DEVICE"], "driver": os.environ["DRIVER"], "date": os.environ["STARTED"],
          "command": os.environ["COMMAND"], "pairs": {}}
table = []
for pair in sorted({k[0] for k in rate}):
    prod_alone, opp_alone = med((pair, "alone", "production")), med((pair, "alone", "opportunistic"))
    entry = {"production_alone_it_per_s": prod_alone, "opportunistic_alone_it_per_s": opp_alone, "modes": {}}
    inter = med((pair, "interposer", "production"))
    entry["interposer_overhead"] = (1 - inter / prod_alone) if inter and prod_alone else None
    for mode in ("coexec", "mps", "tgs"):
        p, o = med((pair, mode, "production")), med((pair, mode, "opportunistic"))
        entry["modes"][mode] = {
            "production": p / prod_alone if p and prod_alone else None,
            "opportunistic": o / opp_alone if o and opp_alone else None,
            "production_runs": len(rate.get((pair, mode, "production"), [])),
            "opportunistic_runs": len(rate.get((pair, mode, "opportunistic"), [])),
            "production_spread": [min(rate[(pair, mode, "production")]) / prod_alone,
                                  max(rate[(pair, mode, "production")]) / prod_alone] if p and prod_alone else None}
        table.append((pair, mode, entry["modes"][mode]["production"], entry["modes"][mode]["opportunistic"]))
    result["pairs"][pair] = entry
    table.append((pair, "interposer overhead", entry["interposer_overhead"], None))
json.dump(result, open(os.environ["JSON_OUT"], "w"), indent=2)
fmt = lambda x: "-" if x is None else f"{x:.3f}"
print(f"\n{result['device']}, driver {result['driver']}: throughput normalized to each job alone (median of runs)")
print(f"{'pair':6} {'mode':20} {'production':>10} {'opportunistic':>14}")
for pair, mode, p, o in table:
    print(f"{pair:6} {mode:20} {fmt(p):>10} {fmt(o):>14}")
EOF
