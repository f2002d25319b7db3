#!/usr/bin/env python3
"""kill -9 of a rank at a random moment of a sharded save: what a resume then loads, hydro against
torch.distributed.checkpoint (DCP), 2 ranks of FSDP2 (fully_shard) on the CPU with gloo.

Each trial, for each variant in random order: 2 rank processes build the same sharded model and
AdamW (python_fsdp_bench.sharded_state), save step 0 (untimed: the first save sets up what the
next ones reuse) and step 1 until durable, take one more training step, then save step 2. At a random moment of that save (uniform over the time step 1's took) one rank,
drawn at random, gets SIGKILL; the other gets it at a second random moment after the first (as
Slurm ends the rest of a step whose task died, or the job's end does).
  hydro: rt.save(step) in sync_any mode; hydro async: rt.save(step) in async mode (each rank's
    background thread writes, the ranks commit), rt.wait_idle() for step 1;
  DCP: dcp.save of get_state_dict(model, optim) into step-N/, then the directories fsynced.
What a resume loads, in this process, with no process group (dcp.load into one unsharded model and
AdamW): hydro's checkpoint chosen as the Runtime chooses it (the newest whose manifest and every
rank's files check, hydro.dcp.Reader); DCP's newest directory, and with a fallback to step-1 when
the newest fails to load. The verdict compares every loaded tensor with the ranks' own digests of
step 1 and step 2: "step 1", "step 2", "fails" (nothing loads) or "wrong" (it loads other bits).
Usage: .venv/bin/python bench/python_fsdp_kill_bench.py [DIR] [--trials N] [--mb MB]"""
import argparse
import hashlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import python_fsdp_bench as fsdp_bench

RANKS = 2
KINDS = ("hydro", "hydro async", "dcp")


