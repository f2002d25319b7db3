# hydro.Job and hydro.JobRunner from Python: the C++ runner's semantics (init on a fresh start only,
# epochs resumed mid-epoch after a SIGTERM checkpoint, exit once, exact epoch metrics).
import signal

import torch

import hydro

STEPS = 6


def run_job(stop_at=None):
    """One process's run; SIGTERM to itself after global step `stop_at`. Returns (status, runner, calls)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    with hydro.Runtime() as rt:
        rt.track("model", model)
        rt.track("optimizer", opt)
        job = hydro.Job()
        job.init = lambda ctx: calls.append("init")

        def epoch(e, ctx):
            calls.append(f"epoch {e} from {ctx.epoch_step}")
            g = torch.Generator().manual_seed(e)  # drawn from the epoch, not the global RNG
            data = torch.randn(STEPS, 4, 3, generator=g)
            for i in range(ctx.epoch_step, STEPS):
                loss = model(data[i]).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                ctx.metrics.add("loss", loss.item())
                if ctx.step + 1 == stop_at:
                    signal.raise_signal(signal.SIGTERM)  # handled when it returns: the exit is at this step
                if not ctx.step_end(i + 1):
                    return

        job.epoch = epoch
        job.exit = lambda ctx: calls.append("exit")
        job.steps_per_epoch = STEPS
        job.epoch_limiter(3)
        runner = hydro.JobRunner(rt)
        status = runner.run(job)
        return status, runner.history, calls, model.weight.detach().clone()


def test_a_requeued_job_ends_as_one_never_interrupted(env, tmp_path):
    env.setenv("HYDRO_PROGRESS_EVERY", "0")
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path / "ref"))
    status, want, calls, w_ref = run_job()
    assert status == 0 and calls == ["init", "epoch 0 from 0", "epoch 1 from 0", "epoch 2 from 0", "exit"]
    assert [h["epoch"] for h in want] == [0, 1, 2] and want[2]["step"] == 3 * STEPS

    env.setenv("HYDRO_CKPT_DIR", str(tmp_path / "ckpt"))
    status, _, calls, _ = run_job(stop_at=STEPS + 2)
    assert status == hydro.EXIT_REQUEUE and calls == ["init", "epoch 0 from 0", "epoch 1 from 0"]
    status, got, calls, w = run_job()
    assert status == 0 and calls == ["epoch 1 from 2", "epoch 2 from 0", "exit"]  # no init on a resume
    assert got == want and torch.equal(w, w_ref)


def test_stop_when_ends_the_job(env, tmp_path):
    env.setenv("HYDRO_PROGRESS_EVERY", "0")
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    with hydro.Runtime() as rt:
        job = hydro.Job()
        job.epoch = lambda e, ctx: ctx.metrics.add("x", float(e))
        job.stop_when(lambda ctx: len(ctx.history) == 2)
        runner = hydro.JobRunner(rt)
        assert runner.run(job) == 0
        assert [h["metrics"]["x"]["mean"] for h in runner.history] == [0.0, 1.0]
