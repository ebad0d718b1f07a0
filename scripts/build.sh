#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds tgs into build/ (binaries in build/bin). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build build --parallel "$(nproc)"
