#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How fast tgs-node's priority-share controller sees a production job lose 5%, and how often it
reacts to noise alone, on the fake driver with injected host noise.

Each trial runs, on a fake GPU of its own:
  - tgs-node with a managed (fake) MPS daemon, `--policy priority-share` at its defaults (500 ms
    windows), the opportunistic job a below-normal MPS client, and the signal under test
    (`speed`: the job's iteration speed, the default; `gpu-wait`: the GPU time it waits for per block);
  - a host-bound production job (0.5 ms of GPU time and 3.5 ms of host time per iteration) whose
    host time is drawn afresh every second within +-JITTER (its speed moves by about 0.9 x that);
  - 10 s of the production job alone (the speed signal's reference), then an opportunistic job
    that runs short kernels back to back.
The quiet phase: QUIET seconds in which the opportunistic job costs the production job nothing
(the fake's MPS priority is perfect). Every cap the controller sets then is a false alarm.
The loss: once the opportunistic job is uncapped, the fake driver's MPS interference c is set so
that the production job's kernels stretch until it loses LOSS of its mean speed: its kernels take
G = 0.5 ms of device time per iteration and its mean iteration alone took T, so
c = (1 / (1 - LOSS) - 1) x T / G (the opportunistic job keeps the device's low-priority timeline
full, so the fake's load is 1). The detection delay is the time from that write to the first cap
(the driver reads the value within 0.1 s, which the delay includes). Each trial also reports the
loss it measured, the production job's speed over the 3 s before the write and from 0.5 s after
it to the detection (only meaningful at low jitter).

Prints one line per trial and a table per (signal, jitter); writes every trial and the summary
as JSON (--json). With --check it exits 1 unless every gpu-wait trial set no cap in its quiet
phase, capped within 10 s of the loss, and read the production job's marked wait. Exit 2 on bad
usage.

Usage: bench/noise_detection.py [--build build] [--signals speed,gpu-wait] [--jitters 0,0.15,0.3]
                                [--runs 3] [--quiet-s 30] [--loss 0.05] [--json FILE] [--check]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SIGNALS = ("speed", "gpu-wait")
PERIOD_S = 0.5           # priority-share's default window
ALONE_S = 10.0           # the production job alone: 16 windows of reference and a margin
DETECT_LIMIT_S = 20.0    # how long a trial waits for the loss to be seen
TARGET_DETECT_S = 10.0   # the bound
NS_PER_BLOCK = 1000      # the fake device's speed (TGS_FAKE_NS_PER_BLOCK)
PRODUCTION = ["--kernels", "5", "--blocks", "100", "--host-ms", "3.5", "--jitter-period-s", "1"]
PRODUCTION_GPU_S = 5 * 100 * NS_PER_BLOCK * 1e-9  # its kernels' device time per iteration
OPPORTUNISTIC = ["--kernels", "100", "--blocks", "20", "--host-ms", "0"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="the build folder (bin/, lib/, fake-driver/, fake-mps/)")
    p.add_argument("--signals", default="speed,gpu-wait", help="comma-separated, of: " + ", ".join(SIGNALS))
    p.add_argument("--jitters", default="0,0.15,0.3", help="comma-separated host-time jitters, each in [0, 0.9]")
    p.add_argument("--runs", type=int, default=3, help="trials per (signal, jitter) (default 3)")
    p.add_argument("--quiet-s", type=float, default=30.0, help="seconds of sharing without loss (default 30)")
    p.add_argument("--loss", type=float, default=0.05, help="the production job's loss to detect (default 0.05)")
    p.add_argument("--json", help="write the trials and the summary here")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every gpu-wait trial had no false alarm and detected within 10 s")
    a = p.parse_args(argv)
    try:
        a.signals = [s for s in a.signals.split(",") if s]
        a.jitters = [float(j) for j in a.jitters.split(",") if j]
    except ValueError:
        p.error("--jitters must be numbers, e.g. 0,0.15,0.3")
    bad = [s for s in a.signals if s not in SIGNALS]
    if bad or not a.signals:
        p.error("--signals: unknown %s (choose from %s)" % (",".join(bad) or "(none)", ", ".join(SIGNALS)))
    if not a.jitters or any(not 0.0 <= j <= 0.9 for j in a.jitters):
        p.error("--jitters must each lie in [0, 0.9]")
    if a.runs < 1 or a.quiet_s < 5 or not 0.0 < a.loss < 0.5:
        p.error("--runs must be at least 1, --quiet-s at least 5, --loss in (0, 0.5)")
    for path in ("bin/tgs-node", "bin/tgs-fake-train", "lib/libtgs-intercept.so", "fake-driver/libcuda.so.1",
                 "fake-mps/nvidia-cuda-mps-control"):
        if not os.path.exists(os.path.join(a.build, path)):
            p.error("%s is missing: build the backend first (cmake --build %s)" % (os.path.join(a.build, path), a.build))
    return a


class Trial:
    """One node, one production job, one opportunistic job, on a fake GPU of their own."""

    def __init__(self, a, sig, jitter, run, work):
        self.a, self.sig, self.jitter, self.run = a, sig, jitter, run
        self.work = work
        self.sock = os.path.join(work, "node.sock")
        self.device = "tgs-noise-%d-%d" % (os.getpid(), run)
        self.interference = os.path.join(work, "interference")
        self.set_interference(0.0)
        self.procs = []
        self.build = os.path.abspath(a.build)

    def set_interference(self, c):
        with open(self.interference + ".new", "w") as f:
            f.write("%.6f\n" % c)
        os.replace(self.interference + ".new", self.interference)

    def env(self, **extra):
        e = dict(os.environ, TGS_FAKE_DEVICE=self.device, TGS_FAKE_MPS_INTERFERENCE=self.interference,
                 TGS_FAKE_NS_PER_BLOCK=str(NS_PER_BLOCK))
        e.update(extra)
        return e

    def start_node(self):
        args = [self.build + "/bin/tgs-node", "--socket", self.sock, "--liveness-ms", "100", "--log-level", "info",
                "--mps-control", self.build + "/fake-mps/nvidia-cuda-mps-control", "--gpus", "1",
                "--policy", "priority-share", "--opportunistic-mechanism", "mps"]
        args.append("--priority-share.gpu-wait-signal=" + ("true" if self.sig == "gpu-wait" else "false"))
        log = open(os.path.join(self.work, "node.log"), "w")
        # No MPS control program on PATH: the node runs the one named above.
        env = self.env(LD_LIBRARY_PATH=self.build + "/fake-driver", PATH=os.path.join(self.work, "no-programs"))
        self.node = subprocess.Popen(args, stdout=log, stderr=log, env=env)
        self.procs.append(self.node)
        deadline = time.time() + 15
        while self.status() is None:
            if time.time() > deadline or self.node.poll() is not None:
                log.flush()
                with open(log.name) as f:
                    raise RuntimeError("tgs-node did not start:\n" + f.read()[-2000:])
            time.sleep(0.05)

    def start_job(self, cls, args):
        out = open(os.path.join(self.work, cls + ".jsonl"), "w")
        env = self.env(LD_PRELOAD=self.build + "/lib/libtgs-intercept.so", TGS_NODE_SOCKET=self.sock,
                       TGS_JOB_CLASS=cls, TGS_JOB_NAME=cls, TGS_LOG_LEVEL="error")
        p = subprocess.Popen([self.build + "/bin/tgs-fake-train", "--seconds", "0", "--report", "0.25"] + args,
                             stdout=out, stderr=subprocess.DEVNULL, env=env)
        self.procs.append(p)
        return p

    def status(self):
        try:
            p = subprocess.run([self.build + "/bin/tgs-node", "status", "--json", "--socket", self.sock],
                               capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if p.returncode != 0:
            return None
        try:
            return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
        except ValueError:
            return None

    def controller(self):
        """The GPU line's controller report and the production job's line, or (None, None)."""
        lines = self.status() or []
        ctl = next((l["controller"] for l in lines if "controller" in l and "job" not in l), None)
        prod = next((l for l in lines if l.get("class") == "production"), None)
        return ctl, prod

    def progress(self, cls):
        rows = []
        with open(os.path.join(self.work, cls + ".jsonl")) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("event") == "progress":
                    rows.append((j["t"], j["iterations"]))
        return rows

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if p is self.node else signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            os.unlink("/dev/shm/%s-0" % self.device)
        except OSError:
            pass

    def execute(self):
        self.start_node()
        prod_args = PRODUCTION + ["--host-jitter", str(self.jitter), "--jitter-seed", str(1000 + self.run)]
        self.start_job("production", prod_args)
        time.sleep(ALONE_S)
        self.start_job("opportunistic", OPPORTUNISTIC)
        # Sharing starts at once (speed) or after a reference beside the held job (gpu-wait).
        deadline = time.time() + 15
        while True:
            ctl, _ = self.controller()
            if ctl and ctl.get("phase") == "sharing":
                break
            if time.time() > deadline:
                raise RuntimeError("the controller never began sharing: %s" % ctl)
            time.sleep(0.1)
        shared_from = time.time()

        # The quiet phase: no loss; every cap is a false alarm.
        false_caps, capped_s = 0, 0.0
        wait_read = False  # the controller read a marked wait (the interposer marks it end to end)
        was_capped, last = False, time.time()
        end = time.time() + self.a.quiet_s
        while time.time() < end:
            ctl, _ = self.controller()
            now = time.time()
            wait_read = wait_read or (bool(ctl) and "wait_loss" in ctl)
            capped = bool(ctl) and ctl.get("phase") == "sharing" and ctl.get("budget_blocks", -1) >= 0
            if capped and not was_capped:
                false_caps += 1
            if was_capped:
                capped_s += now - last
            was_capped, last = capped, now
            time.sleep(0.1)
        quiet_s = time.time() - shared_from

        # The loss starts with the opportunistic job uncapped (a false alarm undone first).
        deadline = time.time() + 30
        while True:
            ctl, _ = self.controller()
            if ctl and ctl.get("phase") == "sharing" and ctl.get("budget_blocks", -1) < 0:
                break
            if time.time() > deadline:
                raise RuntimeError("the cap was never lifted after the quiet phase: %s" % ctl)
            time.sleep(0.1)
        alone = [r for r in self.progress("production") if 2.0 <= r[0] <= ALONE_S]
        if len(alone) < 2 or alone[-1][1] <= alone[0][1]:
            raise RuntimeError("the production job made no progress alone")
        iteration_s = (alone[-1][0] - alone[0][0]) / (alone[-1][1] - alone[0][1])
        c = (1.0 / (1.0 - self.a.loss) - 1.0) * iteration_s / PRODUCTION_GPU_S
        self.set_interference(c)
        loss_at = time.time()
        detected = None
        while time.time() - loss_at < DETECT_LIMIT_S:
            ctl, _ = self.controller()
            if ctl and ctl.get("phase") == "sharing" and ctl.get("budget_blocks", -1) >= 0:
                detected = time.time() - loss_at
                break
            time.sleep(0.1)

        # The loss measured: the speed over the 3 s before the write against the speed from 0.5 s
        # after it (the driver's read) to the detection, or the limit.
        rows = self.progress("production")
        t_write = rows[-1][0] - (time.time() - loss_at) if rows else 0.0

        def speed(lo, hi):
            span = [r for r in rows if lo <= r[0] <= hi]
            return (span[-1][1] - span[0][1]) / (span[-1][0] - span[0][0]) if len(span) >= 2 else None

        before = speed(t_write - 3.0, t_write)
        after = speed(t_write + 0.5, t_write + (detected if detected is not None else DETECT_LIMIT_S))
        measured_loss = 1.0 - after / before if before and after else None

        # The production job's speed, second by second, alone (after its first 2 s): the noise.
        rows = [r for r in rows if 2.0 <= r[0] <= ALONE_S]
        per_s = []
        for i in range(len(rows)):
            j = next((k for k in range(i + 1, len(rows)) if rows[k][0] - rows[i][0] >= 0.999), None)
            if j is not None and i % 4 == 0:
                per_s.append((rows[j][1] - rows[i][1]) / (rows[j][0] - rows[i][0]))
        steps = [abs(b - a) / a for a, b in zip(per_s, per_s[1:]) if a > 0]
        return {
            "signal": self.sig, "jitter": self.jitter, "run": self.run,
            "speed_step_median": statistics.median(steps) if steps else None,
            "speed_step_max": max(steps) if steps else None,
            "quiet_s": round(quiet_s, 2), "false_caps": false_caps, "quiet_capped_s": round(capped_s, 2),
            "iteration_ms": round(1e3 * iteration_s, 4), "interference": round(c, 4), "loss": self.a.loss,
            "measured_loss": None if measured_loss is None else round(measured_loss, 4),
            "detection_s": None if detected is None else round(detected, 2),
            "wait_read": wait_read,
        }


def summarize(trials):
    out = []
    for sig in SIGNALS:
        for jitter in sorted({t["jitter"] for t in trials}):
            cell = [t for t in trials if t["signal"] == sig and t["jitter"] == jitter]
            if not cell:
                continue
            seen = [t["detection_s"] for t in cell if t["detection_s"] is not None]
            minutes = sum(t["quiet_s"] for t in cell) / 60.0
            steps = [t["speed_step_median"] for t in cell if t["speed_step_median"] is not None]
            out.append({
                "signal": sig, "jitter": jitter, "runs": len(cell),
                "speed_step_median": round(statistics.median(steps), 4) if steps else None,
                "false_caps": sum(t["false_caps"] for t in cell),
                "false_caps_per_min": round(sum(t["false_caps"] for t in cell) / minutes, 3) if minutes else None,
                "detected": len(seen),
                "detected_within_10s": sum(1 for s in seen if s <= TARGET_DETECT_S),
                "detection_median_s": round(statistics.median(seen), 2) if seen else None,
                "detection_min_s": min(seen) if seen else None,
                "detection_max_s": max(seen) if seen else None,
            })
    return out


def fmt(x, spec="%.1f"):
    return "-" if x is None else spec % x


def main(argv):
    a = parse_args(argv)
    trials = []
    total = len(a.signals) * len(a.jitters) * a.runs
    n = 0
    for run in range(a.runs):  # interleaved, so a slow spell of the host lands on every cell
        for jitter in a.jitters:
            for sig in a.signals:
                n += 1
                work = tempfile.mkdtemp(prefix="tgs-noise-")
                trial = Trial(a, sig, jitter, run, work)
                try:
                    t = trial.execute()
                except RuntimeError as e:
                    print("trial %d/%d (%s, jitter %.2f, run %d) failed: %s" % (n, total, sig, jitter, run, e),
                          file=sys.stderr)
                    return 1
                finally:
                    trial.stop()
                    shutil.rmtree(work, ignore_errors=True)
                trials.append(t)
                print("trial %d/%d: %-8s jitter %.2f run %d: speed moves %s%%/s; %d false caps in %.0f s; "
                      "loss seen after %s s" % (n, total, sig, jitter, run, fmt(100 * (t["speed_step_median"] or 0)),
                                                t["false_caps"], t["quiet_s"], fmt(t["detection_s"], "%.2f")),
                      flush=True)
    summary = summarize(trials)
    print("\n| signal | jitter | speed moves per s (median) | runs | false caps per minute | "
          "5% loss seen | within 10 s | delay median (min-max) s |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        print("| %s | %.2f | %s%% | %d | %s | %d of %d | %d of %d | %s (%s-%s) |" % (
            s["signal"], s["jitter"], fmt(100 * s["speed_step_median"] if s["speed_step_median"] is not None else None),
            s["runs"], fmt(s["false_caps_per_min"], "%.2f"), s["detected"], s["runs"], s["detected_within_10s"],
            s["runs"], fmt(s["detection_median_s"], "%.2f"), fmt(s["detection_min_s"], "%.2f"),
            fmt(s["detection_max_s"], "%.2f")) if s["detected"] else "| %s | %.2f | %s%% | %d | %s | 0 of %d | 0 of %d | - |" % (
            s["signal"], s["jitter"], fmt(100 * s["speed_step_median"] if s["speed_step_median"] is not None else None),
            s["runs"], fmt(s["false_caps_per_min"], "%.2f"), s["runs"], s["runs"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"loss": a.loss, "quiet_s": a.quiet_s, "period_s": PERIOD_S, "trials": trials,
                       "summary": summary}, f, indent=1)
            f.write("\n")
    if a.check:
        bad = [t for t in trials if t["signal"] == "gpu-wait" and
               (t["false_caps"] > 0 or t["detection_s"] is None or t["detection_s"] > TARGET_DETECT_S or
                not t["wait_read"])]
        if bad:
            print("check failed: %d gpu-wait trial(s) with a false alarm, no detection within 10 s, or no marked "
                  "wait read" % len(bad))
            return 1
        print("check passed: every gpu-wait trial read the marked wait, had no false alarm and saw the loss "
              "within 10 s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
