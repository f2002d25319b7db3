#!/usr/bin/python3
"""hydro's pause from Python, side by side in one run, against HydroJobSche's design as the peer.

The peer, written from its description: Python forward and backward hooks on every leaf module
that owns parameters; each checks a flag that SIGUSR1/SIGUSR2 handlers (Python's `signal` module)
set, and sleep-polls every 1 ms while paused.

  1. step overhead, armed and not paused: no hydro vs hydro (a Runtime: handlers and watcher, no
     operator callback until a pause) vs the peer's hooks; interleaved blocks, medians of the
     paired ratios;
  2. pause latency, signal sent -> the training thread blocked (hydro: at an operator; peer: in
     its hook's sleep loop), p50/p99;
  3. resume latency, signal sent -> the training thread running again, p50/p99.
Models: A = MLP 64-256-256-10, batch 64; B = MLP 64-64-10, batch 16; SGD with momentum, 1 thread.
Training runs on the main thread, as a user's script does; a controller thread sends the signals.
Usage: PYTHONPATH=build/python bench/python_pause_bench.py [--blocks N] [--pauses N]"""
import argparse
import os
import random
import signal
import statistics
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
    ratios = {"hydro": [], "peer": []}
    for _ in range(blocks):
        order = ["none", "hydro", "peer"]
        random.shuffle(order)
        t = {}
        for v in order:
            if v == "hydro":
                with hydro.Runtime():
                    t[v] = time_steps(step, steps)
            elif v == "peer":
                p = Peer(net)
                t[v] = time_steps(step, steps)
                p.close()
            else:
                t[v] = time_steps(step, steps)
        ratios["hydro"].append(t["hydro"] / t["none"])
        ratios["peer"].append(t["peer"] / t["none"])
    h, p = statistics.median(ratios["hydro"]), statistics.median(ratios["peer"])
    print(f"{name}: step overhead armed, not paused: hydro {100 * (h - 1):+.2f}%  peer {100 * (p - 1):+.2f}%"
          f"  ({blocks} blocks of {steps} steps)", flush=True)


def latencies(variant, pauses):
    """Pause and resume latency (µs lists) with training on the main thread."""
    net, step = model([64, 256, 256, 10], 64)
    rt = hydro.Runtime() if variant == "hydro" else None
    peer = Peer(net) if variant == "peer" else None
    stop, out = threading.Event(), {"pause": [], "resume": []}

    def state():
        if rt is not None:
            s = _C.pause_state()
            return s["threads_waiting"] == 1, s["last_block_ns"], s["last_release_ns"]
        return peer.blocked_ns > peer.released_ns, peer.blocked_ns, peer.released_ns

    def control():
        # As from Slurm (another process): the kernel hands the signal to a thread of the training
        # process that does not block it, the main thread first; never to this sender.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})
        rng = random.Random(2)
        try:
            for _ in range(pauses):
                time.sleep(0.002 + rng.random() * 0.01)  # mid-step, somewhere
                # After each signal the controller sleeps before it looks: the times are stamped by
                # the paused thread itself, and a sender polling meanwhile would only compete for the
                # two cores with what is measured (Slurm sends from another process, and waits).
                t0 = time.monotonic_ns()
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.003)
                while not state()[0]:
                    time.sleep(0.001)
                out["pause"].append((state()[1] - t0) / 1000)
                t1 = time.monotonic_ns()
                os.kill(os.getpid(), signal.SIGUSR2)
                time.sleep(0.003)
                while state()[2] < t1:
                    time.sleep(0.001)
                out["resume"].append((state()[2] - t1) / 1000)
        finally:
            stop.set()

    c = threading.Thread(target=control)
    c.start()
    while not stop.is_set():
        step()
    c.join()
    if rt is not None:
        rt.close()
    if peer is not None:
        peer.close()
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=15, help="interleaved blocks per model (default 15)")
    ap.add_argument("--pauses", type=int, default=200, help="pauses per variant and round (default 200)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    overhead("A", [64, 256, 256, 10], 64, a.blocks, 200)
    overhead("B", [64, 64, 10], 16, a.blocks, 1000)
    got = {"hydro": {"pause": [], "resume": []}, "peer": {"pause": [], "resume": []}}
    for _ in range(2):  # interleaved rounds
        for v in ("hydro", "peer"):
            r = latencies(v, a.pauses // 2)
            for k in r:
                got[v][k] += r[k]
    for k in ("pause", "resume"):
        h, p = got["hydro"][k], got["peer"][k]
        print(f"A: {k} latency µs: hydro p50 {pct(h, .5):.0f} p99 {pct(h, .99):.0f}   "
              f"peer p50 {pct(p, .5):.0f} p99 {pct(p, .99):.0f}   p99 hydro/peer {pct(h, .99) / pct(p, .99):.2f}")


if __name__ == "__main__":
    main()
