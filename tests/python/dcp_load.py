"""Loads fsdp_train.py's model and AdamW from a hydro checkpoint with torch.distributed.checkpoint
alone, as a DCP user would, into one unsharded copy on one process (no process group): DCP's planner
gathers every rank's chunks. Prints digest=<fsdp_model.digest>. Fails if anything imported hydro.
Usage: dcp_load.py CHECKPOINT_DIRECTORY"""
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from fsdp_model import digest, model as make_model


def main(path):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, opt)}
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optimizer"])
    loaded = sorted(m for m in sys.modules if m == "hydro" or m.startswith("hydro."))
    assert not loaded, f"hydro was imported: {loaded}"
    print(f"digest={digest(model, opt)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
