#!/usr/bin/env python3
"""hf_trainer.py: examples/loop.py's job as a Hugging Face Trainer run, under hydro.

A small GPT-2 (random weights, dropout on) learns a language of seeded token sequences, trained by
transformers' Trainer for several epochs, with DataLoader workers. The lines marked "hydro" are all
a Trainer user changes. Prints 'step N done' and finally 'weights_digest=<hex>' (the Trainer's own
log lines have the loss); checkpoints go to $HYDRO_CKPT_DIR. The same flags as loop.py, so the
Slurm path tests run either. Under `srun -n N` or torchrun the ranks train with DistributedDataParallel
over Gloo, each on its share of every batch (the lines marked "ranks")."""
import argparse
import ctypes
import hashlib
import multiprocessing
import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import hydro.transformers  # hydro


def parse():
    p = argparse.ArgumentParser(prog="hf_trainer.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps (default 2000)")
    p.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    p.add_argument("--hidden", type=int, default=64, help="the model's width (default 64)")
    p.add_argument("--lr", type=float, default=0.001, help="learning rate (default 0.001)")
    p.add_argument("--seed", type=int, default=1234, help="seed for the weights and the data (default 1234)")
    p.add_argument("--samples", type=int, default=1024, help="sequences in the dataset (default 1024)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    p.add_argument("--accumulate", type=int, default=1,
                   help="batches whose gradients add up to one optimizer step (default 1)")
    p.add_argument("--step-ms", type=int, default=0, help="sleep this long before each step (the weights do not change)")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps (default 10)")
    p.add_argument("--stream", action="store_true",
                   help="the sequences as an endless stream that keeps its place (state_dict/load_state_dict, as a "
                        "streaming datasets.IterableDataset), each DataLoader worker its share (--workers 0: read in "
                        "the training process); prints the samples it gave at the end")
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate on 64 other sequences every N steps (eval_strategy steps; its DataLoader draws "
                        "from torch's generator); 0 = never (default)")
    p.add_argument("--pg-timeout", type=float, default=1800,
                   help="with several ranks: seconds a collective may wait for a peer (the Trainer's ddp_timeout, "
                        "default 1800); under --hydro-pause, time the job is held does not count (hydro.groups)")
    p.add_argument("--no-hydro", action="store_true",
                   help="the peer: the Trainer alone, as its users run it (its own checkpoints every "
                        "--save-every steps in $HYDRO_CKPT_DIR, resumed with resume_from_checkpoint=True)")
    p.add_argument("--save-every", type=int, default=100, help="with --no-hydro: the Trainer's save_steps (default 100)")
    return p.parse_args()


class Sequences(torch.utils.data.Dataset):
    """Seeded token sequences of a toy language: each token follows from the one before."""

    def __init__(self, n, seed, vocab=128, length=32):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(vocab, (n, 1), generator=g)
        stride = torch.randint(1, 8, (n, 1), generator=g)
        self.ids = (start + stride * torch.arange(length)) % vocab

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Stream(torch.utils.data.IterableDataset):
    """The sequences, over and over, as a stream with no length that keeps its place. Read by W
    DataLoader workers, worker w gives the samples w, w + W, w + 2W... and keeps its own place."""

    def __init__(self, sequences):
        self.sequences, self.position = sequences, None
        self.given = multiprocessing.Value("q", 0)  # samples given, by every worker

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        w, n = (worker.id, worker.num_workers) if worker else (0, 1)
        if self.position is None:
            self.position = w
        while True:
            i, self.position = self.position, self.position + n
            with self.given.get_lock():
                self.given.value += 1
            yield self.sequences[i % len(self.sequences)]

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


class Report(TrainerCallback):
    """'step N done' at each optimizer step's end, before hydro's callback (added after this one)
    may checkpoint there and exit: the Trainer's own loss line comes after the step's end."""

    def __init__(self, a):
        self.a = a

    def on_train_begin(self, args, state, control, **kwargs):
        # Each rank its own dropout, as accelerate's set_seed(device_specific=True) gives (the
        # Trainer seeds every rank alike): a resume must give each rank back its own generators.
        if args.world_size > 1:
            torch.manual_seed(args.seed + args.process_index)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.a.step_ms:
            time.sleep(self.a.step_ms / 1000)
            # An operator after the pacing sleep: a pause asked during the sleep waits here, at an
            # operator, as one asked during the step's compute does (else hydro's step end, which
            # comes next, would take it: tests/python/test_transformers.py asks for the former).
            torch.zeros(1)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.a.log_every == 0:
            print(f"step {state.global_step} done", flush=True)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        print(f"evaluated at step {state.global_step}: eval_loss {metrics['eval_loss']:.6f}", flush=True)


def digest(model):
    h = hashlib.sha256()
    for v in model.state_dict().values():
        v = v.detach().contiguous()
        h.update(ctypes.string_at(v.data_ptr(), v.numel() * v.element_size()))
    return h.hexdigest()[:16]


def main():
    a = parse()
    env = hydro.export_env()  # ranks: srun -n N's tasks as the Trainer's (torchrun's need no line)
    ranks = env["world_size"] > 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # else accelerate sets torch's threads to the cores
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=a.hidden, n_layer=2, n_head=4, bos_token_id=0,
                        eos_token_id=0, loss_type="ForCausalLM")
    model = GPT2LMHeadModel(config)
    ckpt = os.environ.get("HYDRO_CKPT_DIR", os.getcwd())
    args = TrainingArguments(
        output_dir=ckpt, max_steps=a.steps, per_device_train_batch_size=a.batch, learning_rate=a.lr,
        gradient_accumulation_steps=a.accumulate, seed=a.seed, dataloader_num_workers=a.workers,
        dataloader_drop_last=True, logging_steps=a.log_every, report_to="none", disable_tqdm=True,
        use_cpu=True, save_strategy="steps" if a.no_hydro else "no", save_steps=a.save_every,
        ddp_timeout=round(a.pg_timeout), eval_strategy="steps" if a.eval_every else "no", eval_steps=a.eval_every or None,
        per_device_eval_batch_size=a.batch)
    evaluation = Sequences(64, a.seed + 1) if a.eval_every else None
    data = Sequences(a.samples, a.seed)
    if a.stream:
        data = Stream(data)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=evaluation, callbacks=[Report(a)])
    try:
        if a.no_hydro:
            resume = any(p.startswith("checkpoint-") for p in os.listdir(ckpt)) if os.path.isdir(ckpt) else False
            trainer.train(resume_from_checkpoint=resume or None)
        else:
            hydro.transformers.train(trainer)  # hydro: in place of trainer.train()
    except SystemExit as e:  # hydro's checkpoint-and-exit (75)
        end(ranks, e.code)
    if a.stream:
        print(f"stream: {data.given.value} samples given", flush=True)
    # One write: under srun the ranks' lines, written at the same moment, would run together.
    sys.stdout.write(f"weights_digest={digest(model)}\n")
    end(ranks, 0)


def end(ranks, status):
    """Ends the program with `status`; with several ranks, as loop.py's end() does: without the
    interpreter's finalization (pytorch/pytorch#179291) or destroy_process_group (which can hang
    before torch 2.8: pytorch/pytorch#154976)."""
    sys.stdout.flush()
    if not ranks:
        sys.exit(status)
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
