# SPDX-License-Identifier: Apache-2.0
"""Does unified memory that one process evicts become allocatable by another process?

Two processes on GPU 0, driver API only (ctypes on libcuda.so.1; no PyTorch):
  A holds SIZE of managed memory (cuMemAllocManaged), B allocates plain device memory
  (cuMemAlloc_v2) in chunks ("balloon") until it fails or reaches a hard cap.

  0. B: free F0.
  1. A: managed SIZE (only if SIZE <= 0.5 x free), accessed-by the GPU, prefetched there and
     written; free F1.
  2. B: balloon up to F1 + SIZE + 2 GiB -> X1 bytes, free F1b; B frees all. X1 well above F1
     means the driver evicted A's resident managed pages to satisfy B (question b). A then
     prefetches back to the GPU and times it: a long prefetch means its pages had been moved out.
  3. A: evict (preferred location host, prefetch to host), timed; free F2 (does cuMemGetInfo
     report the evicted memory free? question a, first half).
  4. B: balloon up to F2 + SIZE + 2 GiB -> X2; B frees all. X2 near F1 + SIZE means the evicted
     memory is allocatable by another process (question a).
  5. A: restore (preferred location GPU, prefetch there), timed; A frees.

Prints one JSON line with every number and a short summary. Exits 0 when the protocol ran to
the end, 1 otherwise (the JSON line then has "error" and the numbers gathered until then).
Usage: python3 bench/gpu/memory_reuse.py [--gib 8] [--timeout-s 120]
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import signal
import sys
import time

GIB = 1 << 30
CHUNK = GIB
SMALL_CHUNK = 256 << 20
CU_MEM_ATTACH_GLOBAL = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_LOCATION_TYPE_HOST = 2
CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
CU_MEM_ADVISE_SET_ACCESSED_BY = 5
CUDA_ERROR_OUT_OF_MEMORY = 2


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.code = code
        self.name = name


class Driver:
    """The driver calls this probe needs, each checked."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self.lib = lib
        u64, sz, i, u = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
        p = ctypes.POINTER
        sig = {
            "cuInit": [u],
            "cuDriverGetVersion": [p(i)],
            "cuDeviceGet": [p(i), i],
            "cuDeviceGetName": [ctypes.c_char_p, i, i],
            "cuDevicePrimaryCtxRetain": [p(ctypes.c_void_p), i],
            "cuDevicePrimaryCtxRelease_v2": [i],
            "cuCtxSetCurrent": [ctypes.c_void_p],
            "cuCtxSynchronize": [],
            "cuMemGetInfo_v2": [p(sz), p(sz)],
            "cuMemAllocManaged": [p(u64), sz, u],
            "cuMemAdvise_v2": [u64, sz, i, CUmemLocation],
            "cuMemPrefetchAsync_v2": [u64, sz, CUmemLocation, u, ctypes.c_void_p],
            "cuMemAlloc_v2": [p(u64), sz],
            "cuMemFree_v2": [u64],
            "cuMemsetD8_v2": [u64, ctypes.c_ubyte, sz],
            "cuGetErrorName": [i, p(ctypes.c_char_p)],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        self.dev = 0
        self.ctx = None

    def error_name(self, code: int) -> str:
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
        return f"CUresult {code}"

    def call(self, name: str, *args) -> int:
        """Calls `name`; raises CudaError unless it returns CUDA_SUCCESS."""
        r = getattr(self.lib, name)(*args)
        if r != 0:
            raise CudaError(name, r, self.error_name(r))
        return r

    def try_call(self, name: str, *args) -> int:
        return getattr(self.lib, name)(*args)

    def init(self) -> None:
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        self.dev = dev.value
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.dev)
        self.ctx = ctx
        self.call("cuCtxSetCurrent", ctx)

    def release(self) -> None:
        if self.ctx is not None:
            self.try_call("cuDevicePrimaryCtxRelease_v2", self.dev)
            self.ctx = None

    def mem_info(self) -> tuple:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def device_name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, self.dev)
        return buf.value.decode()

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def device_location(self) -> CUmemLocation:
        return CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, self.dev)

    @staticmethod
    def host_location() -> CUmemLocation:
        return CUmemLocation(CU_MEM_LOCATION_TYPE_HOST, 0)


def serve(conn, handle) -> None:
    """A worker's loop: answer the coordinator's commands with handle(cmd) -> dict until "quit",
    a closed pipe or 600 s of silence. A failing command is reported, not fatal: the coordinator
    decides."""
    try:
        while True:
            if not conn.poll(600):
                return
            cmd = conn.recv()
            if cmd["op"] == "quit":
                return
            try:
                reply = {"ok": True, **handle(cmd)}
            except Exception as e:
                reply = {"ok": False, "error": str(e)}
            conn.send(reply)
    except (EOFError, OSError, KeyboardInterrupt):
        pass


