#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CPUs local to a GPU, for pinning the GPU scripts' training jobs.

Reads the GPU's PCI address from `nvidia-smi` (a query: it changes nothing) and the CPUs local
to that PCI device from sysfs (`local_cpulist`), keeps those this process may run on, and
prints them (`--halves`: split in two halves, one line "FIRST SECOND", each a taskset list).
Where sysfs has no answer, the CPUs this process may run on stand in. Prints nothing and exits
1 when fewer than two CPUs are left to split.
"""
import argparse
import os
import subprocess
import sys


def parse_cpulist(spec):
    """A sysfs / taskset CPU list ("0-3,8,10-11") as a list of CPU numbers."""
    cpus = []
    for part in filter(None, spec.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def sysfs_bus_id(nvidia_smi_bus_id):
    """nvidia-smi prints an 8-digit PCI domain in upper case; sysfs names use 4, lower case."""
    bus = nvidia_smi_bus_id.strip().lower()
    domain, _, rest = bus.partition(":")
    if len(domain) == 8:
        domain = domain[4:]
    return f"{domain}:{rest}"


def gpu_local_cpus(gpu):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", str(gpu)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        with open(f"/sys/bus/pci/devices/{sysfs_bus_id(out.splitlines()[0])}/local_cpulist") as f:
            return parse_cpulist(f.read())
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return []


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    parser.add_argument("--halves", action="store_true", help="print two halves instead of one list")
    args = parser.parse_args()
    allowed = os.sched_getaffinity(0)
    cpus = [c for c in gpu_local_cpus(args.gpu) if c in allowed] or sorted(allowed)
    if args.halves:
        if len(cpus) < 2:
            return 1
        half = len(cpus) // 2
        print(",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:])))
    else:
        print(",".join(map(str, cpus)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
