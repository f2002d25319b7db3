#!/usr/bin/env python3
"""hydro's pause from Python, side by side in one run, against HydroJobSche's design as the peer.

The peer, written from its description: Python forward and backward hooks on every leaf module
that owns parameters; each checks a flag that SIGUSR1/SIGUSR2 handlers (Python's `signal` module)
set, and sleep-polls every 1 ms while paused.

  1. step overhead, armed and not paused: no hydro vs hydro (a Runtime: handlers and watcher, no
     operator callback until a pause) vs hydro watching a process group's timeout (its hang
     watch, hydro/hang_watch.h), both while steps end and between two steps (an evaluation: no
     step for over half the timeout, when the watch probes for operators) vs the peer's hooks;
     interleaved blocks, medians of the paired ratios;
  2. pause latency, signal sent -> the training thread blocked (hydro: at an operator; peer: in
     its hook's sleep loop), p50/p99;
  3. resume latency, signal sent -> the training thread running again, p50/p99;
  4. the floor under any resume on this machine: the same signals waking a thread that sleeps.
Models: A = MLP 64-256-256-10, batch 64; B = MLP 64-64-10, batch 16; SGD with momentum, one thread
(torch's and OpenBLAS's). Training runs on the main thread, as a user's script does; another
process sends the signals, as Slurm does.
Usage: .venv/bin/python bench/python_pause_bench.py [--blocks N] [--pauses N]"""
import argparse
import ctypes
import datetime
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

import torch

import hydro
from hydro import _C


def model(dims, batch):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step():
        x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    return net, step


class Peer:
    """HydroJobSche's pause: hooks on every leaf module with parameters, a flag, 1 ms sleep-polls."""

    def __init__(self, net):
        self.paused = False
        self.blocked_ns = self.released_ns = 0
        self.handles = []
        for m in net.modules():
            if not list(m.children()) and list(m.parameters(recurse=False)):
                self.handles.append(m.register_forward_pre_hook(lambda mod, inp: self.check()))
                self.handles.append(m.register_full_backward_hook(lambda mod, gi, go: self.check()))
        self.old = [signal.signal(signal.SIGUSR1, self.on_pause), signal.signal(signal.SIGUSR2, self.on_resume)]

    def on_pause(self, *_):
        self.paused = True

    def on_resume(self, *_):
        self.paused = False

    def check(self):
        if self.paused:
            self.blocked_ns = time.monotonic_ns()
            while self.paused:
                time.sleep(0.001)
            self.released_ns = time.monotonic_ns()

    def close(self):
        for h in self.handles:
            h.remove()
        signal.signal(signal.SIGUSR1, self.old[0])
        signal.signal(signal.SIGUSR2, self.old[1])


def time_steps(step, n):
    t = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t) / n


def overhead(name, dims, batch, blocks, steps):
    net, step = model(dims, batch)
    for _ in range(50):
        step()
    ratios = {"hydro": [], "watch": [], "probing": [], "peer": []}
    for _ in range(blocks):
        order = ["none", "hydro", "watch", "probing", "peer"]
        random.shuffle(order)
        t = {}
        for v in order:
            if v == "hydro":
                with hydro.Runtime():
                    t[v] = time_steps(step, steps)
            elif v == "watch":
                with hydro.Runtime() as rt:
                    rt._watch_collectives(datetime.timedelta(minutes=30))  # as a process group's creation does
                    rt.step_end(1)  # the watch counts from the first step's end
                    t[v] = time_steps(step, steps)
            elif v == "probing":
                with hydro.Runtime() as rt:
                    rt._watch_collectives(datetime.timedelta(seconds=1))
                    rt.step_end(1)
                    time.sleep(0.6)  # past half the timeout: the watch probes for operators from now on
                    t[v] = time_steps(step, steps)  # an evaluation: operators, no step's end
            elif v == "peer":
                p = Peer(net)
                t[v] = time_steps(step, steps)
                p.close()
            else:
                t[v] = time_steps(step, steps)
        for v in ratios:
            ratios[v].append(t[v] / t["none"])
    h, w, e, p = (statistics.median(ratios[v]) for v in ("hydro", "watch", "probing", "peer"))
    print(f"{name}: step overhead armed, not paused: hydro {100 * (h - 1):+.2f}%  hydro watching a group's "
          f"timeout {100 * (w - 1):+.2f}% (between steps: {100 * (e - 1):+.2f}%)  peer {100 * (p - 1):+.2f}%"
          f"  ({blocks} blocks of {steps} steps)", flush=True)


SENDER = r"""
import os, random, signal, sys, time
pid, pauses, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
for _ in range(pauses):
    time.sleep(0.002 + rng.random() * 0.01)  # mid-step, somewhere
    t0 = time.monotonic_ns()
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.005)
    t1 = time.monotonic_ns()
    os.kill(pid, signal.SIGUSR2)
    time.sleep(0.005)
    print(t0, t1, flush=True)  # to the collector, after the cycle: nothing competes with it
    sys.stdin.readline()  # the collector's go for the next one
"""


