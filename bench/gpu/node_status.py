# SPDX-License-Identifier: Apache-2.0
"""tgs-node status for the GPU scripts: one query, and a sampler that records it once a second.

  python3 bench/gpu/node_status.py sample NODE SOCKET OUT LABEL

appends one JSON line per second to OUT until SIGTERM: {"run": LABEL, "t": unix time, "gpus":
[...], "jobs": [...]}, the objects of `NODE status --json --socket SOCKET` (a second in which the
node does not answer writes nothing). memory.sh and rate_control.sh sample their tgs runs with it;
bench/gpu/status_phases.py summarizes such a file per run and rate-control phase.
"""
import json
import signal
import subprocess
import sys
import time


def status(node: str, sock: str):
    """(gpus, jobs) from `tgs-node status --json`, or None when the node does not answer."""
    try:
        p = subprocess.run([node, "status", "--json", "--socket", sock], capture_output=True, text=True, timeout=5)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if p.returncode != 0:
        return None
    gpus, jobs = [], []
    for line in p.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "job" in d:
            jobs.append(d)
        elif "gpu" in d:
            gpus.append(d)
    return gpus, jobs


def sample(node: str, sock: str, out: str, label: str, period_s: float = 1.0) -> None:
    """Appends a status sample to `out` every `period_s` until SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(out, "a", encoding="utf-8") as f:
        while True:
            t = time.time()
            st = status(node, sock)
            if st is not None:
                f.write(json.dumps({"run": label, "t": t, "gpus": st[0], "jobs": st[1]}) + "\n")
                f.flush()
            time.sleep(max(0.05, period_s - (time.time() - t)))


def main() -> int:
    if len(sys.argv) != 6 or sys.argv[1] != "sample":
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        print("usage: node_status.py sample NODE SOCKET OUT LABEL", file=sys.stderr)
        return 2
    sample(*sys.argv[2:6])
    return 0


if __name__ == "__main__":
    sys.exit(main())
