# Issue 32: a suspend longer than the process group's timeout costs a 2-rank job nothing, while a
# rank that stops alone is still caught as a hang (hydro.groups, hydro/hang_watch.h).
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import HERE, free_port, hydro_env, wait_for
from forkserver import spawn
# On a torch without libuv, hydro sets USE_LIBUV=0 at import: in this process's environment, so for
# the ranks without hydro too (the control's store would fail before any hold).
import hydro.distributed  # noqa: F401

WORKER = os.path.join(HERE, "hold_proof_worker.py")
STEPS, SLOW = 6, 3
# The groups' timeout: rank 1's slow step (1.5 s of running time) and the test's own delays before
# a hold fit within it with seconds to spare on a loaded machine; each hold is over 3 times it.
TIMEOUT = 4
HOLD = 3 * TIMEOUT + 1
DONE = f"done {2 ** (STEPS + 1) - 2}"
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def start(mode, tmp_path, pause="on"):
    port = free_port()
    ranks = []
    for r in range(2):
        env = hydro_env({"HYDRO_PAUSE": pause, "HYDRO_CKPT_DIR": str(tmp_path / f"r{r}"), "PYTHONUNBUFFERED": "1"})
        ranks.append(spawn([sys.executable, WORKER, mode, str(r), str(port), str(STEPS), str(SLOW), str(TIMEOUT)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    assert ranks[1].stdout.readline().strip() == "slow", ranks[1].communicate()
    time.sleep(0.5)  # rank 0 now waits for rank 1 inside all_reduce
    return ranks


def hold(ranks, seconds, tstp=True):
    """As Slurm suspends a job: SIGTSTP, SIGSTOP, and SIGCONT after `seconds`."""
    for p in ranks:
        if tstp:
            p.send_signal(signal.SIGTSTP)
    time.sleep(0.2)
    for p in ranks:
        p.send_signal(signal.SIGSTOP)
    time.sleep(seconds)
    for p in ranks:
        p.send_signal(signal.SIGCONT)


def finish(ranks):
    out = [p.communicate(timeout=120) for p in ranks]
    for r, (o, e) in enumerate(out):  # whole in the report of a failure (assert messages are cut)
        print(f"--- rank {r}: status {ranks[r].returncode}\n{o}{e}")
    return [p.returncode for p in ranks], out


@pytest.mark.parametrize("tstp", [True, False], ids=["suspend", "freeze"])
def test_a_hold_three_times_the_timeout_inside_a_collective_costs_nothing(tmp_path, tstp):
    ranks = start("runtime_first", tmp_path)
    hold(ranks, HOLD, tstp)
    codes, out = finish(ranks)
    assert codes == [0, 0], out
    for o, _ in out:
        assert o.strip().endswith(DONE), out


def test_a_group_split_by_device_mesh_imported_before_hydro_costs_nothing_either(tmp_path):
    # DeviceMesh (FSDP2) takes torch's own new_group and split_group at its import, which often
    # comes before hydro's: those are wrapped too. torch 1.13 has neither split_group nor DeviceMesh.
    if not TORCH2:
        assert not hasattr(torch.distributed, "split_group")
        return
    ranks = start("split", tmp_path)
    hold(ranks, HOLD)
    codes, out = finish(ranks)
    assert codes == [0, 0], out
    for o, _ in out:
        assert o.strip().endswith(DONE), out


def test_without_hydro_the_same_hold_fails_the_job(tmp_path):
    # The control: the failure hydro prevents is real on this torch.
    ranks = start("plain", tmp_path, pause="off")
    hold(ranks, HOLD)
    codes, out = finish(ranks)
    assert codes != [0, 0], out
    assert any("Timed out" in err or "Connection closed" in err for _, err in out), out


def test_a_group_made_before_the_runtime_is_switched_when_it_starts(tmp_path):
    # A torch that cannot switch a Gloo group once made (1.13, 2.6) has it made hold-proof at once.
    ranks = start("group_first", tmp_path)
    hold(ranks, HOLD)
    codes, out = finish(ranks)
    assert codes == [0, 0], out
    assert all(o.strip().endswith(DONE) for o, _ in out), out
    at_once = "cannot lengthen a gloo group's timeout once made: it is made hold-proof now"
    assert all((at_once in err) != hydro.groups.late_switch_reaches("gloo") for _, err in out), out


def test_a_rank_stopped_alone_is_caught_as_a_hang(tmp_path):
    ranks = start("runtime_first", tmp_path)
    ranks[1].send_signal(signal.SIGSTOP)  # not Slurm: rank 1 alone
    try:
        wait_for(lambda: ranks[0].poll() is not None, timeout=60)
    finally:
        ranks[1].kill()
    out, err = ranks[0].communicate()
    assert ranks[0].returncode == 124, (out, err)  # hydro.EXIT_WATCHDOG, no watchdog FIFO here
    assert "hang: no step ended in" in err, err
    assert f"over the process groups' timeout of {TIMEOUT:.1f} s" in err, err


def test_an_evaluation_longer_than_the_timeout_is_no_hang(tmp_path):
    # Operators run and no step ends for 3 times the timeout: work goes on, as hydro's operator
    # heartbeat sees (before it, hydro's watch ended both ranks as hung).
    ranks = start("eval", tmp_path)
    codes, out = finish(ranks)
    assert codes == [0, 0], out
    for o, err in out:
        assert o.strip().endswith(DONE), out
        assert "hang:" not in err, out


# The port: free_port's (below the kernel's ephemeral range, where a port bound to 0 and closed
# could be taken by another test's connection before the group binds it).
NCCL_CHECK = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
import hydro
rt = hydro.Runtime()
port = int(sys.argv[1])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=3))
print(json.dumps({"heartbeat": os.environ.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"),
                  "watched": hydro.groups.collective_timeout().total_seconds(),
                  "hold_proof": hydro.groups.HOLD_PROOF.total_seconds(),
                  "nccl_default": hydro.groups._asked(None, "nccl").total_seconds()}))
'''


def test_what_nccl_is_given_without_a_gpu(tmp_path):
    # The NCCL parts that run without a GPU: the heartbeat monitor's timeout is set before any group
    # exists, the asked timeout is watched, and NCCL's default (10 min on torch 2) is the one watched
    # when the script asks for none.
    import json
    env = hydro_env({"HYDRO_PAUSE": "on", "HYDRO_CKPT_DIR": str(tmp_path)})
    out = subprocess.run([sys.executable, "-c", NCCL_CHECK, str(free_port())], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["hold_proof"] == 365 * 24 * 3600
    assert got["heartbeat"] == str(int(got["hold_proof"]))
    assert got["watched"] == 3
    # torch's NCCL default: 10 min on torch 2 with NCCL; its default of every group, 30 min, on one
    # without NCCL (Debian 13's 2.6, CPU only) and on 1.13.
    from torch.distributed import constants
    nccl = getattr(constants, "default_pg_nccl_timeout", None) if torch.distributed.is_nccl_available() else None
    assert got["nccl_default"] == (600 if nccl else 1800)
