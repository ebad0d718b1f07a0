#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CPUs local to a GPU, for pinning the GPU scripts' training jobs.

Reads the GPU's PCI address from `nvidia-smi` (a query: it changes nothing) and the CPUs local
to that PCI device from sysfs (`local_cpulist`), keeps those this process may run on, and
prints them (`--halves`: split in two halves, one line "FIRST SECOND", each a taskset list).
Where sysfs has no answer, the CPUs this process may run on stand in. Prints nothing and exits
1 when fewer than two CPUs are left to split.

The halves are made of whole cores where sysfs gives the cores' hardware threads
(`topology/thread_siblings_list`): two hardware threads of one core share its execution units and
caches, so halves that split a core's threads between the two jobs would let one job's host side
slow the other's, which the pinning is there to keep apart (a container given whole cores, as a
kubelet's static CPU manager does, shares none). Where the threads are not known, or all the
CPUs are one core, the CPUs are split in order.
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


def thread_siblings(cpu):
    """The hardware threads of CPU's core, from sysfs; [] where sysfs does not say."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            return parse_cpulist(f.read())
    except (OSError, ValueError):
        return []


def halves(cpus, siblings_of=thread_siblings):
    """CPUS split in two lists of whole cores (each core's threads among CPUS kept together, the
    cores in order of their first CPU, the first half taking the smaller half of the cores), or,
    where SIBLINGS_OF does not place every CPU or there is one core, in two halves in order."""
    cores, core_of = [], {}
    for c in cpus:
        sib = [x for x in siblings_of(c) if x in cpus]
        if c not in sib:  # unknown topology (or a CPU sysfs places in no core of its own)
            cores = None
            break
        key = min(sib)
        if key not in core_of:
            core_of[key] = []
            cores.append(core_of[key])
        core_of[key].append(c)
    if cores and len(cores) >= 2:
        half = len(cores) // 2
        return sorted(x for core in cores[:half] for x in core), sorted(x for core in cores[half:] for x in core)
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


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
        first, second = halves(cpus)
        print(",".join(map(str, first)), ",".join(map(str, second)))
    else:
        print(",".join(map(str, cpus)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
