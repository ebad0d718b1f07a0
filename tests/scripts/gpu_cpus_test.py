# SPDX-License-Identifier: Apache-2.0
"""bench/gpu/gpu_cpus.py: CPU lists and PCI names as sysfs writes them, and the halves it prints."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import gpu_cpus  # noqa: E402


class GpuCpus(unittest.TestCase):
    def test_cpulist_ranges_and_singles(self):
        self.assertEqual(gpu_cpus.parse_cpulist("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11])
        self.assertEqual(gpu_cpus.parse_cpulist(""), [])

    def test_bus_id_as_sysfs_names_it(self):
        self.assertEqual(gpu_cpus.sysfs_bus_id("00000000:18:00.0"), "0000:18:00.0")
        self.assertEqual(gpu_cpus.sysfs_bus_id("0000:AB:00.0"), "0000:ab:00.0")

    def test_halves_without_a_gpu_split_the_allowed_cpus(self):
        # No nvidia-smi answer: the CPUs this process may run on stand in.
        env = dict(os.environ, PATH="/nonexistent")
        script = os.path.join(os.path.dirname(gpu_cpus.__file__), "gpu_cpus.py")
        allowed = sorted(os.sched_getaffinity(0))
        out = subprocess.run([sys.executable, script, "--halves"], capture_output=True, text=True, env=env)
        if len(allowed) < 2:
            self.assertEqual(out.returncode, 1)
            return
        self.assertEqual(out.returncode, 0, out.stderr)
        first, second = out.stdout.split()
        want = gpu_cpus.halves(allowed)  # this machine's own cores, as sysfs gives them
        self.assertEqual(first, ",".join(map(str, want[0])))
        self.assertEqual(second, ",".join(map(str, want[1])))
        self.assertEqual(sorted(want[0] + want[1]), allowed)

    def test_halves_keep_each_cores_threads_together(self):
        # 8 CPUs on 4 cores, each core's two threads numbered N and N + 4 (as Linux numbers them
        # on many two-socket and SMT machines): in-order halves would split every core.
        siblings = {c: [c % 4, c % 4 + 4] for c in range(8)}
        self.assertEqual(gpu_cpus.halves(list(range(8)), siblings.get), ([0, 1, 4, 5], [2, 3, 6, 7]))
        # Threads numbered next to each other: the same as the in-order split.
        siblings = {c: [c - c % 2, c - c % 2 + 1] for c in range(8)}
        self.assertEqual(gpu_cpus.halves(list(range(8)), siblings.get), ([0, 1, 2, 3], [4, 5, 6, 7]))
        # Only the allowed CPUs count: a core with one allowed thread is a core of one.
        self.assertEqual(gpu_cpus.halves([0, 1, 4, 6], {0: [0, 4], 4: [0, 4], 1: [1, 5], 6: [2, 6]}.get),
                         ([0, 4], [1, 6]))
        # An odd number of cores: the second half takes the larger part.
        siblings = {c: [c - c % 2, c - c % 2 + 1] for c in range(6)}
        self.assertEqual(gpu_cpus.halves(list(range(6)), siblings.get), ([0, 1], [2, 3, 4, 5]))

    def test_halves_fall_back_to_cpu_order_without_the_topology(self):
        self.assertEqual(gpu_cpus.halves([0, 1, 2, 3], lambda c: []), ([0, 1], [2, 3]))
        # One core with every thread: two halves of its threads rather than nothing.
        self.assertEqual(gpu_cpus.halves([0, 1, 2, 3], lambda c: [0, 1, 2, 3]), ([0, 1], [2, 3]))
        # A CPU sysfs places in another CPU's list only: not a topology to trust.
        # (with CPU 3 in core 1 the split would be [0, 2] and [1, 3]).
        self.assertEqual(gpu_cpus.halves([0, 1, 2, 3], {0: [0, 2], 2: [0, 2], 1: [1, 3], 3: [1]}.get), ([0, 1], [2, 3]))
        self.assertEqual(gpu_cpus.halves([0, 1, 2, 3], {0: [0, 2], 2: [0, 2], 1: [1, 3], 3: [1, 3]}.get), ([0, 2], [1, 3]))


if __name__ == "__main__":
    unittest.main()
