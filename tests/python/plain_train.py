"""An ordinary training script that knows nothing of hydro (for the zero-lines pause test):
prints "step N" after every step, for argv[1] steps."""
import sys

import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, int(sys.argv[1]) + 1):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}", flush=True)
