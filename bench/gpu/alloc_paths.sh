#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Which driver allocation paths PyTorch takes (NSDI'23 TGS's memory side needs to know): runs a
# ResNet-50 training job under libtgs-intercept.so with PyTorch's default caching allocator and
# with expandable segments, and compares what the interposer counted (allocations through
# cuMemAlloc*/cuMemAllocManaged/cuMemCreate, mappings through cuMemMap) with the bytes PyTorch
# reserved. Writes $OUT/alloc-paths.jsonl and prints a table.
# Usage: OUT=/some/dir bench/gpu/alloc_paths.sh   (GPU machine; see rate_control.sh for .deps)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:-$repo/gpu-alloc-paths-out}
mkdir -p "$OUT"
BUILD=${TGS_GPU_BUILD:-/tmp/tgs-gpu-build}
work=$(mktemp -d /tmp/tgs-alloc-XXXXXX)
socket=$work/node.sock
node_pid=""
cleanup() { [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
. "$repo/bench/gpu/build_backend.sh"
build_backend
"$node" --socket "$socket" --log-level warn > "$OUT/alloc-node.log" 2>&1 &
node_pid=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.05; done
: > "$OUT/alloc-paths.jsonl"
for conf in "" "expandable_segments:True"; do
  start=$(( $(date +%s) + 12 ))
  PYTORCH_CUDA_ALLOC_CONF=$conf LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" \
    TGS_JOB_CLASS=production TGS_JOB_NAME="resnet50 alloc_conf=${conf:-default}" \
    python3 bench/gpu/train.py --model resnet50 --batch 64 --start-at "$start" --windows 2 --window-s 3 \
    --label "alloc/${conf:-default}" > "$work/train.json" &
  pid=$!
  sleep $(( start - $(date +%s) + 4 ))
  "$node" status --socket "$socket" --json > "$work/status.json"
  wait "$pid"
  python3 - "$work/train.json" "$work/status.json" "${conf:-default}" >> "$OUT/alloc-paths.jsonl" <<'PY'
import json, sys
train = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
jobs = [json.loads(l) for l in open(sys.argv[2]) if '"job"' in l]
job = jobs[0] if jobs else {}
print(json.dumps({"alloc_conf": sys.argv[3], "reserved_bytes": train["reserved_bytes"],
                  **{k: job.get(k) for k in ("device_bytes", "managed_bytes", "alloc_calls", "free_calls",
                                              "map_calls", "launches_per_s")}}))
PY
done
python3 - "$OUT/alloc-paths.jsonl" <<'PY'
import json, sys
print(f"{'PYTORCH_CUDA_ALLOC_CONF':26} {'reserved MiB':>12} {'counted MiB':>12} {'alloc calls':>11} {'map calls':>9} {'launches/s':>10}")
for l in open(sys.argv[1]):
    r = json.loads(l)
    counted = ((r["device_bytes"] or 0) + (r["managed_bytes"] or 0)) / 2**20
    print(f"{r['alloc_conf']:26} {r['reserved_bytes']/2**20:12.0f} {counted:12.0f} {r['alloc_calls']!s:>11} {r['map_calls']!s:>9} {r['launches_per_s']!s:>10}")
PY
