#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Real-GPU memory scenarios of TGS (NSDI'23 §5, transparent unified memory) against a configured
# memory budget smaller than the card. Per scenario a production job shares the GPU with a
# memory-heavy DLRM-like opportunistic job (bench/gpu/train.py --model dlrm):
#   low:  production ResNet-50 (LOW_MODEL, RESNET_BATCH) + opportunistic DLRM-like
#   high: production BERT-base (BERT_BATCH, seq BERT_SEQ) + opportunistic DLRM-like
# First each job's footprint alone (train.py --report-memory-only: peak reserved bytes P, O);
# the per-GPU budget is then BUDGET_MIB = ceil((P + O) / RATIO / MiB), so the two jobs
# oversubscribe the budget RATIO times. Modes, each a separate run on a fresh tgs-node:
#   alone       each job alone, no interposer (ALONE_RUNS runs; the DLRM runs are shared by the
#               scenarios of one call)
#   coexec-um   both under the interposer, tgs-node --policy co-execution --memory-policy
#               unified-memory: all allocations unified memory, no priority, no eviction (RUNS)
#   tgs         tgs-node --policy tgs --memory-policy tgs --memory-reserve-mib RESERVE_MIB plus
#               rate_control.sh's rate flags; production first, the DLRM job OPP_DELAY_S later;
#               measured after TGS_SETTLE_S more seconds (RUNS). tgs-node status is sampled once
#               a second (eviction numbers). At the end of the last tgs run, the fault
#               demonstration: SIGKILL the production job (time until tgs-node drops it, time
#               until the DLRM job is restored to the GPU), then a fresh production job, then
#               SIGSEGV the DLRM job (time until dropped; the production job's progress after).
#   coexec-budget both jobs train under tgs-node --policy co-execution --memory-policy tgs: the
#               memory budget, residency plan and eviction of a tgs run, no rate control (RUNS);
#               set against coexec-um and tgs it separates what the budget's placement costs the
#               jobs (host-resident rows read over PCIe) from what rate control does
#   opp-limited the DLRM job beside an idle production job (it trains 3 steps, then holds its
#               memory and launches nothing), tgs-node --policy co-execution
#               --memory-policy tgs: the resident limit of a tgs run, no rate control, the GPU
#               to itself; the ceiling of its tgs share (RUNS)
#   fixed       one run per entry of FIXED_BUDGETS (RUNS each): tgs-node --policy token-bucket
#               --fixed-budget-blocks B --budget-window-ms W (entries B, B:W or B:W:D; W defaults
#               to FIXED_WINDOW_MS) --memory-policy tgs, started as a tgs run (production first,
#               the DLRM job OPP_DELAY_S later; windows after WARMUP_S + PAIR_SETTLE_S, no
#               controller to settle: the share is fixed from the start). A fixed share never reacts to the production job, so the sweep maps what each
#               opportunistic launch rate costs the production job under the interposer's
#               enforcement: the trade-off an adaptive controller moves along. D > 0 adds
#               --max-inflight-launches D (the DLRM job's launch window: at most D of its launches
#               unfinished on the GPU), so one call compares a share with and without a window.
#               Mode names fixed-B (fixed-B-Wms when W is not 50; -inflight-D appended when D is
#               set); only run when named.
#   tgs-NAME    one mode per TGS_VARIANTS entry NAME=FLAGS: a tgs run with FLAGS added to
#               TGS_NODE_FLAGS (so one call compares controller settings on one machine, in
#               one order); never the fault demonstration. Run when TGS_VARIANTS names them.
#   hard-limit  tgs-node --memory-policy hard-limit with a production limit of P + 2048 MiB and
#               the rest of the budget for the DLRM job, which should die out of memory at start
#               (one run).
# Throughput is normalized to the job's alone median (per run: median window; over runs:
# median, spread min-max). An opportunistic job that printed no result in a coexec-um, coexec-budget
# or tgs run (it overran its deadline or crashed) counts 0 there and is listed under *_missing_runs.
#
# Run from anywhere on a machine with a GPU, CUDA, PyTorch + torchvision, CMake and ninja:
#   OUT=/some/dir SCENARIOS=low bench/gpu/memory.sh     (then SCENARIOS=high in a second call)
# Knobs (environment, defaults in parentheses):
#   SCENARIOS ("low high"), PROBE (1: run bench/gpu/memory_reuse.py first), PROBE_GIB (8),
#   RUNS (3) runs of coexec-um and tgs, ALONE_RUNS (2), ALONE_DLRM_RUNS (ALONE_RUNS; at most
#   ALONE_RUNS: fewer DLRM alone runs make room for a production alone run in every round of an
#   interleaved call, whose drift the production job shows most), WINDOWS (3) windows of WINDOW_S (4)
#   seconds, WARMUP_S (15) before the first window, TGS_SETTLE_S (20) more in tgs runs,
#   ALONE_SETTLE_S (0) more in the alone runs (a host-bound production job can still be speeding
#   up 15 s after its start, and a tgs run measures it WARMUP_S + TGS_SETTLE_S after its start:
#   ALONE_SETTLE_S=$TGS_SETTLE_S measures both at the same age; the log's "ages" line says when
#   each kind of run measures),
#   PAIR_SETTLE_S (10) more in the other runs of two jobs (coexec-um, coexec-budget, fixed,
#   hard-limit: under the budget the DLRM job needs 14-20 s to place its 16 GiB and train; with
#   WARMUP_S alone its first window was partial, and the summary's *_ready_late_max_s says so),
#   OPP_DELAY_S (5), TGS_PRODUCTION_WINDOW_MS (1000), PROFILE_WINDOWS (3) and MAX_PROFILE_WINDOWS (6)
#   tgs-node's --profile-windows and --max-profile-windows (with --noise-band-multiple the band is
#   calibrated on these windows: more of them, a steadier band), RATIO (1.5), BUDGET_MIB (unset: from the
#   footprints), RESERVE_MIB (1024), LOW_MODEL (resnet50: the low scenario's production model,
#   any torchvision classifier train.py knows, e.g. mobilenet_v2 for a production job that leaves
#   the GPU room), RESNET_BATCH (128: LOW_MODEL's batch), BERT_BATCH (32), BERT_SEQ (128),
#   DLRM_BATCH (2048), DLRM_TABLES (8), DLRM_ROWS (2000000), DLRM_DIM (256), DLRM_BAG (32),
#   DLRM_ZIPF (0: uniform row ids; S > 0: a power law with exponent S, hot rows first, as in tables
#   ordered by frequency), RESIDENCY_SPLIT (in-order: tgs-node --residency-split, how the DLRM job's
#   resident limit is shared among its tables; even: the same prefix of each),
#   FAULT_RUN_S (10) seconds the fresh production job runs before the SIGSEGV, FAULT_AFTER_S (5)
#   seconds it runs after, FAULT_TIMEOUT_S (20) longest wait for a drop or a restore,
#   JOB_GRACE_S (20) a job may run past its last window before it is killed, MAX_S (540) seconds
#   after which no further run starts (a device call is limited to 600 s: runs that would end
#   later are skipped, with a warning in the summary; the tgs run that still fits becomes the
#   one with the fault demonstration), TGS_GPU_BUILD (/tmp/tgs-gpu-build), TGS_NODE_FLAGS (empty)
#   extra tgs-node rate-control flags for the tgs and hard-limit runs, MODES ("coexec-um opp-limited
#   hard-limit tgs"; coexec-budget only when named) the modes to run (the alone runs always run:
#   the numbers are normalized to them), TGS_VARIANTS (empty: "NAME=FLAGS;NAME=FLAGS", NAME of
#   lower-case letters, digits and dashes, FLAGS added to TGS_NODE_FLAGS; mode tgs-NAME each),
#   FAULT_DEMO (1; 0: no fault demonstration, every tgs run is a plain one), FIXED_BUDGETS
#   ("500000 1000000 2000000 4000000 8000000") and FIXED_WINDOW_MS (50) for MODES=fixed,
#   MPS (0; 1: every run with a tgs-node, i.e. all but the alone runs, runs under an MPS control
#   daemon started with its node and stopped with it, so the two jobs' kernels share the SMs
#   instead of time-slicing; the alone runs stay without MPS, so the numbers are against the
#   plain GPU; MPS=1 adds the mode alone-mps: each job alone under a fresh MPS daemon,
#   ALONE_RUNS runs per scenario, normalized like a pair to the plain alone runs, so a row shows
#   what MPS alone does to each job's rate), MPS_OPP_PCT (100: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
#   of the opportunistic job under MPS=1; the production job always gets 100), MPS_OPP_PRIORITY (0;
#   1: CUDA_MPS_CLIENT_PRIORITY=1, below normal, for the opportunistic job under MPS=1, meant to
#   let the GPU's block scheduler take the production job's pending blocks first; on an H100 and
#   an H200 it did not measurably protect the production job, docs/results/gpu-memory.md; the
#   production job stays at 0, normal; PLAN_ONLY=1 prints both jobs' MPS settings), PIN_CPUS (1: every
#   job runs under taskset on one half of the CPUs local to the GPU, whole cores where sysfs says
#   which threads share one, bench/gpu/gpu_cpus.py: the
#   DLRM job on the second half, alone too, a production model on the first, as containers get
#   their own CPUs; 0: unpinned, as every call before PIN_CPUS was), ORDER (grouped: per scenario
#   all alone runs, then each mode's runs in turn; interleaved: round i makes the i-th alone runs
#   and then the i-th run of every mode, so drift of the machine during a call hits the modes
#   alike, and skips an alone run of round 2 or later after which the round's first run would
#   not fit in MAX_S; needs FAULT_DEMO=0 with tgs), PLAN_ONLY (1: print the runs in order, the
#   ones MAX_S would skip and about when the call would end, and stop, without a GPU and writing
#   nothing; a call whose plan leaves a requested mode no run refuses to start).
# Order per scenario: alone runs, alone-mps runs (MPS=1), coexec-um runs, coexec-budget runs, opp-limited runs, hard-limit,
# fixed runs, tgs-NAME runs, tgs runs (the fault demonstration ends the last one); ORDER=interleaved
# makes rounds of that order, with the tgs-NAME runs after the tgs run of each round.
# Writes (at most 8 files, as the device tool returns): $OUT/gpu-memory.json (summary; it names
# the card by its serial and UUID, gpu_serial and gpu_uuid, so calls pooled over machines say which ran,
# and the host's CPU, host_cpu; a warning when one model's alone runs spread more than +-5%),
# $OUT/memory-runs.jsonl (every train.py result line), $OUT/status-samples.jsonl (tgs-node
# status samples, one line per sample and run), $OUT/node.log, $OUT/jobs.log (each job's stderr
# with a header), $OUT/gpu-memory.log (this script's output; a short table last).
# bench/gpu/status_phases.py $OUT/status-samples.jsonl summarizes the samples per run and
# rate-control phase (budget, R, both jobs' block rates, the production job's sync wait); with
# --control, one line per run: where the controller settled, and the spread over R of the rate
# it compared with the dead band (sample_sd: the noise a --dead-band has to be about twice of).
# bench/gpu/pool_memory.py SCENARIO/MODE CALL.json... pools one cell's runs over several calls
# (each run normalized within its own call), for differences smaller than one call resolves;
# with --by-round it also pools run 1 of every call, run 2, ...: with one alone run at a call's
# start (ALONE_RUNS=1), drift of the machine during the call shows as later runs lower.
# bench/gpu/signal_check.py SCENARIO/MODE CALL.json... puts each tgs run's production share beside
# the rates its controller watched (launched and corrected, over R) and its host side's speed per
# block, with rank correlations: which of them follows the job's loss?
# A summary that fails (a bug, a killed call) leaves its inputs in $OUT/summary-inputs; redo it
# without the GPU: GPU_SCRIPTS=<repo>/bench/gpu bash $OUT/summary-inputs/redo-summary.sh
# Machines without the fmt and CLI11 packages: see rate_control.sh (.deps/include).
#
# Safety (shared/GPU.md): the budget must stay under half of the card's free memory and both
# jobs together under 0.8 of it (else the DLRM tables shrink, with a warning); the reuse probe
# holds at most half of the free memory as managed memory. This script never changes clocks,
# power limits, compute mode or MIG, and never resets the GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
OUT=${OUT:-$repo/gpu-memory-out}
PLAN_ONLY=${PLAN_ONLY:-0}
case $PLAN_ONLY in 0 | 1) ;; *) echo "PLAN_ONLY must be 0 or 1 (got '$PLAN_ONLY')"; exit 2 ;; esac
if [ "$PLAN_ONLY" = 0 ]; then  # a plan writes nothing
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu-memory.log") 2>&1
fi