def role_a(conn, size: int) -> None:
    """The managed-memory holder."""
    drv = Driver()
    ptr = None

    def move(location, advise: bool) -> dict:
        """Prefetch the allocation to `location` (with it as preferred location when `advise`)."""
        t = time.perf_counter()
        if advise:
            drv.call("cuMemAdvise_v2", ptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, location)
        drv.call("cuMemPrefetchAsync_v2", ptr, size, location, 0, None)
        drv.call("cuCtxSynchronize")
        return {"seconds": time.perf_counter() - t, "free": drv.mem_info()[0]}

    def handle(cmd) -> dict:
        nonlocal ptr
        op = cmd["op"]
        if op == "init":
            drv.init()
            return {"device": drv.device_name(), "driver": drv.driver_version()}
        if op == "alloc":
            free, total = drv.mem_info()
            if size > 0.5 * free:
                raise RuntimeError(f"SAFETY: {size} bytes of managed memory is more than half of the "
                                   f"{free} bytes free; not allocating (lower --gib)")
            p = ctypes.c_uint64()
            drv.call("cuMemAllocManaged", ctypes.byref(p), size, CU_MEM_ATTACH_GLOBAL)
            ptr = p.value
            drv.call("cuMemAdvise_v2", ptr, size, CU_MEM_ADVISE_SET_ACCESSED_BY, drv.device_location())
            t = time.perf_counter()
            drv.call("cuMemPrefetchAsync_v2", ptr, size, drv.device_location(), 0, None)
            drv.call("cuMemsetD8_v2", ptr, 0x5A, size)
            drv.call("cuCtxSynchronize")
            return {"free_before": free, "total": total, "populate_s": time.perf_counter() - t,
                    "free": drv.mem_info()[0]}
        if op == "to_device":
            return move(drv.device_location(), advise=False)
        if op == "evict":
            return move(drv.host_location(), advise=True)
        if op == "restore":
            return move(drv.device_location(), advise=True)
        if op == "free":
            if ptr is not None:
                drv.call("cuMemFree_v2", ptr)
                ptr = None
            return {"free": drv.mem_info()[0]}
        raise RuntimeError(f"unknown op {op}")

    try:
        serve(conn, handle)
    finally:
        if ptr is not None:
            drv.try_call("cuMemFree_v2", ptr)
        drv.release()


def role_b(conn) -> None:
    """The plain-memory balloon."""
    drv = Driver()
    held = []

    def release_all() -> None:
        while held:
            drv.try_call("cuMemFree_v2", held.pop()[0])

    def handle(cmd) -> dict:
        op = cmd["op"]
        if op == "init":
            drv.init()
            free, total = drv.mem_info()
            return {"free": free, "total": total}
        if op == "balloon":
            cap = int(cmd["cap"])
            got, stop = 0, None
            t = time.perf_counter()
            for chunk in (CHUNK, SMALL_CHUNK):  # 1 GiB steps, then 256 MiB to the edge
                stop = None
                while got + chunk <= cap:
                    p = ctypes.c_uint64()
                    r = drv.try_call("cuMemAlloc_v2", ctypes.byref(p), chunk)
                    if r != 0:
                        stop = drv.error_name(r)
                        if r != CUDA_ERROR_OUT_OF_MEMORY:
                            raise CudaError("cuMemAlloc_v2", r, stop)
                        break
                    held.append((p.value, chunk))
                    got += chunk
                    drv.call("cuMemsetD8_v2", p.value, 0xA5, chunk)  # really use it
            drv.call("cuCtxSynchronize")
            return {"bytes": got, "cap": cap, "stopped_by": stop or "cap", "seconds": time.perf_counter() - t,
                    "free": drv.mem_info()[0]}
        if op == "release":
            release_all()
            drv.call("cuCtxSynchronize")
            return {"free": drv.mem_info()[0]}
        if op == "info":
            return {"free": drv.mem_info()[0]}
        raise RuntimeError(f"unknown op {op}")

    try:
        serve(conn, handle)
    finally:
        release_all()
        drv.release()


