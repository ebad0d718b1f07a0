# SPDX-License-Identifier: Apache-2.0
"""What the GPU scripts' tests share besides the byte fuzz: a script run as a user runs it, and an
input file that lives as long as the test."""
import json
import os
import subprocess
import sys
import tempfile


def run_script(path: str, *args):
    """The script at PATH run with ARGS under this Python; its exit code and output."""
    return subprocess.run([sys.executable, path, *args], capture_output=True, text=True)


def temp_file(case, suffix: str, lines) -> str:
    """A file of LINES (strings as they are, anything else as JSON), one per line, removed when
    the test CASE ends; its path."""
    f = tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False)
    case.addCleanup(os.unlink, f.name)
    for line in lines:
        f.write(line if isinstance(line, str) else json.dumps(line))
        f.write("\n")
    f.close()
    return f.name
