#!/usr/bin/env python3
"""What hydro's hold-proof process groups cost a 2-rank torch.distributed job (gloo, CPU), side by
side in one run against the same job without hydro.

The job: two processes on this machine, DistributedDataParallel over an MLP 256-1024-10, batch 64,
SGD, one thread each, a fixed number of steps. Two variants:
  hydro: HYDRO_PAUSE=on, `import hydro`, a hydro.Runtime made before init_process_group (each
    rank's Runtime a 1-rank one, HYDRO_CKPT_EVERY=0: no checkpoints), rt.step_end() each step; the
    group asks for a --timeout (default 1 s) shorter than the hold, which hydro watches in running
    time while torch's group gets hydro.groups.HOLD_PROOF;
  plain: no hydro, torch's init_process_group with a 3600 s timeout, so that it survives the hold.
Each round runs both variants, each once without a hold and once held, the four runs in random
order:
  1. step overhead: each rank's median step time (perf_counter around each step after a warm-up of
     20 steps) in the runs without a hold; hydro/plain per round, the median of those ratios;
  2. hold cost: the bench holds both ranks once, as Slurm suspends a job: SIGTSTP, SIGSTOP 0.2 s
     later, SIGCONT --hold seconds after that, at a random step after the warm-up. Each rank's
     extra = total with the hold - the time held (measured here, SIGTSTP to SIGCONT) - the total
     without it (same variant, same round); medians over rounds and ranks, and the median of the
     per-round, per-rank differences hydro - plain.
Nothing asserts on time. A worker that fails makes the bench print its stderr's end and exit 1.
Usage: PYTHONPATH=build/python .venv/bin/python bench/python_hold_bench.py
           [--rounds N] [--steps N] [--hold SECONDS] [--timeout SECONDS]"""
import argparse
import datetime
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WARM = 20          # steps before step times count and before a hold may come
PLAIN_TIMEOUT = 3600
VARIANTS = ("plain", "hydro")


# ---- the worker: one rank of the job ----

def worker(argv):
    """--worker VARIANT RANK PORT STEPS HOLD_AT TIMEOUT: runs the job's rank and prints
    "result median_step_s=... total_s=..." (HOLD_AT > 0: rank 0 prints "hold" after that step)."""
    variant, rank, port, steps, hold_at, timeout = argv[0], int(argv[1]), argv[2], int(argv[3]), int(argv[4]), float(argv[5])
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rt = None
    if variant == "hydro":
        import hydro
        rt = hydro.Runtime()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=timeout))
    step = training_step(torch)
    times = []
    start = time.perf_counter()
    for n in range(1, steps + 1):
        t = time.perf_counter()
        step(n)
        if rt is not None:
            rt.step_end(n)
        times.append(time.perf_counter() - t)
        if n == hold_at and rank == 0:
            print("hold", flush=True)
    total = time.perf_counter() - start
    print(f"result median_step_s={statistics.median(times[WARM:]):.9f} total_s={total:.6f}", flush=True)
    dist.barrier()  # both ranks done with the job's collectives before either tears its group down
    if rt is not None:
        rt.close()
    dist.destroy_process_group()


def training_step(torch):
    """One DDP step of the MLP on one of a few batches made up front."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    batches = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(8)]

    def step(n):
        x, y = batches[n % len(batches)]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    return step


# ---- the bench: starts the ranks, holds them, reads their results ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(variant, scratch, rank):
    """This environment without hydro's, Slurm's or torchrun's settings; hydro's for its variant."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HYDRO_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if variant == "hydro":
        env.update(HYDRO_PAUSE="on", HYDRO_CKPT_EVERY="0",
                   HYDRO_CKPT_DIR=tempfile.mkdtemp(prefix=f"r{rank}-", dir=scratch))
    return env


def start_ranks(variant, steps, hold_at, timeout, scratch):
    port = free_port()
    asked = timeout if variant == "hydro" else PLAIN_TIMEOUT
    return [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", variant, str(r), str(port),
                              str(steps), str(hold_at), str(asked)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=worker_env(variant, scratch, r))
            for r in range(2)]


def fail(what, ranks, outs=None):
    """Stops the ranks, prints what went wrong and each rank's stderr tail, exits 1."""
    for p in ranks:
        if p.poll() is None:
            p.kill()
    outs = outs or [p.communicate() for p in ranks]
    print(f"error: {what}", file=sys.stderr)
    for r, (p, (out, err)) in enumerate(zip(ranks, outs)):
        print(f"--- rank {r} (exit {p.returncode}) stdout tail:\n{out[-1000:]}--- stderr tail:\n{err[-3000:]}",
              file=sys.stderr)
    sys.exit(1)


def hold(ranks, seconds):
    """As Slurm suspends a job: SIGTSTP, SIGSTOP 0.2 s later, SIGCONT `seconds` after that.
    Returns the time held, first SIGTSTP to last SIGCONT."""
    t0 = time.perf_counter()
    for p in ranks:
        p.send_signal(signal.SIGTSTP)
    time.sleep(0.2)
    for p in ranks:
        p.send_signal(signal.SIGSTOP)
    time.sleep(seconds)
    for p in ranks:
        p.send_signal(signal.SIGCONT)
    return time.perf_counter() - t0


