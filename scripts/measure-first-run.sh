#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Times the README's first command on a fresh Debian 12: debootstraps a minimal bookworm root
# into ROOT, puts the committed tree (git archive HEAD) in it, runs scripts/run.sh there in a
# chroot as root, and prints one JSON line: seconds from the start to each phase's end, read off
# run.sh's own output (package installation, configure, build, the first table line).
# Needs root, debootstrap and network access to a Debian mirror (MIRROR, default deb.debian.org).
#   scripts/measure-first-run.sh ROOT        ROOT must not exist; it is removed afterwards
#   KEEP_ROOT=1 scripts/measure-first-run.sh ROOT   keeps it
set -euo pipefail
root="${1:?usage: scripts/measure-first-run.sh ROOT (a folder that does not exist yet)}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
[ "$(id -u)" -eq 0 ] || { echo "measure-first-run: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "measure-first-run: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
[ ! -e "$root" ] || { echo "measure-first-run: $root exists; name a new folder" >&2; exit 1; }
cd "$(dirname "$0")/.."
commit="$(git rev-parse --short HEAD)"

mounted=()
cleanup() {
  for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
  [ "${KEEP_ROOT:-0}" = 1 ] || rm -rf --one-file-system "$root"
}
trap cleanup EXIT

t0=$(date +%s.%N)
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
  { echo "measure-first-run: debootstrap failed (see $root.debootstrap.log)" >&2; exit 1; }
debootstrap_s=$(echo "$(date +%s.%N) - $t0" | bc)
rm -f "$root.debootstrap.log"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev; do mount --rbind "/$m" "$root/$m"; mounted=("$root/$m" "${mounted[@]}"); done
base_packages=$(chroot "$root" dpkg-query -W -f='.\n' | wc -l)
mkdir -p "$root/src/tgs"
git archive HEAD | tar -x -C "$root/src/tgs"

# The machine's load from other work just before (the chroot shares its cores).
load_before=$(cut -d' ' -f1 /proc/loadavg)
# run.sh's output, each line stamped with the milliseconds since it started.
log="$root/src/run.log"
chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash -c 'cd /src/tgs && start=$(date +%s%N); scripts/run.sh 2>&1 | while IFS= read -r line; do
             printf "%s %s\n" "$(( ($(date +%s%N) - start) / 1000000 ))" "$line"; done; exit ${PIPESTATUS[0]}' >"$log" ||
  { echo "measure-first-run: scripts/run.sh failed:" >&2; tail -30 "$log" >&2; exit 1; }

# The phases, by the lines that end them (milliseconds since run.sh started).
last_ms() { grep -E "$1" "$log" | tail -1 | cut -d' ' -f1; }
first_ms() { grep -E "$1" "$log" | head -1 | cut -d' ' -f1; }
packages_ms=$(first_ms ' -- The CXX compiler identification')
configure_ms=$(first_ms ' -- Build files have been written')
build_ms=$(last_ms 'Linking CXX executable bin/tgs-sim')
table_ms=$(first_ms ' mixed stream: ')
cores=$(nproc)
printf '{"commit":"%s","date":"%s","debian":"%s","cores":%s,"load_before":%s,"debootstrap_s":%.1f,"base_packages":%s,' \
  "$commit" "$(date -u +%Y-%m-%d)" "$(cat "$root/etc/debian_version")" "$cores" "$load_before" "$debootstrap_s" "$base_packages"
printf '"packages_added":%s,"packages_done_s":%.1f,"configure_done_s":%.1f,"build_done_s":%.1f,"first_table_s":%.1f}\n' \
  "$(( $(chroot "$root" dpkg-query -W -f='.\n' | wc -l) - base_packages ))" \
  "$(echo "$packages_ms / 1000" | bc -l)" "$(echo "$configure_ms / 1000" | bc -l)" \
  "$(echo "$build_ms / 1000" | bc -l)" "$(echo "$table_ms / 1000" | bc -l)"
