#!/usr/bin/env python3
"""hydro-example-loop, in Python: an MLP trained with SGD on seeded synthetic data, under hydro.

The lines marked "hydro" are all a user adds to a loop of their own. Under `srun -n N` (N > 1) the
ranks train with DistributedDataParallel over Gloo (the lines marked "ranks"), or with --fsdp a model
sharded by FSDP2 (each rank holds and checkpoints its own shards). Prints 'step N loss X' and
finally 'weights_digest=<hex>'; checkpoints go to $HYDRO_CKPT_DIR. The same flags and output as the
C++ hydro-example-loop (but --fsdp and --workers), so the Slurm path tests run either."""
import argparse
import contextlib
import ctypes
import datetime
import functools
import hashlib
import os
import sys
import time

import torch
import torch.nn.functional as F

import hydro  # hydro


def parse():
    p = argparse.ArgumentParser(prog="loop.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--hidden", type=int, default=512, help="hidden layer width (default 512)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=1234, help="seed for the weights and the data (default 1234)")
    p.add_argument("--step-ms", type=int, default=0, help="sleep this long after each step (the weights do not change)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps (default 10)")
    p.add_argument("--step-timeout", type=float, default=0,
                   help="arm a watchdog timer of this many seconds around each step (under hydro-launch "
                        "--watchdog-file: a step that hangs longer is killed and the job requeued); 0 = none")
    p.add_argument("--pg-timeout", type=float, default=1800,
                   help="with several ranks: seconds a collective may wait for a peer (default 1800); "
                        "under --hydro-pause, time the job is held does not count (hydro.groups)")
    p.add_argument("--rank-skew-ms", type=int, default=0,
                   help="the last rank sleeps this long before each backward pass, so that the others "
                        "wait for it inside the collective (the weights do not change)")
    p.add_argument("--rank-skew-end-ms", type=int, default=0,
                   help="the last rank runs torch operators this long after each optimizer step, so "
                        "that the others wait for it in the step end's vote, where it pauses at an "
                        "operator (the weights do not change)")
    p.add_argument("--workers", type=int, default=0,
                   help="read the batches through hydro.DataLoader with this many worker processes, from a "
                        "dataset of seeded samples whose noise the workers draw (default 0: each batch is "
                        "drawn in the training process)")
    p.add_argument("--fsdp", action="store_true",
                   help="with several ranks: shard the model with FSDP2 (fully_shard, on the CPU) instead of "
                        "DistributedDataParallel")
    return p.parse_args()


def busy_in_operators(ms):
    """Work in torch operators for `ms` milliseconds, whose results are dropped."""
    a, end = torch.ones(32, 32), time.monotonic() + ms / 1000
    while time.monotonic() < end:
        torch.mm(a, a)


def digest(model):
    """The weights' bytes, hashed (no numpy: pip's torch does not bring it). A sharded weight is
    gathered whole first (every rank calls this)."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        v = (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().contiguous()
        h.update(ctypes.string_at(v.data_ptr(), v.numel() * v.element_size()))
    return h.hexdigest()[:16]


class Samples(torch.utils.data.Dataset):
    """--workers: sample i is the same in every run, plus noise that a DataLoader worker draws from
    torch's generator (hydro.DataLoader seeds it per sample: the same noise after a resume)."""

    def __init__(self, seed, teacher, size=4096):
        self.seed, self.teacher, self.size = seed, teacher, size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        x = torch.randn(64, generator=torch.Generator().manual_seed(self.seed * 1000003 + i))
        x = x + 0.01 * torch.randn(64)
        return x, (x @ self.teacher).argmax()


def draw(a, step, rank, teacher):
    """A step's batch without --workers. Several ranks: each draws it from a generator of (seed, step,
    rank); one rank (rank None): from the training's own generator, which checkpoints hold."""
    g = torch.Generator().manual_seed(a.seed * 1000003 + step * 1009 + rank) if rank is not None else None
    x = torch.randn(a.batch, 64, generator=g)
    return x, (x @ teacher).argmax(1)


def batches(loader):
    """Batch after batch, epoch after epoch, from where a resumed loader left off."""
    epoch = loader.sampler.epoch
    while True:
        loader.sampler.set_epoch(epoch)  # the resumed epoch keeps its place
        yield from loader
        epoch += 1


def shard(net, world_size):
    """FSDP2: each Linear, then the whole model, sharded over every rank (on the CPU, with Gloo)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(net, mesh=mesh)


def main():
    a = parse()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(64, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, a.hidden),
                              torch.nn.ReLU(), torch.nn.Linear(a.hidden, 10))
    teacher = torch.randn(64, 10)
    env = hydro.dist_env()  # rank, world size, master: torchrun's or the Slurm step's   # ranks
    ranks = env["world_size"] > 1
    if ranks:  # torch's own call, with the script's own timeout                          # ranks
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://{env['master_addr']}:{env['master_port']}", rank=env["rank"],
            world_size=env["world_size"], timeout=datetime.timedelta(seconds=a.pg_timeout))
    # find_unused_parameters: DDP keeps its first order of gradient buckets, which a resumed run
    # starts with too; bit-for-bit on 3 ranks or more needs it (hydro.Runtime.track warns).
    ddp = functools.partial(torch.nn.parallel.DistributedDataParallel, find_unused_parameters=True)  # ranks
    model = (shard(net, env["world_size"]) if a.fsdp else ddp(net)) if ranks else net  # ranks
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    loader = hydro.DataLoader(Samples(a.seed, teacher), batch_size=a.batch, shuffle=True, num_workers=a.workers,
                              seed=a.seed) if a.workers else None  # keeps its place (hydro)

    rt = hydro.Runtime()                                                      # hydro
    rt.track("model", model)                                                  # hydro
    rt.track("optimizer", opt)                                                # hydro
    if loader:
        rt.track("loader", loader)                                            # hydro
    first = step = rt.resume()                                                # hydro
    data = batches(loader) if loader else None
    while step < a.steps:
        # A watchdog timer around the whole step, the checkpoint included (none without --step-timeout).
        timer = hydro.watchdog.expires(a.step_timeout, scope="step") if a.step_timeout else contextlib.nullcontext()
        with timer:
            x, y = next(data) if data else draw(a, step, env["rank"] if ranks else None, teacher)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if a.rank_skew_ms and env["rank"] == env["world_size"] - 1:
                time.sleep(a.rank_skew_ms / 1000)
            loss.backward()
            opt.step()
            if a.rank_skew_end_ms and env["rank"] == env["world_size"] - 1:
                busy_in_operators(a.rank_skew_end_ms)
            step += 1
            if step == first + 1:
                hydro._C.log_line("hydro-example-loop", f"first step done: step {step}")
            if step % a.log_every == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
            if a.step_ms:
                time.sleep(a.step_ms / 1000)
            if not rt.step_end(step):                                         # hydro
                end(rt, ranks, hydro.EXIT_REQUEUE)                            # hydro
    # One write: print() writes the text and the newline apart, and under srun the ranks' lines,
    # written at the same moment, would run together.
    sys.stdout.write(f"weights_digest={digest(net)}\n")
    sys.stdout.flush()
    end(rt, ranks, 0)


def end(rt, ranks, status):
    """Closes the Runtime and ends the program with `status`. With several ranks, it ends without
    the interpreter's finalization, where a gloo thread that frees the last gathered tensor needs
    the GIL for the tensor's Python object and aborts the process (pytorch/pytorch#179291), and
    without destroy_process_group, which before torch 2.8 frees a gloo group with the GIL held
    while it waits for that thread, and so can hang for ever (pytorch/pytorch#154976)."""
    rt.close()
    if not ranks:
        sys.exit(status)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
