# Issues 32 and 34 on a real GPU and NCCL (scripts/gpu-check; one GPU, so one NCCL rank: NCCL
# refuses two ranks on one device):
#  - a freeze or a suspend of 3x the NCCL group's timeout costs a job under hydro nothing, while the
#    same freeze ends a job without hydro (ProcessGroupNCCL's watchdog times out the work it had not
#    reaped when the process stopped);
#  - an FSDP2 model on CUDA and NCCL resumes bit-for-bit after a requeue, and its checkpoint
#    resumes on 2 CPU ranks (gloo) with the saved bits, as a CPU one of 2 ranks resumes on the GPU.
import os
import signal
import subprocess
import sys
import time

import pytest

import hydro

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from conftest import free_port, hydro_env  # noqa: E402
from test_fsdp import STOP_AT, digest_of, run  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_hold_worker.py")
STEPS, TIMEOUT_S = 300, 2
CUDA = {"FSDP_TRAIN_DEVICE": "cuda"}


def held_run(mode, tmp_path, tstp):
    """Runs the worker, holds it at step 20 for 3x its group's timeout (SIGTSTP first, as Slurm
    suspends, when tstp), and returns (status, stdout, stderr)."""
    env = hydro_env({"HYDRO_CKPT_DIR": str(tmp_path / "ck"), "PYTHONUNBUFFERED": "1"})
    p = subprocess.Popen([sys.executable, WORKER, mode, str(free_port()), str(STEPS)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if line.strip() == "step 20":
            break
    if tstp:
        p.send_signal(signal.SIGTSTP)
        time.sleep(0.5)
    p.send_signal(signal.SIGSTOP)
    time.sleep(3 * TIMEOUT_S)
    p.send_signal(signal.SIGCONT)
    out, err = p.communicate(timeout=120)
    print(f"--- status {p.returncode}\n{''.join(seen)}{out}{err}")  # whole in a failure's report
    return p.returncode, out, err


@pytest.mark.parametrize("tstp", [True, False], ids=["suspend", "freeze"])
def test_an_nccl_job_held_three_times_its_timeout_goes_on(tmp_path, tstp):
    status, out, err = held_run("runtime", tmp_path, tstp)
    assert status == 0 and out.strip().endswith(f"done {STEPS}"), err


def test_without_hydro_the_same_freeze_ends_the_job(tmp_path):
    status, out, err = held_run("plain", tmp_path, False)
    assert status != 0 and f"done {STEPS}" not in out, "the freeze did not end an NCCL job: the test is void"
    assert "timeout" in err.lower() or "timed out" in err.lower(), err


def test_an_fsdp_model_on_nccl_resumes_bit_for_bit_after_a_requeue(tmp_path):
    uninterrupted = digest_of(run(1, tmp_path / "whole", CUDA))
    stopped = run(1, tmp_path / "ck", CUDA, stop_at=STOP_AT)
    assert stopped[0][0] == hydro.EXIT_REQUEUE, stopped[0][2]
    resumed = run(1, tmp_path / "ck", CUDA)
    assert "resumed from" in resumed[0][2], resumed[0][2]
    assert digest_of(resumed) == uninterrupted, "the resumed CUDA model differs from the uninterrupted one"


@pytest.mark.parametrize("saved_on,resumed_on", [((1, CUDA), (2, {})), ((2, {}), (1, CUDA))],
                         ids=["gpu-to-2-cpu-ranks", "2-cpu-ranks-to-gpu"])
def test_a_checkpoint_moves_between_the_gpu_and_cpu_ranks_with_its_bits(tmp_path, saved_on, resumed_on):
    stopped = run(saved_on[0], tmp_path / "ck", saved_on[1], stop_at=STOP_AT)
    assert all(s == hydro.EXIT_REQUEUE for s, _, _, _ in stopped), [err for _, _, err, _ in stopped]
    saved = {d["saved"] for _, _, _, d in stopped}
    resumed = run(resumed_on[0], tmp_path / "ck", resumed_on[1])
    for _, _, err, _ in resumed:
        assert f"resharding model: the chunks of {saved_on[0]} ranks onto this job's {resumed_on[0]}" in err, err
    assert {d["resumed"] for _, _, _, d in resumed} == saved, "the resumed state differs from the saved one"
