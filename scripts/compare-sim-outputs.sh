#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs two tgs-sim binaries over the same commands (pairs, mixed, fit, profiles, the Philly
# replays, every output format and the --out files) and reports any difference: tables and CSV
# byte for byte, JSON value for value, the wall-time columns aside. A refactoring of the
# simulator must leave the outputs identical; this is how that is shown.
#
#   scripts/compare-sim-outputs.sh OLD_TGS_SIM NEW_TGS_SIM [TRACES_DIR]
#
# TRACES_DIR (default: $TGS_TRACES, else ../shared/traces beside the checkout) holds the Philly
# files; the replays are skipped with a message when it does not.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
old=$1 new=$2
traces=${3:-${TGS_TRACES:-$(cd "$(dirname "$0")/../.." && pwd)/shared/traces}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run_all() {  # run_all BIN DIR
  local b=$1 o=$2
  mkdir -p "$o"
  for f in table json csv; do
    "$b" mixed --format $f >"$o/mixed.$f"
    "$b" pairs --format $f >"$o/pairs.$f"
    "$b" pairs --production resnet50 --opportunistic shufflenet \
      --policies tgs,co-execution,mps,mig,antman,exclusive --format $f >"$o/pairs-custom.$f"
    "$b" fit --format $f >"$o/fit.$f"
    "$b" profiles --format $f >"$o/profiles.$f"
  done
  "$b" pairs --timeline "$o/timeline.csv" --observation-noise 0.05 --seed 3 >"$o/pairs-noise.table"
  "$b" pairs --production-drift 0.1 --memory-budget-gib 30 >"$o/pairs-drift.table"
  if [ -f "$traces/philly_jobs_pollux.csv" ]; then
    "$b" replay --trace "$traces/philly_jobs_pollux.csv" --no-progress --out "$o/pollux" >"$o/pollux.table"
    "$b" replay --trace "$traces/philly_multigpu_pass_attempts.json" --no-progress --format json \
      --out "$o/attempts" >"$o/attempts.json"
  fi
}

run_all "$old" "$work/old"
run_all "$new" "$work/new"
[ -f "$traces/philly_jobs_pollux.csv" ] || echo "compare-sim-outputs: no traces in $traces; replays skipped"

mask() {  # the wall-time column of tables and CSV
  if head -1 "$1" | grep -q 'wall_s$'; then sed -E 's/,[0-9.]+$/,W/' "$1"; else sed -E 's/[0-9]+\.[0-9]+ s$/W s/' "$1"; fi
}
status=0
while IFS= read -r f; do
  if [[ $f == *.json ]]; then
    python3 - "$work/old/$f" "$work/new/$f" <<'PY' || { echo "differs: $f"; status=1; }
import json, sys
def clean(v):
    if isinstance(v, dict): return {k: clean(x) for k, x in v.items() if k != "wall_s"}
    if isinstance(v, list): return [clean(x) for x in v]
    return v
a, b = (clean(json.load(open(p))) for p in sys.argv[1:3])
sys.exit(a != b)
PY
  elif ! cmp -s <(mask "$work/old/$f") <(mask "$work/new/$f"); then
    echo "differs: $f"; status=1
  fi
done < <(cd "$work/old" && find . -type f | sort)
[ $status -eq 0 ] && echo "compare-sim-outputs: $(cd "$work/old" && find . -type f | wc -l) outputs identical"
exit $status
