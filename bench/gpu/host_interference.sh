#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Does a busy CPU beside it slow a host-bound production job, with no second GPU job at all?
# The production jobs of the memory scenarios are host-bound (bench/gpu/memory.sh: their CPU time
# per iteration equals their wall time), and beside the DLRM job they lose iterations that their
# launch calls and synchronisation waits do not account for (docs/results/gpu-memory.md). This
# runs the production job (MODEL, BATCH) on the first half of the GPU's local CPUs
# (bench/gpu/gpu_cpus.py), ROUNDS times each of:
#   alone      nothing else running
#   spin-1     one thread spinning on the second half (about what the DLRM job's Python thread,
#              which spins in its synchronisation calls, takes)
#   spin-all   one spinning thread per CPU of the second half
# interleaved (alone, spin-1, spin-all, alone, ...), so drift over the call hits every mode alike.
# The spinners use no GPU. Each run: WARMUP_S seconds of training, then WINDOWS windows of
# WINDOW_S seconds (train.py); a run's rate is its median window.
# Writes $OUT/host-interference.jsonl (train.py's lines, labels MODE/ROUND) and
# $OUT/host-interference.json (per mode: run rates, median, normalized to alone), and prints a table.
# Usage: OUT=/some/dir bench/gpu/host_interference.sh   (a GPU machine with PyTorch + torchvision)
# Knobs: MODEL (resnet50), BATCH (32), ROUNDS (2), WARMUP_S (15), WINDOWS (3), WINDOW_S (4).
# Safety (shared/GPU.md): one training job at a time, its own footprint (about 2 GiB for
# ResNet-50 batch 32); no managed memory; clocks, power, compute mode and MIG are left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:-$repo/gpu-host-interference-out}
MODEL=${MODEL:-resnet50}
BATCH=${BATCH:-32}
ROUNDS=${ROUNDS:-2}
WARMUP_S=${WARMUP_S:-15}
WINDOWS=${WINDOWS:-3}
WINDOW_S=${WINDOW_S:-4}
for v in BATCH ROUNDS WARMUP_S WINDOWS WINDOW_S; do
  case ${!v} in '' | *[!0-9]* | 0) echo "$v must be a positive whole number (got '${!v}')"; exit 2 ;; esac
done
mkdir -p "$OUT"
runs=$OUT/host-interference.jsonl
: > "$runs"

read -r cpus_job cpus_busy < <(python3 "$repo/bench/gpu/gpu_cpus.py" --halves) || true
if [ -z "${cpus_busy:-}" ]; then
  echo "the GPU's local CPUs could not be split in two (bench/gpu/gpu_cpus.py --halves)"; exit 1
fi
echo "== job on CPUs $cpus_job, spinners on $cpus_busy"
spinners=()
stop_spinners() {
  for p in ${spinners[@]+"${spinners[@]}"}; do kill "$p" 2>/dev/null || true; done
  for p in ${spinners[@]+"${spinners[@]}"}; do wait "$p" 2>/dev/null || true; done
  spinners=()
}
trap stop_spinners EXIT

spin() {  # spin N: N busy threads (separate processes) on the second half
  local i
  for i in $(seq "$1"); do
    taskset -c "$cpus_busy" python3 -c 'while True: pass' &
    spinners+=("$!")
  done
}

busy_count=$(python3 -c "import sys; sys.path.insert(0, '$repo/bench/gpu'); import gpu_cpus; print(len(gpu_cpus.parse_cpulist('$cpus_busy')))")
for round in $(seq "$ROUNDS"); do
  for mode in alone spin-1 spin-all; do
    case $mode in spin-1) spin 1 ;; spin-all) spin "$busy_count" ;; esac
    start=$(( $(date +%s) + WARMUP_S ))
    echo "== [$SECONDS s] $mode/$round"
    taskset -c "$cpus_job" python3 "$repo/bench/gpu/train.py" --model "$MODEL" --batch "$BATCH" \
      --start-at "$start" --windows "$WINDOWS" --window-s "$WINDOW_S" --label "$mode/$round" >> "$runs"
    stop_spinners
  done
done

command="MODEL=$MODEL BATCH=$BATCH ROUNDS=$ROUNDS WARMUP_S=$WARMUP_S WINDOWS=$WINDOWS WINDOW_S=$WINDOW_S bench/gpu/host_interference.sh"
python3 - "$runs" "$OUT/host-interference.json" "$MODEL" "$BATCH" "$command" "$cpus_job" "$cpus_busy" <<'PY'
import datetime, json, statistics, subprocess, sys
runs_path, out_path, model, batch, command, cpus_job, cpus_busy = sys.argv[1:8]
rates = {}
for line in open(runs_path):
    if not line.strip():
        continue
    d = json.loads(line)
    mode = d["label"].rsplit("/", 1)[0]
    rates.setdefault(mode, []).append(statistics.median(d["it_per_s"]))
def gpu(q):
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return None
alone = statistics.median(rates["alone"])
out = {"device": gpu("name"), "driver": gpu("driver_version"), "command": command,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "cpus_job": cpus_job, "cpus_busy": cpus_busy, "model": model, "batch": int(batch),
       "modes": {m: {"it_per_s": v, "median": statistics.median(v),
                     "normalized": statistics.median(v) / alone,
                     "spread": [min(v) / alone, max(v) / alone]} for m, v in rates.items()}}
json.dump(out, open(out_path, "w"), indent=2)
print(f"{out['device']}: {model} batch {batch}, iterations/s normalized to alone (median of runs, min-max)")
for m, e in out["modes"].items():
    print(f"  {m:9} {e['median']:7.2f} it/s  {e['normalized']:.2f} ({e['spread'][0]:.2f}-{e['spread'][1]:.2f})  runs {len(e['it_per_s'])}")
PY
