#!/usr/bin/env python3
"""hydro's checkpoint of a sharded model against torch.distributed.checkpoint (DCP), side by side in
one run: FSDP2 (fully_shard) on the CPU with gloo, RANKS processes on this machine, the two
interleaved in random order per round, medians of per-round ratios.

State: Linear layers of 1024 x 1024 sharded over the ranks, plus AdamW's state after one step, MB in
all (AdamW holds two more copies of the weights). Each rank holds 1/RANKS of it and writes only that.
  save until durable (the slowest rank's time, from a barrier): hydro: rt.save(step) in sync_any
    mode (each rank writes its shards into the checkpoint, fsyncs them, the ranks commit it, `latest`
    moves, directories fsynced); DCP: dcp.save of get_state_dict(model, optim), as DCP's docs show,
    with its FileSystemWriter (data files and .metadata fsynced), plus an fsync of the checkpoint directory
    and of its parent, the least that makes its names durable;
  load (the slowest rank's): hydro: rt.resume() (each rank checks the checksums of its own shard
    and reads its own file; the model and the optimizer filled through torch's set_*_state_dict); DCP: dcp.load into the model's and the optimizer's state dicts, then
    set_model_state_dict and set_optimizer_state_dict. Both read what the page cache holds.
Usage: .venv/bin/python bench/python_fsdp_bench.py [DIR] [--ranks N] [--mb MB] [--rounds N]"""
import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

WIDTH = 1024


def parse():
    p = argparse.ArgumentParser(prog="python_fsdp_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="where the checkpoints go (default: a new directory under /tmp)")
    p.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    p.add_argument("--mb", type=int, default=100, help="the whole state in MB, every rank's together (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    return p.parse_args()


def sharded_state(mb):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    layers = max(1, mb * (1 << 20) // 4 // 3 // (WIDTH * WIDTH))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).sum().backward()
    opt.step()
    return model, opt


def slowest(fn):
    """fn()'s time on the slowest rank, every rank starting together."""
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Variants:
    def __init__(self, model, opt, rt, top):
        self.model, self.opt, self.rt, self.top = model, opt, rt, top
        self.step = 0
        self.dcp_last = None

    def hydro_save(self):
        self.step += 1
        self.rt.save(self.step)

    def hydro_load(self):
        self.rt.resume()

    def dcp_save(self):
        import torch.distributed.checkpoint as dcp
        if dist.get_rank() == 0 and self.dcp_last:
            shutil.rmtree(self.dcp_last)  # the previous round's, outside the time
        self.step += 1
        d = os.path.join(self.top, f"dcp-{self.step}")
        self.dcp_last = d

        def save():
            from torch.distributed.checkpoint.state_dict import get_state_dict
            msd, osd = get_state_dict(self.model, self.opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=d)
            if dist.get_rank() == 0:
                fsync_dir(d)
                fsync_dir(self.top)
        return save

    def dcp_load(self):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        msd, osd = get_state_dict(self.model, self.opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=self.dcp_last)
        set_state_dict(self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def worker(a):
    import hydro
    rt = hydro.Runtime()
    dist.init_process_group("gloo")
    model, opt = sharded_state(a.mb)
    rt.track("model", model)
    rt.track("optimizer", opt)
    v = Variants(model, opt, rt, a.dir)
    rng = random.Random(1)
    rows = {"save until durable": [], "load": []}
    for _ in range(a.rounds + 1):  # the first round warms both up and is not counted
        order = ["hydro", "dcp"]
        rng.shuffle(order)
        save, load = {}, {}
        for kind in order:
            dist.barrier()
            if kind == "hydro":
                save[kind] = slowest(v.hydro_save)
                load[kind] = slowest(v.hydro_load)
            else:
                save[kind] = slowest(v.dcp_save())
                load[kind] = slowest(v.dcp_load)
        rows["save until durable"].append(save)
        rows["load"].append(load)
    rt.close()
    if dist.get_rank() == 0:
        shard_mb = a.mb / a.ranks
        print(f"FSDP2 on the CPU, {a.ranks} ranks, {a.mb} MB in all ({shard_mb:.0f} MB a rank), {a.rounds} rounds; "
              "medians, the slowest rank's time")
        print(f"{'measure':<20} {'hydro ms':>10} {'DCP ms':>10} {'hydro/DCP':>10}")
        for name, runs in rows.items():
            runs = runs[1:]
            h = statistics.median(r["hydro"] for r in runs) * 1000
            d = statistics.median(r["dcp"] for r in runs) * 1000
            ratio = statistics.median(r["hydro"] / r["dcp"] for r in runs)
            print(f"{name:<20} {h:>10.1f} {d:>10.1f} {ratio:>10.2f}")
    dist.destroy_process_group()


def spawn(a):
    top = a.dir or tempfile.mkdtemp(prefix="hydro-fsdp-bench.")
    os.makedirs(top, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRO_", "SLURM_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(a.ranks), HYDRO_KEEP_LAST="1",
               HYDRO_CKPT_DIR=os.path.join(top, "hydro"), HYDRO_CKPT_MODE="sync_any", OMP_NUM_THREADS="1")
    args = [sys.executable, os.path.abspath(__file__), top, "--ranks", str(a.ranks), "--mb", str(a.mb),
            "--rounds", str(a.rounds)]
    procs = [subprocess.Popen(args, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(a.ranks)]
    rc = max(p.wait() for p in procs)
    if not a.dir:
        shutil.rmtree(top)
    return rc


if __name__ == "__main__":
    a = parse()
    sys.exit(worker(a) if "RANK" in os.environ else spawn(a))
