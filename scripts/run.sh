#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main job: install what the simulator needs, build tgs-sim, and run it on its
# embedded default. Arguments are passed to tgs-sim. (scripts/test.sh installs and builds the rest.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh sim
scripts/build.sh sim
exec build/bin/tgs-sim "$@"