SCENARIOS=${SCENARIOS:-low high}
PROBE=${PROBE:-1}
PROBE_GIB=${PROBE_GIB:-8}
RUNS=${RUNS:-3}
ALONE_RUNS=${ALONE_RUNS:-2}
ALONE_DLRM_RUNS=${ALONE_DLRM_RUNS:-$ALONE_RUNS}
WINDOWS=${WINDOWS:-3}
WINDOW_S=${WINDOW_S:-4}
WARMUP_S=${WARMUP_S:-15}
TGS_SETTLE_S=${TGS_SETTLE_S:-20}
PROFILE_WINDOWS=${PROFILE_WINDOWS:-3}
MAX_PROFILE_WINDOWS=${MAX_PROFILE_WINDOWS:-6}
OPP_DELAY_S=${OPP_DELAY_S:-5}
PAIR_SETTLE_S=${PAIR_SETTLE_S:-10}
ALONE_SETTLE_S=${ALONE_SETTLE_S:-0}
PIN_CPUS=${PIN_CPUS:-1}
case $PIN_CPUS in 0 | 1) ;; *) echo "PIN_CPUS must be 0 or 1 (got '$PIN_CPUS')"; exit 2 ;; esac
TGS_PRODUCTION_WINDOW_MS=${TGS_PRODUCTION_WINDOW_MS:-1000}
RATIO=${RATIO:-1.5}
BUDGET_MIB=${BUDGET_MIB:-}
RESERVE_MIB=${RESERVE_MIB:-1024}
RESNET_BATCH=${RESNET_BATCH:-128}
LOW_MODEL=${LOW_MODEL:-resnet50}
# train.py's image models, read from its IMAGE_MODELS list (no torch import needed).
image_models=$(python3 - "$repo/bench/gpu/train.py" <<'PY'
import ast, sys
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "IMAGE_MODELS" for t in node.targets):
        print(" ".join(ast.literal_eval(node.value)))
PY
)
case " $image_models " in
  *" $LOW_MODEL "*) ;;
  *) echo "LOW_MODEL must be one of train.py's image models: $image_models (got '$LOW_MODEL')"; exit 2 ;;
esac
BERT_BATCH=${BERT_BATCH:-32}
BERT_SEQ=${BERT_SEQ:-128}
DLRM_BATCH=${DLRM_BATCH:-2048}
DLRM_TABLES=${DLRM_TABLES:-8}
DLRM_ROWS=${DLRM_ROWS:-2000000}
DLRM_DIM=${DLRM_DIM:-256}
DLRM_BAG=${DLRM_BAG:-32}
DLRM_ZIPF=${DLRM_ZIPF:-0}
RESIDENCY_SPLIT=${RESIDENCY_SPLIT:-in-order}
case $RESIDENCY_SPLIT in in-order | even) ;; *) echo "RESIDENCY_SPLIT must be in-order or even (got '$RESIDENCY_SPLIT')"; exit 2 ;; esac
if ! python3 -c 'import sys; v = float(sys.argv[1]); sys.exit(0 if 0 <= v <= 10 else 1)' "$DLRM_ZIPF" 2>/dev/null; then
  echo "DLRM_ZIPF must be a number in [0, 10] (got '$DLRM_ZIPF')"; exit 2
fi
FAULT_RUN_S=${FAULT_RUN_S:-10}
FAULT_AFTER_S=${FAULT_AFTER_S:-5}
FAULT_TIMEOUT_S=${FAULT_TIMEOUT_S:-20}
JOB_GRACE_S=${JOB_GRACE_S:-20}
MAX_S=${MAX_S:-540}
TGS_NODE_FLAGS=${TGS_NODE_FLAGS:-}
MODES=${MODES:-coexec-um opp-limited hard-limit tgs}
FAULT_DEMO=${FAULT_DEMO:-1}
FIXED_BUDGETS=${FIXED_BUDGETS:-500000 1000000 2000000 4000000 8000000}
FIXED_WINDOW_MS=${FIXED_WINDOW_MS:-50}
# The knobs the script does arithmetic with: a value that is not a whole number is named here,
# not left to fail inside $(( )) or [ ] halfway through a call.
for knob in WARMUP_S TGS_SETTLE_S OPP_DELAY_S PAIR_SETTLE_S ALONE_SETTLE_S WINDOW_S JOB_GRACE_S \
            FAULT_RUN_S FAULT_AFTER_S FAULT_TIMEOUT_S MAX_S; do
  case ${!knob} in '' | *[!0-9]*) echo "$knob must be a whole number of seconds (got '${!knob}')"; exit 2 ;; esac
done
for knob in RUNS ALONE_RUNS ALONE_DLRM_RUNS WINDOWS PROFILE_WINDOWS MAX_PROFILE_WINDOWS; do
  case ${!knob} in '' | *[!0-9]*) echo "$knob must be a whole number (got '${!knob}')"; exit 2 ;; esac
done
if [ "$ALONE_DLRM_RUNS" -lt 1 ] || [ "$ALONE_DLRM_RUNS" -gt "$ALONE_RUNS" ]; then
  echo "need 1 <= ALONE_DLRM_RUNS <= ALONE_RUNS (got $ALONE_DLRM_RUNS, $ALONE_RUNS): every job needs an alone run to be normalized to"; exit 2
fi
if [ "$WINDOWS" -lt 1 ] || [ "$WINDOW_S" -lt 1 ]; then
  echo "need at least one measured window of at least 1 s (got WINDOWS=$WINDOWS, WINDOW_S=$WINDOW_S)"; exit 2
fi
if [ "$PROFILE_WINDOWS" -lt 1 ] || [ "$MAX_PROFILE_WINDOWS" -lt "$PROFILE_WINDOWS" ]; then
  echo "need 1 <= PROFILE_WINDOWS <= MAX_PROFILE_WINDOWS (got $PROFILE_WINDOWS, $MAX_PROFILE_WINDOWS)"; exit 2
fi
MPS=${MPS:-0}
MPS_OPP_PCT=${MPS_OPP_PCT:-100}
case $MPS in 0 | 1) ;; *) echo "MPS must be 0 or 1 (got '$MPS')"; exit 2 ;; esac
case $MPS_OPP_PCT in '' | *[!0-9]*) echo "MPS_OPP_PCT must be a whole number in [1, 100] (got '$MPS_OPP_PCT')"; exit 2 ;; esac
if [ "$MPS_OPP_PCT" -lt 1 ] || [ "$MPS_OPP_PCT" -gt 100 ]; then echo "MPS_OPP_PCT must be in [1, 100] (got '$MPS_OPP_PCT')"; exit 2; fi
MPS_OPP_PRIORITY=${MPS_OPP_PRIORITY:-0}
case $MPS_OPP_PRIORITY in 0 | 1) ;; *) echo "MPS_OPP_PRIORITY must be 0 (normal) or 1 (below normal) (got '$MPS_OPP_PRIORITY')"; exit 2 ;; esac
if [ "$MPS_OPP_PRIORITY" = 1 ] && [ "$MPS" != 1 ]; then
  echo "MPS_OPP_PRIORITY=1 needs MPS=1: a client priority means nothing without an MPS daemon"; exit 2
fi
# mps_client_env CLASS: the MPS settings of a job of CLASS (production|opportunistic) under MPS=1,
# one NAME=VALUE per line; the launch and the plan both read them here.
mps_client_env() {
  if [ "$1" = opportunistic ]; then
    echo "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$MPS_OPP_PCT"
    if [ "$MPS_OPP_PRIORITY" = 1 ]; then echo "CUDA_MPS_CLIENT_PRIORITY=1"; fi
  fi
  return 0
}
if [ "$MPS" = 1 ] && [ "$PLAN_ONLY" != 1 ] && ! command -v nvidia-cuda-mps-control > /dev/null; then
  echo "MPS=1 needs nvidia-cuda-mps-control on the PATH"; exit 1
fi
for m in $MODES; do
  case $m in coexec-um | coexec-budget | opp-limited | hard-limit | fixed | tgs) ;; *) echo "unknown mode '$m' in MODES (known: coexec-um coexec-budget opp-limited hard-limit fixed tgs)"; exit 2 ;; esac
done
case $FIXED_WINDOW_MS in '' | *[!0-9]* | 0) echo "FIXED_WINDOW_MS must be a positive whole number of ms (got '$FIXED_WINDOW_MS')"; exit 2 ;; esac
# fixed_modes: one "MODE_NAME BLOCKS WINDOW_MS INFLIGHT" line per FIXED_BUDGETS entry.
fixed_modes=""
for f in $FIXED_BUDGETS; do
  IFS=: read -r fb fw fd extra <<< "$f"
  fw=${fw:-$FIXED_WINDOW_MS}
  fd=${fd:-0}
  case $fb$fw$fd in '' | *[!0-9]*) echo "FIXED_BUDGETS entries are BLOCKS, BLOCKS:WINDOW_MS or BLOCKS:WINDOW_MS:INFLIGHT, whole numbers (got '$f')"; exit 2 ;; esac
  if [ -n "$extra" ]; then echo "FIXED_BUDGETS entry '$f': at most three fields, BLOCKS:WINDOW_MS:INFLIGHT"; exit 2; fi
  if [ "$fb" -lt 1 ] || [ "$fw" -lt 1 ]; then echo "FIXED_BUDGETS entry '$f': blocks and window must be positive"; exit 2; fi
  if [ "$fd" -gt 256 ]; then echo "FIXED_BUDGETS entry '$f': INFLIGHT (the launch window) is at most 256"; exit 2; fi
  fname=fixed-$fb
  [ "$fw" = 50 ] || fname=$fname-${fw}ms
  [ "$fd" = 0 ] || fname=$fname-inflight-$fd
  fixed_modes+="$fname $fb $fw $fd"$'\n'
done
case $FAULT_DEMO in 0 | 1) ;; *) echo "FAULT_DEMO must be 0 or 1 (got '$FAULT_DEMO')"; exit 2 ;; esac
TGS_VARIANTS=${TGS_VARIANTS:-}
# variant_modes: one "MODE_NAME<TAB>FLAGS" line per TGS_VARIANTS entry.
variant_modes=""
IFS=';' read -r -a variant_list <<< "$TGS_VARIANTS"
for v in ${variant_list[@]+"${variant_list[@]}"}; do
  v=$(echo "$v" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
  [ -n "$v" ] || continue
  case $v in *=*) ;; *) echo "TGS_VARIANTS entries are NAME=FLAGS (got '$v')"; exit 2 ;; esac
  vname=${v%%=*}
  case $vname in '' | *[!a-z0-9-]*) echo "TGS_VARIANTS entry '$v': NAME is lower-case letters, digits and dashes"; exit 2 ;; esac
  if grep -q "^tgs-$vname"$'\t' <<< "$variant_modes"; then echo "TGS_VARIANTS names '$vname' twice"; exit 2; fi
  variant_modes+="tgs-$vname"$'\t'"${v#*=}"$'\n'
