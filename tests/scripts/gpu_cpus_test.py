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
        half = len(allowed) // 2
        self.assertEqual(first, ",".join(map(str, allowed[:half])))
        self.assertEqual(second, ",".join(map(str, allowed[half:])))


if __name__ == "__main__":
    unittest.main()
