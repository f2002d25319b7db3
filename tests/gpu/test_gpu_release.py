# Issue 33 on a real device: HYDRO_GPU_RELEASE=full moves a paused job's whole device state to host
# memory (the driver's process checkpoint, through hydro-cuda-checkpoint) and brings it back.
# Run by scripts/gpu-check where a GPU machine is lent; CI has none. Each test prints its figures.
import os
import re
import signal
import itertools
import subprocess
import sys
import tempfile
import time

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from conftest import hydro_env  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release_worker.py")
MOVED = re.compile(r"gpu_release=full: (\d+) MiB of device state moved to host memory in ([0-9.]+) s")
JOBS = itertools.count(1)
BACK = re.compile(r"the device state is back on the GPU in ([0-9.]+) s")
# HYDRO_GPU_ALLOCATOR=hydro's own move (issue 57), and its way back.
OWN_OUT = re.compile(r"gpu_release=full: (\d+) MiB in ([0-9.]+) s \(([0-9.]+) GiB/s\) of device memory in (\d+) "
                     r"segments moved to pinned host memory \((\d+) MiB of them idle")
OWN_BACK = re.compile(r"gpu_release=full: (\d+) MiB in ([0-9.]+) s \(([0-9.]+) GiB/s\) of device memory back on the GPU")


PREEMPTOR = """
import sys, torch
free, total = torch.cuda.mem_get_info(0)
take = int(0.9 * total)
grab = torch.empty(take, dtype=torch.uint8, device="cuda:0")
grab.fill_(7)
a = torch.randn(8192, 8192, device="cuda:0")
for _ in range(20):
    a = a @ a / 8192
torch.cuda.synchronize()
print(take >> 20, total >> 20, free >> 20)
"""


def device_gb():
    return torch.cuda.get_device_properties(0).total_memory / (1 << 30)


def smi(query):
    return subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=True).stdout


def used_by(pid):
    """The MiB nvidia-smi lists for `pid` on the device, or None when it lists no such pid (a PID
    namespace hides it)."""
    rows = [line.split(",") for line in smi("--query-compute-apps=pid,used_memory").splitlines() if line.strip()]
    mine = [int(m) for p, m in rows if int(p) == pid]
    return sum(mine) if mine else None


def host_facts():
    """What the job's host-memory check reads (/proc/meminfo, /proc/self/cgroup, each cgroup's
    memory files up to the root), for a failure's message."""
    lines = [l for l in open("/proc/meminfo") if l.startswith(("MemTotal", "MemAvailable"))]
    cgroups = open("/proc/self/cgroup").readlines()
    v1 = [c for c in cgroups if ":memory:" in c or ",memory:" in c]
    path = (v1 or [c for c in cgroups if c.startswith("0::")] or ["0::"])[0].strip().split(":", 2)[2]
    lines += cgroups
    while True:
        d = ("/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup") + (path if path != "/" else "")
        for f in ("memory.max", "memory.current", "memory.limit_in_bytes", "memory.usage_in_bytes"):
            if os.path.exists(f"{d}/{f}"):
                lines.append(f"{d}/{f}: {open(f'{d}/{f}').read().strip()}\n")
        if path in ("/", ""):
            return "\nthis host:\n" + "".join(lines)
        path = os.path.dirname(path)


def device_used():
    return int(smi("--query-gpu=memory.used").splitlines()[0])


