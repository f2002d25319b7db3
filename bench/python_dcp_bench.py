#!/usr/bin/env python3
"""hydro's async checkpoint from Python against torch.distributed.checkpoint.async_save (DCP: one
process, no process group, its default FileSystemWriter), side by side in one run, interleaved in
random order per round, each variant after sync(); medians of per-round ratios.

State: a model of large parameters plus AdamW's state after one step, at 10, 100 and 1000 MB in
all (as in python_checkpoint_bench.py). hydro: one Runtime, HYDRO_CKPT_MODE=async, HYDRO_KEEP_LAST=1
(its pruning of the previous checkpoint runs in its background write); DCP: a new directory per
save, the previous one removed outside the time. Both on the same disk, under DIR.
  stall: what the training thread waits for. hydro: rt.save(step) (after rt.wait_idle() on the
    previous save, untimed); DCP: async_save({"model": model, "optimizer": opt}, checkpoint_id=dir)
    until it returns its future (it stages a copy of every tensor into new CPU memory first);
  time to durable, from the start of the save: hydro: save + rt.wait_idle() (every file fsynced,
    manifest, rename, `latest`, directories fsynced); DCP (default): async_save + future.result(),
    as DCP gives it; its default sync_files=True fsyncs every data file and .metadata.tmp before
    renaming it to .metadata, but fsyncs no directory, so the files' names (and the checkpoint
    directory's own entry) are not yet durable; DCP (+fsync): the same + fsync of the checkpoint
    directory and of its parent, the least that makes it durable;
  kill -9 during the save (--kill-trials, at --kill-mb): a child builds the state (seeded), saves
    step 1 to durability, changes every tensor, starts saving step 2 and gets SIGKILL at a random
    moment in [0, step 1's save time]. Then this process loads what a user would resume from, into
    fresh objects: hydro: a new Runtime on the same HYDRO_CKPT_DIR, rt.resume(); DCP: the newest
    directory (step 2's if it exists, else step 1's), dcp.load(); and counts: loads step 1's or
    step 2's exact tensors (SHA-256 of every parameter and optimizer tensor), fails to load, loads
    but wrong. For DCP also "fallback": step 1's directory when the newest one fails to load (a
    user who knows which directory was cut short). hydro.dcp: the child's async_save goes through
    hydro.dcp.Writer into one root, and the parent's dcp.load through hydro.dcp.Reader.
Usage: .venv/bin/python bench/python_dcp_bench.py [DIR] [--sizes 10,100,1000] [--rounds N]
       [--kill-trials N] [--kill-mb MB]"""
import argparse
import hashlib
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import hydro
from python_bench_state import fsync_path, state

SEED = 20240611
STEPS = (1, 2)


def tensors(model, opt):
    """Every parameter, then each one's optimizer state (by key), in a fixed order."""
    params = list(model.parameters())
    return params + [t for p in params for _, t in sorted(opt.state[p].items()) if torch.is_tensor(t)]


def digest(model, opt):
    h = hashlib.sha256()
    for t in tensors(model, opt):
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


@torch.no_grad()
def bump(model, opt):
    """Step 2's state: every tensor changed."""
    for t in tensors(model, opt):
        t.add_(1)


def dcp_save(model, opt, d):
    return dcp.async_save({"model": model, "optimizer": opt}, checkpoint_id=d)


def dcp_fsync_dirs(d):
    """What DCP leaves undone for durability: the directory's entries and its own entry."""
    fsync_path(d, directory=True)
    fsync_path(os.path.dirname(d), directory=True)


def runtime(model, opt, root):
    os.environ.update(HYDRO_CKPT_DIR=root, HYDRO_CKPT_MODE="async", HYDRO_KEEP_LAST="1")
    rt = hydro.Runtime()
    rt.track("model", model)
    rt.track("optimizer", opt)
    return rt


def two_phase(start, finish):
    """(stall, durable) in s: start() returns what finish() takes."""
    t = time.perf_counter()
    x = start()
    stall = time.perf_counter() - t
    finish(x)
    return stall, time.perf_counter() - t


class Variants:
    """The three saves of one size, each returning (stall, end) after its untimed preparation."""

    def __init__(self, model, opt, rt, top):
        self.model, self.opt, self.rt, self.top = model, opt, rt, top
        self.step = 0
        os.makedirs(os.path.join(top, "dcp"))

    def hydro(self):
        self.rt.wait_idle()
        self.step += 1
        os.sync()
        return two_phase(lambda: self.rt.save(self.step), lambda _: self.rt.wait_idle())

    def dcp_dir(self):
        shutil.rmtree(os.path.join(self.top, "dcp"))
        os.makedirs(os.path.join(self.top, "dcp"))
        self.step += 1
        d = os.path.join(self.top, "dcp", f"step-{self.step}")
        os.sync()
        return d

    def dcp(self):
        d = self.dcp_dir()
        return two_phase(lambda: dcp_save(self.model, self.opt, d), lambda f: f.result())

    def dcp_fsync(self):
        d = self.dcp_dir()
        return two_phase(lambda: dcp_save(self.model, self.opt, d),
                         lambda f: (f.result(), dcp_fsync_dirs(d)))


