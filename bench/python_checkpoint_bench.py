#!/usr/bin/env python3
"""hydro's checkpoints from Python, side by side in one run, interleaved in random order per round,
each variant after sync(); medians of per-round ratios.

State: a model of large parameters plus AdamW's state after one step (exp_avg, exp_avg_sq), at 10,
100 and 1000 MB in all. One Runtime per phase (sync, then async), as a job has one.
  durable save: hydro's rt.save() (the checkpoint-directory protocol: every file fsynced, manifest,
    rename, `latest`) against torch.save of the same two state_dicts + fsync of each file and of the
    directory (the least any durable save does);
  async stall: rt.save() with HYDRO_CKPT_MODE=async (what training waits for) against libc's memcpy
    of the same tensors into buffers allocated once, on one thread (the floor of any snapshot; hydro
    shares its copy with one helper thread where a CPU is free).
Usage: .venv/bin/python bench/python_checkpoint_bench.py [DIR] [--sizes 10,100,1000] [--rounds N]"""
import argparse
import ctypes
import os
import random
import shutil
import statistics
import time

import torch

import hydro
from python_bench_state import fsync_path, state


def torch_save_fsync(model, opt, d):
    os.makedirs(d, exist_ok=True)
    for name, obj in (("model.pt", model), ("optimizer.pt", opt)):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            torch.save(obj.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
    fsync_path(d, directory=True)


def memcpy(tensors, buffers):
    """libc's memcpy of each tensor into its buffer, on this thread: the floor of any snapshot."""
    for t, b in zip(tensors, buffers):
        ctypes.memmove(b.data_ptr(), t.data_ptr(), t.numel() * t.element_size())


def timed(fn, before=None):
    """fn()'s time, after before() (untimed) and sync(2)."""
    if before is not None:
        before()
    os.sync()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def runtime(model, opt, root, mode):
    os.environ.update(HYDRO_CKPT_DIR=root, HYDRO_CKPT_MODE=mode, HYDRO_KEEP_LAST="1")
    rt = hydro.Runtime()
    rt.track("model", model)
    rt.track("optimizer", opt)
    return rt


def interleaved(variants, rounds):
    """Each round runs every variant (fn, or (before, fn)) once, in random order; returns each one's
    times."""
    t = {k: [] for k in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for v in order:
            before, fn = variants[v] if isinstance(variants[v], tuple) else (None, variants[v])
            t[v].append(timed(fn, before))
    return t


def bench(mb, rounds, top):
    model, opt = state(mb)
    tensors = list(model.state_dict().values()) + [
        t for s in opt.state_dict()["state"].values() for t in s.values() if torch.is_tensor(t)]
    buffers = [torch.empty_like(t) for t in tensors]
    memcpy(tensors, buffers)  # touched once: reused, as hydro's are
    step = [0]

    def save(rt):
        step[0] += 1
        rt.save(step[0])

    # One Runtime per phase, as a job has one: its copy buffers are allocated at the first save (an
    # untimed warm-up here) and reused after. Each async save's background write is waited for
    # before the next variant runs, outside the time.
    with runtime(model, opt, os.path.join(top, "hydro"), "sync_any") as rt:
        save(rt)
        rt.wait_idle()
        # The previous save's pruning (a background thread, which save() waits for) is over before
        # the next is timed: two hydro saves can come back to back here, never in a training loop.
        t = interleaved({"hydro": (rt.wait_idle, lambda: save(rt)),
                         "torch": lambda: torch_save_fsync(model, opt, os.path.join(top, "torch"))}, rounds)
        rt.wait_idle()
    with runtime(model, opt, os.path.join(top, "async"), "async") as rt:
        save(rt)
        rt.wait_idle()

        def stall():
            took = timed(lambda: save(rt))
            rt.wait_idle()
            return took

        a = {"async": [], "memcpy": []}
        for _ in range(rounds):
            for v in random.sample(list(a), 2):
                a[v].append(stall() if v == "async" else timed(lambda: memcpy(tensors, buffers)))
        rt.wait_idle()
    t.update(a)
    ratio = lambda x, y: statistics.median(p / q for p, q in zip(t[x], t[y]))
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"{mb:5d} MB: hydro save {med['hydro']:.3f} s, torch.save+fsync {med['torch']:.3f} s, "
          f"hydro/torch {ratio('hydro', 'torch'):.2f}x | async stall {med['async'] * 1000:.1f} ms, "
          f"memcpy {med['memcpy'] * 1000:.1f} ms, stall/memcpy {ratio('async', 'memcpy'):.2f}x "
          f"({rounds} rounds)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="/var/tmp/hydro-bench-py", help="scratch directory (removed)")
    ap.add_argument("--sizes", default="10,100,1000", help="state sizes in MB (default 10,100,1000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7; 3 at 1000 MB and above)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir, mode=0o700)
    print(f"directory {a.dir}")
    for mb in (int(s) for s in a.sizes.split(",")):
        bench(mb, a.rounds if mb < 1000 else min(a.rounds, 3), a.dir)
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
