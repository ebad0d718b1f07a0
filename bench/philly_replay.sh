#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole-replay scenario of docs/benchmarks.md: tgs-sim replays all 82,247 jobs of the Philly
# trace on 800 GPUs under tgs-sim's default policies (eight); prints wall time and peak memory of the whole run.
# Usage: bench/philly_replay.sh [TRACE]   (default: $TGS_TRACES or ../shared/traces)
set -euo pipefail
cd "$(dirname "$0")/.."
trace=${1:-${TGS_TRACES:-../shared/traces}/philly_jobs_pollux.csv}
[ -f "$trace" ] || { echo "philly_replay: no trace at $trace" >&2; exit 1; }
[ -x build/bin/tgs-sim ] || scripts/build.sh
/usr/bin/time -f 'whole run: %e s wall, %M KiB peak resident' \
  build/bin/tgs-sim replay --trace "$trace" --format table
