#!/usr/bin/env python3
"""A GPU job's checkpoint (issue 58): hydro's against torch.save, DCP and DCP with pinned staging as
torchtitan sets it up, side by side in one run on one GPU, interleaved in random order per round;
medians. The floor: the raw copy of the same bytes into pinned memory allocated once, and the raw
write of those bytes (one file, fsynced).

State: a model of large parameters plus AdamW's state after one step, on cuda:0, of each size in GB.
  stall: what the training thread waits for before it may change the state again. torch.save
    (after .cpu()), dcp.save and hydro's sync: the whole save. dcp.async_save: until it returns (its
    default stager copies every tensor first). DCP pinned: async_save with DefaultStager(pinned,
    async staging) until its staging is complete. hydro async: rt.save(); hydro behind
    (HYDRO_ASYNC_COPY=behind): rt.save() and the wait for its copies that the next optimizer step
    makes;
  durable: from the start of the save until every file is fsynced (hydro: + manifest, rename,
    `latest`; DCP: + an fsync of its directory, which it does not make itself);
  restart: torch.load (map_location cuda) + load_state_dict, dcp.load, hydro's rt.resume(), each of
    its own checkpoint, until the state is on the device.
Also prints the driver, CUDA, NCCL and torch versions.
Usage: python bench/python_gpu_checkpoint_bench.py [DIR] [--sizes 1,10,40] [--rounds N]"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import time

import torch

from python_bench_state import fsync_path, state


DEVICE = "cuda"


def device_sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def sync_time(fn):
    device_sync()
    os.sync()
    t = time.perf_counter()
    out = fn()
    device_sync()
    return time.perf_counter() - t, out


def state_dict(model, opt):
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def torch_save(model, opt, d):
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    cpu = {k: {n: v.cpu() for n, v in sd.items()} if k == "model" else sd for k, sd in state_dict(model, opt).items()}
    with open(os.path.join(d, "state.pt"), "wb") as f:
        torch.save(cpu, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_path(d, directory=True)
    took = time.perf_counter() - t0
    return took, took


def dcp_variant(model, opt, d, stager=None, asynchronous=True):
    import torch.distributed.checkpoint as dcp
    shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    if not asynchronous:
        dcp.save(state_dict(model, opt), checkpoint_id=d)
        stall = time.perf_counter() - t0
        done = None
    elif stager is None:
        done = dcp.async_save(state_dict(model, opt), checkpoint_id=d)
        stall = time.perf_counter() - t0
    else:
        response = dcp.async_save(state_dict(model, opt), checkpoint_id=d, async_stager=stager)
        response.staging_completion.result()
        stall = time.perf_counter() - t0
        done = response.upload_completion
    if done is not None:
        done.result()
    fsync_path(d, directory=True)
    fsync_path(os.path.dirname(d), directory=True)
    return stall, time.perf_counter() - t0


def pinned_stager():
    """DCP's DefaultStager with pinned memory and async staging, as torchtitan's async_with_pinned_mem; None
    where this torch has none (before 2.9)."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return DefaultStager(StagingOptions(True, False, True, DEVICE == "cuda"))


class Hydro:
    def __init__(self, model, opt, root, mode, behind=False):
        os.environ.update(HYDRO_CKPT_DIR=root, HYDRO_CKPT_MODE=mode, HYDRO_KEEP_LAST="1",
                          HYDRO_ASYNC_COPY="behind" if behind else "save")
        import hydro
        self.rt = hydro.Runtime()
        self.rt.track("model", model)
        self.rt.track("optimizer", opt)
        self.behind, self.step = behind, 0

    def save(self):
        self.rt.wait_idle()
        self.step += 1
        t0 = time.perf_counter()
        self.rt.save(self.step)
        if self.behind:
            self.rt._c.wait_copies()  # what the next optimizer step waits for
        stall = time.perf_counter() - t0
        self.rt.wait_idle()
        return stall, time.perf_counter() - t0

    def close(self):
        self.rt.wait_idle()
        self.rt.close()


def floor(tensors, d):
    """The raw copy into pinned buffers allocated once, and the raw write of their bytes."""
    pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=DEVICE == "cuda") for t in tensors]

    def copy():
        for t, b in zip(tensors, pinned):
            b.copy_(t, non_blocking=True)

    def write():
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "raw"), "wb") as f:
            for b in pinned:
                f.write(memoryview(b.view(torch.uint8).numpy()))
            f.flush()
            os.fsync(f.fileno())
    return copy, write


