"""One rank of a model sharded with FSDP2 (fully_shard, CPU and gloo) trained under hydro, for
test_fsdp.py. RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them. hydro tracks the
sharded model and its AdamW; a batch is drawn from a generator seeded by the step, the same on every
rank. Prints "step N" after each step; on SIGTERM checkpoints at the step's end, prints
saved=<digest> and exits 75; after a resume prints resumed=<digest>; at the end prints
digest=<digest>: fsdp_model.digest, of every whole weight and optimizer tensor (gathered for it alone).
FSDP_TRAIN_UNTRACKED_MODEL=1 tracks the optimizer without its model. FSDP_TRAIN_STOP_IN_SAVE=N: rank 1
prints "in save N" as it starts writing its model's shards in its Nth save, and stops there (a test
kills it). FSDP_TRAIN_DEVICE=cuda trains
on GPU LOCAL_RANK with NCCL (tests/gpu); the batches are drawn on the CPU either way.
Usage: fsdp_train.py STEPS"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import hydro
from fsdp_model import digest, model as make_model
from seeded_steps import train


def sharded_model(mesh):
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


DEVICE = os.environ.get("FSDP_TRAIN_DEVICE", "cpu")


def stop_in_save(n):
    """Rank 1 stops inside its nth save, writing its model's shards (in async mode, on the
    background thread): hydro's writer of sharded files, wrapped before anything is tracked."""
    write, saves = hydro.shard_file.write, [0]

    def stopping(chunks, sink):
        if any(fqn.startswith("model.") for fqn in chunks["tensors"]):
            saves[0] += 1
            if saves[0] == n:
                print(f"in save {n}", flush=True)
                time.sleep(3600)
        write(chunks, sink)

    hydro.shard_file.write = stopping


def main(steps):
    if os.environ.get("FSDP_TRAIN_STOP_IN_SAVE") and os.environ.get("RANK") == "1":
        stop_in_save(int(os.environ["FSDP_TRAIN_STOP_IN_SAVE"]))
    rt = hydro.Runtime()  # first: it sets up the ranks' store and watches the group's timeout
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
    model = sharded_model(init_device_mesh(DEVICE, (dist.get_world_size(),)))  # built on the CPU, moved
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if not os.environ.get("FSDP_TRAIN_UNTRACKED_MODEL"):  # the test of an optimizer tracked alone
        rt.track("model", model)
    rt.track("optimizer", opt)
    loss_of = lambda x, y: torch.nn.functional.mse_loss(model(x.to(DEVICE)), y.to(DEVICE))  # noqa: E731
    if not train(rt, opt, loss_of, ((16, 32), (16, 4)), steps, lambda: print_digest("resumed", model, opt)):
        rt.close()
        print_digest("saved", model, opt)
        end(hydro.EXIT_REQUEUE)
    rt.close()
    print_digest("digest", model, opt)
    end(0)


def end(status):
    """Ends the process as examples/loop.py's end() does: without the interpreter's finalization,
    where a gloo thread that frees the last gathered tensor needs the GIL for the tensor's Python
    object and aborts the process ("terminate called without an active exception";
    pytorch/pytorch#179291), and without destroy_process_group, which can hang before torch 2.8
    (pytorch/pytorch#154976)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def print_digest(what, model, opt):
    """WHAT=<fsdp_model.digest: every whole weight and optimizer tensor>."""
    print(f"{what}={digest(model, opt)}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
