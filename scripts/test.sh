#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: install what is missing, build, and run every test through ctest.
# TGS_TRACES (default ../shared/traces beside the checkout) points the trace tests at real files.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh all
scripts/build.sh all
cd build
ctest --output-on-failure --parallel "$(nproc)" "$@"