done
ORDER=${ORDER:-grouped}
case $ORDER in grouped | interleaved) ;; *) echo "ORDER must be grouped or interleaved (got '$ORDER')"; exit 2 ;; esac
has_mode() { case " $MODES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ "$ORDER" = interleaved ] && [ "$FAULT_DEMO" = 1 ] && has_mode tgs; then
  echo "ORDER=interleaved measures only: set FAULT_DEMO=0 (the fault demonstration ends the last tgs run of a grouped call)"; exit 2
fi
# Time guard: rough seconds per run (start-up and teardown included).
est_plain=$(( WARMUP_S + WINDOWS * WINDOW_S + 6 ))
est_tgs=$(( est_plain + TGS_SETTLE_S ))
est_pair=$(( est_plain + PAIR_SETTLE_S ))
est_alone=$(( est_plain + ALONE_SETTLE_S ))
est_opp_limited=$(( est_plain + 15 ))  # and the idle production job's start-up and 3 steps
est_demo=$(( 2 * FAULT_TIMEOUT_S + FAULT_RUN_S + FAULT_AFTER_S + 15 ))
if [ "$FAULT_DEMO" = 0 ]; then est_demo=0; fi
fits() { [ $(( SECONDS + $1 )) -le "$MAX_S" ]; }
# skip LABEL [WHY]: records LABEL as skipped (WHY: it would end past MAX_S).
skip() { echo "!! WARNING: skipped $1: ${2:-it would end past MAX_S=$MAX_S s}" | tee -a "$work/warnings.txt"; }

# timed EST COMMAND...: runs COMMAND, a run the time guard expects to take about EST seconds
# (PLAN_ONLY=1 advances its clock by it).
timed() { shift; "$@"; }

# attempt EST LABEL COMMAND...: runs COMMAND when a run of about EST seconds still fits in
# MAX_S, else records LABEL as skipped.
attempt() {
  local est=$1 label=$2
  shift 2
  if fits "$est"; then timed "$est" "$@"; else skip "$label"; fi
}

# pair_entries: the modes of two jobs other than tgs this call runs, in order, one line each:
# "MODE" or, for a fixed share, "MODE_NAME BLOCKS WINDOW_MS INFLIGHT".
pair_entries() {
  local m
  for m in coexec-um coexec-budget opp-limited hard-limit; do
    if has_mode "$m"; then echo "$m"; fi
  done
  if has_mode fixed; then printf '%s' "$fixed_modes"; fi
}
# variant_entries: the tgs-NAME modes, in order, one "MODE_NAME<TAB>FLAGS" line each.
variant_entries() { printf '%s' "$variant_modes"; }
# requested_modes: the name of every mode this call measures, one per line (alone-mps with MPS=1).
requested_modes() {
  local entry
  if [ "$MPS" = 1 ]; then echo alone-mps; fi
  while read -r entry; do if [ -n "$entry" ]; then echo "${entry%% *}"; fi; done <<< "$(pair_entries)"
  while IFS=$'\t' read -r entry _; do if [ -n "$entry" ]; then echo "$entry"; fi; done <<< "$(variant_entries)"
  if has_mode tgs; then echo tgs; fi
}
# variant_run SCEN I ENTRY: run I of the TGS_VARIANTS mode of ENTRY (a variant_entries line), or
# its skip.
variant_run() {
  local vmode vflags
  IFS=$'\t' read -r vmode vflags <<< "$3"
  attempt "$est_tgs" "$1/$vmode/$2" run_tgs "$1" "$2" 0 "$vmode" "$vflags"
}

# runs_of MODE: how many runs of MODE a scenario gets (hard-limit: one).
runs_of() { if [ "$1" = hard-limit ]; then echo 1; else echo "$RUNS"; fi; }

# pair_est MODE: the guard's seconds for one run of MODE, a mode of two jobs other than tgs.
pair_est() { if [ "$1" = opp-limited ]; then echo "$est_opp_limited"; else echo "$est_pair"; fi; }
# pair_run SCEN I MODE [BLOCKS WINDOW_MS INFLIGHT]: run I of MODE, or its skip.
pair_run() {
  local scen=$1 i=$2 mode=$3 run
  case $mode in
    coexec-um | coexec-budget) run=(run_coexec "$scen" "$i" "$mode") ;;
    opp-limited) run=(run_opp_limited "$scen" "$i") ;;
    hard-limit) i=1; run=(run_hard_limit "$scen") ;;
    *) run=(run_fixed "$scen" "$i" "$mode" "$4" "$5" "$6") ;;
  esac
  attempt "$(pair_est "$mode")" "$scen/$mode/$i" "${run[@]}"
}

# alone_est_of KIND: the guard's seconds for one alone run of KIND (mps: both jobs, one by one).
alone_est_of() { if [ "$1" = mps ]; then echo $(( 2 * est_alone )); else echo "$est_alone"; fi; }
# alone_label SCEN I KIND: the label of the I-th alone run of KIND.
alone_label() {
  case $3 in
    production) echo "alone/$(prod_model_of "$1")/$2" ;;
    dlrm) echo "alone/dlrm/$2" ;;
    mps) echo "$1/alone-mps/$2" ;;
  esac
}
# alone_run SCEN I KIND: the I-th alone run of SCEN's production job (KIND production), of the
# DLRM job (dlrm: in a call's first scenario only, its alone runs serve them all) or of both
# under MPS (mps, MPS=1 only).
alone_run() {
  local scen=$1 i=$2 kind=$3 run
  case $kind in
    production) run=(run_alone "$(prod_model_of "$scen")" "$i") ;;
    dlrm) run=(run_alone dlrm "$i") ;;
    mps) run=(run_alone_mps "$scen" "$i") ;;
  esac
  attempt "$(alone_est_of "$kind")" "$(alone_label "$scen" "$i" "$kind")" "${run[@]}"
}
# alone_kinds FIRST: the alone runs a scenario makes (FIRST=1: the call's first scenario).
alone_kinds() {
  echo production
  if [ "$1" = 1 ]; then echo dlrm; fi
  if [ "$MPS" = 1 ]; then echo mps; fi
}
# alone_runs_of KIND: how many alone runs of KIND a scenario makes.
alone_runs_of() { if [ "$1" = dlrm ]; then echo "$ALONE_DLRM_RUNS"; else echo "$ALONE_RUNS"; fi; }

# round_first_est I: the guard's seconds for the first run of a mode in round I, or nothing when
# round I runs no mode (only the alone runs beyond RUNS).
round_first_est() {
  local entry mode
  while read -r entry; do
    [ -n "$entry" ] || continue
    mode=${entry%% *}
    if [ "$1" -le "$(runs_of "$mode")" ]; then pair_est "$mode"; return; fi
  done <<< "$(pair_entries)"
  if [ "$1" -le "$RUNS" ] && { has_mode tgs || [ -n "$variant_modes" ]; }; then echo "$est_tgs"; fi
}

# ORDER=grouped: per scenario every alone run first, then each mode's runs one after another; the
# fault demonstration (FAULT_DEMO=1) ends the last tgs run that fits.
run_grouped() {
  local scen i first=1 last kind entry mode fb fw fd entries=() variants=()
  mapfile -t entries < <(pair_entries)
  mapfile -t variants < <(variant_entries)
  for scen in $SCENARIOS; do
    for kind in $(alone_kinds "$first"); do
      for i in $(seq "$(alone_runs_of "$kind")"); do alone_run "$scen" "$i" "$kind"; done
    done
    first=0
    for entry in ${entries[@]+"${entries[@]}"}; do
      read -r mode fb fw fd <<< "$entry"
      for i in $(seq "$(runs_of "$mode")"); do pair_run "$scen" "$i" "$mode" "$fb" "$fw" "$fd"; done
    done
    for entry in ${variants[@]+"${variants[@]}"}; do
      for i in $(seq "$RUNS"); do variant_run "$scen" "$i" "$entry"; done
    done
    for i in $(seq "$RUNS"); do
      has_mode tgs || break
      if ! fits $(( est_tgs + est_demo )); then skip "$scen/tgs/$i and after"; break; fi
      last=0
      if [ "$i" = "$RUNS" ] || ! fits $(( 2 * est_tgs + est_demo )); then last=1; fi
      if [ "$FAULT_DEMO" = 0 ]; then
        fits $(( 2 * est_tgs )) || last=1
        timed "$est_tgs" run_tgs "$scen" "$i" 0
      elif [ "$last" = 1 ]; then
        timed $(( est_tgs + est_demo )) run_tgs "$scen" "$i" 1
      else
        timed "$est_tgs" run_tgs "$scen" "$i" 0
      fi
      if [ "$last" = 1 ]; then
        if [ "$i" != "$RUNS" ]; then skip "$scen/tgs/$(( i + 1 ))..$RUNS"; fi
        break
      fi
    done
  done
}

# ORDER=interleaved: per scenario, rounds; round i runs the i-th alone runs and then the i-th run
# of every mode, so a machine whose speed drifts during the call (alone rates moved 13% within
# three minutes on one H100 host) shifts every mode alike instead of the modes run last.
run_interleaved() {
  local scen i first=1 kind entry mode fb fw fd first_est entries=() variants=()
  local rounds=$(( RUNS > ALONE_RUNS ? RUNS : ALONE_RUNS ))
  mapfile -t entries < <(pair_entries)
  mapfile -t variants < <(variant_entries)
  for scen in $SCENARIOS; do
    for i in $(seq "$rounds"); do
      # A later round's alone runs serve only that round's runs: an alone run after which the
      # round's first run would no longer fit is skipped, so the time goes to that run
      # (normalized to the call's alone median) instead of to an alone run nothing follows.
      first_est=$(round_first_est "$i")
      if [ "$i" -le "$ALONE_RUNS" ]; then
        for kind in $(alone_kinds "$first"); do
          [ "$i" -le "$(alone_runs_of "$kind")" ] || continue
          if [ "$i" -gt 1 ] && [ -n "$first_est" ] && ! fits $(( $(alone_est_of "$kind") + first_est )); then
            skip "$(alone_label "$scen" "$i" "$kind")" "round $i's first run would not fit after it in MAX_S=$MAX_S s"
          else
            alone_run "$scen" "$i" "$kind"
          fi
        done
      fi
      for entry in ${entries[@]+"${entries[@]}"}; do
        read -r mode fb fw fd <<< "$entry"
        if [ "$i" -le "$(runs_of "$mode")" ]; then pair_run "$scen" "$i" "$mode" "$fb" "$fw" "$fd"; fi
      done
      if has_mode tgs && [ "$i" -le "$RUNS" ]; then attempt "$est_tgs" "$scen/tgs/$i" run_tgs "$scen" "$i" 0; fi
      for entry in ${variants[@]+"${variants[@]}"}; do
        if [ "$i" -le "$RUNS" ]; then variant_run "$scen" "$i" "$entry"; fi
      done
    done
    first=0
  done
}

run_scenarios() { if [ "$ORDER" = interleaved ]; then run_interleaved; else run_grouped; fi; }

for s in $SCENARIOS; do
  case $s in low|high) ;; *) echo "unknown scenario '$s' (low, high)"; exit 2 ;; esac
done
prod_model_of() { case $1 in low) echo "$LOW_MODEL" ;; high) echo bert_base ;; esac; }

# How long after its start each kind of run measures the production job: runs compared at
# different ages differ by whatever the job still gains after its first seconds.
ages_line() {
  echo "ages (s from the production job's start to its first window): alone $(( WARMUP_S + ALONE_SETTLE_S )), pairs $(( WARMUP_S + PAIR_SETTLE_S )), tgs $(( WARMUP_S + TGS_SETTLE_S ))"
}

