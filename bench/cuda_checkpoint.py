#!/usr/bin/env python3
"""The CUDA driver's process checkpoint (cuCheckpointProcess*) on a torch process: what it costs
and what it allows. Facts for gpu_release=full (issue 33); runs only where a GPU is lent.

  bench/cuda_checkpoint.py [--gib 1,8]

For each size, a child torch process fills that many GiB on the GPU and keeps an integer checksum.
This process (never a CUDA context of its own: cuInit only) then locks, checkpoints, restores and
unlocks the child by pid, and prints:
  - each step's time, and GiB/s for checkpoint and restore;
  - the GPU memory in use (nvidia-smi) before, while checkpointed, and after;
  - the child's resident host memory (VmRSS) before and while checkpointed;
  - whether another process can allocate the freed memory while the child is checkpointed;
  - whether the child's tensor is bit-for-bit the same after restore, and a matmul runs.
Then two questions the design turns on:
  - self: can a process lock and checkpoint itself?
  - stopped: can a SIGSTOPped process be locked (Slurm's SIGSTOP comes 2 s after SIGTSTP)?
"""
import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

CHILD = r'''
import ctypes, os, sys, threading, torch
gib = float(sys.argv[1])
g = torch.Generator(device="cuda").manual_seed(7)
x = torch.randn(int(gib * 2**30) // 4, device="cuda", generator=g)
def digest():
    return sum(int(c.sum(dtype=torch.int64)) for c in x.view(torch.int32).split(2**28))
before = digest()
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "verify":
        a = torch.randn(1024, 1024, device="cuda")
        ok = digest() == before and bool(torch.isfinite(a @ a).all())
        print("verified", ok, flush=True)
    elif cmd[0] == "self":
        cu = ctypes.CDLL("libcuda.so.1")
        args = (ctypes.c_uint64 * 8)()
        args[0] = 3000  # lock's timeoutMs
        out = []
        for name in ("Lock", "Checkpoint", "Restore", "Unlock"):
            rc = getattr(cu, "cuCheckpointProcess" + name)(os.getpid(), ctypes.byref(args))
            out.append(f"{name}={rc}")
            args[0] = 0
            if rc != 0:
                break
        print("self", " ".join(out), flush=True)
    elif cmd[0] == "exit":
        break
'''


class Driver:
    """The checkpoint calls, from a process with no CUDA context of its own."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        rc = self.cu.cuInit(0)
        if rc != 0:
            sys.exit(f"cuInit failed: {rc}")
        v = ctypes.c_int()
        self.cu.cuDriverGetVersion(ctypes.byref(v))
        self.version = v.value

    def call(self, name, pid, timeout_ms=0):
        args = (ctypes.c_uint64 * 8)()
        args[0] = timeout_ms
        t = time.perf_counter()
        rc = getattr(self.cu, "cuCheckpointProcess" + name)(pid, ctypes.byref(args))
        return rc, time.perf_counter() - t

    def state(self, pid):
        s = ctypes.c_int(-1)
        rc = self.cu.cuCheckpointProcessGetState(pid, ctypes.byref(s))
        return ["running", "locked", "checkpointed", "failed"][s.value] if rc == 0 else f"error {rc}"


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else -1


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


class Child:
    def __init__(self, gib):
        self.p = subprocess.Popen([sys.executable, "-c", CHILD, str(gib)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().split() == ["ready"], "child did not start"

    def ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        try:
            self.ask("exit")
        except BrokenPipeError:
            pass
        self.p.wait(timeout=60)


def can_allocate(gib):
    code = f"import torch; t = torch.empty(int({gib} * 2**30), dtype=torch.uint8, device='cuda'); print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return r.stdout.strip() == "ok"


def round_trip(drv, gib):
    c = Child(gib)
    pid = c.p.pid
    used0, rss0 = gpu_used_mib(), rss_mib(pid)
    rc_l, t_l = drv.call("Lock", pid, 10000)
    rc_c, t_c = drv.call("Checkpoint", pid)
    used1, rss1, st = gpu_used_mib(), rss_mib(pid), drv.state(pid)
    free_gib = max(1, int((used0 - used1) / 1024) - 1)
    other = can_allocate(free_gib) if rc_c == 0 else False
    rc_r, t_r = drv.call("Restore", pid)
    rc_u, t_u = drv.call("Unlock", pid)
    used2 = gpu_used_mib()
    verified = c.ask("verify")
    c.close()
    print(f"{gib:g} GiB: lock {rc_l} {t_l:.3f}s, checkpoint {rc_c} {t_c:.3f}s ({gib / t_c:.2f} GiB/s), "
          f"restore {rc_r} {t_r:.3f}s ({gib / t_r:.2f} GiB/s), unlock {rc_u} {t_u:.3f}s; state while "
          f"checkpointed: {st}")
    print(f"  GPU used MiB: before {used0}, checkpointed {used1}, after {used2}; child VmRSS MiB: "
          f"before {rss0}, checkpointed {rss1}; another process allocated {free_gib} GiB meanwhile: "
          f"{other}; child after restore: {verified}")


def stopped(drv):
    c = Child(1)
    pid = c.p.pid
    os.kill(pid, signal.SIGSTOP)
    time.sleep(0.5)
    res = []
    th = threading.Thread(target=lambda: res.append(drv.call("Lock", pid, 5000)), daemon=True)
    th.start()
    th.join(10)
    if res:
        print(f"stopped: lock of a SIGSTOPped process (timeoutMs 5000) -> rc {res[0][0]} after {res[0][1]:.3f}s")
    else:
        print("stopped: lock of a SIGSTOPped process (timeoutMs 5000) did not return in 10 s")
    os.kill(pid, signal.SIGCONT)
    th.join(20)
    if res:
        print(f"  after SIGCONT: lock rc {res[0][0]} after {res[0][1]:.3f}s, state {drv.state(pid)}")
        if res[0][0] == 0:
            drv.call("Unlock", pid)
    print(f"  then: {c.ask('verify')}")
    # The order hydro would use: checkpointed while running, then stopped, continued, restored.
    rc_l, _ = drv.call("Lock", pid, 10000)
    rc_c, _ = drv.call("Checkpoint", pid)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(1)
    os.kill(pid, signal.SIGCONT)
    rc_r, t_r = drv.call("Restore", pid)
    rc_u, _ = drv.call("Unlock", pid)
    print(f"checkpoint, SIGSTOP, SIGCONT, restore: lock {rc_l} checkpoint {rc_c} restore {rc_r} "
          f"({t_r:.3f}s) unlock {rc_u}; {c.ask('verify')}")
    c.close()


def self_checkpoint():
    c = Child(1)
    result = []
    t = threading.Thread(target=lambda: result.append(c.ask("self")), daemon=True)
    t.start()
    t.join(30)
    print(f"self: {result[0] if result else 'no answer in 30 s (hung)'}")
    if result:
        print(f"  afterwards: {c.ask('verify')}")
        c.close()
    else:
        c.p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", default="1,8", help="sizes in GiB, comma-separated (default 1,8)")
    ap.add_argument("--only", choices=["sizes", "self", "stopped"], help="run one part alone")
    a = ap.parse_args()
    drv = Driver()
    print(f"driver API version {drv.version}")
    if a.only in (None, "sizes"):
        for gib in a.gib.split(","):
            round_trip(drv, float(gib))
    if a.only in (None, "self"):
        self_checkpoint()
    if a.only in (None, "stopped"):
        stopped(drv)


if __name__ == "__main__":
    main()
