#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main job: install what is missing, build, and run tgs-sim on its embedded default.
# Arguments are passed to tgs-sim.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/tgs-sim "$@"