# PLAN_ONLY=1: print the runs this call would make, in order, and stop (no GPU, no build, nothing
# written). The plan keeps the time guard's clock: the runs MAX_S would skip are listed with
# "(skipped: ...)", and the last line says about when the call would end.
if [ "$PLAN_ONLY" = 1 ]; then
  ages_line
  if [ "$MPS" = 1 ]; then
    for cls in production opportunistic; do
      settings=$(mps_client_env "$cls" | tr '\n' ' ')
      if [ -z "$settings" ]; then settings="the daemon's defaults"; fi
      echo "mps: the $cls job, in a pair and in alone-mps: ${settings% }"
    done
  fi
  # The plan's clock starts after the build and the footprint runs (16-43 s on the H100 machines
  # measured). A run ends about 5 s before the guard's estimate, which keeps that much for
  # start-up and teardown (an alone run of 15 + 40 s and 3 windows of 5 s took 71 s, against its
  # estimate of 76).
  plan_setup_s=40
  plan_t=$plan_setup_s
  plan_skipped=0
  timed() { local est=$1; shift; "$@"; plan_t=$(( plan_t + est - 5 )); }
  fits() { [ $(( plan_t + $1 )) -le "$MAX_S" ]; }
  skip() { echo "plan: $1 (skipped: ${2:-it would end past MAX_S=$MAX_S s})"; plan_skipped=$(( plan_skipped + 1 )); }
  plan_labels=""  # every run the plan keeps, one label per line
  plan() { echo "plan: $*"; plan_labels+="$1"$'\n'; }
  run_alone() { plan "alone/$1/$2"; }
  run_alone_mps() { plan "$1/alone-mps/$2"; }
  run_coexec() { plan "$1/$3/$2"; }
  run_opp_limited() { plan "$1/opp-limited/$2"; }
  run_hard_limit() { plan "$1/hard-limit/1"; }
  run_fixed() { plan "$1/$3/$2"; }
  run_tgs() {
    if [ "$3" = 1 ]; then plan "$1/tgs/$2 (then the fault demonstration)"; else plan "$1/${4:-tgs}/$2${5:+ (+ $5)}"; fi
  }
  run_scenarios
  # A mode the call asks for but of which MAX_S leaves no run: the call would spend its time on
  # alone runs with nothing to normalize (the real call refuses to start, below).
  no_run=""
  for m in $(requested_modes); do
    case $plan_labels in *"/$m/"*) ;; *) no_run+=" $m" ;; esac
  done
  if [ -n "$no_run" ]; then echo "plan: MAX_S=$MAX_S s leaves no run of:${no_run}"; fi
  probe_words=""
  if [ "$PROBE" = 1 ]; then probe_words=", the probe (PROBE=1) not counted"; fi
  echo "plan ends about $plan_t s after the call's start (MAX_S=$MAX_S s; $plan_setup_s s assumed for the build and the footprints$probe_words); $plan_skipped skipped"
  exit 0
fi

# Before the build: a call whose own plan leaves a requested mode no run would spend the GPU on
# alone runs only (as one call did with MAX_S=390). The plan's clock assumes the build's 40 s, so
# this errs toward refusing a call that would only just fit.
no_run_line=$(PLAN_ONLY=1 bash "$repo/bench/gpu/memory.sh" | grep '^plan: MAX_S=.* leaves no run of:' || true)
if [ -n "$no_run_line" ]; then
  echo "${no_run_line#plan: } (raise MAX_S or ask for fewer runs; PLAN_ONLY=1 prints the plan)"; exit 2
fi

BUILD=${TGS_GPU_BUILD:-/tmp/tgs-gpu-build}
FAULT_KEEP_S=$(( 3 * FAULT_TIMEOUT_S + FAULT_RUN_S + FAULT_AFTER_S + 60 ))  # lingering of the last tgs run's jobs
# Not $([ ... ] && echo ...): under set -e a false test there ends the script without a word.
mps_words=""
if [ "$MPS" = 1 ]; then mps_words=" MPS=1 MPS_OPP_PCT=$MPS_OPP_PCT"; fi
# Named only when set, so the commands of earlier MPS calls read the same.
if [ "$MPS_OPP_PRIORITY" = 1 ]; then mps_words+=" MPS_OPP_PRIORITY=1"; fi
# Named only where it differs from ALONE_RUNS, so the commands of earlier calls read the same.
alone_dlrm_word=""
if [ "$ALONE_DLRM_RUNS" != "$ALONE_RUNS" ]; then alone_dlrm_word=" ALONE_DLRM_RUNS=$ALONE_DLRM_RUNS"; fi
COMMAND="SCENARIOS=\"$SCENARIOS\" PROBE=$PROBE PROBE_GIB=$PROBE_GIB RUNS=$RUNS ALONE_RUNS=$ALONE_RUNS${alone_dlrm_word} WINDOWS=$WINDOWS WINDOW_S=$WINDOW_S WARMUP_S=$WARMUP_S TGS_SETTLE_S=$TGS_SETTLE_S PAIR_SETTLE_S=$PAIR_SETTLE_S ALONE_SETTLE_S=$ALONE_SETTLE_S OPP_DELAY_S=$OPP_DELAY_S TGS_PRODUCTION_WINDOW_MS=$TGS_PRODUCTION_WINDOW_MS PROFILE_WINDOWS=$PROFILE_WINDOWS MAX_PROFILE_WINDOWS=$MAX_PROFILE_WINDOWS RATIO=$RATIO${BUDGET_MIB:+ BUDGET_MIB=$BUDGET_MIB} RESERVE_MIB=$RESERVE_MIB LOW_MODEL=$LOW_MODEL RESNET_BATCH=$RESNET_BATCH BERT_BATCH=$BERT_BATCH BERT_SEQ=$BERT_SEQ DLRM_BATCH=$DLRM_BATCH DLRM_TABLES=$DLRM_TABLES DLRM_ROWS=$DLRM_ROWS DLRM_DIM=$DLRM_DIM DLRM_BAG=$DLRM_BAG DLRM_ZIPF=$DLRM_ZIPF RESIDENCY_SPLIT=$RESIDENCY_SPLIT FAULT_RUN_S=$FAULT_RUN_S FAULT_AFTER_S=$FAULT_AFTER_S FAULT_TIMEOUT_S=$FAULT_TIMEOUT_S JOB_GRACE_S=$JOB_GRACE_S MAX_S=$MAX_S PIN_CPUS=$PIN_CPUS ORDER=$ORDER${TGS_NODE_FLAGS:+ TGS_NODE_FLAGS=\"$TGS_NODE_FLAGS\"}${TGS_VARIANTS:+ TGS_VARIANTS=\"$TGS_VARIANTS\"} MODES=\"$MODES\"${fixed_modes:+ FIXED_BUDGETS=\"$FIXED_BUDGETS\" FIXED_WINDOW_MS=$FIXED_WINDOW_MS}${mps_words} FAULT_DEMO=$FAULT_DEMO bench/gpu/memory.sh"

work=$(mktemp -d /tmp/tgs-mem-XXXXXX)
runs=$OUT/memory-runs.jsonl
samples=$OUT/status-samples.jsonl
: > "$runs"
: > "$samples"
: > "$OUT/node.log"
: > "$OUT/jobs.log"
: > "$work/exits.tsv"
: > "$work/tgsruns.tsv"
: > "$work/faults.jsonl"
: > "$work/footprints.jsonl"
: > "$work/budgets.tsv"
: > "$work/warnings.txt"
export PYTHONUNBUFFERED=1
export GPU_SCRIPTS="$repo/bench/gpu"  # the helper imports node_status.py and memory_call.py from there
ulimit -c 0  # no core files from the SIGSEGV demonstration
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
helper=$work/memhelper.py

