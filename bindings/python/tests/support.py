# SPDX-License-Identifier: Apache-2.0
"""What the Python module's tests share: where tgs-sim, the sources and the real traces are, and
running tgs-sim."""
import os
import subprocess
import unittest

SOURCE = os.environ.get("TGS_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
SIM = os.environ.get("TGS_SIM", os.path.join(SOURCE, "build", "bin", "tgs-sim"))
TRACES = os.environ.get("TGS_TRACES", os.path.join(SOURCE, "..", "shared", "traces"))
TRACE_DATA = os.path.join(SOURCE, "tests", "traces", "data")
SIM_DATA = os.path.join(SOURCE, "tests", "sim", "data")


def tgs_sim(*args, check=True):
    """Runs tgs-sim; returns the completed process (stdout and stderr as text)."""
    r = subprocess.run([SIM, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise AssertionError(f"tgs-sim {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def philly(name):
    """The path of a real trace, or a skip when the traces are not beside the checkout."""
    path = os.path.join(TRACES, name)
    if not os.path.exists(path):
        raise unittest.SkipTest(f"{path} not found: set TGS_TRACES to the folder of the Philly traces")
    return path
