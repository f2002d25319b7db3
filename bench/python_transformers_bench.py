#!/usr/bin/env python3
"""A Hugging Face Trainer's checkpoint, until durable: hydro's (what `hydro.transformers.train`
commits at a step's end on SIGTERM) against the Trainer's own `_save_checkpoint` (what its
`save_steps` write), side by side in one process, interleaved in random order per round, after
sync(); medians and the median of the per-round ratios.

The Trainer: a GPT-2 of width 512 with as many layers as make about MB megabytes of state (weights
and Adam's two moments), trained two steps on the CPU so that Adam has its state.
  hydro:   Runtime.save() of the parts hydro.transformers tracks (the weights, the optimizer, the
           scheduler, the generators, the Trainer's state), each file, the manifest and the
           directories fsynced: durable when it returns;
  trainer: `_save_checkpoint` (model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth,
           trainer_state.json, the config and the arguments), written in place without fsync:
           reported as saved, and as durable once this bench fsyncs every file and directory.
Usage: .venv/bin/python bench/python_transformers_bench.py [DIR] [--mb 150] [--rounds 5]"""
import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

from python_bench_state import fsync_path


def parse():
    p = argparse.ArgumentParser(prog="python_transformers_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="where the checkpoints go (default: a temporary directory under /var/tmp)")
    p.add_argument("--mb", type=int, default=150, help="megabytes of state, weights plus Adam's (default 150)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each one save of each (default 5)")
    return p.parse_args()


def trainer_of(mb, root):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    layers = max(1, round(mb / (12 * 512 * 512 * 4 * 3 / 1e6)))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=512, n_layer=layers, n_head=8,
                                       bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM"))
    data = [{"input_ids": torch.arange(32) % 128, "labels": torch.arange(32) % 128}] * 8
    args = TrainingArguments(output_dir=os.path.join(root, "trainer"), max_steps=2, per_device_train_batch_size=4,
                             use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no")
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    state = sum(t.numel() * t.element_size() for t in model.state_dict().values()) * 3
    return trainer, state


def durable_tree(folder):
    for d, _, files in os.walk(folder):
        for f in files:
            fsync_path(os.path.join(d, f))
        fsync_path(d, directory=True)
    fsync_path(os.path.dirname(folder), directory=True)


def main():
    a = parse()
    root = a.dir or tempfile.mkdtemp(prefix="hydro-bench-hf-", dir="/var/tmp")
    os.makedirs(root, exist_ok=True)
    os.environ.update(HYDRO_CKPT_DIR=os.path.join(root, "hydro"), HYDRO_KEEP_LAST="1", HYDRO_CKPT_MODE="sync_any")
    import hydro
    import hydro.transformers

    trainer, state = trainer_of(a.mb, root)
    rt = hydro.Runtime()
    hydro.transformers._track(rt, trainer)
    times = {"hydro": [], "saved": [], "durable": []}
    for r in range(a.rounds):
        for kind in random.sample(["hydro", "trainer"], 2):
            os.sync()
            t0 = time.perf_counter()
            if kind == "hydro":
                rt.save(r + 1)
                times["hydro"].append(time.perf_counter() - t0)
                continue
            trainer._save_checkpoint(trainer.model, None)
            times["saved"].append(time.perf_counter() - t0)
            durable_tree(os.path.join(trainer.args.output_dir, f"checkpoint-{trainer.state.global_step}"))
            times["durable"].append(time.perf_counter() - t0)
            shutil.rmtree(trainer.args.output_dir)
    rt.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = statistics.median(h / d for h, d in zip(times["hydro"], times["durable"]))
    print(f"state {state / 1e6:.0f} MB, {a.rounds} rounds, medians:")
    print(f"  hydro, committed (durable):     {med['hydro']:.3f} s")
    print(f"  the Trainer's own, saved:       {med['saved']:.3f} s")
    print(f"  the Trainer's own, fsynced:     {med['durable']:.3f} s")
    print(f"  hydro / the Trainer's durable:  {ratio:.2f}")
    if not a.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
