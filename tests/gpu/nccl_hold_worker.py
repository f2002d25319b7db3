# One rank of a 1-rank NCCL job on GPU 0 whose group has a 2 s timeout (one GPU holds one NCCL rank):
# each step all-reduces on the device and sleeps 10 ms, so ProcessGroupNCCL's watchdog always has
# work it has not yet reaped when the test stops the process. Prints "step N" after each step and
# "done <steps>" at the end.
#   nccl_hold_worker.py plain|runtime PORT STEPS
import datetime
import sys
import time

import torch
import torch.distributed as dist

mode, port, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rt = None
if mode == "runtime":
    import hydro

    rt = hydro.Runtime()  # first: the group made next gets hydro's hold-proof timeout
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=2))
t = torch.zeros(1, device="cuda")
for step in range(1, steps + 1):
    t += 1
    dist.all_reduce(t)
    time.sleep(0.01)
    if rt is not None:
        rt.step_end(step)
    print(f"step {step}", flush=True)
print("done", int(t.item()), flush=True)
dist.destroy_process_group()
