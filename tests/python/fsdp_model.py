"""The model fsdp_train.py shards, and the digest it prints, without hydro: dcp_load.py loads hydro's
checkpoints of it with torch.distributed.checkpoint alone."""
import hashlib

import torch


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


def digest(model, opt):
    """A SHA-256 of every whole weight and every whole tensor of the optimizer's state: the same for
    a sharded model (its DTensors gathered, on every rank alike) and an unsharded one."""
    whole = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(whole(p).detach().cpu().numpy().tobytes())
        for _, t in sorted(opt.state[p].items()):
            h.update(whole(t).detach().cpu().numpy().tobytes())
    return h.hexdigest()
