"""One rank of fsdp_train.py's sharded model and AdamW, saved by the program's own dcp.save and
dcp.async_save with hydro as DCP's storage layer (hydro.dcp.Writer), for test_dcp_storage.py. RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them. Trains 3 steps (every rank the same
batch), dcp.save as step 3, 2 more steps, dcp.async_save as step 5 (waited for), and prints
saved3=<digest> and saved5=<digest> (fsdp_model.digest). Then loads through hydro.dcp.Reader with the
process group (the ranks split the check), prints loaded=<step>:<digest>, saves the same state as
step 6, tears rank 1's file of it, loads again and prints fallback=<step>:<digest>.
torch 2.6's fully_shard trains on no CPU (torch.cpu.Stream has no record_event before 2.7): there
each rank trains the whole model, and the state saved and loaded is the same, sharded as FSDP2's
is (each tensor's dim 0 across the ranks, by distribute_tensor).
Usage: dcp_save.py ROOT"""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.utils._pytree import tree_map

import hydro.dcp
from fsdp_model import digest, model as make_model


def steps(model, opt, first, last):
    for step in range(first, last):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


FSDP2_ON_CPU = hasattr(torch.cpu.Stream, "record_event")


def shard(model, mesh):
    if FSDP2_ON_CPU:
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)


def state_of(model, opt, mesh):
    """The sharded state: FSDP2's own, or (torch 2.6) the whole model's, sharded as FSDP2 does."""
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, opt)}
    if FSDP2_ON_CPU:
        return state
    return tree_map(lambda t: distribute_tensor(t, mesh, [Shard(0)]) if torch.is_tensor(t) and t.dim() else t, state)


def load(model, opt, state, root, what):
    """dcp.load of the sharded state through hydro.dcp.Reader (the ranks split its check); prints
    WHAT=<the step it chose>:<digest>."""
    reader = hydro.dcp.Reader(root)
    loaded = state()
    dcp.load(loaded, storage_reader=reader)
    if not FSDP2_ON_CPU:
        loaded = tree_map(lambda t: t.full_tensor() if isinstance(t, DTensor) else t, loaded)
    set_model_state_dict(model, loaded["model"])
    set_optimizer_state_dict(model, opt, loaded["optimizer"])
    print(f"{what}={reader.step}:{digest(model, opt)}", flush=True)


def main(root):
    dist.init_process_group("gloo")
    model = make_model()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    shard(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = lambda: state_of(model, opt, mesh)  # noqa: E731
    steps(model, opt, 0, 3)
    dcp.save(state(), storage_writer=hydro.dcp.Writer(root, 3))
    print(f"saved3={digest(model, opt)}", flush=True)
    steps(model, opt, 3, 5)
    dcp.async_save(state(), storage_writer=hydro.dcp.Writer(root, 5)).result()
    print(f"saved5={digest(model, opt)}", flush=True)
    load(model, opt, state, root, "loaded")
    dcp.save(state(), storage_writer=hydro.dcp.Writer(root, 6))  # step 5's state again
    if dist.get_rank() == 0:  # rank 1's file of step 6 torn: only rank 1 checks it, and both pass over it
        with open(os.path.join(root, "step-000000000006", "rank-1", "__1_0.distcp"), "r+b") as f:
            f.truncate(f.seek(0, os.SEEK_END) - 1)
    dist.barrier()
    load(model, opt, state, root, "fallback")
    sys.stdout.flush()
    # As examples/loop.py's end(): no destroy_process_group, which before torch 2.8 can hang for
    # ever (pytorch/pytorch#154976; a Debian 13 rank hung so, gdb's stacks, 7 December 2026), and
    # os._exit, as gloo may abort the interpreter's finalization (pytorch/pytorch#179291).
    os._exit(0)


if __name__ == "__main__":
    # Within test_dcp_storage.py's 300 s: a rank that hangs prints every thread's stack and exits,
    # so that a failure says where (it takes about 15 s).
    faulthandler.dump_traceback_later(240, exit=True)
    main(sys.argv[1])
