#!/usr/bin/env python3
"""From the signal to a durable checkpoint, for a Lightning fit: hydro's callback against
Lightning's own Slurm handler, side by side in one run (each trial a fresh process, the two
interleaved in random order per round, after sync(); medians).

The fit: a model of two square Linear layers and SGD with momentum, about MB megabytes of state in
all (weights plus momentum), batches of 16 from a hydro.DataLoader. At the start of step K the fit
sends itself the signal:
  hydro:     SIGTERM with callbacks=[hydro.lightning.Hydro()]; the checkpoint is committed at the
             end of that step (every file, the manifest and the directories fsynced); the time ends
             when the commit returns (then the fit exits with 75);
  lightning: SIGUSR1 with plugins=[SLURMEnvironment(auto_requeue=True)], Lightning's requeue
             handler, which saves `hpc_ckpt_1.ckpt` at once, inside the handler (then would run
             `scontrol requeue`: the trial ends before it); reported as saved (Lightning does not
             fsync it), and durable once this bench fsyncs the file and its directory.
A step's own time is reported beside them: hydro's figure includes the rest of the step it waits
for, Lightning's saves in the middle of it.
Usage: .venv/bin/python bench/python_lightning_bench.py [DIR] [--mb 100] [--rounds 5]"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from python_bench_state import fsync_path

K = 5  # the step whose start sends the signal


def parse():
    p = argparse.ArgumentParser(prog="python_lightning_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="where the checkpoints go (default: a temporary directory under /var/tmp)")
    p.add_argument("--mb", type=int, default=100, help="megabytes of state, weights plus momentum (default 100)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each one trial of each (default 5)")
    p.add_argument("--child", choices=["hydro", "lightning"], help=argparse.SUPPRESS)
    return p.parse_args()


def fit_module(kind, mb, times, marks):
    """The LightningModule: about `mb` MB of state; it sends itself the signal at step K's start."""
    import torch
    import lightning.pytorch as pl

    import hydro

    width = int((mb * (1 << 20) / 4 / 2 / 2) ** 0.5)  # two width x width layers, and momentum
    torch.manual_seed(0)

    class Fit(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, width))

        def training_step(self, batch, batch_idx):
            return self.net(batch).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3, momentum=0.9)

        def train_dataloader(self):
            return hydro.DataLoader(torch.randn(64 * 16, width), batch_size=16, seed=0)

        def on_train_batch_start(self, batch, batch_idx):
            times.append(time.perf_counter())
            if self.global_step == K:
                marks["signal"] = time.perf_counter()
                os.kill(os.getpid(), signal.SIGTERM if kind == "hydro" else signal.SIGUSR1)

    return Fit()


def trainer_for(kind, root, marks):
    """hydro's callback, timed to its commit; or Lightning's Slurm handler."""
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    import hydro.lightning

    class Hydro(hydro.lightning.Hydro):
        def on_train_batch_end(self, *args):
            try:
                super().on_train_batch_end(*args)
            except SystemExit:
                marks["committed"] = time.perf_counter()  # step_end returned: the commit is durable
                raise

    if kind == "hydro":
        os.environ.update(HYDRO_CKPT_DIR=os.path.join(root, "hydro"), HYDRO_KEEP_LAST="1")
        extra = dict(callbacks=[Hydro()])
    else:
        os.environ.update(SLURM_NTASKS="1", SLURM_JOB_ID="1", SLURM_JOB_NAME="bench")
        extra = dict(plugins=[SLURMEnvironment(auto_requeue=True)], default_root_dir=os.path.join(root, "lightning"))
    return pl.Trainer(max_steps=K + 3, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **extra)


def trial(kind, mb, root):
    """One fit in this process; prints its figures as one JSON line."""
    import hydro

    times, marks = [], {}

    def report(**t):
        steps = [b - a for a, b in zip(times[:K], times[1:K + 1])]
        print(json.dumps({k: v - marks["signal"] for k, v in t.items()} | {"step": statistics.median(steps)}),
              flush=True)
        os._exit(0)

    module, trainer = fit_module(kind, mb, times, marks), trainer_for(kind, root, marks)
    if kind == "lightning":
        save = trainer.save_checkpoint

        def save_then_end(path, *a, **kw):  # Lightning's handler saves here; then scontrol: not run
            save(path, *a, **kw)
            saved = time.perf_counter()
            fsync_path(path)
            fsync_path(os.path.dirname(path), directory=True)
            report(saved=saved, durable=time.perf_counter())

        trainer.save_checkpoint = save_then_end
    try:
        trainer.fit(module)
    except SystemExit as e:
        assert e.code == hydro.EXIT_REQUEUE, e.code
        report(durable=marks["committed"])
    raise SystemExit(f"{kind}: the fit ended without its checkpoint")


def run(kind, mb, root):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    os.sync()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRO_", "SLURM_"))}
    out = subprocess.run([sys.executable, __file__, root, "--mb", str(mb), "--child", kind], env=env,
                         capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the {kind} trial failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main():
    a = parse()
    if a.child:
        return trial(a.child, a.mb, a.dir)
    base = a.dir or tempfile.mkdtemp(prefix="hydro-lightning-bench.", dir="/var/tmp")
    results = {"hydro": [], "lightning": []}
    for _ in range(a.rounds):
        kinds = list(results)
        random.shuffle(kinds)
        for kind in kinds:
            results[kind].append(run(kind, a.mb, os.path.join(base, kind)))
    if a.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: {f: statistics.median(r[f] for r in rs) for f in rs[0]} for k, rs in results.items()}
    h, l = med["hydro"], med["lightning"]
    print(f"state {a.mb} MB, {a.rounds} rounds, medians (seconds from the signal)")
    print(f"  hydro callback, SIGTERM to durable checkpoint (at the step's end): {h['durable']:.3f}  "
          f"(a step: {h['step']:.3f})")
    print(f"  Lightning's Slurm handler, SIGUSR1 to its file saved (not durable): {l['saved']:.3f}  "
          f"(a step: {l['step']:.3f})")
    print(f"  Lightning's Slurm handler, SIGUSR1 to its file fsynced (durable):   {l['durable']:.3f}")
    print(f"  ratio hydro / Lightning durable: {h['durable'] / l['durable']:.2f}; "
          f"hydro less its step / Lightning durable: {(h['durable'] - h['step']) / l['durable']:.2f}")


if __name__ == "__main__":
    main()