class Peer:
    def __init__(self, name: str, conn, proc, timeout: float) -> None:
        self.name, self.conn, self.proc, self.timeout = name, conn, proc, timeout

    def ask(self, op: str, **kw) -> dict:
        self.conn.send({"op": op, **kw})
        deadline = time.monotonic() + self.timeout
        while not self.conn.poll(0.5):
            if not self.proc.is_alive():
                raise RuntimeError(f"process {self.name} died (exit code {self.proc.exitcode}) during '{op}'")
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {self.name}: no answer to '{op}' in {self.timeout:.0f} s")
        reply = self.conn.recv()
        if not reply.get("ok"):
            raise RuntimeError(f"process {self.name}, '{op}': {reply.get('error')}")
        return reply

    def stop(self) -> None:
        try:
            self.conn.send({"op": "quit"})
        except (OSError, ValueError):
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def on_term(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=8.0, help="managed memory held by process A, GiB")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="longest wait for one step")
    args = parser.parse_args()
    size = int(args.gib * GIB) // (2 << 20) * (2 << 20)  # whole 2 MiB pages
    signal.signal(signal.SIGTERM, on_term)
    ctx = mp.get_context("spawn")  # never fork after CUDA init
    res = {"size": size, "gib": args.gib}
    peers = []
    rc = 1
    try:
        b_conn, b_child = ctx.Pipe()
        b = Peer("B", b_conn, ctx.Process(target=role_b, args=(b_child,), name="balloon-B"), args.timeout_s)
        b.proc.start()
        peers.append(b)
        a_conn, a_child = ctx.Pipe()
        a = Peer("A", a_conn, ctx.Process(target=role_a, args=(a_child, size), name="managed-A"), args.timeout_s)
        a.proc.start()
        peers.append(a)

        r = b.ask("init")
        res.update(F0=r["free"], total=r["total"])
        r = a.ask("init")
        res.update(device=r["device"], driver=r["driver"])
        r = a.ask("alloc")
        res.update(F1=r["free"], populate_s=r["populate_s"])

        cap = res["F1"] + size + 2 * GIB
        r = b.ask("balloon", cap=cap)
        res.update(X1=r["bytes"], X1_cap=cap, X1_stopped_by=r["stopped_by"], F1b=r["free"])
        res["F1_after_release"] = b.ask("release")["free"]
        r = a.ask("to_device")  # safe: B holds nothing now
        res.update(back_to_device_s=r["seconds"], back_to_device_gbps=size / r["seconds"] / 1e9,
                   F1_again=r["free"])

        r = a.ask("evict")
        res.update(eviction_s=r["seconds"], eviction_gbps=size / r["seconds"] / 1e9, F2=r["free"])
        cap = res["F2"] + size + 2 * GIB
        r = b.ask("balloon", cap=cap)
        res.update(X2=r["bytes"], X2_cap=cap, X2_stopped_by=r["stopped_by"], F2b=r["free"])
        res["F2_after_release"] = b.ask("release")["free"]

        r = a.ask("restore")
        res.update(restore_s=r["seconds"], restore_gbps=size / r["seconds"] / 1e9, F3=r["free"])
        res["F_end"] = a.ask("free")["free"]
        rc = 0
    except (Exception, KeyboardInterrupt) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        for p in reversed(peers):
            p.stop()

    margin = GIB  # chunk granularity plus slack
    if all(k in res for k in ("F1", "X1")):
        res["driver_evicts_resident_managed_for_other_process"] = res["X1"] > res["F1"] + margin
    if all(k in res for k in ("F1", "F2")):
        res["mem_get_info_reports_evicted_free"] = res["F2"] - res["F1"] >= 0.9 * size
    if all(k in res for k in ("F1", "X2")):
        res["evicted_allocatable_by_other_process"] = res["X2"] >= res["F1"] + 0.9 * size - margin
    print(json.dumps(res), flush=True)

    g = lambda k: f"{res[k] / GIB:.2f} GiB" if isinstance(res.get(k), (int, float)) else "-"
    print(f"reuse probe on {res.get('device', '?')} (driver {res.get('driver', '?')}), A holds {args.gib:g} GiB managed")
    print(f"  free: F0 {g('F0')}, A resident F1 {g('F1')}, after eviction F2 {g('F2')}")
    print(f"  B got X1 {g('X1')} while A was resident, X2 {g('X2')} after A's eviction")
    if "eviction_s" in res:
        print(f"  eviction {res['eviction_s']:.2f} s ({res['eviction_gbps']:.1f} GB/s)", end="")
    if "restore_s" in res:
        print(f", restore {res['restore_s']:.2f} s ({res['restore_gbps']:.1f} GB/s)", end="")
    print()
    yn = lambda k: {True: "yes", False: "no"}.get(res.get(k), "not measured")
    print(f"  (b) driver evicts A's resident managed memory for B's cuMemAlloc: "
          f"{yn('driver_evicts_resident_managed_for_other_process')}"
          + (f" (A's prefetch back took {res['back_to_device_s']:.2f} s)" if "back_to_device_s" in res else ""))
    print(f"  (a) evicted memory allocatable by another process: {yn('evicted_allocatable_by_other_process')}; "
          f"cuMemGetInfo reports it free: {yn('mem_get_info_reports_evicted_free')}")
    if "error" in res:
        print(f"  ERROR: {res['error']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
