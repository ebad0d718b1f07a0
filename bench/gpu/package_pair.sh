#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A pair shared through the installed Debian package: builds the backend's tgs-node .deb (cpack), installs
# it with dpkg -i, and runs harness.py with the installed tgs-node and libtgs-intercept.so (two
# plain processes). Needs root for dpkg -i. Arguments go to `harness.py run`, e.g.
#   OUT=/tmp/out bench/gpu/package_pair.sh --pairs high --modes alone,idle-harvest
# TGS_HEADER_DEPS: a folder of CLI/, fmt/, nlohmann/ headers where those packages are missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/tgs-gpu-out}
BUILD=${BUILD:-/tmp/tgs-package-build}
mkdir -p "$OUT"
{ . /etc/os-release; echo "os: $PRETTY_NAME"
  for t in podman runc crun docker nvidia-ctk; do echo "$t: $(command -v $t || echo missing)"; done; } | tee "$OUT/facts.txt"
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTGS_BUILD_SIM=OFF -DTGS_BUILD_TESTS=OFF \
  -DTGS_BUILD_BENCH=OFF ${TGS_HEADER_DEPS:+-DTGS_HEADER_DEPS=$TGS_HEADER_DEPS} > "$OUT/build.log"
cmake --build "$BUILD" >> "$OUT/build.log"
(cd "$BUILD" && cpack -G DEB > "$OUT/cpack.log")
deb=$(ls "$BUILD"/tgs-node_*.deb)
dpkg-deb --info "$deb" > "$OUT/deb-info.txt"
dpkg -i "$deb" > "$OUT/dpkg.log"
tgs-node --version
# The harness takes a build folder ({build}/bin/tgs-node, {build}/lib/libtgs-intercept.so): one
# made of links to the installed files.
installed=$(mktemp -d)
mkdir -p "$installed/bin" "$installed/lib"
ln -s "$(command -v tgs-node)" "$installed/bin/tgs-node"
ln -s "$(dpkg -L tgs-node | grep '/libtgs-intercept\.so$')" "$installed/lib/libtgs-intercept.so"
python3 "$HERE/harness.py" run --no-build --build "$installed" --out "$OUT/pair" "$@"
