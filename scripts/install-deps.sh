#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages tgs builds with, only those missing. Idempotent.
#   scripts/install-deps.sh sim   what the simulator (tgs-sim) alone needs: scripts/run.sh
#   scripts/install-deps.sh [all] everything the build and the tests use: scripts/test.sh
set -euo pipefail

set_name="${1:-all}"
# The simulator: a compiler, CMake and Ninja, and the libraries tgs-sim links or includes (fmt,
# CLI11, Eigen for its fit, Boost.Graph's headers for the cluster, nlohmann-json and libcsv for
# the trace readers). g++ rather than build-essential: Ninja builds it, nothing needs make or dpkg-dev.
sim_packages=(
  g++ cmake ninja-build
  libfmt-dev libcli11-dev libeigen3-dev libboost-dev nlohmann-json3-dev libcsv-dev
)
case "$set_name" in
  sim) packages=("${sim_packages[@]}") ;;
  all)
    packages=(
      "${sim_packages[@]}" build-essential pkg-config libboost-graph-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcurl4-openssl-dev
      prometheus-cpp-dev libmicrohttpd-dev libsystemd-dev
      help2man python3 python3-yaml
      python3-dev pybind11-dev python3-numpy python3-matplotlib python3-pandas
      # Tests only: promtool checks tgs-node's metrics; podman and runc run the CDI devices for real;
      # gRPC's Python side plays kubelet to the DRA plugin, jsonschema checks its objects.
      prometheus podman runc python3-grpcio python3-protobuf python3-jsonschema
    )
    # kubectl checks the Kubernetes manifests (that test skips without it); any kubectl already
    # on the PATH will do, and Debian's conflicts with some others.
    command -v kubectl >/dev/null || packages+=(kubernetes-client)
    ;;
  *) echo "install-deps: unknown set '$set_name' (sim or all)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages of '$set_name' present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# force-unsafe-io: dpkg skips its fsync per unpacked file (Boost alone has 14,000 headers), as
# Debian's own container images do; after a power loss mid-install, reinstall what it named.
$sudo apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}"