def results(ranks, limit, run):
    """Each rank's (median step s, total s) from its result line; fail() if one failed."""
    try:
        outs = [p.communicate(timeout=limit) for p in ranks]
    except subprocess.TimeoutExpired:
        fail(f"{run}: the ranks did not finish within {limit:.0f} s", ranks)
    if any(p.returncode != 0 for p in ranks):
        fail(f"{run}: a rank failed", ranks, outs)
    got = []
    for out, _ in outs:
        line = [l for l in out.splitlines() if l.startswith("result ")]
        if not line:
            fail(f"{run}: a rank printed no result line", ranks, outs)
        fields = dict(f.split("=") for f in line[-1].split()[1:])
        got.append((float(fields["median_step_s"]), float(fields["total_s"])))
    return got


def run_job(variant, a, held, scratch):
    """One run of the job; returns per rank (median step s, total s), and the time held (or 0)."""
    hold_at = random.randint(WARM + 1, a.steps - a.steps // 5) if held else 0
    ranks = start_ranks(variant, a.steps, hold_at, a.timeout, scratch)
    run = f"{variant}, " + (f"held after step {hold_at}" if held else "not held")
    took = 0.0
    if held:
        if ranks[0].stdout.readline().strip() != "hold":
            fail(f"{run}: rank 0 ended before the hold", ranks)
        took = hold(ranks, a.hold)
    return results(ranks, 120 + a.hold + a.steps, run), took


def one_round(a, scratch):
    """The four runs in random order: {(variant, held): (per-rank results, time held)}."""
    runs = [(v, h) for v in VARIANTS for h in (False, True)]
    random.shuffle(runs)
    return {(v, h): run_job(v, a, h, scratch) for v, h in runs}


def summarize(rounds, a):
    step = {v: [] for v in VARIANTS}
    ratios, extra, diffs = [], {v: [] for v in VARIANTS}, []
    for got in rounds:
        med = {v: statistics.mean(m for m, _ in got[(v, False)][0]) for v in VARIANTS}
        for v in VARIANTS:
            step[v].append(med[v])
        ratios.append(med["hydro"] / med["plain"])
        per_rank = {}
        for v in VARIANTS:
            (quiet, _), (loud, held) = got[(v, False)], got[(v, True)]
            per_rank[v] = [lt - held - qt for (_, qt), (_, lt) in zip(quiet, loud)]
            extra[v] += per_rank[v]
        diffs += [h - p for h, p in zip(per_rank["hydro"], per_rank["plain"])]
    ms = lambda x: 1000 * statistics.median(x)
    print(f"step time (median): plain {ms(step['plain']):.3f} ms, hydro {ms(step['hydro']):.3f} ms; "
          f"hydro overhead {100 * (statistics.median(ratios) - 1):+.2f}% (median of {len(ratios)} per-round ratios)")
    print(f"hold of {a.hold:g} s (+0.2 s SIGTSTP..SIGSTOP), extra time (median over rounds x ranks): "
          f"plain {ms(extra['plain']):+.1f} ms, hydro {ms(extra['hydro']):+.1f} ms; "
          f"hydro - plain {ms(diffs):+.1f} ms")


def print_round(i, got):
    parts = []
    for v in VARIANTS:
        (quiet, _), (loud, held) = got[(v, False)], got[(v, True)]
        parts.append(f"{v}: step {1000 * statistics.mean(m for m, _ in quiet):.3f} ms, total "
                     f"{max(t for _, t in quiet):.3f} s, held {held:.3f} s, extra "
                     + "/".join(f"{1000 * (lt - held - qt):+.0f}" for (_, qt), (_, lt) in zip(quiet, loud)) + " ms")
    print(f"round {i}: " + " | ".join(parts), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--steps", type=int, default=300, help=f"steps per run (default 300; more than {2 * WARM})")
    ap.add_argument("--hold", type=float, default=3.0, help="seconds between SIGSTOP and SIGCONT (default 3)")
    ap.add_argument("--timeout", type=float, default=1.0,
                    help="the hydro variant's asked process-group timeout, in s (default 1; under the hold)")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps <= 2 * WARM or a.hold < 0 or a.timeout <= 0:
        ap.error(f"need --rounds >= 1, --steps > {2 * WARM}, --hold >= 0, --timeout > 0")
    print(f"2 ranks, gloo, MLP 256-1024-10, batch 64; {a.rounds} rounds of {a.steps} steps, hold {a.hold:g} s, "
          f"hydro's asked timeout {a.timeout:g} s, plain's {PLAIN_TIMEOUT} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="hydro-hold-bench-") as scratch:
        rounds = []
        for i in range(1, a.rounds + 1):
            rounds.append(one_round(a, scratch))
            print_round(i, rounds[-1])
    summarize(rounds, a)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2:])
    else:
        main()
