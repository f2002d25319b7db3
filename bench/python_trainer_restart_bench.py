#!/usr/bin/env python3
"""A Hugging Face Trainer's restart to its first step, resumed in the middle of an epoch of 100,000
samples: `hydro.transformers.train` against the Trainer's own `resume_from_checkpoint`, side by
side in one process, interleaved in random order per round; medians.

Each round builds a new Trainer (the tiny GPT-2 of examples/hf_trainer.py, batches of 8: 12,500 an
epoch) and times `train()` from its call to the first step's `on_step_begin`:
  fresh:   no checkpoint: the floor (the DataLoader, the first batch);
  trainer: the Trainer's own checkpoint-N of step --at, `resume_from_checkpoint=` it;
  hydro:   hydro's checkpoint of the same step, `hydro.transformers.train(trainer)`.
The Trainer's resume skips the epoch's first --at batches (accelerate's `skip_first_batches`):
over the sampler's indices for a map-style dataset, and, with --iterable or --stream, by loading
every batch it skips (an IterableDataset has no indices to skip). hydro's resume takes the same
skip, except with --stream: a stream with no length that keeps its place (state_dict and
load_state_dict, as a streaming datasets.IterableDataset), which hydro starts at its checkpointed
place (then hydro's checkpoint is of a run trained to step --at for real).
Usage: .venv/bin/python bench/python_trainer_restart_bench.py [DIR] [--samples 100000] [--at 6250]
       [--rounds 5] [--iterable | --stream]"""
import argparse
import os
import random
import signal
import statistics
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import hydro.transformers

BATCH = 8


def parse():
    p = argparse.ArgumentParser(prog="python_trainer_restart_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="where the checkpoints go (default: a temporary directory under /var/tmp)")
    p.add_argument("--samples", type=int, default=100000, help="samples in the epoch (default 100000)")
    p.add_argument("--at", type=int, default=6250, help="the step resumed from (default 6250: mid-epoch)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each one restart of each (default 5)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--iterable", action="store_true", help="the dataset as an IterableDataset")
    kind.add_argument("--stream", action="store_true", help="the dataset as a stream that keeps its place")
    return p.parse_args()


class Sequences(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.ids = (torch.randint(128, (n, 1), generator=g) + torch.arange(32)) % 128

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Stream(torch.utils.data.IterableDataset):
    def __init__(self, n):
        self.seq = Sequences(n)

    def __len__(self):
        return len(self.seq)

    def __iter__(self):
        return (self.seq[i] for i in range(len(self.seq)))


class PlacedStream(torch.utils.data.IterableDataset):
    """The sequences, over and over, with no length, keeping its place (state_dict, load_state_dict)."""

    def __init__(self, n):
        self.seq, self.position = Sequences(n), 0

    def __iter__(self):
        while True:
            i, self.position = self.position, self.position + 1
            yield self.seq[i % len(self.seq)]

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


class Reached(Exception):
    """The first step began: train() is left there."""


class FirstStep(TrainerCallback):
    """Stops train() at its first step's begin, and notes when; or, with jump_to, makes the second
    step the one of --at and sends SIGTERM at its end, for hydro to checkpoint it."""

    def __init__(self, jump_to=None, stop_at=None):
        self.at, self.jump_to, self.stop_at = None, jump_to, stop_at

    def on_step_begin(self, args, state, control, **kwargs):
        if self.jump_to is None and self.stop_at is None:
            self.at = time.perf_counter()
            raise Reached

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_at is not None and state.global_step == self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.jump_to is not None and state.global_step == 2:
            state.global_step = self.jump_to
            os.kill(os.getpid(), signal.SIGTERM)


def trainer_of(a, out, callback, steps=None):
    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                       bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM"))
    data = (PlacedStream if a.stream else Stream if a.iterable else Sequences)(a.samples)
    args = TrainingArguments(output_dir=out, max_steps=steps or a.samples // BATCH * 2,
                             per_device_train_batch_size=BATCH, use_cpu=True, report_to="none", disable_tqdm=True,
                             save_strategy="steps" if steps else "no", save_steps=2, logging_steps=10**9)
    return Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def checkpoints(a, root):
    """The Trainer's checkpoint-2 made one of step --at, and hydro's of step --at."""
    trainer_of(a, os.path.join(root, "trainer"), TrainerCallback(), steps=2).train()
    import json
    state = os.path.join(root, "trainer", "checkpoint-2", "trainer_state.json")
    with open(state) as f:
        s = json.load(f)
    s["global_step"] = a.at
    with open(state, "w") as f:
        json.dump(s, f)
    os.environ["HYDRO_CKPT_DIR"] = os.path.join(root, "hydro")
    # A stream's place is the batches its steps read: trained to step --at for real.
    first = FirstStep(stop_at=a.at) if a.stream else FirstStep(jump_to=a.at)
    try:
        hydro.transformers.train(trainer_of(a, os.path.join(root, "out"), first))
    except SystemExit as e:
        assert e.code == hydro.EXIT_REQUEUE, e.code
    return os.path.join(root, "trainer", "checkpoint-2")


def restart(a, root, kind, trainer_ckpt):
    cb = FirstStep()
    trainer = trainer_of(a, os.path.join(root, "out"), cb)
    t0 = time.perf_counter()
    try:
        if kind == "hydro":
            hydro.transformers.train(trainer)
        else:
            trainer.train(resume_from_checkpoint=trainer_ckpt if kind == "trainer" else None)
    except Reached:
        pass
    return cb.at - t0


def main():
    a = parse()
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="hydro-trainer-restart-", dir=a.dir or "/var/tmp")
    trainer_ckpt = checkpoints(a, root)
    times = {k: [] for k in ("fresh", "trainer", "hydro")}
    for _ in range(a.rounds):
        for kind in random.sample(list(times), len(times)):
            times[kind].append(restart(a, root, kind, trainer_ckpt))
    kind = "a stream that keeps its place" if a.stream else "iterable" if a.iterable else "map-style"
    print(f"{a.samples} samples ({kind}), batches of {BATCH}, resumed at step {a.at}; {a.rounds} rounds; "
          "train() to the first step, median ms")
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    for k, v in med.items():
        print(f"  {k:8s} {v:9.1f}")
    print(f"  hydro / trainer: {med['hydro'] / med['trainer']:.2f}; the skip's cost, trainer - fresh: "
          f"{med['trainer'] - med['fresh']:.1f} ms")


if __name__ == "__main__":
    main()
