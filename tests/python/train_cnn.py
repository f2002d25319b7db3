"""A small CNN trained under hydro, for the bit-for-bit resume test: BatchNorm and Dropout, AdamW
and an LR scheduler, and augmentation that draws from Python's random, numpy and torch inside two
DataLoader workers. Prints "step N" after each step; on SIGTERM checkpoints and exits 75; at the
end writes the SHA-256 of every weight and buffer to argv[1]. With TRAIN_CNN_HOLD=FILE:K, it goes
past step K only once FILE exists (the test makes it once its signal is sent: however busy the
machine, the run cannot finish before the signal lands)."""
import hashlib
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import hydro

EPOCHS, SAMPLES, BATCH = 3, 256, 16


class Images(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(SAMPLES, 1, 12, 12, generator=g)
        self.y = torch.randint(0, 10, (SAMPLES,), generator=g)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        x = self.x[i].clone()
        if random.random() < 0.5:
            x = x.flip(-1)
        x += torch.from_numpy(np.random.normal(0.0, 0.1, x.shape).astype(np.float32))
        x = torch.roll(x, int(torch.randint(-2, 3, ())), dims=-2)
        return x, self.y[i]


def hold(flag):
    """Waits until the file `flag` exists."""
    while not os.path.exists(flag):
        time.sleep(0.01)


def main(out):
    flag, _, at = os.environ.get("TRAIN_CNN_HOLD", "").rpartition(":")
    hold_at = int(at) if flag else None
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.25), torch.nn.Linear(8 * 5 * 5, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    loader = hydro.DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=2, seed=5)

    rt = hydro.Runtime()                                   # hydro
    for name, obj in [("model", model), ("optimizer", opt), ("scheduler", sched), ("loader", loader)]:
        rt.track(name, obj)                                # hydro
    step = rt.resume()                                     # hydro
    for epoch in range(loader.sampler.epoch, EPOCHS):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            print(f"step {step}", flush=True)
            if step == hold_at:  # before its step end, until the test's signal is sent
                hold(flag)
            if not rt.step_end(step):                      # hydro
                sys.exit(hydro.EXIT_REQUEUE)
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.contiguous().numpy().tobytes())
    with open(out, "w") as f:
        f.write(h.hexdigest())
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