def bench(mb, rounds, top):
    """{measure: (hydro median s, DCP median s, median of per-round hydro/DCP)} for one size."""
    model, opt = state(mb)
    os.makedirs(top)
    with runtime(model, opt, os.path.join(top, "hydro")) as rt:
        v = Variants(model, opt, rt, top)
        fns = {"hydro": v.hydro, "dcp": v.dcp, "dcp+fsync": v.dcp_fsync}
        for fn in fns.values():
            fn()  # warm-up, untimed: hydro's buffers, DCP's first imports and threads
        t = {k: [] for k in fns}
        for _ in range(rounds):
            for k in random.sample(list(fns), len(fns)):
                t[k].append(fns[k]())
        rt.wait_idle()
    shutil.rmtree(os.path.join(top, "dcp"), ignore_errors=True)

    def row(a, b, i, j):
        return (statistics.median(x[i] for x in t[a]), statistics.median(x[j] for x in t[b]),
                statistics.median(x[i] / y[j] for x, y in zip(t[a], t[b])))

    r = {"stall": row("hydro", "dcp", 0, 0), "done": row("hydro", "dcp", 1, 1),
         "durable": row("hydro", "dcp+fsync", 1, 1)}
    print(f"{mb:5d} MB: stall hydro {r['stall'][0] * 1e3:.1f} ms, DCP {r['stall'][1] * 1e3:.1f} ms | "
          f"durable hydro {r['durable'][0] * 1e3:.1f} ms, DCP done {r['done'][1] * 1e3:.1f} ms, "
          f"DCP+fsync {r['durable'][1] * 1e3:.1f} ms ({rounds} rounds)", flush=True)
    return r


# ---- kill -9 during the save: the child ----

def child(kind, d, mb):
    """Saves step 1 to durability, prints its time, waits for a line, then saves step 2."""
    warnings.simplefilter("ignore")
    torch.manual_seed(SEED)
    model, opt = state(mb)
    if kind == "hydro":
        rt = runtime(model, opt, d)
        save = lambda step: rt.save(step)
        durable = lambda step, _: rt.wait_idle()
    elif kind == "hydro.dcp":
        import hydro.dcp
        save = lambda step: dcp.async_save({"model": model, "optimizer": opt},
                                           storage_writer=hydro.dcp.Writer(d, step))
        durable = lambda step, f: f.result()
    else:
        save = lambda step: dcp_save(model, opt, os.path.join(d, f"step-{step}"))
        durable = lambda step, f: (f.result(), dcp_fsync_dirs(os.path.join(d, f"step-{step}")))
    t = time.perf_counter()
    durable(1, save(1))
    print(time.perf_counter() - t, flush=True)
    bump(model, opt)
    sys.stdin.readline()
    durable(2, save(2))
    sys.stdin.readline()  # killed here at the latest


# ---- kill -9 during the save: the parent ----

def expected(mb):
    """{digest: step} of the child's two states."""
    torch.manual_seed(SEED)
    model, opt = state(mb)
    first = digest(model, opt)
    bump(model, opt)
    return {first: 1, digest(model, opt): 2}


def verdict(model, opt, want):
    got = digest(model, opt)
    return f"step {want[got]}" if got in want else "wrong"


def resume_hydro(d, mb, want):
    os.environ["HYDRO_CKPT_DIR"] = d
    model, opt = state(mb)
    try:
        with hydro.Runtime() as rt:
            rt.track("model", model)
            rt.track("optimizer", opt)
            if rt.resume() == 0:
                return "fails"
    except Exception:  # noqa: BLE001 - any failure to load counts as one
        return "fails"
    return verdict(model, opt, want)


def load_dcp(path, mb, want):
    model, opt = state(mb)
    try:
        dcp.load({"model": model, "optimizer": opt}, checkpoint_id=path)
    except (Exception, CheckpointException):  # DCP's is a BaseException; any failure counts
        return "fails"
    return verdict(model, opt, want)


def resume_hydro_dcp(d, mb, want):
    """dcp.load through hydro.dcp.Reader: the newest checkpoint whose every file checks."""
    import hydro.dcp
    model, opt = state(mb)
    try:
        dcp.load({"model": model, "optimizer": opt}, storage_reader=hydro.dcp.Reader(d))
    except (Exception, CheckpointException):  # noqa: BLE001 - any failure to load counts as one
        return "fails"
    return verdict(model, opt, want)