node_pid=""
sampler_pid=""
mps_started=0
summary_done=0
job_pids=()
cleanup() {
  local p
  if [ -n "$sampler_pid" ]; then kill "$sampler_pid" 2>/dev/null || true; fi
  for p in ${job_pids[@]+"${job_pids[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  if [ ${#job_pids[@]} -gt 0 ]; then
    sleep 2
    for p in "${job_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  fi
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  if [ "$mps_started" = 1 ]; then stop_mps; fi  # (defined below; only set once it has run)
  # A summary that did not finish leaves its inputs in $OUT/summary-inputs, so it can be redone
  # from $OUT alone (redo-summary.sh there, written before the summary ran).
  if [ -d "$work" ] && [ "$summary_done" = 0 ] && [ -f "$work/redo-summary.sh" ]; then
    mkdir -p "$OUT/summary-inputs"
    cp "$work"/*.tsv "$work"/*.jsonl "$work"/*.txt "$work"/probe.log "$work"/*.sh "$OUT/summary-inputs/" 2>/dev/null || true
    cp "$helper" "$OUT/summary-inputs/" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say() { echo "== [$(printf '%4d' "$SECONDS") s] $*"; }

# ---------------------------------------------------------------------------------------------
# Python helper: status sampling, fault timing, budget arithmetic and the summary (all JSON).
cat > "$helper" <<'PY'
import json, math, os, signal, statistics, sys, time

sys.path.insert(0, os.environ["GPU_SCRIPTS"])
from node_status import sample, status  # noqa: E402  (bench/gpu/node_status.py)
from memory_call import read_result_lines  # noqa: E402  (bench/gpu/memory_call.py)

MIB, GIB = 1 << 20, 1 << 30

def job_by_pid(jobs, pid):
    return next((j for j in jobs if j.get("pid") == pid), None)

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

MEM_KEYS = ("device_bytes", "managed_bytes", "managed_resident_bytes", "resident_bytes", "evictions", "restores",
            "evicted_bytes_total", "restored_bytes_total", "evict_s_total", "restore_s_total", "denied_allocs",
            "host_placed_bytes", "converted_allocs")

def mem_of(j):
    return {k: j.get(k) for k in MEM_KEYS} if j else None

def resident(j):
    """A job's resident bytes: the node's resident_bytes, else device + resident managed bytes."""
    r = j.get("resident_bytes")
    if isinstance(r, (int, float)):
        return r
    d, m = j.get("device_bytes"), j.get("managed_resident_bytes")
    return d + m if isinstance(d, (int, float)) and isinstance(m, (int, float)) else None

def cmd_fault_kill(node, sock, prod, opp, timeout, scen):
    """SIGKILL the production job; time until the node drops it and until the opportunistic job
    is fully resident again."""
    prod, opp, timeout = int(prod), int(opp), float(timeout)
    st = status(node, sock)
    before = mem_of(job_by_pid(st[1], opp)) if st else None
    res = {"scenario": scen, "event": "kill_production", "signal": "SIGKILL",
           "production_listed_before": bool(st and job_by_pid(st[1], prod)),
           "opportunistic_before": before, "opportunistic_alive": alive(opp)}
    t0 = time.monotonic()
    os.kill(prod, signal.SIGKILL)
    gone = restored = None
    after = None
    while time.monotonic() - t0 < timeout:
        st = status(node, sock)
        now = time.monotonic() - t0
        if st is not None:
            if gone is None and job_by_pid(st[1], prod) is None:
                gone = now
            j = job_by_pid(st[1], opp)
            if j is not None:
                after = mem_of(j)
                m, r = j.get("managed_bytes"), j.get("managed_resident_bytes")
                if restored is None and isinstance(m, int) and isinstance(r, int) and r >= m:
                    restored = now
        if gone is not None and (restored is not None or after is None):
            break
        time.sleep(0.1)
    res.update(production_gone_s=gone, restored_s=restored, opportunistic_after=after)
    if before and after:
        for k in ("restored_bytes_total", "restore_s_total"):
            if isinstance(before.get(k), (int, float)) and isinstance(after.get(k), (int, float)):
                res[k.replace("_total", "") + "_delta"] = after[k] - before[k]
    print(json.dumps(res), flush=True)

def cmd_fault_segv(node, sock, prod, opp, run_s, after_s, timeout, scen, fstart):
    """Once the fresh production job launches kernels, let it run RUN_S, SIGSEGV the
    opportunistic job, time until the node drops it, let production run AFTER_S, SIGTERM it."""
    prod, opp = int(prod), int(opp)
    run_s, after_s, timeout, fstart = float(run_s), float(after_s), float(timeout), float(fstart)
    res = {"scenario": scen, "event": "segv_opportunistic", "signal": "SIGSEGV"}
    t0 = time.monotonic()
    launching = None
    while time.monotonic() - t0 < 3 * timeout and alive(prod):
        st = status(node, sock)
        j = job_by_pid(st[1], prod) if st else None
        if j is not None and (j.get("launches_per_s") or 0) > 0:
            launching = time.monotonic() - t0
            break
        time.sleep(0.2)
    res["production_launching_after_s"] = launching
    time.sleep(run_s)
    st = status(node, sock)
    pj = job_by_pid(st[1], prod) if st else None
    res["production_launches_per_s_before"] = pj.get("launches_per_s") if pj else None
    res["opportunistic_alive"] = alive(opp)
    res["opportunistic_listed_before"] = bool(st and job_by_pid(st[1], opp))
    kill_epoch = time.time()
    t1 = time.monotonic()
    gone = None
    if res["opportunistic_alive"]:
        os.kill(opp, signal.SIGSEGV)
        while time.monotonic() - t1 < timeout:
            st = status(node, sock)
            if st is not None and job_by_pid(st[1], opp) is None:
                gone = time.monotonic() - t1
                break
            time.sleep(0.1)
    res.update(opportunistic_gone_s=gone, kill_rel_s=kill_epoch - fstart)
    time.sleep(after_s)
    st = status(node, sock)
    pj = job_by_pid(st[1], prod) if st else None
    res["production_launches_per_s_after"] = pj.get("launches_per_s") if pj else None
    res["production_alive_after"] = alive(prod)
    if alive(prod):
        os.kill(prod, signal.SIGTERM)
    print(json.dumps(res), flush=True)

def cmd_budget(footprints, free_mib, ratio, override, pairs):
    """Per scenario: P, O and the budget; then OK, SHRINK (DLRM too big for the card) or FAIL."""
    fp = {}
    for line in open(footprints):
        if line.startswith("{"):
            d = json.loads(line)
            fp[d["model"]] = math.ceil(d["peak_reserved_bytes"] / MIB)
    free_mib, ratio = float(free_mib), float(ratio)
    verdict = "OK"
    for pair in pairs:
        scen, prod = pair.split(":")
        p, o = fp[prod], fp["dlrm"]
        budget = int(override) if override else math.ceil((p + o) / ratio)
        print(scen, prod, p, o, budget)
        if budget >= 0.5 * free_mib or p + o >= 0.8 * free_mib:
            why = (f"{scen}: budget {budget} MiB (must be < {0.5 * free_mib:.0f}) or both jobs {p + o} MiB "
                   f"(must be < {0.8 * free_mib:.0f}) too large for {free_mib:.0f} MiB free")
            if override and p + o < 0.8 * free_mib:
                verdict = "FAIL " + why
            elif verdict == "OK":
                verdict = "SHRINK " + why
    print(verdict)

# ------------------------------------------------------------------ summary
def med(v):
    return statistics.median(v) if v else None

# The production target's margin (0.95 of alone): alone runs spread wider than this make one call
# too noisy to judge it.
ALONE_NOISE = 0.05

def read_records(path):
    """Every JSON object in a file of result lines, as memory_call.py reads them; a line that is
    not JSON is reported, not fatal."""
    records, problems = read_result_lines(path)
    for p in problems:
        print(p, file=sys.stderr)
    return [obj for _, obj in records]

def cmd_summarize():
    E = os.environ
    rows = read_records(E["RUNS_FILE"])
    by_label = {r["label"]: r for r in rows if "label" in r}
    exits = {}
    for line in open(E["EXITS"]):
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 4:
            exits[parts[0]] = {"rc": int(parts[1]), "overran": parts[2] == "1", "oom": parts[3] == "1"}
    budgets = {}
    for line in open(E["BUDGETS"]):
        scen, prod, p, o, b, pl, ol = line.split()
        budgets[scen] = {"production": prod, "P": int(p), "O": int(o), "budget": int(b),
                         "production_limit": int(pl), "opportunistic_limit": int(ol)}
    footprints = {}
    for line in open(E["FOOTPRINTS"]):
        if line.startswith("{"):
            d = json.loads(line)
            footprints[d["model"]] = math.ceil(d["peak_reserved_bytes"] / MIB)
    faults = [json.loads(l) for l in open(E["FAULTS"]) if l.startswith("{")]
    samples = {}
    for line in open(E["SAMPLES"]):
        if line.startswith("{"):
            d = json.loads(line)
            samples.setdefault(d["run"], []).append(d)
    tgsruns = [line.split() for line in open(E["TGSRUNS"]) if line.strip()]
    windows, window_s = int(E["WINDOWS"]), float(E["WINDOW_S"])

    def run_rate(label):  # per-run median window, None when the job printed nothing
        r = by_label.get(label)
        return med(r["it_per_s"]) if r and "it_per_s" in r else None

    alone = {}
    for label, r in by_label.items():
        if label.startswith("alone/") and "it_per_s" in r:
            alone.setdefault(label.split("/")[1], []).append(med(r["it_per_s"]))
    alone_med = {m: med(v) for m, v in alone.items()}

    probe = None
    if E.get("PROBE_LOG") and os.path.exists(E["PROBE_LOG"]):
        for line in open(E["PROBE_LOG"]):
            if line.startswith("{"):
                try:
                    probe = json.loads(line)
                except ValueError:
                    pass

    # Which card ran the call ("[N/A]" or nothing from nvidia-smi, and summaries redone from an
    # older call's inputs, give null).
    card = {k: (v if (v := E.get(k, "").strip()) and not v.startswith("[") else None) for k in ("GPU_SERIAL", "GPU_UUID")}
    # And which host: the production jobs here are bound by their CPU side, so the host's CPU sets
    # their alone rate (ResNet-50 b32's alone runs in docs/results range from 24 to 61 it/s) and its noise.
    # With the threads per core and the two jobs' CPU lists (PIN_CPUS=1; bench/gpu/gpu_cpus.py
    # gives each job whole cores where sysfs says which threads share one), null where unknown.
    count = lambda k: int(v) if (v := E.get(k, "").strip()).isdigit() else None
    pinned = {c: E.get(k, "").strip() for c, k in (("production", "PINNED_PRODUCTION"),
                                                   ("opportunistic", "PINNED_OPPORTUNISTIC"))}
    host_cpu = {"model": E.get("HOST_CPU_MODEL", "").strip() or None, "cpus": count("HOST_CPUS"),
                "threads_per_core": count("HOST_THREADS_PER_CORE"),
                "governor": E.get("HOST_CPU_GOVERNOR", "").strip() or None,
                "pinned": pinned if all(pinned.values()) else None}
    noisy_alone = []
    # A call whose alone runs of one model spread more than the production target's margin cannot
    # tell 0.95 of alone from 1.00 by itself (an H100 host's alone runs spread 0.80-1.21 in one
    # call): said in the summary and last in the log, so nobody reads such a call's 0.95 alone.
    for model, v in alone.items():
        base = alone_med.get(model)
        if len(v) >= 2 and base:
            lo, hi = min(v) / base, max(v) / base
            if lo < 1 - ALONE_NOISE or hi > 1 + ALONE_NOISE:
                noisy_alone.append(f"alone runs of {model} spread {lo:.2f}-{hi:.2f} of their median, more than "
                                   f"+-{ALONE_NOISE:.0%}: this call alone cannot resolve a {ALONE_NOISE:.0%} change in {model}'s "
                                   f"share, such as 0.95 of alone against 1.00 (pool calls: bench/gpu/pool_memory.py)")
    out = {"device": E["DEVICE"], "driver": E["DRIVER"], "gpu_serial": card["GPU_SERIAL"], "gpu_uuid": card["GPU_UUID"],
           "date": E["STARTED"], "command": E["COMMAND"],
           "ratio": float(E["RATIO"]), "budget_mib": {s: b["budget"] for s, b in budgets.items()},
           "footprints_mib": footprints, "free_mib_at_start": float(E["FREE_MIB"]),
           "dlrm": {**{k: int(E["DLRM_" + k.upper()]) for k in ("tables", "rows", "dim", "bag", "batch")},
                    "zipf": float(E["DLRM_ZIPF"])},
           "residency_split": E["RESIDENCY_SPLIT"],
           "host_cpu": host_cpu,
           "warnings": ([l.strip() for l in open(E["WARNINGS"])] if os.path.exists(E["WARNINGS"]) else []) + noisy_alone,
           "limits_mib": {s: {"reserve": int(E["RESERVE_MIB"]), "hard_limit_production": b["production_limit"],
                              "hard_limit_opportunistic": b["opportunistic_limit"]} for s, b in budgets.items()},
           "alone_it_per_s": {m: {"median": alone_med[m], "runs": v} for m, v in alone.items()},
           "scenarios": {}, "reuse_probe": probe}

    def norm_stats(rates, base):
        vals = [x / base for x in rates if x is not None] if base else []
        return (med(vals), [min(vals), max(vals)] if vals else None)

    for scen in E["SCENARIO_LIST"].split():
        if scen not in budgets:
            continue
        prod = budgets[scen]["production"]
        entry = {"production_model": prod, "opportunistic_model": "dlrm", "budget_mib": budgets[scen]["budget"],
                 "footprint_mib": {"production": budgets[scen]["P"], "opportunistic": budgets[scen]["O"]},
                 "modes": {}, "memory": {}, "faults": {}}
        m = {}
        for cls, model in (("production", prod), ("opportunistic", "dlrm")):
            v = alone.get(model, [])
            base = alone_med.get(model)
            n, s = norm_stats(v, base)
            m[cls] = n
            m[cls + "_spread"] = s
            m[cls + "_it_per_s"] = base
        m["runs"] = len(alone.get(prod, []))
        entry["modes"]["alone"] = m
        fixed = {}  # mode name -> (blocks, window ms, launch window: 0 = none)
        for line in E.get("FIXED_MODES", "").splitlines():
            if line.split():
                name, blocks, window, inflight = line.split()
                fixed[name] = (int(blocks), int(window), int(inflight))
        variants = {}  # tgs-NAME -> tgs-node's rate flags of that mode's runs
        for line in E.get("VARIANT_MODES", "").splitlines():
            if line.strip():
                name, _, flags = line.partition("\t")
                variants[name] = " ".join(x for x in (E.get("TGS_NODE_FLAGS", ""), flags) if x.strip())
        for mode in ("alone-mps", "coexec-um", "coexec-budget", "opp-limited", *fixed, "tgs", *variants,
                     "hard-limit"):
            labels = sorted({l.rsplit("/", 1)[0] for l in list(by_label) + list(exits) if l.startswith(f"{scen}/{mode}/")})
            if not labels:
                continue
            m = {"runs": len(labels)}
            for cls, model in (("production", prod), ("opportunistic", "dlrm")):
                if mode == "opp-limited" and cls == "production":
                    # The production job idles there: no production numbers.
                    m.update({"production": None, "production_spread": None, "production_it_per_s": None,
                              "production_missing_runs": 0, "production_exit_codes": []})
                    continue
                rates = [run_rate(f"{l}/{cls}") for l in labels]
                missing = sum(r is None for r in rates)
                if mode != "hard-limit":
                    rates = [0.0 if r is None else r for r in rates]
                n, s = norm_stats(rates, alone_med.get(model))
                m[cls] = n
                m[cls + "_spread"] = s
                m[cls + "_it_per_s"] = med([r for r in rates if r is not None])
                m[cls + "_missing_runs"] = missing
                m[cls + "_exit_codes"] = [exits.get(f"{l}/{cls}", {}).get("rc") for l in labels]
                # A job not yet training at the shared start loses part of its first window (and
                # leaves its co-runner that part alone): the latest it was ready, over the runs.
                late = [by_label[f"{l}/{cls}"].get("ready_late_s") for l in labels if f"{l}/{cls}" in by_label]
                late = [x for x in late if isinstance(x, (int, float))]
                m[cls + "_ready_late_max_s"] = round(max(late), 1) if late else None
            if mode in fixed:
                m["budget_blocks"], m["budget_window_ms"], m["max_inflight_launches"] = fixed[mode]
            if mode in variants:
                m["tgs_node_flags"] = variants[mode]
            if mode == "hard-limit":
                e = [exits.get(f"{l}/opportunistic", {}) for l in labels]
                m["opportunistic_died"] = [x.get("rc") not in (None, 0) for x in e]
                m["opportunistic_oom_in_stderr"] = [x.get("oom") for x in e]
                m["production_limit_mib"] = budgets[scen]["production_limit"]
                m["opportunistic_limit_mib"] = budgets[scen]["opportunistic_limit"]
            entry["modes"][mode] = m

        # Memory numbers of the tgs runs, from the status samples.
        per_run = []
        for scen_, idx, run_label, start, ppid, opid in tgsruns:
            if scen_ != scen:
                continue
            start, ppid, opid = float(start), int(ppid), int(opid)
            ss = samples.get(run_label, [])
            r = {"run": run_label, "samples": len(ss)}
            opp = [(s["t"], job_by_pid(s["jobs"], opid), s["gpus"][0] if s["gpus"] else {}) for s in ss]
            opp = [(t, j, g) for t, j, g in opp if j is not None]
            if opp:
                t_first, j_first, _ = opp[0]
                registered = t_first - float(j_first.get("up_s") or 0.0)
                end = start + windows * window_s
                steady = [x for x in opp if start <= x[0] <= end] or [x for x in opp if x[0] <= end] or opp
                t_s, j_s, g_s = steady[-1]
                lim = g_s.get("opportunistic_resident_limit")
                res_s = resident(j_s)
                r.update({k: j_s.get(k) for k in MEM_KEYS})
                r["resident_bytes"] = res_s
                r["opportunistic_resident_limit"] = lim
                pj = job_by_pid(next(s["jobs"] for s in ss if s["t"] == t_s), ppid)
                r["production_device_bytes"] = pj.get("device_bytes") if pj else None
                r["production_resident_bytes"] = resident(pj) if pj else None
                ev_b, ev_s = j_s.get("evicted_bytes_total"), j_s.get("evict_s_total")
                r["eviction_gbps"] = ev_b / ev_s / 1e9 if isinstance(ev_b, (int, float)) and ev_s else None
                rs_b, rs_s = j_s.get("restored_bytes_total"), j_s.get("restore_s_total")
                r["restore_gbps"] = rs_b / rs_s / 1e9 if isinstance(rs_b, (int, float)) and rs_s else None
                # Seconds from registration until the resident bytes were first within the limit
                # once the job had (nearly) all its steady managed memory (1 s sampling).
                steady_managed = j_s.get("managed_bytes") or 0
                within = None
                over = 0
                for t, j, g in opp:
                    lm = g.get("opportunistic_resident_limit")
                    res_b = resident(j)
                    if not isinstance(lm, (int, float)) or not isinstance(res_b, (int, float)):
                        continue
                    over = max(over, res_b - lm)
                    if within is None and (j.get("managed_bytes") or 0) >= 0.9 * steady_managed \
                            and res_b <= lm + max(64 * MIB, 0.01 * lm):
                        within = t - registered
                r["seconds_to_within_limit"] = within
                r["max_over_limit_bytes"] = over
                r["within_limit_at_steady"] = (isinstance(lim, (int, float)) and isinstance(res_s, (int, float))
                                               and res_s <= lim + max(64 * MIB, 0.01 * lim))
            per_run.append(r)
        if per_run:
            keys = list(dict.fromkeys(k for r in per_run for k in r if k != "run"))
            summary = {}
            for k in keys:
                v = [r.get(k) for r in per_run if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)]
                summary[k] = med(v) if v else None
            entry["memory"] = {"median": summary, "runs": per_run}

        for f in faults:
            if f.get("scenario") != scen:
                continue
            if f["event"] == "kill_production":
                last_base = [t[2] for t in tgsruns if t[0] == scen][-1:]
                f["production_exit"] = exits.get(f"{last_base[0]}/production", {}).get("rc") if last_base else None
                entry["faults"]["kill_production"] = f
            else:
                row = by_label.get(f"{scen}/fault/production")
                if row and "per_second" in row and f.get("kill_rel_s") is not None:
                    ps = row["per_second"]
                    series = {row["first_second"] + i: c for i, c in enumerate(ps)}
                    k = f["kill_rel_s"]
                    after = [c for s, c in series.items() if s >= math.ceil(k)]
                    # Rates over whole seconds: the last second of a job stopped early is partial.
                    full_after = after[:-1] if row.get("stopped_early") else after
                    before = [series.get(s, 0) for s in range(math.floor(k) - 5, math.floor(k))]
                    f["production_iterations_after_kill"] = sum(after)
                    f["production_seconds_after_kill"] = len(full_after)
                    f["production_it_per_s_after_kill"] = statistics.mean(full_after) if full_after else None
                    f["production_it_per_s_before_kill"] = statistics.mean(before) if before else None
                    f["production_progressed_after_kill"] = sum(after) > 0
                f["production_exit"] = exits.get(f"{scen}/fault/production", {}).get("rc")
                last_base = [t[2] for t in tgsruns if t[0] == scen][-1:]
                f["opportunistic_exit"] = exits.get(f"{last_base[0]}/opportunistic", {}).get("rc") if last_base else None
                entry["faults"]["segv_opportunistic"] = f
        out["scenarios"][scen] = entry

    json.dump(out, open(E["JSON_OUT"], "w"), indent=2)

    # ---- the short table, printed last
    fx = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
    sp = lambda s: "" if not s else f" ({s[0]:.2f}-{s[1]:.2f})"
    gib = lambda b: "-" if not isinstance(b, (int, float)) else f"{b / GIB:.1f}"
    print(f"\n{out['device']}, driver {out['driver']}: throughput normalized to each job alone "
          f"(median of runs, min-max); budget = (P + O) / {out['ratio']:g}")
    for scen, e in out["scenarios"].items():
        fp = e["footprint_mib"]
        print(f"{scen}: {e['production_model']} ({fp['production']} MiB) + dlrm ({fp['opportunistic']} MiB), "
              f"budget {e['budget_mib']} MiB")
        print(f"  {'mode':18} {'production':>20} {'opportunistic':>20} runs")
        for mode, m in e["modes"].items():
            extra = ""
            if mode == "hard-limit":
                extra = f"  opp died {m['opportunistic_died']}, OOM in stderr {m['opportunistic_oom_in_stderr']}"
            elif m.get("opportunistic_missing_runs"):
                extra = f"  opp missing in {m['opportunistic_missing_runs']} run(s)"
            late = [f"{c} {m[c + '_ready_late_max_s']:.1f} s" for c in ("production", "opportunistic")
                    if (m.get(c + "_ready_late_max_s") or 0) > 0.5]
            if late:
                extra += "  ready late (first window partial): " + ", ".join(late)
            print(f"  {mode:18} {fx(m['production']) + sp(m['production_spread']):>20} "
                  f"{fx(m['opportunistic']) + sp(m['opportunistic_spread']):>20} {m['runs']:>4}{extra}")
        mm = e["memory"].get("median") if e["memory"] else None
        if mm:
            print(f"  tgs memory (median): opp managed {gib(mm.get('managed_bytes'))} GiB, resident "
                  f"{gib(mm.get('resident_bytes'))} GiB, limit {gib(mm.get('opportunistic_resident_limit'))} GiB; "
                  f"placed on host at allocation {gib(mm.get('host_placed_bytes'))} GiB, "
                  f"evicted {gib(mm.get('evicted_bytes_total'))} GiB in {fx(mm.get('evict_s_total'))} s "
                  f"({fx(mm.get('eviction_gbps'), 1)} GB/s); within limit {fx(mm.get('seconds_to_within_limit'), 0)} s "
                  f"after registration")
        k = e["faults"].get("kill_production")
        if k:
            print(f"  SIGKILL production: dropped after {fx(k.get('production_gone_s'))} s, opp restored after "
                  f"{fx(k.get('restored_s'))} s ({gib(k.get('restored_bytes_delta'))} GiB)")
        s = e["faults"].get("segv_opportunistic")
        if s:
            print(f"  SIGSEGV opportunistic: dropped after {fx(s.get('opportunistic_gone_s'))} s; production "
                  f"{fx(s.get('production_it_per_s_before_kill'), 1)} it/s before, "
                  f"{fx(s.get('production_it_per_s_after_kill'), 1)} it/s after")
    for w in noisy_alone:
        print(f"!! WARNING: {w}")
    if probe:
        yn = lambda k: {True: "yes", False: "no"}.get(probe.get(k), "-")
        print(f"reuse probe ({probe.get('gib')} GiB): driver evicts resident managed for another process: "
              f"{yn('driver_evicts_resident_managed_for_other_process')}; evicted allocatable by another: "
              f"{yn('evicted_allocatable_by_other_process')}; cuMemGetInfo reports evicted free: "
              f"{yn('mem_get_info_reports_evicted_free')}; eviction {fx(probe.get('eviction_gbps'), 1)} GB/s, "
              f"restore {fx(probe.get('restore_gbps'), 1)} GB/s" + (f"; ERROR {probe['error']}" if "error" in probe else ""))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sample":
        sample(*args)
    elif cmd == "fault-kill":
        cmd_fault_kill(*args)
    elif cmd == "fault-segv":
        cmd_fault_segv(*args)
    elif cmd == "budget":
        cmd_budget(args[0], args[1], args[2], args[3], args[4:])
    elif cmd == "summarize":
        cmd_summarize()
    else:
        sys.exit(f"memhelper: unknown command {cmd}")
PY

say "build (against the real libcuda; no CUDA toolkit headers needed)"
. "$repo/bench/gpu/build_backend.sh"
build_backend
node_help=$("$node" --help 2>&1 || true)
for flag in --memory-policy --memory-budget-mib --memory-reserve-mib --production-limit-mib --opportunistic-limit-mib; do
  if ! grep -q -- "$flag" <<< "$node_help"; then
    echo "this tgs-node has no $flag option: build from a tree with the memory policies in tgs-node"; exit 1
  fi
done

free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1 | tr -d ' ')
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
# The card's serial and UUID go into the summary, so calls pooled over machines can be told apart
# by the card that ran them (cards without a serial report "[N/A]"; the UUID is always there).
gpu_serial=$(nvidia-smi --query-gpu=serial --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ' || true)
gpu_uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ' || true)
case $free_mib in ''|*[!0-9]*) echo "cannot read the GPU's free memory from nvidia-smi ('$free_mib')"; exit 1 ;; esac
say "$device, driver $driver, $free_mib MiB free (serial ${gpu_serial:-?}, ${gpu_uuid:-no UUID})"
# The host's CPU goes into the summary too (host_cpu): the production jobs are bound by their CPU side.
host_cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -1 || true)
host_cpus=$(nproc 2>/dev/null || true)
host_cpu_governor=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || true)
host_threads_per_core=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import gpu_cpus; print(len(gpu_cpus.thread_siblings(0)) or "")' \
  "$repo/bench/gpu" 2>/dev/null || true)
say "host: ${host_cpu_model:-CPU model not readable}, ${host_cpus:-?} CPUs, ${host_threads_per_core:-?} threads per core, frequency governor ${host_cpu_governor:-not readable}"
# The CPUs local to GPU 0, split in two halves (bench/gpu/gpu_cpus.py): one per job.
cpus_production="" cpus_opportunistic=""
if [ "$PIN_CPUS" = 1 ]; then
  read -r cpus_production cpus_opportunistic < <(python3 "$repo/bench/gpu/gpu_cpus.py" --halves) || true
  if [ -z "$cpus_opportunistic" ]; then
    echo "!! WARNING: PIN_CPUS=1 but the GPU's local CPUs could not be split in two: no pinning" | tee -a "$work/warnings.txt"
    cpus_production=""
  else
    say "CPUs: production jobs $cpus_production, the DLRM job $cpus_opportunistic"
  fi
fi
say "$(ages_line)"

# JA: train.py's model arguments for model $1.
job_args() {
  JA=(--model "$1")
  case $1 in
    bert_base) JA+=(--batch "$BERT_BATCH" --seq-len "$BERT_SEQ") ;;
    dlrm) JA+=(--batch "$DLRM_BATCH" --dlrm-tables "$DLRM_TABLES" --dlrm-rows "$DLRM_ROWS" --dlrm-dim "$DLRM_DIM"
               --dlrm-bag "$DLRM_BAG" --dlrm-zipf "$DLRM_ZIPF") ;;
    *) JA+=(--batch "$RESNET_BATCH") ;;  # LOW_MODEL
  esac
}
errfile() { echo "$work/$(echo "$1" | tr '/' '_').err"; }

# launch LABEL CLASS MODEL INTERPOSED(0|1) STDOUT [train.py args...]: one training process in the
# background; its PID (python's own: env execs it) in last_pid.
launch() {
  local label=$1 cls=$2 model=$3 inter=$4 out=$5
  shift 5
  job_args "$model"
  local envs=(PYTHONUNBUFFERED=1)
  if [ "$inter" = 1 ]; then
    envs+=(LD_PRELOAD="$intercept" TGS_NODE_SOCKET="$socket" TGS_JOB_CLASS="$cls" TGS_JOB_NAME="$model"
           TGS_LOG_LEVEL=info)
  fi
  if [ "$mps_started" = 1 ]; then
    envs+=(CUDA_MPS_PIPE_DIRECTORY="$work/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$work/mps-log")
    local setting
    while read -r setting; do envs+=("$setting"); done < <(mps_client_env "$cls")
  fi
  # Each job on its own half of the GPU's local CPUs, as containers get their own CPUs: the DLRM
  # job's half whenever it runs (alone too, so its alone rate is taken on the CPUs it shares
  # with), the production job's half otherwise.
  local pin=()
  if [ -n "$cpus_opportunistic" ]; then
    if [ "$model" = dlrm ]; then pin=(taskset -c "$cpus_opportunistic"); else pin=(taskset -c "$cpus_production"); fi
  fi
  env "${envs[@]}" ${pin[@]+"${pin[@]}"} python3 "$repo/bench/gpu/train.py" "${JA[@]}" --label "$label" "$@" \
    >> "$out" 2> "$(errfile "$label")" &
  last_pid=$!
  job_pids+=("$last_pid")
}

# reap PID LABEL DEADLINE: waits for a job (stopping it once past DEADLINE, a Unix time), records
# its exit status and whether its stderr mentions out of memory, and appends its stderr to jobs.log.
reap() {
  local pid=$1 label=$2 deadline=$3 rc=0 overran=0 oom=0 err keep=() p
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      overran=1
      echo "!! $label is still running past its deadline: stopping it"
      kill -TERM "$pid" 2>/dev/null || true
      sleep 3
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  wait "$pid" || rc=$?
  err=$(errfile "$label")
  if grep -qi "out of memory" "$err" 2>/dev/null; then oom=1; fi
  printf '%s\t%s\t%s\t%s\n' "$label" "$rc" "$overran" "$oom" >> "$work/exits.tsv"
  {
    echo "==== $label (pid $pid, exit status $rc$([ "$overran" = 1 ] && echo ', killed past its deadline'))"
    if [ -f "$err" ] && [ "$(wc -l < "$err")" -gt 200 ]; then
      head -n 100 "$err"; echo "[... $(( $(wc -l < "$err") - 200 )) lines ...]"; tail -n 100 "$err"
    elif [ -f "$err" ]; then
      cat "$err"
    fi
  } >> "$OUT/jobs.log"
  for p in "${job_pids[@]}"; do
    if [ "$p" != "$pid" ]; then keep+=("$p"); fi
  done
  job_pids=(${keep[@]+"${keep[@]}"})
  if [ "$rc" != 0 ]; then echo "   $label: exit status $rc"; fi
  return 0
}

# MPS=1: a control daemon per run, private to this script (its own pipe and log directories),
# started with the run's node and always stopped again (shared/GPU.md).
start_mps() {
  mkdir -p "$work/mps-pipe" "$work/mps-log"
  CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log nvidia-cuda-mps-control -d
  mps_started=1
}
stop_mps() {
  if [ "$mps_started" = 1 ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe nvidia-cuda-mps-control > /dev/null 2>&1 || true
    mps_started=0
    # The server exits after its clients; wait for it (up to 10 s) so the next run starts afresh.
    for _ in $(seq 20); do
      pgrep -u "$(id -u)" -f nvidia-cuda-mps-server > /dev/null || break
      sleep 0.5
    done
  fi
}
node_n=0
# start_node RUN_LABEL [tgs-node flags...]: a fresh node on a fresh socket (and, with MPS=1, a
# fresh MPS daemon).
start_node() {
  local label=$1
  shift
  if [ "$MPS" = 1 ]; then start_mps; fi
  node_n=$(( node_n + 1 ))
  socket=$work/node-$node_n.sock
  echo "==== $label: tgs-node $*" >> "$OUT/node.log"
  "$node" --socket "$socket" --log-level info "$@" >> "$OUT/node.log" 2>&1 &
  node_pid=$!
  for _ in $(seq 100); do
    if [ -S "$socket" ]; then return 0; fi
    if ! kill -0 "$node_pid" 2>/dev/null; then break; fi
    sleep 0.05
  done
  echo "tgs-node did not start (flags: $*); its log:"; tail -n 20 "$OUT/node.log"; exit 1
}
stop_node() {
  "$node" status --socket "$socket" >> "$OUT/node.log" 2>&1 || true
  kill "$node_pid" 2>/dev/null || true
  wait "$node_pid" 2>/dev/null || true
  node_pid=""
  stop_mps
}
start_sampler() {
  python3 "$helper" sample "$node" "$socket" "$samples" "$1" &
  sampler_pid=$!
}
stop_sampler() {
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
}
rate_flags=(--production-window-ms "$TGS_PRODUCTION_WINDOW_MS" --profile-windows "$PROFILE_WINDOWS"
  --max-profile-windows "$MAX_PROFILE_WINDOWS")
# Extra tgs-node rate flags, e.g. TGS_NODE_FLAGS="--rate-smoothing 0.8 --noise-band-multiple 2".
read -r -a extra_rate_flags <<< "$TGS_NODE_FLAGS"
rate_flags+=(${extra_rate_flags[@]+"${extra_rate_flags[@]}"})
win_args() { WA=(--start-at "$1" --windows "$WINDOWS" --window-s "$WINDOW_S"); }
measured_end() { echo $(( $1 + WINDOWS * WINDOW_S )); }

# ---------------------------------------------------------------------------------------------
if [ "$PROBE" = 1 ]; then
  say "reuse probe: bench/gpu/memory_reuse.py --gib $PROBE_GIB (nothing else on the GPU)"
  timeout -k 10 300 python3 "$repo/bench/gpu/memory_reuse.py" --gib "$PROBE_GIB" | tee "$work/probe.log" ||
    echo "!! the reuse probe failed (its JSON line, if any, is kept)"
fi

# Footprints: each job alone, 3 steps, peak reserved bytes (in parallel: the peaks are per process).
measure_footprints() {
  local models=("$@") pids=() m i
  for m in "${models[@]}"; do
    launch "footprint/$m" production "$m" 0 "$work/footprints.jsonl" --report-memory-only
    pids+=("$last_pid")
  done
  for i in "${!models[@]}"; do
    reap "${pids[$i]}" "footprint/${models[$i]}" $(( $(date +%s) + 180 ))
  done
}
prods=()
pairs=()
for s in $SCENARIOS; do
  prods+=("$(prod_model_of "$s")")
  pairs+=("$s:$(prod_model_of "$s")")
done
say "footprints: ${prods[*]} dlrm"
measure_footprints "${prods[@]}" dlrm
budget_lines=""
for attempt in 1 2 3 4 5; do
  if ! budget_lines=$(python3 "$helper" budget "$work/footprints.jsonl" "$free_mib" "$RATIO" "$BUDGET_MIB" "${pairs[@]}"); then
    echo "footprint measurement failed (see $OUT/jobs.log)"; exit 1
  fi
  verdict=$(tail -n 1 <<< "$budget_lines")
  case $verdict in
    OK) break ;;
    FAIL*) echo "SAFETY: ${verdict#FAIL } (BUDGET_MIB was set: lower it)"; exit 1 ;;
    SHRINK*)
      if [ "$attempt" = 5 ]; then echo "SAFETY: ${verdict#SHRINK }; giving up"; exit 1; fi
      DLRM_ROWS=$(( DLRM_ROWS / 2 ))
      echo "!! WARNING (safety): ${verdict#SHRINK }: halving the DLRM tables to $DLRM_ROWS rows" |
        tee -a "$work/warnings.txt"
      grep -v '"model": "dlrm"' "$work/footprints.jsonl" > "$work/fp.tmp" || true
      mv "$work/fp.tmp" "$work/footprints.jsonl"
      measure_footprints dlrm ;;
  esac
done
declare -A BUDGET PROD_LIMIT OPP_LIMIT
while read -r s prod p o b; do
  [ -n "${b:-}" ] || continue
  BUDGET[$s]=$b
  PROD_LIMIT[$s]=$(( p + 2048 ))
  OPP_LIMIT[$s]=$(( b - p - 2048 ))
  if [ "${OPP_LIMIT[$s]}" -lt 256 ]; then
    echo "!! WARNING: $s: budget $b MiB leaves less than 256 MiB beside the production limit; opportunistic limit 256 MiB" |
      tee -a "$work/warnings.txt"
    OPP_LIMIT[$s]=256
  fi
  if [ "$b" -lt $(( p + RESERVE_MIB + 512 )) ]; then
    echo "!! WARNING: $s: budget $b MiB barely holds the production job ($p MiB) and the reserve ($RESERVE_MIB MiB)" |
      tee -a "$work/warnings.txt"
  fi
  printf '%s %s %s %s %s %s %s\n' "$s" "$prod" "$p" "$o" "$b" "${PROD_LIMIT[$s]}" "${OPP_LIMIT[$s]}" >> "$work/budgets.tsv"
  echo "   $s: production $prod $p MiB + dlrm $o MiB = $(( p + o )) MiB over budget $b MiB" \
       "(ratio $(python3 -c "print(f'{($p + $o) / $b:.2f}')")), $free_mib MiB free;" \
       "hard-limit: production ${PROD_LIMIT[$s]} MiB, opportunistic ${OPP_LIMIT[$s]} MiB"
done < <(grep -v '^OK$' <<< "$budget_lines")

# ---------------------------------------------------------------------------------------------
run_alone() {  # run_alone MODEL INDEX
  local start label=alone/$1/$2
  start=$(( $(date +%s) + WARMUP_S + ALONE_SETTLE_S ))
  win_args "$start"
  say "$label"
  launch "$label" production "$1" 0 "$runs" "${WA[@]}"
  reap "$last_pid" "$label" $(( $(measured_end "$start") + JOB_GRACE_S ))
}

run_alone_mps() {  # run_alone_mps SCENARIO INDEX: each job alone under its own MPS daemon
  local scen=$1 i=$2 start cls model label
  for cls in production opportunistic; do
    model=dlrm
    [ "$cls" = opportunistic ] || model=$(prod_model_of "$scen")
    label=$scen/alone-mps/$i/$cls
    start_mps
    start=$(( $(date +%s) + WARMUP_S + ALONE_SETTLE_S ))
    win_args "$start"
    say "$label ($model)"
    launch "$label" "$cls" "$model" 0 "$runs" "${WA[@]}"
    reap "$last_pid" "$label" $(( $(measured_end "$start") + JOB_GRACE_S ))
    stop_mps
  done
}

run_coexec() {  # run_coexec SCENARIO INDEX MODE (coexec-um | coexec-budget)
  local scen=$1 i=$2 mode=$3 prod start p1 p2 base=$1/$3/$2
  prod=$(prod_model_of "$scen")
  say "$base"
  if [ "$mode" = coexec-budget ]; then
    start_node "$base" --policy co-execution --memory-policy tgs --memory-budget-mib "${BUDGET[$scen]}" \
      --memory-reserve-mib "$RESERVE_MIB" --residency-split "$RESIDENCY_SPLIT"
  else
    start_node "$base" --policy co-execution --memory-policy unified-memory --memory-budget-mib "${BUDGET[$scen]}"
  fi
  start_sampler "$base"
  start=$(( $(date +%s) + WARMUP_S + PAIR_SETTLE_S ))
  win_args "$start"
  launch "$base/production" production "$prod" 1 "$runs" "${WA[@]}"
  p1=$last_pid
  launch "$base/opportunistic" opportunistic dlrm 1 "$runs" "${WA[@]}"
  p2=$last_pid
  reap "$p1" "$base/production" $(( $(measured_end "$start") + JOB_GRACE_S ))
  reap "$p2" "$base/opportunistic" $(( $(measured_end "$start") + JOB_GRACE_S ))
  stop_sampler
  stop_node
}

# The fault demonstration on the running jobs of the last tgs run (P1 production, P2 opportunistic).
fault_demo() {  # fault_demo SCENARIO BASE P1 P2
  local scen=$1 base=$2 p1=$3 p2=$4 prod fstart p3
  prod=$(prod_model_of "$scen")
  say "$scen faults: SIGKILL the production job"
  python3 "$helper" fault-kill "$node" "$socket" "$p1" "$p2" "$FAULT_TIMEOUT_S" "$scen" >> "$work/faults.jsonl" ||
    echo "!! fault-kill step failed"
  reap "$p1" "$base/production" $(( $(date +%s) + 15 ))
  say "$scen faults: a fresh production job, then SIGSEGV the opportunistic job"
  fstart=$(date +%s.%N)
  launch "$scen/fault/production" production "$prod" 1 "$runs" --start-at "$fstart" --timeline-s 600
  p3=$last_pid
  python3 "$helper" fault-segv "$node" "$socket" "$p3" "$p2" "$FAULT_RUN_S" "$FAULT_AFTER_S" "$FAULT_TIMEOUT_S" \
    "$scen" "$fstart" >> "$work/faults.jsonl" || echo "!! fault-segv step failed"
  reap "$p2" "$base/opportunistic" $(( $(date +%s) + 15 ))
  reap "$p3" "$scen/fault/production" $(( $(date +%s) + 20 ))
}

# run_tgs SCENARIO INDEX LAST(0|1) [MODE FLAGS]: MODE (default tgs) names a TGS_VARIANTS run,
# whose FLAGS follow the rate flags; only the tgs runs' memory numbers and faults are summarized.
run_tgs() {
  local scen=$1 i=$2 last=$3 mode=${4:-tgs} prod start p1 p2 keep=() vflags=()
  local base=$scen/$mode/$i
  read -r -a vflags <<< "${5:-}"
  prod=$(prod_model_of "$scen")
  say "$base${5:+ (+ $5)}"
  start_node "$base" --policy tgs --memory-policy tgs --memory-budget-mib "${BUDGET[$scen]}" \
    --memory-reserve-mib "$RESERVE_MIB" --residency-split "$RESIDENCY_SPLIT" "${rate_flags[@]}" \
    ${vflags[@]+"${vflags[@]}"}
  start_sampler "$base"
  start=$(( $(date +%s) + WARMUP_S + TGS_SETTLE_S ))
  win_args "$start"
  if [ "$last" = 1 ]; then keep=(--keep-running-s "$FAULT_KEEP_S"); fi
  launch "$base/production" production "$prod" 1 "$runs" "${WA[@]}" ${keep[@]+"${keep[@]}"}
  p1=$last_pid
  sleep "$OPP_DELAY_S"
  launch "$base/opportunistic" opportunistic dlrm 1 "$runs" "${WA[@]}" --no-core-dump ${keep[@]+"${keep[@]}"}
  p2=$last_pid
  if [ "$mode" = tgs ]; then printf '%s %s %s %s %s %s\n' "$scen" "$i" "$base" "$start" "$p1" "$p2" >> "$work/tgsruns.tsv"; fi
  if [ "$last" = 1 ]; then
    # Both jobs run on after their windows: wait for the windows to end, then the faults.
    while [ "$(date +%s)" -lt $(( $(measured_end "$start") + 2 )) ]; do sleep 0.5; done
    fault_demo "$scen" "$base" "$p1" "$p2"
  else
    reap "$p1" "$base/production" $(( $(measured_end "$start") + JOB_GRACE_S ))
    reap "$p2" "$base/opportunistic" $(( $(measured_end "$start") + JOB_GRACE_S ))
  fi
  stop_sampler
  stop_node
}

# staggered_pair BASE PROD, with the run's node started: the production job first, the DLRM job
# OPP_DELAY_S later, both measured from WARMUP_S + PAIR_SETTLE_S on; then the node is stopped.
staggered_pair() {
  local base=$1 prod=$2 start p1 p2
  start_sampler "$base"
  start=$(( $(date +%s) + WARMUP_S + PAIR_SETTLE_S ))
  win_args "$start"
  launch "$base/production" production "$prod" 1 "$runs" "${WA[@]}"
  p1=$last_pid
  sleep "$OPP_DELAY_S"
  launch "$base/opportunistic" opportunistic dlrm 1 "$runs" "${WA[@]}" --no-core-dump
  p2=$last_pid
  reap "$p1" "$base/production" $(( $(measured_end "$start") + JOB_GRACE_S ))
  reap "$p2" "$base/opportunistic" $(( $(measured_end "$start") + JOB_GRACE_S ))
  stop_sampler
  stop_node
}

run_fixed() {  # run_fixed SCENARIO INDEX MODE_NAME BLOCKS WINDOW_MS INFLIGHT
  local scen=$1 base=$1/$3/$2 window=() label="no launch window"
  if [ "$6" -gt 0 ]; then window=(--max-inflight-launches "$6"); label="launch window $6"; fi
  say "$base ($4 blocks per $5 ms, $label)"
  start_node "$base" --policy token-bucket --fixed-budget-blocks "$4" --budget-window-ms "$5" --memory-policy tgs \
    --memory-budget-mib "${BUDGET[$scen]}" --memory-reserve-mib "$RESERVE_MIB" --residency-split "$RESIDENCY_SPLIT" \
    ${window[@]+"${window[@]}"}
  staggered_pair "$base" "$(prod_model_of "$scen")"
}

# The DLRM job beside an idle production job under the tgs memory policy: the production job
# trains 3 steps (its caching allocator then holds its footprint) and idles, so the DLRM job
# has the resident limit it has in a tgs run and the GPU to itself; rate control is off
# (co-execution). Its throughput here is what the memory budget alone leaves it (its
# host-resident rows are read over PCIe): the ceiling of its share in a tgs run.
run_opp_limited() {  # run_opp_limited SCENARIO INDEX
  local scen=$1 i=$2 prod start p1 p2 base=$1/opp-limited/$2
  prod=$(prod_model_of "$scen")
  say "$base (beside an idle $prod)"
  start_node "$base" --policy co-execution --memory-policy tgs --memory-budget-mib "${BUDGET[$scen]}" \
    --memory-reserve-mib "$RESERVE_MIB" --residency-split "$RESIDENCY_SPLIT"
  start_sampler "$base"
  launch "$base/idle-production" production "$prod" 1 "$runs" --idle-after-steps 3
  p1=$last_pid
  # Its JSON line says its steps are done and its footprint is allocated (as in a tgs run).
  local deadline=$(( $(date +%s) + 180 ))
  until grep -q "\"label\": \"$base/idle-production\"" "$runs"; do
    if [ "$(date +%s)" -ge "$deadline" ] || ! kill -0 "$p1" 2>/dev/null; then
      echo "!! $base: the idle production job did not get ready"; break
    fi
    sleep 0.5
  done
  start=$(( $(date +%s) + WARMUP_S ))
  win_args "$start"
  launch "$base/opportunistic" opportunistic dlrm 1 "$runs" "${WA[@]}" --no-core-dump
  p2=$last_pid
  reap "$p2" "$base/opportunistic" $(( $(measured_end "$start") + JOB_GRACE_S ))
  kill -TERM "$p1" 2>/dev/null || true
  reap "$p1" "$base/idle-production" $(( $(date +%s) + 15 ))
  stop_sampler
  stop_node
}

run_hard_limit() {  # run_hard_limit SCENARIO
  local scen=$1 base=$1/hard-limit/1
  say "$base (production limit ${PROD_LIMIT[$scen]} MiB, opportunistic ${OPP_LIMIT[$scen]} MiB)"
  start_node "$base" --policy tgs --memory-policy hard-limit --memory-budget-mib "${BUDGET[$scen]}" \
    --production-limit-mib "${PROD_LIMIT[$scen]}" --opportunistic-limit-mib "${OPP_LIMIT[$scen]}" "${rate_flags[@]}"
  staggered_pair "$base" "$(prod_model_of "$scen")"
}

run_scenarios

say "summary"
# The summary's environment, written beside its inputs first (cleanup copies them to
# $OUT/summary-inputs), so a summary that fails can be redone from $OUT without the GPU:
#   GPU_SCRIPTS=<repo>/bench/gpu bash $OUT/summary-inputs/redo-summary.sh
summary_env=(DEVICE="$device" DRIVER="$driver" GPU_SERIAL="$gpu_serial" GPU_UUID="$gpu_uuid" STARTED="$started" COMMAND="$COMMAND"
  HOST_CPU_MODEL="$host_cpu_model" HOST_CPUS="$host_cpus" HOST_CPU_GOVERNOR="$host_cpu_governor"
  HOST_THREADS_PER_CORE="$host_threads_per_core" PINNED_PRODUCTION="$cpus_production" PINNED_OPPORTUNISTIC="$cpus_opportunistic"
  WINDOWS="$WINDOWS" WINDOW_S="$WINDOW_S" RATIO="$RATIO" RESERVE_MIB="$RESERVE_MIB" FREE_MIB="$free_mib"
  SCENARIO_LIST="$SCENARIOS" DLRM_TABLES="$DLRM_TABLES" DLRM_ROWS="$DLRM_ROWS" DLRM_DIM="$DLRM_DIM"
  DLRM_BAG="$DLRM_BAG" DLRM_BATCH="$DLRM_BATCH" DLRM_ZIPF="$DLRM_ZIPF" RESIDENCY_SPLIT="$RESIDENCY_SPLIT"
  FIXED_MODES="$fixed_modes" VARIANT_MODES="$variant_modes" TGS_NODE_FLAGS="$TGS_NODE_FLAGS")
summary_files=(RUNS_FILE="$runs" SAMPLES="$samples" JSON_OUT="$OUT/gpu-memory.json" EXITS="$work/exits.tsv"
  BUDGETS="$work/budgets.tsv" FOOTPRINTS="$work/footprints.jsonl" FAULTS="$work/faults.jsonl"
  TGSRUNS="$work/tgsruns.tsv" PROBE_LOG="$work/probe.log" WARNINGS="$work/warnings.txt")
{
  echo '#!/usr/bin/env bash'
  echo '# Redoes the summary of the memory.sh call whose $OUT holds this folder (writes $OUT/gpu-memory.json).'
  echo 'set -euo pipefail'
  echo 'cd "$(dirname "$0")"'
  echo ': "${GPU_SCRIPTS:?set GPU_SCRIPTS to the bench/gpu folder of the repository}"'
  echo 'export GPU_SCRIPTS'
  printf 'env'
  printf ' %q' "${summary_env[@]}"
  # The same files, relative to summary-inputs: the work folder's copies there, $OUT's one up.
  for kv in "${summary_files[@]}"; do
    f=${kv#*=}
    case $f in "$work"/*) rel=${f#"$work"/} ;; *) rel=../${f#"$OUT"/} ;; esac
    printf ' %q' "${kv%%=*}=$rel"
  done
  printf ' python3 memhelper.py summarize\n'
} > "$work/redo-summary.sh"
env "${summary_env[@]}" "${summary_files[@]}" python3 "$helper" summarize
summary_done=1