def start_sender(pauses, seed):
    """The SENDER process, signalling this one; its lines are each cycle's send times."""
    return subprocess.Popen([sys.executable, "-c", SENDER, str(os.getpid()), str(pauses), str(seed)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def next_cycle(sender):
    sender.stdin.write("\n")
    sender.stdin.flush()


def latencies(variant, pauses, seed):
    """Pause and resume latency (µs lists) with training on the main thread.

    The signals come from another process, as from Slurm's slurmstepd: it stamps the clock (the
    system-wide CLOCK_MONOTONIC), signals, and sleeps. The times the signals took hold are stamped
    by the paused thread itself. A collector thread hears each cycle's send times only once the
    cycle is over (5 ms each way, well past the slowest pause), so nothing in this process competes
    with what is measured: a controller thread here would hold the GIL and a CPU at the very moment
    the signal lands, which Slurm never does."""
    net, step = model([64, 256, 256, 10], 64)
    rt = hydro.Runtime() if variant == "hydro" else None
    peer = Peer(net) if variant == "peer" else None
    stop, out = threading.Event(), {"pause": [], "resume": [], "late": 0}

    def state():
        if rt is not None:
            s = _C.pause_state()
            return s["last_block_ns"], s["last_release_ns"]
        return peer.blocked_ns, peer.released_ns

    def collect():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})
        sender = start_sender(pauses, seed)
        try:
            for line in sender.stdout:
                t0, t1 = map(int, line.split())
                blocked, released = state()
                if t0 < blocked < t1 < released:
                    out["pause"].append((blocked - t0) / 1000)
                    out["resume"].append((released - t1) / 1000)
                else:
                    out["late"] += 1  # not paused within 5 ms: counted, reported
                next_cycle(sender)
        finally:
            sender.wait()
            stop.set()

    c = threading.Thread(target=collect)
    c.start()
    while not stop.is_set():
        step()
    c.join()
    if rt is not None:
        rt.close()
    if peer is not None:
        peer.close()
    return out


def wake_floor(pauses, seed):
    """The floor under any resume here: the same sender's signals woke a thread asleep in
    sigwaitinfo (µs list, signal sent -> the thread running Python again)."""
    sigs = {signal.SIGUSR1, signal.SIGUSR2}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    while signal.sigtimedwait(sigs, 0):  # none left over from the runs before
        pass
    sender = start_sender(pauses, seed)
    woke, us = {}, []
    try:
        for _ in range(pauses):
            for _ in range(2):
                signo = signal.sigwaitinfo(sigs).si_signo
                woke[signo] = time.monotonic_ns()
            t0, t1 = map(int, sender.stdout.readline().split())
            us.append((woke[signal.SIGUSR2] - t1) / 1000)
            next_cycle(sender)
    finally:
        sender.wait()
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return us


def one_blas_thread():
    """OpenBLAS (Debian's torch links it) keeps its own thread pool: set it to one thread through
    the library torch loaded, found in this process's maps."""
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "openblas" in line}
    for lib in libs:
        fn = getattr(ctypes.CDLL(lib), "openblas_set_num_threads", None)
        if fn is not None:
            fn(1)
            return
    print("note: no OpenBLAS in this process; BLAS threads left as they are")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=15, help="interleaved blocks per model (default 15)")
    ap.add_argument("--pauses", type=int, default=200, help="pauses per variant and round (default 200)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    # One BLAS thread too: OpenBLAS's own pool ignores torch.set_num_threads, and its idle threads
    # spin on the other CPU, where hydro's watcher thread then waits for a time slice.
    one_blas_thread()
    overhead("A", [64, 256, 256, 10], 64, a.blocks, 200)
    overhead("B", [64, 64, 10], 16, a.blocks, 1000)
    got = {v: {"pause": [], "resume": [], "late": 0} for v in ("hydro", "peer")}
    for r in range(2):  # interleaved rounds
        for v in ("hydro", "peer"):
            for k, x in latencies(v, a.pauses // 2, seed=r).items():
                got[v][k] += x
    for k in ("pause", "resume"):
        h, p = got["hydro"][k], got["peer"][k]
        print(f"A: {k} latency µs: hydro p50 {pct(h, .5):.0f} p99 {pct(h, .99):.0f}   "
              f"peer p50 {pct(p, .5):.0f} p99 {pct(p, .99):.0f}   p99 hydro/peer {pct(h, .99) / pct(p, .99):.2f}")
    f = wake_floor(a.pauses // 2, seed=0)
    print(f"floor: a thread asleep, woken by a signal from another process: p50 {pct(f, .5):.0f} p99 {pct(f, .99):.0f} µs")
    for v in ("hydro", "peer"):
        if got[v]["late"]:
            print(f"A: {v}: {got[v]['late']} of {a.pauses} pauses did not take hold within 5 ms (not in the figures)")


if __name__ == "__main__":
    main()