def resume_dcp(d, mb, want):
    """(newest directory's verdict, with fallback to step 1's)."""
    newest = os.path.join(d, "step-2")
    if not os.path.isdir(newest):
        newest = os.path.join(d, "step-1")
    first = load_dcp(newest, mb, want)
    if first == "fails" and newest.endswith("step-2"):
        return first, load_dcp(os.path.join(d, "step-1"), mb, want)
    return first, first


def kill_trial(kind, d, mb, rng):
    """One child, killed at a random moment of its second save."""
    os.makedirs(d)
    env = dict(os.environ, HYDRO_CKPT_DIR=d, HYDRO_CKPT_MODE="async")
    log = os.path.join(os.path.dirname(d), "child.log")  # hydro's lines, one per save: not on the terminal
    with open(log, "w") as err:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), d, "--child", kind, "--kill-mb", str(mb)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                             start_new_session=True)
    line = p.stdout.readline()
    if not line:
        p.wait()
        with open(log) as err:
            sys.exit(f"the {kind} child failed (exit {p.returncode}):\n{err.read()}")
    took = float(line)
    delay = rng.uniform(0, took)
    p.stdin.write("\n")
    p.stdin.flush()
    time.sleep(delay)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    p.stdin.close()
    p.stdout.close()


def kill_trials(trials, mb, top):
    """{variant: {verdict: count}} over `trials` kills of each kind, interleaved."""
    want, rng = expected(mb), random.Random()  # resume() restores `random`: a private generator
    counts = {k: {} for k in ("hydro", "hydro.dcp", "dcp newest", "dcp fallback")}
    resumes = {"hydro": lambda d: {"hydro": resume_hydro(d, mb, want)},
               "hydro.dcp": lambda d: {"hydro.dcp": resume_hydro_dcp(d, mb, want)},
               "dcp": lambda d: dict(zip(["dcp newest", "dcp fallback"], resume_dcp(d, mb, want)))}
    for i in range(trials):
        for kind in rng.sample(list(resumes), len(resumes)):
            d = os.path.join(top, "kill", f"{kind}-{i}")
            kill_trial(kind, d, mb, rng)
            for k, g in resumes[kind](d).items():
                counts[k][g] = counts[k].get(g, 0) + 1
            shutil.rmtree(d)
    return counts


def print_table(results, kills, trials, mb):
    print("\n  size | stall ms: hydro    DCP  hydro/DCP | durable ms: hydro  DCP done  DCP+fsync"
          "  hydro/done  hydro/+fsync")
    for size, r in results.items():
        print(f"{size:4d} MB | {r['stall'][0] * 1e3:14.1f} {r['stall'][1] * 1e3:6.1f} {r['stall'][2]:9.2f}x |"
              f" {r['durable'][0] * 1e3:17.1f} {r['done'][1] * 1e3:9.1f} {r['durable'][1] * 1e3:10.1f}"
              f" {r['done'][2]:10.2f}x {r['durable'][2]:12.2f}x")
    if kills:
        print(f"\nkill -9 during the second save, {trials} trials each, {mb} MB:")
        print("  variant       | loads step 1  loads step 2  fails to load  loads but wrong")
        for k, c in kills.items():
            print(f"  {k:13s} | {c.get('step 1', 0):12d}  {c.get('step 2', 0):12d}  {c.get('fails', 0):13d}"
                  f"  {c.get('wrong', 0):15d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="/tmp",
                    help="a new temporary directory is made (and removed) in it; default /tmp")
    ap.add_argument("--sizes", default="10,100,1000", help="state sizes in MB (default 10,100,1000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7; 3 at 1000 MB and above)")
    ap.add_argument("--kill-trials", type=int, default=100, help="kill -9 trials of each kind (default 100)")
    ap.add_argument("--kill-mb", type=int, default=10, help="state size of the kill trials (default 10)")
    ap.add_argument("--child", choices=["hydro", "hydro.dcp", "dcp"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.child:
        return child(a.child, a.dir, a.kill_mb)
    warnings.simplefilter("ignore")  # DCP's "experimental" notices
    logging.disable(logging.WARNING)  # DCP's tracebacks on the root logger when a load fails
    top = tempfile.mkdtemp(prefix="hydro-dcp-bench-", dir=a.dir)
    print(f"directory {top}, torch {torch.__version__}")
    try:
        results = {mb: bench(mb, a.rounds if mb < 1000 else min(a.rounds, 3), os.path.join(top, str(mb)))
                   for mb in (int(s) for s in a.sizes.split(",") if s)}
        kills = kill_trials(a.kill_trials, a.kill_mb, top) if a.kill_trials else None
        print_table(results, kills, a.kill_trials, a.kill_mb)
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
