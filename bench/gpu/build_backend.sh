# SPDX-License-Identifier: Apache-2.0
# Sourced by the GPU scripts: builds libtgs-intercept.so and tgs-node against the machine's real
# libcuda into $BUILD (no CUDA toolkit headers needed). Machines without the fmt and CLI11
# packages: put their headers in .deps/include (CLI/, fmt/) at the repository root; the build
# then uses them header-only. Needs $repo, $BUILD and $work; sets $intercept and $node.
build_backend() {
  local deps=()
  [ -d "$repo/.deps/include" ] && deps=(-DTGS_HEADER_DEPS="$repo/.deps/include")
  cmake -S "$repo" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTGS_BUILD_SIM=OFF \
    -DTGS_BUILD_TESTS=OFF -DTGS_BUILD_BENCH=OFF "${deps[@]}" > "$work/cmake.log" ||
    { cat "$work/cmake.log"; exit 1; }
  cmake --build "$BUILD" --target tgs-intercept tgs-node > "$work/build.log" ||
    { cat "$work/build.log"; exit 1; }
  intercept=$BUILD/lib/libtgs-intercept.so
  node=$BUILD/bin/tgs-node
}