class Job:
    def __init__(self, gb, pause_at=-1, extra=None):
        env = hydro_env({"HYDRO_GPU_RELEASE": "full", **(extra or {})})
        logs = os.environ.get("HYDRO_GPU_LOGS")  # a folder to keep each job's log in, where set
        self.log = (open(os.path.join(logs, f"job{next(JOBS)}-{gb:.0f}GB.log"), "w+") if logs
                    else tempfile.TemporaryFile("w+"))
        self.p = subprocess.Popen([sys.executable, WORKER, "--gb", str(gb), "--pause-at", str(pause_at)],
                                  env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def text(self):
        self.log.seek(0)
        return self.log.read()

    def wait(self, what, timeout):
        """Until `what` is in the job's log, or the pause ended without it: fails with the log when
        the job ends first or the time runs out (a hang must show its log, not a bare timeout)."""
        deadline = time.monotonic() + timeout
        while not re.search(what, self.text()):
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.p.kill()
                pytest.fail(f"no '{what}' in the job's log (exit {self.p.wait()}):\n{self.text()}")
            time.sleep(0.2)

    def digest(self):
        assert self.p.wait(1800) == 0, self.text()
        return self.text().strip().splitlines()[-1]


def preempt():
    """The preemptor, run to its end: the MiB it took, the device's, and those free when it began."""
    pre = subprocess.run([sys.executable, "-c", PREEMPTOR], capture_output=True, text=True)
    assert pre.returncode == 0, pre.stderr
    return tuple(int(v) for v in pre.stdout.split())


def uninterrupted(gb):
    return Job(gb).digest()


def test_the_versions_this_check_ran_on():
    print(f"\ndriver {smi('--query-gpu=driver_version').strip()}, torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}, {torch.cuda.get_device_name(0)} ({device_gb():.0f} GiB)")


def test_the_preemptor_gets_the_gpu_and_the_job_ends_bit_for_bit():
    torch.cuda.empty_cache()  # this process's own cache, from the checks before
    gb = 0.4 * device_gb()
    job = Job(gb, pause_at=3)
    job.wait("pausing at step", timeout=300)
    listed, used_running = used_by(job.p.pid), device_used()
    job.wait("paused at operator", timeout=600)
    moved = MOVED.search(job.text())
    assert moved, job.text() + host_facts()
    held, used_paused = used_by(job.p.pid), device_used()
    take, total, free = preempt()
    job.p.send_signal(signal.SIGUSR2)
    resumed = job.digest()
    back = BACK.search(job.text())
    print(f"\nfull release of {moved.group(1)} MiB: moved in {moved.group(2)} s, back in {back.group(1)} s; "
          f"nvidia-smi: the job's process {listed} MiB running, {held} MiB paused; the device "
          f"{used_running} MiB used running, {used_paused} MiB paused; the preemptor took {take} of "
          f"{total} MiB ({100 * take / total:.1f}%; {free} MiB were free)")
    if listed is not None:
        assert not held, f"nvidia-smi shows {held} MiB for the paused job"
    assert used_running - used_paused >= 0.99 * int(moved.group(1)) - 600, "the device did not get the memory back"
    assert resumed == uninterrupted(gb), "the resumed job's weights differ from an uninterrupted run's"


@pytest.mark.parametrize("gb", [1, 10, 40])
def test_checkpoint_and_restore_times(gb):
    if gb > 0.5 * device_gb():
        pytest.fail(f"{gb} GB does not fit this {device_gb():.0f} GB device with room for the run")
    job = Job(gb, pause_at=2)
    job.wait("paused at operator", timeout=900)
    moved = MOVED.search(job.text())
    assert moved, job.text() + host_facts()
    start = time.monotonic()
    job.p.send_signal(signal.SIGUSR2)
    job.digest()
    back = BACK.search(job.text())
    mib = int(moved.group(1))
    print(f"\n{gb} GB job, {mib} MiB moved: checkpoint {moved.group(2)} s "
          f"({mib / 1024 / float(moved.group(2)):.2f} GiB/s), restore {back.group(1)} s "
          f"({mib / 1024 / float(back.group(1)):.2f} GiB/s); resumed in {time.monotonic() - start:.2f} s")


def test_a_failed_checkpoint_falls_back_to_the_cache_and_the_job_finishes():
    # The driver's checkpoint call made to fail (hydro-cuda-checkpoint's HYDRO_CUDA_CHECKPOINT_FAIL):
    # the lock is undone, the cache released, the reason logged, and the job ends as an
    # uninterrupted one.
    job = Job(2, pause_at=2, extra={"HYDRO_CUDA_CHECKPOINT_FAIL": "checkpoint"})
    job.wait("paused at operator", timeout=300)
    assert "failed moving the device state to host memory" in job.text(), job.text()
    job.p.send_signal(signal.SIGUSR2)
    assert job.digest() == uninterrupted(2)


def link_rate(gb):
    """A pinned cudaMemcpy's GiB/s out and back, for `gb` GB, in this process: the link's speed."""
    n = int(gb * (1 << 30))
    dev = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    rates = []
    for src, dst in ((dev, host), (host, dev)):
        torch.cuda.synchronize()
        start = time.monotonic()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(gb * 1e9 / (1 << 30) / (time.monotonic() - start))
    del dev, host
    torch.cuda.empty_cache()
    return rates


@pytest.mark.parametrize("gb", [1, 10, 40])
def test_hydros_allocator_moves_at_the_links_speed_and_the_job_ends_bit_for_bit(gb):
    # HYDRO_GPU_ALLOCATOR=hydro: the job's memory is hydro's segments, moved by plain copies to a
    # pool pinned at the steps' ends; the device gives the memory back, a preemptor takes 90% of it,
    # and the resumed job ends as an uninterrupted one (with libtorch's own allocator).
    if gb > 0.5 * device_gb():
        pytest.fail(f"{gb} GB does not fit this {device_gb():.0f} GB device with room for the run")
    out_link, back_link = link_rate(min(gb, 4))
    job = Job(gb, pause_at=3, extra={"HYDRO_GPU_ALLOCATOR": "hydro"})
    job.wait("pausing at step", timeout=300)
    used_running = device_used()
    job.wait("paused at operator", timeout=900)
    out = OWN_OUT.search(job.text())
    assert out, job.text() + host_facts()
    assert "go to hydro's allocator" in job.text(), job.text()
    used_paused = device_used()
    preempt()
    job.p.send_signal(signal.SIGUSR2)
    resumed = job.digest()
    back = OWN_BACK.search(job.text())
    assert back, job.text()
    print(f"\nFIGURE own_move gb={gb} copied_mib={out.group(1)} idle_mib={out.group(5)} segments={out.group(4)} "
          f"out_s={out.group(2)} out_gibs={out.group(3)} back_s={back.group(2)} back_gibs={back.group(3)} "
          f"link_out_gibs={out_link:.1f} link_back_gibs={back_link:.1f} "
          f"out_ratio={float(out.group(3)) / out_link:.2f} back_ratio={float(back.group(3)) / back_link:.2f} "
          f"device_used_running={used_running} device_used_paused={used_paused}")
    assert used_running - used_paused >= 0.99 * (int(out.group(1)) + int(out.group(5))) - 600, \
        "the device did not get the memory back"
    assert resumed == uninterrupted(gb), "the resumed job's weights differ from an uninterrupted run's"
