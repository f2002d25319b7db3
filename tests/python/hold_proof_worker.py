# One rank of a 2-rank gloo job whose own process group has a TIMEOUT s timeout: each step
# all-reduces.
# Rank 1 sleeps at SLOW_STEP (printing "slow"), so that rank 0 waits for it inside the collective
# when the test holds or stops them. Prints "done <value>"; the value is 2^(steps+1) - 2.
# `split` all-reduces over a group that torch.distributed.device_mesh's own split_group makes (it
# took torch's at its import, before hydro's; FSDP2 and DeviceMesh make their groups so), or its
# new_group where split_group needs a device (torch 2.6 on the CPU).
# `eval`: after SLOW_STEP, each rank evaluates for 3 times the timeout: operators, no collective
# and no step end (torch's timeout, per collective, would not end it; nor may hydro's watch).
#   hold_proof_worker.py plain|runtime_first|group_first|split|eval RANK PORT STEPS SLOW_STEP TIMEOUT
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

mode, rank, port, steps, slow_step = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
timeout = datetime.timedelta(seconds=float(sys.argv[6]))
if mode == "split":
    import torch.distributed.device_mesh as mesh  # before hydro, as `import torch.distributed.fsdp` would
if mode != "plain":
    import hydro


def join():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timeout)


def running_sleep(seconds):
    """Sleeps `seconds` of this process's running time: a hold (SIGSTOP) counts at most one short
    slice, as it would of a computation, which a suspended job does not advance. (A plain sleep
    would end during the hold, and the test's control would race the peer's timeout at SIGCONT.)"""
    left = seconds
    while left > 0:
        t = time.monotonic()
        time.sleep(0.01)
        left -= min(time.monotonic() - t, 0.2)


def evaluate(seconds):
    x, w = torch.ones(32, 32), torch.eye(32)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = x @ w


rt = None
group = None
if mode in ("runtime_first", "split", "eval"):
    rt = hydro.Runtime()
    join()
    if mode == "split":
        try:
            group = mesh.split_group(split_ranks=[[0, 1]], timeout=timeout)
        except RuntimeError as e:  # torch 2.6 splits only a group bound to a device: DeviceMesh takes
            if "No device associated" not in str(e):  # its new_group on the CPU there
                raise
            group = mesh.new_group([0, 1], timeout=timeout)
elif mode == "group_first":
    join()
    rt = hydro.Runtime()
else:
    join()
t = torch.zeros(1)
for step in range(1, steps + 1):
    if rank == 1 and step == slow_step:
        print("slow", flush=True)
        running_sleep(1.5)
    if mode == "eval" and step == slow_step + 1:
        evaluate(seconds=3 * timeout.total_seconds())
    t += 1
    dist.all_reduce(t, group=group)
    if rt is not None:
        rt.step_end(step)
print("done", int(t.item()), flush=True)
# As examples/loop.py's end(): no interpreter's finalization, where torch's gloo can abort
# (pytorch/pytorch#179291), and no destroy_process_group, which can hang before torch 2.8
# (pytorch/pytorch#154976).
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
