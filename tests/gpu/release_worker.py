"""A training job holding `--gb` GB of device state (weights, Adam's state, gradients and
activations of an MLP), for tests/gpu/test_gpu_release.py. With --pause-at N it asks for a pause
itself (SIGUSR1, as hydroctl pause) before step N; whoever started it sends SIGUSR2 to resume.
Prints the sha256 of its final weights on its last line."""
import argparse
import hashlib
import os
import signal

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch

import hydro

p = argparse.ArgumentParser()
p.add_argument("--gb", type=float, required=True)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--pause-at", type=int, default=-1)
a = p.parse_args()

DEV = torch.device("cuda", 0)
WIDTH = 8192                                       # a layer's weights: 256 MiB in fp32
layers = max(1, int(a.gb * (1 << 30) / 4 / (WIDTH * WIDTH * 4)))  # weights, grads and Adam's two
torch.cuda.set_device(DEV)
# The Runtime first, then the model: with HYDRO_GPU_ALLOCATOR=hydro, what is allocated after its
# start is hydro's allocator's (docs/users-guide.md, "Giving the GPU back while paused"), and each
# step's end pins the host memory a pause moves it to.
with hydro.Runtime() as rt:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False, device=DEV) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(256, WIDTH, device=DEV)
    for step in range(a.steps):
        if step == a.pause_at:
            torch.cuda.synchronize()
            print(f"pausing at step {step} with {torch.cuda.memory_reserved(DEV) >> 20} MiB reserved", flush=True)
            os.kill(os.getpid(), signal.SIGUSR1)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rt.step_end(step)
    torch.cuda.synchronize()
h = hashlib.sha256()
for t in model.state_dict().values():
    h.update(t.cpu().numpy().tobytes())
print(h.hexdigest(), flush=True)