def restart(kind, model, opt, d):
    if kind == "torch.load":
        def run():
            sd = torch.load(os.path.join(d, "state.pt"), map_location=DEVICE)
            model.load_state_dict(sd["model"])
            opt.load_state_dict(sd["optimizer"])
    elif kind == "dcp.load":
        def run():
            import torch.distributed.checkpoint as dcp
            sd = state_dict(model, opt)
            dcp.load(sd, checkpoint_id=d)
            opt.load_state_dict(sd["optimizer"])
    else:
        def run():
            h = Hydro(model, opt, d, "sync_any")
            h.rt.resume()
            h.close()
    return sync_time(run)[0]


def bench(gb, rounds, top):
    model, opt = state(max(1, int(gb * 1024)), device=DEVICE)
    tensors = [p for p in model.parameters()] + [t for s in opt.state.values() for t in s.values() if t.dim()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    copy, write = floor(tensors, os.path.join(top, "raw"))
    copy()  # the pinned buffers touched once, as any reused buffer is
    stager = pinned_stager()
    runs = {
        "torch.save": lambda: torch_save(model, opt, os.path.join(top, "torch")),
        "dcp.save": lambda: dcp_variant(model, opt, os.path.join(top, "dcp"), asynchronous=False),
        "dcp.async_save": lambda: dcp_variant(model, opt, os.path.join(top, "dcp_async")),
        "raw pinned copy": lambda: (sync_time(copy)[0],) * 2,
        "raw write": lambda: (sync_time(write)[0],) * 2,
    }
    if stager is not None:
        runs["dcp pinned"] = lambda: dcp_variant(model, opt, os.path.join(top, "dcp_pinned"), stager)
    times = {k: [] for k in list(runs) + ["hydro sync", "hydro async", "hydro behind"]}
    for _ in range(rounds):
        for k in random.sample(list(runs), len(runs)):
            times[k].append(runs[k]())
    for name, mode, behind in (("hydro sync", "sync_any", False), ("hydro async", "async", False),
                               ("hydro behind", "async", True)):
        h = Hydro(model, opt, os.path.join(top, name.replace(" ", "_")), mode, behind)
        h.save()  # its pinned slots are made once, as a job's first save makes them
        times[name] = [h.save() for _ in range(rounds)]
        h.close()
    med = {k: (statistics.median(s for s, _ in v), statistics.median(d for _, d in v)) for k, v in times.items()}
    floor_s = med["raw pinned copy"][0]
    print(f"\n{gb} GB on the device ({nbytes / 2**30:.2f} GiB of tensors), {rounds} rounds, medians:")
    for k, (stall, durable) in med.items():
        print(f"  {k:16s} stall {stall:8.3f} s  durable {durable:8.3f} s  ({nbytes / 2**30 / stall:6.1f} GiB/s stalled)")
    print(f"  copy in hydro's sync save vs the raw pinned copy: floor {floor_s:.3f} s; sync save / (copy + write): "
          f"{med['hydro sync'][1] / (floor_s + med['raw write'][0]):.2f}x")
    if "dcp.async_save" in med:
        print(f"  hydro async stall / dcp.async_save's: {med['hydro async'][0] / med['dcp.async_save'][0]:.2f}x")
    for kind, d in (("torch.load", "torch"), ("dcp.load", "dcp"), ("hydro", "hydro_sync")):
        print(f"  restart {kind:10s} {restart(kind, model, opt, os.path.join(top, d)):8.3f} s")


def versions():
    driver = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-"
    print(f"GPU, driver: {driver}; CUDA {torch.version.cuda}; NCCL {nccl}; torch {torch.__version__}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="/var/tmp/hydro-bench-gpu", help="scratch directory (removed)")
    ap.add_argument("--sizes", default="1,10,40", help="state sizes in GB (default 1,10,40)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--device", default="cuda", help="cuda (default), or cpu: a dry run of the script itself")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit("python_gpu_checkpoint_bench: no CUDA device here")
    if DEVICE == "cuda":
        versions()
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir, mode=0o700)
    for gb in (float(s) for s in a.sizes.split(",")):
        bench(gb, a.rounds, a.dir)
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
