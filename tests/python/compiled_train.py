"""A torch.compile'd model (inductor, on the CPU) trained under hydro, for test_torch2.py: Dropout
and AdamW, a batch drawn from a generator seeded by the step. Prints "step N" after each step; on
SIGTERM checkpoints at the step's end and exits 75; at the end prints digest=<SHA-256 of every
weight>. Usage: compiled_train.py STEPS"""
import hashlib
import sys

import torch

import hydro
from seeded_steps import train

BACKEND = "inductor"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))

    def forward(self, x):
        return self.body(x)


def main(steps):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    compiled = torch.compile(lambda x, y: torch.nn.functional.mse_loss(model(x), y), backend=BACKEND)
    rt = hydro.Runtime()
    rt.track("model", model)
    rt.track("optimizer", opt)
    # forward, loss and (through AOTAutograd) backward are compiled code
    if not train(rt, opt, compiled, ((256, 64), (256, 4)), steps):
        sys.exit(hydro.EXIT_REQUEUE)
    rt.close()
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    print(f"digest={h.hexdigest()}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
