#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds tgs into build/ (binaries in build/bin).
#   scripts/build.sh sim [cmake args]    only tgs-sim (what scripts/run.sh needs)
#   scripts/build.sh [all] [cmake args]  everything: tools, backend, tests, benchmarks, Python
# Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
what="all"
case "${1:-}" in
  sim|all) what="$1"; shift ;;
esac
generator=()
[ -f build/CMakeCache.txt ] || { command -v ninja >/dev/null && generator=(-G Ninja); }

if [ "$what" = sim ]; then
  # A build that already has the simulator (a full one, say) is only brought up to date;
  # otherwise the simulator alone, with none of the parts that need the test packages.
  if [ ! -f build/CMakeCache.txt ] || ! grep -q '^TGS_BUILD_SIM:BOOL=ON' build/CMakeCache.txt || [ $# -gt 0 ]; then
    # Release: debug information would make the Eigen-heavy fit much slower to compile;
    # a later full build (scripts/test.sh) configures RelWithDebInfo again.
    cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTGS_BUILD_SIM=ON \
      -DTGS_BUILD_TESTS=OFF -DTGS_BUILD_BENCH=OFF -DTGS_BUILD_CUDA=OFF -DTGS_BUILD_CONTAINERS=OFF \
      -DTGS_BUILD_KUBERNETES=OFF -DTGS_BUILD_PYTHON=OFF -DTGS_BUILD_MAN=OFF "$@"
  fi
  cmake --build build --parallel "$(nproc)" --target tgs-sim
else
  # Every part named, so a build first configured for the simulator alone gets the rest.
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTGS_BUILD_SIM=ON \
    -DTGS_BUILD_TESTS=ON -DTGS_BUILD_BENCH=ON -DTGS_BUILD_CUDA=ON -DTGS_BUILD_CONTAINERS=ON \
    -DTGS_BUILD_KUBERNETES=ON -DTGS_BUILD_PYTHON=ON -DTGS_BUILD_MAN=ON "$@"
  cmake --build build --parallel "$(nproc)"
fi