def digest(state):
    """The bytes of every tensor of {"model": ..., "optimizer": ...}, in DCP's flattened order by name;
    a DTensor whole (every rank calls this for a sharded state)."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    flat, _ = flatten_state_dict(state)
    h = hashlib.sha256()
    for fqn in sorted(flat):
        v = flat[fqn]
        if not isinstance(v, torch.Tensor):
            continue
        v = (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().contiguous()
        h.update(fqn.encode())
        h.update(v.numpy().tobytes() if v.dtype != torch.bfloat16 else v.view(torch.int16).numpy().tobytes())
    return h.hexdigest()[:16]


def state_of(model, opt):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optimizer": osd}


def one_more_step(model, opt):
    model(torch.randn(4, fsdp_bench.WIDTH, generator=torch.Generator().manual_seed(2))).sum().backward()
    opt.step()


# ---- a rank of a trial ----

def rank(kind, d, mb):
    """Saves steps 0 and 1 until durable; prints step 1's time and the digests of step 1 and step 2 (rank 0);
    waits for a line, then saves step 2; waits to be killed."""
    warnings.simplefilter("ignore")
    rt = None
    if kind != "dcp":
        import hydro
        rt = hydro.Runtime()
    dist.init_process_group("gloo")
    model, opt = fsdp_bench.sharded_state(mb)
    if rt is not None:
        rt.track("model", model)
        rt.track("optimizer", opt)

    def save(step):
        if rt is not None:
            rt.save(step)
            rt.wait_idle()
            return
        step_dir = os.path.join(d, f"step-{step}")
        dcp.save(state_of(model, opt), checkpoint_id=step_dir)
        if dist.get_rank() == 0:
            fsdp_bench.fsync_dir(step_dir)
            fsdp_bench.fsync_dir(d)

    save(0)  # the first save sets up what the next reuse (DCP's plan, hydro's buffers): not timed
    t = time.perf_counter()
    save(1)
    took = time.perf_counter() - t
    first = digest(state_of(model, opt))
    one_more_step(model, opt)
    print(took, first, digest(state_of(model, opt)), flush=True)
    sys.stdin.readline()
    save(2)
    sys.stdin.readline()  # killed here at the latest


# ---- the parent ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trial(kind, d, mb, rng):
    """Both ranks of one trial, killed during their second save; {digest: step} of their states."""
    os.makedirs(d)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRO_", "SLURM_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(RANKS), HYDRO_CKPT_DIR=d,
               HYDRO_CKPT_MODE="async" if kind == "hydro async" else "sync_any", HYDRO_STORE_TIMEOUT="30",
               OMP_NUM_THREADS="1")
    args = [sys.executable, os.path.abspath(__file__), d, "--rank", kind, "--mb", str(mb)]
    with open(os.path.join(os.path.dirname(d), "ranks.log"), "w") as err:
        procs = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
                 for r in range(RANKS)]
    lines = [p.stdout.readline().split() for p in procs]
    if not all(lines):
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        with open(os.path.join(os.path.dirname(d), "ranks.log")) as err:
            sys.exit(f"a {kind} rank failed:\n{err.read()}")
    took, first, second = float(lines[0][0]), lines[0][1], lines[0][2]
    for p in procs:
        p.stdin.write("\n")
        p.stdin.flush()
    first_kill = rng.uniform(0, took)
    victims = rng.sample(procs, len(procs))
    time.sleep(first_kill)
    os.killpg(victims[0].pid, signal.SIGKILL)
    time.sleep(rng.uniform(0, took - first_kill))
    for p in victims[1:]:
        os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()
        p.stdin.close()
        p.stdout.close()
    return {first: "step 1", second: "step 2"}


def unsharded(mb):
    """A template of the whole state for dcp.load: the model and AdamW, unsharded, with a state."""
    layers = max(1, mb * (1 << 20) // 4 // 3 // (fsdp_bench.WIDTH * fsdp_bench.WIDTH))
    model = torch.nn.Sequential(*(torch.nn.Linear(fsdp_bench.WIDTH, fsdp_bench.WIDTH, bias=False)
                                  for _ in range(layers)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    one_more_step(model, opt)
    return state_of(model, opt)


def load(mb, want, **where):
    state = unsharded(mb)
    try:
        dcp.load(state, **where)
    except (Exception, CheckpointException):  # noqa: BLE001 -- DCP's is a BaseException; any failure counts
        return "fails"
    return want.get(digest(state), "wrong")


def verdicts(kind, d, mb, want):
    if kind != "dcp":
        import hydro.dcp
        try:
            reader = hydro.dcp.Reader(d)
        except Exception:  # noqa: BLE001 -- no checkpoint that checks
            return {kind: "fails"}
        return {kind: load(mb, want, storage_reader=reader)}
    newest = os.path.join(d, "step-2") if os.path.isdir(os.path.join(d, "step-2")) else os.path.join(d, "step-1")
    got = load(mb, want, checkpoint_id=newest)
    fallback = load(mb, want, checkpoint_id=os.path.join(d, "step-1")) if got == "fails" else got
    return {"dcp newest": got, "dcp fallback": fallback}


def main():
    p = argparse.ArgumentParser(prog="python_fsdp_kill_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="where the trials' checkpoints go (default: a new directory under /tmp)")
    p.add_argument("--trials", type=int, default=100, help="trials of each variant (default 100)")
    p.add_argument("--mb", type=int, default=10, help="the whole state in MB, both ranks' together (default 10)")
    p.add_argument("--rank", choices=KINDS, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank:
        return rank(a.rank, a.dir, a.mb)
    warnings.simplefilter("ignore")  # dcp.load without a process group says so at every load
    logging.getLogger("torch.distributed.checkpoint").setLevel(logging.CRITICAL)  # and a failed one logs tracebacks
    top = a.dir or tempfile.mkdtemp(prefix="hydro-fsdp-kill.")
    rng = random.Random()
    counts = {k: {} for k in ("hydro", "hydro async", "dcp newest", "dcp fallback")}
    for i in range(a.trials):
        for kind in rng.sample(KINDS, len(KINDS)):
            d = os.path.join(top, "trial", kind.replace(" ", "-"))
            want = trial(kind, d, a.mb, rng)
            for k, v in verdicts(kind, d, a.mb, want).items():
                counts[k][v] = counts[k].get(v, 0) + 1
            shutil.rmtree(d)
    print(f"kill -9 of a rank at a random moment of the second save, 2 ranks of FSDP2, {a.mb} MB, "
          f"{a.trials} trials each; what a resume then loads:")
    print(f"{'variant':<14} {'step 1':>7} {'step 2':>7} {'fails':>7} {'wrong':>7}")
    for k, c in counts.items():
        print(f"{k:<14} " + " ".join(f"{c.get(v, 0):>7}" for v in ("step 1", "step 2", "fails", "wrong")))
    if not a.dir:
        shutil.rmtree(top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
