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
    hydro.dcp: the same dcp.save with hydro as its storage layer (hydro.dcp.Writer: each rank's
    file hashed and fsynced, the coordinator's .metadata, manifest, rename and `latest`);
  load (the slowest rank's), with every file of the checkpoint in the page cache, then with none
    (page_cache()): hydro: rt.resume() (each rank checks the checksums of its own shard
    and reads its own file; the model and the optimizer filled through torch's set_*_state_dict);
    DCP: dcp.load into the model's and the optimizer's state dicts, then set_model_state_dict and
    set_optimizer_state_dict; hydro.dcp: the same with hydro.dcp.Reader (every rank checks every
    file's checksum first);
  async_save, DCP's and through hydro.dcp.Writer: the stall (until dcp.async_save returns, the
    state staged in host memory) and the time until durable (its future's result, plus DCP's
    directory fsyncs as above);
  Runtime async (a second Runtime, HYDRO_CKPT_MODE=async, against DCP's async_save again): the
    stall (until rt.save(step) returns: every rank's shards captured into reused host buffers) and
    the time until durable (rt.wait_idle(): written, fsynced and committed by the ranks); then
    the same with HYDRO_ASYNC_COPY=behind (rt.save(step) returns before the copies are made, which
    the next optimizer step waits for): the stall, when the copies are made, until durable.
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


def page_cache(path, warm):
    """Every file under `path` read into the page cache (warm), or dropped from it (cold: as on the
    node a requeued job resumes on; the files are fsynced, so clean). Rank 0 does it, the others
    wait. hydro writes big files past the page cache (O_DIRECT) and DCP through it, so a load right
    after the save would read hydro's from the disk and DCP's from memory."""
    if dist.get_rank() == 0:
        for root, _, files in os.walk(path):
            for name in files:
                try:
                    fd = os.open(os.path.join(root, name), os.O_RDONLY)
                except FileNotFoundError:  # an older checkpoint, pruned meanwhile
                    continue
                try:
                    if warm:
                        while os.read(fd, 8 << 20):
                            pass
                    else:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    dist.barrier()


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

    def dcp_state(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict
        msd, osd = get_state_dict(self.model, self.opt)
        return {"model": msd, "optim": osd}

    def hydro_dcp_save(self):
        import torch.distributed.checkpoint as dcp
        import hydro.dcp
        self.step += 1
        dcp.save(self.dcp_state(), storage_writer=hydro.dcp.Writer(os.path.join(self.top, "hydro-dcp"), self.step,
                                                                     keep_last=1))

    def hydro_dcp_load(self):
        import hydro.dcp
        self.dcp_load(hydro.dcp.Reader(os.path.join(self.top, "hydro-dcp")))

    def async_save(self, kind):
        """(stall, until durable) of one dcp.async_save, DCP's own or through hydro.dcp.Writer."""
        import torch.distributed.checkpoint as dcp
        import hydro.dcp
        self.step += 1
        if kind == "dcp":
            d = os.path.join(self.top, f"dcp-async-{self.step}")
            where = {"checkpoint_id": d}
        else:
            where = {"storage_writer": hydro.dcp.Writer(os.path.join(self.top, "hydro-dcp"), self.step, keep_last=1)}
        dist.barrier()
        t0 = time.perf_counter()
        future = dcp.async_save(self.dcp_state(), **where)
        t1 = time.perf_counter()
        future.result()
        if kind == "dcp" and dist.get_rank() == 0:
            fsync_dir(d)
            fsync_dir(self.top)
        t = torch.tensor([t1 - t0, time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.barrier()
        if kind == "dcp" and dist.get_rank() == 0:
            shutil.rmtree(d)
        return t.tolist()

    def runtime_async(self):
        """(stall, until durable, copies made) of one rt.save() in async mode: each rank captures
        its shards into reused host buffers and returns (HYDRO_ASYNC_COPY=behind: before the copies
        are made, which the next optimizer step waits for); its background thread writes them and
        the ranks commit (rt.wait_idle() returns once that rank's part, the commit included, is
        done)."""
        self.step += 1
        dist.barrier()
        t0 = time.perf_counter()
        self.rt.save(self.step)
        t1 = time.perf_counter()
        self.rt._c.wait_copies()
        t2 = time.perf_counter()
        self.rt.wait_idle()
        t = torch.tensor([t1 - t0, time.perf_counter() - t0, t2 - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def dcp_load(self, reader=None):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        msd, osd = get_state_dict(self.model, self.opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, **({"storage_reader": reader} if reader else {"checkpoint_id": self.dcp_last}))
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
    rows = {m: [] for m in ("save until durable", "load (page cache)", "load (cold)", "async_save: stall",
                            "async_save: until durable")}
    roots = {"hydro": os.path.join(a.dir, "hydro"), "hydro.dcp": os.path.join(a.dir, "hydro-dcp")}
    for _ in range(a.rounds + 1):  # the first round warms every variant up and is not counted
        order = ["hydro", "dcp", "hydro.dcp"]
        rng.shuffle(order)
        save, load, cold, stall, durable = {}, {}, {}, {}, {}
        for kind in order:
            dist.barrier()
            saver, loader = {"hydro": (v.hydro_save, v.hydro_load), "dcp": (v.dcp_save, v.dcp_load),
                             "hydro.dcp": (v.hydro_dcp_save, v.hydro_dcp_load)}[kind]
            save[kind] = slowest(saver() if kind == "dcp" else saver)  # dcp_save() makes the timed call
            for warm, into in ((True, load), (False, cold)):
                page_cache(roots.get(kind, v.dcp_last), warm)
                into[kind] = slowest(loader)
            if kind != "hydro":
                stall[kind], durable[kind] = v.async_save("dcp" if kind == "dcp" else "hydro.dcp")
        for name, got in zip(rows, (save, load, cold, stall, durable)):
            rows[name].append(got)
    rt.close()
    rows.update(async_rounds(a, v, rng, "save"))
    rows.update(async_rounds(a, v, rng, "behind"))
    if dist.get_rank() == 0:
        report(a, rows)
    dist.destroy_process_group()


def async_rounds(a, v, rng, copy):
    """hydro's Runtime in async mode (a Runtime of its own: the mode is read at its start), its
    copies made at save or behind it (HYDRO_ASYNC_COPY), against DCP's async_save, interleaved in
    random order per round. Behind: also when the copies are made (what the next optimizer step
    waits for at most; in training they overlap the forward and backward)."""
    import hydro
    dist.barrier()  # rank 0's store of the closed Runtime is gone before any rank opens the next
    os.environ.update(HYDRO_CKPT_MODE="async", HYDRO_CKPT_DIR=os.path.join(a.dir, f"hydro-async-{copy}"),
                      HYDRO_ASYNC_COPY=copy)
    v.rt = rt = hydro.Runtime()
    rt.track("model", v.model)
    rt.track("optimizer", v.opt)
    name = "Runtime async" + (", behind" if copy == "behind" else "")
    rows = {f"{name}: stall": [], f"{name}: until durable": []}
    if copy == "behind":
        rows[f"{name}: copies made"] = []
    for _ in range(a.rounds + 1):
        order = ["hydro", "dcp"]
        rng.shuffle(order)
        stall, durable, copied = {}, {}, {}
        for kind in order:
            t = v.runtime_async() if kind == "hydro" else v.async_save("dcp") + [None]
            stall[kind], durable[kind], copied[kind] = t
        copied["dcp"] = stall["dcp"]  # DCP's copies are made inside its stall
        for row, value in zip(rows, (stall, durable, copied)):
            rows[row].append(value)
    rt.close()
    return rows


def report(a, rows):
    print(f"FSDP2 on the CPU, {a.ranks} ranks, {a.mb} MB in all ({a.mb / a.ranks:.0f} MB a rank), {a.rounds} rounds; "
          "medians, the slowest rank's time; ratios: medians of each round's against DCP's")
    print(f"{'measure':<38} {'variant':<10} {'ms':>9} {'/ DCP':>7}")
    for name, runs in rows.items():
        runs = runs[1:]
        for kind in ("hydro", "hydro.dcp", "dcp"):
            if kind not in runs[0]:
                continue
            ms = statistics.median(r[kind] for r in runs) * 1000
            ratio = statistics.median(r[kind] / r["dcp"] for r in runs)
            print(f"{name:<38} {kind:<10} {ms:>9.1f} {ratio:>7.2f}")


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
