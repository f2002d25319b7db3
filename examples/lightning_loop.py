#!/usr/bin/env python3
"""lightning_loop.py: examples/loop.py's job as a PyTorch Lightning fit, under hydro.

An MLP with dropout, trained by a Lightning Trainer on a dataset of seeded samples, each with noise
drawn in the DataLoader's workers (augmentation), over several epochs. The line marked "hydro" is
all a Lightning user adds. Under `srun -n N` (N > 1) Lightning's DDP over Gloo trains on N ranks
(its Slurm environment). Prints 'step N loss X' and finally 'weights_digest=<hex>'; checkpoints go
to $HYDRO_CKPT_DIR. The same flags and output as loop.py, so the Slurm path tests run either."""
import argparse
import ctypes
import datetime
import hashlib
import os
import sys
import time

import torch
import torch.nn.functional as F
import lightning.pytorch as pl
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import DDPStrategy

import hydro
import hydro.lightning  # hydro


def parse():
    p = argparse.ArgumentParser(prog="lightning_loop.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps (default 2000)")
    p.add_argument("--batch", type=int, default=64, help="batch size per rank (default 64)")
    p.add_argument("--hidden", type=int, default=512, help="hidden layer width (default 512)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=1234, help="seed for the weights and the data (default 1234)")
    p.add_argument("--samples", type=int, default=4096, help="samples in the dataset (default 4096)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    p.add_argument("--accumulate", type=int, default=1,
                   help="batches whose gradients add up to one optimizer step (default 1)")
    p.add_argument("--step-ms", type=int, default=0, help="sleep this long after each step (the weights do not change)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps (default 10)")
    p.add_argument("--pg-timeout", type=float, default=1800,
                   help="with several ranks: seconds a collective may wait for a peer (default 1800)")
    p.add_argument("--no-hydro", action="store_true",
                   help="the peer: Lightning alone, as its users run it on Slurm (its SLURMEnvironment's "
                        "auto-requeue on SIGUSR1, its checkpoint in $HYDRO_CKPT_DIR or the working directory, "
                        "torch's DataLoader)")
    return p.parse_args()


class Samples(torch.utils.data.Dataset):
    """Seeded inputs, labelled by a fixed teacher; each fetch adds fresh noise (augmentation), drawn
    from torch's generator in whichever process loads the sample."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 64, generator=g)
        self.y = (self.x @ torch.randn(64, 10, generator=g)).argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.1 * torch.randn(64), self.y[i]


class Net(pl.LightningModule):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.net = torch.nn.Sequential(torch.nn.Linear(64, a.hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 10))

    def train_dataloader(self):
        if self.a.no_hydro:
            return torch.utils.data.DataLoader(Samples(self.a.samples, self.a.seed), batch_size=self.a.batch,
                                               shuffle=True, drop_last=True, num_workers=self.a.workers)
        return hydro.DataLoader(Samples(self.a.samples, self.a.seed), batch_size=self.a.batch, shuffle=True,
                                seed=self.a.seed, drop_last=True, num_workers=self.a.workers)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.a.lr, momentum=0.9)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        step = self.global_step + 1  # the optimizer step this batch is part of
        if step % self.a.log_every == 0 and (batch_idx + 1) % self.a.accumulate == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.a.step_ms:
            time.sleep(self.a.step_ms / 1000)


def digest(model):
    h = hashlib.sha256()
    for v in model.state_dict().values():
        v = v.detach().contiguous()
        h.update(ctypes.string_at(v.data_ptr(), v.numel() * v.element_size()))
    return h.hexdigest()[:16]


def main():
    a = parse()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    env = hydro.dist_env()
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    if nodes == 1 and "SLURM_NTASKS" in os.environ:
        # Lightning refuses a step of several tasks started by `srun -n N` alone and asks for
        # --ntasks-per-node; on one node they are the same (the Slurm tests start it either way).
        os.environ.setdefault("SLURM_NTASKS_PER_NODE", os.environ["SLURM_NTASKS"])
    strategy = "auto" if env["world_size"] == 1 else DDPStrategy(
        process_group_backend="gloo", timeout=datetime.timedelta(seconds=a.pg_timeout))
    model = Net(a)
    if a.no_hydro:
        pl.seed_everything(a.seed, workers=True)
        extra = dict(plugins=[SLURMEnvironment(auto_requeue=True)],
                     default_root_dir=os.environ.get("HYDRO_CKPT_DIR", os.getcwd()))
    else:
        extra = dict(callbacks=[hydro.lightning.Hydro()])  # hydro
    trainer = pl.Trainer(max_steps=a.steps, max_epochs=-1, accelerator="cpu", devices=env["world_size"] // nodes,
                         num_nodes=nodes, strategy=strategy, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accumulate_grad_batches=a.accumulate, **extra)
    trainer.fit(model)
    sys.stdout.write(f"weights_digest={digest(model.net)}\n")
    sys.stdout.flush()
    if env["world_size"] > 1:
        # As loop.py's end(): no interpreter's finalization, during which a gloo thread can abort
        # the process (pytorch/pytorch#179291), and no destroy_process_group, which can hang
        # before torch 2.8 (pytorch/pytorch#154976).
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
