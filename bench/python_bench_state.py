"""What the Python checkpoint benches share: the state they save (a model plus AdamW, by size)
and an fsync of a path."""
import os

import torch


def state(mb, device="cpu"):
    """A model whose parameters are a third of `mb` (AdamW holds two more copies), after one step."""
    n = mb * (1 << 20) // 4 // 3
    chunk = 4 << 20
    params = torch.nn.ParameterList(
        torch.nn.Parameter(torch.randn(min(chunk, n - i), device=device)) for i in range(0, n, chunk))
    opt = torch.optim.AdamW(params.parameters(), lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    return params, opt


def fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
