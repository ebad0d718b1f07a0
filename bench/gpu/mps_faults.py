#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What an opportunistic MPS client's fatal end does to the production client of the same server.

One MPS control daemon private to the call (its own pipe and log folders, told to quit at the end).
The production client is a bf16 matrix-multiply loop at normal priority that prints its iteration
count every 0.25 s; each case starts an opportunistic client at below-normal priority
(CUDA_MPS_CLIENT_PRIORITY=1) that ends in one way:

  kill-in-kernel-MS   SIGKILL while one spin kernel of MS milliseconds runs (torch.cuda._sleep)
  kill-queued         SIGKILL while thousands of 1 ms kernels are queued
  term-in-kernel-MS   SIGTERM while one spin kernel of MS milliseconds runs
  illegal-address     a kernel stores to address 0x8 (a PTX kernel through the driver API)
  out-of-memory       one allocation of more than the card has free, then exit(1)
  device-assert       a device-side assert (an index out of bounds), then one more CUDA call, exit(1)
  exit-in-kernel-MS   os._exit(0) while one spin kernel of MS milliseconds runs

With --node BUILD the MPS daemon is tgs-node's instead (`--policy priority-share --mps managed
--opportunistic-mechanism M`, M from --node-mechanism, auto by default), and both clients run under
its interposer (BUILD/lib/libtgs-intercept.so): what the node does about these ends (an MPS client
drains its GPU work before SIGTERM ends it; by default a job whose kernels it has not timed is not
an MPS client at all) is measured the same way, and each case records the mechanism the node chose.

After each case the probe watches the production client for 3 s: `survived` when it made progress
and printed no error, else the error it printed. A production client that died is started again
before the next case. A client that has not ended --stuck-s after its end was due (or a new client
that has not run its kernel by then) is looked at before it is killed: each thread's state and
kernel wait channel, its Python stack (faulthandler, on SIGUSR1), and under --node what the node's
status and log say of it (`stuck` in its record). A process that SIGKILL does not end is recorded as
such and the cases go on. Writes cases.jsonl (one line per case) and summary.json to --out; the
table last. Never asks for managed memory; touches no setting of the card.
"""
import argparse
import contextlib
import faulthandler
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (mps_daemon, nvidia_smi)

CASE_KINDS = ("kill-in-kernel", "term-in-kernel", "exit-in-kernel", "kill-queued", "illegal-address",
              "out-of-memory", "device-assert")

# A kernel that stores 1 to the address it is given: 0x8 is never mapped, so the store faults.
POKE_PTX = b""".version 7.0
.target sm_75
.address_size 64
.visible .entry poke(.param .u64 p) {
  .reg .u64 %a;
  .reg .u32 %v;
  ld.param.u64 %a, [p];
  mov.u32 %v, 1;
  st.global.u32 [%a], %v;
  ret;
}
\0"""


def parse_case(name: str) -> tuple:
    """`kill-in-kernel-2000` -> ("kill-in-kernel", 2000.0); a case without a length -> (name, 0)."""
    for kind in CASE_KINDS:
        if name == kind and not kind.endswith("kernel"):
            return kind, 0.0
        if name.startswith(kind + "-") and kind.endswith("kernel"):
            try:
                ms = float(name[len(kind) + 1:])
            except ValueError:
                break
            if ms > 0:
                return kind, ms
    raise argparse.ArgumentTypeError(f"unknown case {name!r}: one of {', '.join(CASE_KINDS)} "
                                     "(the *-kernel ones with -MS, a kernel length in ms)")


# ------------------------------------------------------------------ the clients (on the GPU)

def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def client_production(args) -> int:
    import torch
    n = args.matrix
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    iters, last = 0, time.monotonic()
    say({"ready": True, "pid": os.getpid()})
    try:
        while True:
            for _ in range(8):
                c = a @ b
            torch.cuda.synchronize()
            iters += 8
            now = time.monotonic()
            if now - last >= 0.25:
                say({"t": now, "iters": iters, "checksum": float(c[0, 0])})
                last = now
    except Exception as e:  # a CUDA error: say it, then end as the job would
        say({"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]})
        return 1


def spin_cycles_per_ms(torch) -> float:
    """The spin kernel's cycles per millisecond on this GPU, from a 20 ms calibration kernel."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # warm up the kernel
    torch.cuda.synchronize()
    cycles = 40_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


def poke_invalid_address() -> None:
    """Launches POKE_PTX at address 0x8 in the current context and waits for it."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    for call, rc in (("cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(module), POKE_PTX)),
                     ("cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(function), module, b"poke"))):
        if rc != 0:
            raise RuntimeError(f"{call} returned {rc}")
    address = ctypes.c_uint64(0x8)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(address), ctypes.c_void_p))
    rc = cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None)
    say({"launched": True, "rc": rc})
    rc = cuda.cuCtxSynchronize()
    say({"error": f"cuCtxSynchronize returned {rc}"})


def client_opportunistic(args) -> int:
    import torch
    kind, ms = parse_case(args.case)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the probe asks for the stack of a stuck client
    say({"pid": os.getpid()})
    torch.zeros(1, device="cuda")  # the context (an MPS client from here on)
    if kind == "device-assert":
        x = torch.zeros(8, device="cuda")
        index = torch.tensor([64], device="cuda")
        try:
            x[index] += 1  # out of bounds: the indexing kernel's device-side assert
            torch.cuda.synchronize()
        except Exception as e:
            say({"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]})
        try:  # one more call, as a job's error handling makes: the interposer sees its error too
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
        except Exception as e:
            say({"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]})
        return 1
    if kind == "illegal-address":
        poke_invalid_address()
        return 1
    if kind == "out-of-memory":
        free, _ = torch.cuda.mem_get_info()
        try:
            torch.empty(free + (1 << 30), dtype=torch.uint8, device="cuda")
        except Exception as e:
            say({"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]})
        return 1
    per_ms = spin_cycles_per_ms(torch)
    if kind == "kill-queued":
        for _ in range(4000):
            torch.cuda._sleep(int(per_ms))
        say({"launched": True, "queued_ms": 4000})
    else:
        torch.cuda._sleep(int(per_ms * ms))
        say({"launched": True, "kernel_ms": ms, "cycles_per_ms": per_ms})
        if kind == "exit-in-kernel":
            time.sleep(ms / 2000)
            os._exit(0)
    time.sleep(3600)  # the probe ends this process
    return 0


# ------------------------------------------------------------------ the probe (on the host)

class Client:
    """A client process whose JSON lines are collected by a thread."""

    def __init__(self, argv: list, env: dict) -> None:
        self.lines, self.lock = [], threading.Lock()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                obj = {"text": line.rstrip()[:300]}
            with self.lock:
                self.lines.append((time.monotonic(), obj))

    def seen(self, key: str, since: float = 0.0) -> list:
        with self.lock:
            return [o for t, o in self.lines if t >= since and key in o]

    def wait_for(self, key: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.seen(key) or self.proc.poll() is not None:
                return bool(self.seen(key))
            time.sleep(0.05)
        return False

    def end(self, wait_s: float = 15) -> bool:
        """SIGKILL if still running; whether the process has ended WAIT_S later (a process in an
        uninterruptible wait in the driver may not)."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True


def process_state(pid: int) -> dict:
    """What /proc says a process is doing: its state, and per thread its name, state and kernel
    wait channel (and the kernel stack where it may be read), so a process stuck in the driver, in
    a futex or stopped by a signal can be told apart."""
    state = {"pid": pid}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("State", "SigBlk", "SigCgt", "SigPnd", "ShdPnd", "Threads"):
                    state[key] = value.strip()
    except OSError as e:
        state["error"] = str(e)
        return state
    # A cgroup v2 freezer (tgs-node's way of holding a process where it can) shows in its cgroup's
    # events, not in the process's state letter.
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            path = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
        if path is not None:
            state["cgroup"] = path
            with open(os.path.join("/sys/fs/cgroup", path.lstrip("/"), "cgroup.events")) as f:
                state["cgroup_frozen"] = any(line.split() == ["frozen", "1"] for line in f)
    except OSError:
        pass
    threads = []
    for task in sorted(glob.glob(f"/proc/{pid}/task/*")):
        t = {"tid": int(os.path.basename(task))}
        for name, path in (("comm", "comm"), ("wchan", "wchan"), ("stat", "stat"), ("stack", "stack")):
            try:
                with open(os.path.join(task, path)) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if name == "stat":  # the state letter after the parenthesised name
                text = text.rpartition(")")[2].split()[0] if ")" in text else text
            elif name == "stack":
                text = [line.split("]", 1)[-1].strip() for line in text.splitlines()][:8]
            t[name] = text
        threads.append(t)
    state["threads"] = threads
    return state


def daemon_dir(out: str) -> str:
    """The folder of the call's MPS daemon or tgs-node (`node_daemon` writes node.sock and node.log)."""
    return os.path.join(out, "mps")


def node_status(args) -> list:
    """The node's status lines (JSON objects) now, or why there are none."""
    if not args.node:
        return []
    socket = os.path.join(daemon_dir(args.out), "node.sock")
    try:
        r = subprocess.run([os.path.join(args.node, "bin", "tgs-node"), "status", "--json", "--socket", socket],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return [{"error": str(e)}]
    lines = []
    for line in r.stdout.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"text": line[:300]})
    return lines or [{"error": r.stderr.strip()[:300]}]


def node_said_of(args, pid: int) -> list:
    """The node's log lines that name `pid`, the last ten."""
    if not args.node:
        return []
    pattern = re.compile(rf"\bpid {pid}\b")
    try:
        with open(os.path.join(daemon_dir(args.out), "node.log"), encoding="utf-8", errors="replace") as f:
            return [line.rstrip()[:300] for line in f if pattern.search(line)][-10:]
    except OSError:
        return []


def diagnose(client: "Client", args) -> dict:
    """A stuck client, looked at before it is killed: /proc, its Python stack, the node's word."""
    pid = client.proc.pid
    seen = {"process": process_state(pid), "node_said": node_said_of(args, pid), "node_status": node_status(args)}
    before = len(client.lines)
    try:
        os.kill(pid, signal.SIGUSR1)  # faulthandler writes every thread's Python stack
        time.sleep(1.0)
    except OSError:
        pass
    with client.lock:
        seen["python_stack"] = [o["text"] for _, o in client.lines[before:] if "text" in o][:40]
    return seen


def production_state(prod: Client, since: float) -> dict:
    """Whether production progressed and stayed error-free since `since`."""
    errors = prod.seen("error", since)
    progress = prod.seen("iters", since)
    iters = [o["iters"] for o in progress]
    state = {"alive": prod.proc.poll() is None, "progress": len(iters) >= 2 and iters[-1] > iters[0]}
    if errors:
        state["error"] = errors[0]["error"]
    state["survived"] = state["alive"] and state["progress"] and not errors
    return state


def run_case(case: str, env: dict, prod_env: dict, opp_env: dict, prod: Client, args) -> tuple:
    kind, ms = parse_case(case)
    me = [sys.executable, os.path.abspath(__file__), "client"]
    if prod is None or prod.proc.poll() is not None:
        prod = Client(me + ["production", "--matrix", str(args.matrix)], prod_env)
        if not prod.wait_for("iters", 120):
            prod.end()
            return {"case": case, "error": "the production client did not start"}, None
    opp = Client(me + ["opportunistic", "--case", case], opp_env)
    record = {"case": case, "kind": kind, "kernel_ms": ms or None}
    if kind in ("illegal-address", "out-of-memory", "device-assert"):
        started = True
    else:
        started = record["launched"] = opp.wait_for("launched", args.stuck_s)
    if kind in ("kill-in-kernel", "term-in-kernel", "kill-queued") and started:
        time.sleep(max(ms, 200) / 2000)  # into the kernel (or the queue)
        opp.proc.send_signal(signal.SIGKILL if kind != "term-in-kernel" else signal.SIGTERM)
    ended = time.monotonic()
    try:
        record["opportunistic_exit"] = opp.proc.wait(args.stuck_s)
    except subprocess.TimeoutExpired:
        record["stuck"] = diagnose(opp, args)
        record["stuck"]["after_s"] = round(time.monotonic() - ended, 1)
        record["opportunistic_exit"] = (f"killed after {args.stuck_s:g} s" if opp.end()
                                        else f"still there after SIGKILL, {args.stuck_s:g} + 15 s")
    record["opportunistic_said"] = [o for _, o in opp.lines if "error" in o or "text" in o][-3:]
    time.sleep(args.watch_s)
    record["production"] = production_state(prod, ended)
    # A new client after the case (another job): does the GPU, or the server, still take clients?
    probe_env = {**opp_env, "TGS_JOB_NAME": "probe"} if args.node else opp_env
    probe = Client([sys.executable, "-c", "import torch; torch.ones(1, device='cuda').sum().item(); print('ok')"],
                   probe_env)
    try:
        probe.proc.wait(args.stuck_s)
    except subprocess.TimeoutExpired:
        record["probe_stuck"] = diagnose(probe, args)
        probe.end()
    with probe.lock:
        record["new_client_ok"] = any(o.get("text") == "ok" for _, o in probe.lines)
    if not args.node:
        try:
            servers = subprocess.run([args.control], input="get_server_list\n", env=env, text=True,
                                     capture_output=True, timeout=30)
            record["servers"] = servers.stdout.split()
        except subprocess.TimeoutExpired:
            record["servers"] = "the control daemon did not answer in 30 s"
    record["opportunistic_log"] = [o["text"] for _, o in opp.lines if "text" in o and "tgs-intercept" in o["text"]][-3:]
    if args.node:  # how the node had it share: its log's line for the client's pid
        pids = [o["pid"] for _, o in opp.lines if "pid" in o]
        record["mechanism"] = node_mechanism_of(os.path.join(daemon_dir(args.out), "node.log"), pids[0]) if pids else None
    if not record["production"]["survived"]:
        prod.end()
        prod = None
    return record, prod


def cmd_run(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    work = daemon_dir(args.out)
    os.makedirs(work, exist_ok=True)
    gpu = harness.nvidia_smi(["name", "driver_version"]) or {}
    device = [gpu.get("name", "unknown"), gpu.get("driver_version", "unknown")]
    records, t0 = [], time.time()
    with (node_daemon(args.node, work, args.node_mechanism) if args.node
          else harness.mps_daemon(args.control, work)) as mps_env:
        env = {**os.environ, **mps_env}
        if args.node:  # the node says who is a client of which daemon, at which priority
            prod_env = {**env, "TGS_JOB_CLASS": "production", "TGS_JOB_NAME": "production"}
            opp_env = {**env, "TGS_JOB_CLASS": "opportunistic", "TGS_JOB_NAME": "opportunistic",
                       "TGS_LOG_LEVEL": "info"}
        else:
            prod_env = {**env, "CUDA_MPS_CLIENT_PRIORITY": "0"}
            opp_env = {**env, "CUDA_MPS_CLIENT_PRIORITY": "1"}
        prod = None
        for i in range(args.repeat):
            for case in args.cases:
                if time.time() - t0 > args.max_s:
                    records.append({"case": case, "skipped": f"past --max-s {args.max_s:g}"})
                    continue
                record, prod = run_case(case, env, prod_env, opp_env, prod, args)
                record["round"] = i + 1
                records.append(record)
                with open(os.path.join(args.out, "cases.jsonl"), "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"== [{time.time() - t0:4.0f} s] {case}: production "
                      f"{'survived' if record.get('production', {}).get('survived') else 'ENDED'} "
                      f"{record.get('production', {}).get('error', '')}", flush=True)
        if prod is not None:
            prod.end()
    summary = summarize(records)
    summary.update({"device": device[0], "driver": device[1], "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(sys.argv)})
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print_table(summary)
    return 0


MECHANISM_SAID = re.compile(r"registered: pid (\d+) .*, (mps-client|time-sliced|held) \(([a-z-]+)\)")


def node_mechanism_of(log_path: str, pid: int):
    """The mechanism tgs-node's log says it chose for the job of `pid` at its registration
    ("time-sliced (kernels-unmeasured)"), or None."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = MECHANISM_SAID.search(line)
                if m and int(m.group(1)) == pid:
                    return f"{m.group(2)} ({m.group(3)})"
    except OSError:
        return None
    return None


@contextlib.contextmanager
def node_daemon(build: str, work: str, mechanism: str = "auto"):
    """tgs-node with priority-share and a managed MPS daemon; yields its clients' environment."""
    socket = os.path.join(work, "node.sock")
    log = open(os.path.join(work, "node.log"), "w")
    node = subprocess.Popen([os.path.join(build, "bin", "tgs-node"), "--socket", socket, "--policy", "priority-share",
                             "--mps", "managed", "--opportunistic-mechanism", mechanism, "--log-level", "info"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            if node.poll() is not None:
                raise SystemExit(f"tgs-node ended at start (exit {node.returncode}); see {log.name}")
            with open(log.name) as f:
                if "listening on" in f.read():
                    break
            time.sleep(0.1)
        yield {"LD_PRELOAD": os.path.join(build, "lib", "libtgs-intercept.so"), "TGS_NODE_SOCKET": socket}
    finally:
        node.terminate()
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
        log.close()


def summarize(records: list) -> dict:
    cases = {}
    for r in records:
        if "production" not in r:
            continue
        c = cases.setdefault(r["case"], {"runs": 0, "production_survived": 0, "new_client_ok": 0, "errors": []})
        c["runs"] += 1
        if r.get("mechanism"):  # under tgs-node: how the node had the opportunistic client share
            c.setdefault("mechanisms", [])
            if r["mechanism"] not in c["mechanisms"]:
                c["mechanisms"].append(r["mechanism"])
        c["production_survived"] += bool(r["production"]["survived"])
        c["new_client_ok"] += bool(r.get("new_client_ok"))
        if r["production"].get("error") and r["production"]["error"] not in c["errors"]:
            c["errors"].append(r["production"]["error"])
    return {"cases": cases}


def print_table(summary: dict) -> None:
    print(f"{summary.get('device', '')}, driver {summary.get('driver', '')}: the production client after "
          "the opportunistic client's end")
    print(f"{'case':24} {'runs':>4} {'production survived':>20} {'new client ok':>14}  production's error"
          "  [the node's mechanism]")
    for case, c in summary["cases"].items():
        print(f"{case:24} {c['runs']:>4} {c['production_survived']:>20} {c['new_client_ok']:>14}  "
              f"{'; '.join(c['errors'])}" + (f"  [{'; '.join(c['mechanisms'])}]" if c.get("mechanisms") else ""))


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the cases against one MPS server")
    r.add_argument("--out", required=True, help="folder for cases.jsonl and summary.json")
    r.add_argument("--cases", type=lambda s: [c for c in s.split(",") if c], required=True,
                   help="comma-separated: " + ", ".join(CASE_KINDS) + " (the *-kernel ones as KIND-MS)")
    r.add_argument("--repeat", type=int, default=1, help="rounds of all cases (1)")
    r.add_argument("--watch-s", type=float, default=3.0, help="seconds production is watched after a case (3)")
    r.add_argument("--matrix", type=int, default=8192, help="production's matrix size (8192)")
    r.add_argument("--control", default="nvidia-cuda-mps-control")
    r.add_argument("--node", metavar="BUILD", help="run under tgs-node and its interposer from this build folder")
    r.add_argument("--node-mechanism", choices=["auto", "mps", "time-sliced"], default="auto",
                   help="with --node: tgs-node's --opportunistic-mechanism (auto)")
    r.add_argument("--max-s", type=float, default=400, help="no case starts later than this (400)")
    r.add_argument("--stuck-s", type=float, default=30,
                   help="seconds a client may take to launch, to end, or (a new client) to run its kernel before it "
                        "is looked at and killed (30)")
    c = sub.add_parser("client", help="(internal) one client process")
    c.add_argument("role", choices=["production", "opportunistic"])
    c.add_argument("--case", default="")
    c.add_argument("--matrix", type=int, default=8192)
    args = parser.parse_args(argv)
    if args.command == "run":
        for case in args.cases:
            parse_case(case)
        return cmd_run(args)
    return client_production(args) if args.role == "production" else client_opportunistic(args)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except argparse.ArgumentTypeError as e:
        print(f"mps_faults.py: {e}", file=sys.stderr)
        sys.exit(2)
