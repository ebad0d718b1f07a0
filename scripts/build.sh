#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds tgs into build/ (binaries in build/bin).
#   scripts/build.sh sim [cmake args]    only tgs-sim (what scripts/run.sh needs)
#   scripts/build.sh [all] [cmake args]  everything: tools, backend, tests, benchmarks, Python
# Extra arguments go to cmake's configure step. TGS_BUILD_DIR names another build folder (the
# install tests build the simulator alone this way).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${TGS_BUILD_DIR:-build}"
what="all"
case "${1:-}" in
  sim|all) what="$1"; shift ;;
esac
generator=()
[ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null && generator=(-G Ninja); }

if [ "$what" = sim ]; then
  # A build that already has the simulator (a full one, say) is only brought up to date;
  # otherwise the simulator alone, with none of the parts that need the test packages, built
  # for a first run on two cores: -O2 without debug info (-g doubles the compile time of the
  # Eigen fit), one unity source per eight (the headers and templates compiled once, not per
  # file: a third less CPU), and warnings not fatal: a newer compiler's new warning must not stop
  # a user's first run. It prints none: CI builds this configuration too and fails on any warning
  # in its output (tests/install, install.FirstRunBuild); the developers' build makes them errors.
  if [ ! -f "$build/CMakeCache.txt" ] || ! grep -q '^TGS_BUILD_SIM:BOOL=ON' "$build/CMakeCache.txt" || [ $# -gt 0 ]; then
    cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DCMAKE_UNITY_BUILD=ON -DTGS_WERROR=OFF -DTGS_BUILD_SIM=ON \
      -DTGS_BUILD_TESTS=OFF -DTGS_BUILD_BENCH=OFF -DTGS_BUILD_CUDA=OFF -DTGS_BUILD_CONTAINERS=OFF \
      -DTGS_BUILD_KUBERNETES=OFF -DTGS_BUILD_PYTHON=OFF -DTGS_BUILD_MAN=OFF "$@"
  fi
  cmake --build "$build" --parallel "$(nproc)" --target tgs-sim
else
  # Every part and setting named, so a build first configured for the simulator alone gets the
  # rest, with debug info, one object per source and warnings as errors.
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=OFF \
    -DTGS_WERROR=ON -DTGS_BUILD_SIM=ON \
    -DTGS_BUILD_TESTS=ON -DTGS_BUILD_BENCH=ON -DTGS_BUILD_CUDA=ON -DTGS_BUILD_CONTAINERS=ON \
    -DTGS_BUILD_KUBERNETES=ON -DTGS_BUILD_PYTHON=ON -DTGS_BUILD_MAN=ON "$@"
  cmake --build "$build" --parallel "$(nproc)"
fi
