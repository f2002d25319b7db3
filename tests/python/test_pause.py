# The operator-boundary pause from Python: it takes hold inside backward() and inside
# optimizer.step(), on the thread running them, and nothing in the release needs the GIL. While a
# pause is pending every thread's next operator blocks, the test's own too: the checks made while
# paused run no torch operator.
import faulthandler
import os
import random
import signal
import threading
import time

import torch

import hydro
from conftest import wait_for
from hydro import _C


# signal.raise_signal, not os.kill: the signal is this thread's, so its handlers (hydro's in C, and
# a Python one, run on the main thread) have run when it returns; a kill() to the process may be
# taken by another thread, and its Python handler run a moment after the test checked.
def pause():
    signal.raise_signal(signal.SIGUSR1)
    wait_for(lambda: _C.pause_state()["armed"])


def resume():
    signal.raise_signal(signal.SIGUSR2)
    wait_for(lambda: not _C.pause_state()["pending"])


def pause_inside(target, inside, go, after):
    """Runs target on a thread; once it is `inside`, pauses, lets it `go` on to its next operator,
    and sees it held there (nothing appended to `after`) until the resume."""
    with hydro.Runtime():
        t = threading.Thread(target=target)
        t.start()
        inside.wait()
        pause()
        go.set()
        wait_for(lambda: _C.pause_state()["threads_waiting"] == 1)
        time.sleep(0.2)
        # No torch operator here: the pause holds every thread, this one too.
        assert after == [] and t.is_alive()
        resume()
        t.join(60)
        assert after == [True]


def test_pause_takes_hold_inside_backward(env, capfd):
    inside, go, after = threading.Event(), threading.Event(), []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            inside.set()
            go.wait()
            out = g.mul(2)  # the next operator: the pause holds here
            after.append(True)
            return out

    x = torch.ones(3, requires_grad=True)
    pause_inside(lambda: Probe.apply(x).sum().backward(), inside, go, after)
    assert torch.equal(x.grad, torch.full((3,), 2.0))
    assert "paused at operator aten::mul" in capfd.readouterr().err


def test_pause_takes_hold_inside_optimizer_step(env, capfd):
    inside, go, after = threading.Event(), threading.Event(), []

    class ProbeSGD(torch.optim.SGD):
        def step(self, closure=None):
            inside.set()
            go.wait()
            out = super().step(closure)  # its first operator: the pause holds there
            after.append(True)
            return out

    w = torch.nn.Parameter(torch.ones(4))
    opt = ProbeSGD([w], lr=0.5)
    w.sum().backward()
    pause_inside(opt.step, inside, go, after)
    assert torch.equal(w.detach(), torch.full((4,), 0.5))
    assert "paused at operator" in capfd.readouterr().err


def test_ten_thousand_pauses_and_resumes_never_deadlock(env):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stop, steps = threading.Event(), [0]

    def train():
        while not stop.is_set():
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps[0] += 1

    with hydro.Runtime():
        t = threading.Thread(target=train)
        t.start()
        rng = random.Random(1)
        held = 0
        for i in range(10_000):
            os.kill(os.getpid(), signal.SIGUSR1)
            if i % 1000 == 0:  # now and then, see it take hold
                wait_for(lambda: _C.pause_state()["threads_waiting"] == 1)
                held += 1
            elif rng.random() < 0.5:
                time.sleep(rng.random() * 1e-4)
            os.kill(os.getpid(), signal.SIGUSR2)
        wait_for(lambda: not _C.pause_state()["armed"])
        before = steps[0]
        wait_for(lambda: steps[0] > before + 10)
        stop.set()
        t.join(60)
        assert not t.is_alive() and held == 10


# The training thread arms the pause itself: hydro's Python handler for the pause signal runs on
# the main thread at its next bytecode (here inside signal.raise_signal, which checks for signals;
# why not os.kill: above pause()), while hydro's watcher thread is held back by the test hook, so it
# cannot be the one that armed it.
def test_the_main_thread_arms_the_pause_without_waiting_for_the_watcher(env):
    env.setenv("HYDRO_TEST_WATCHER_DELAY_MS", "2000")
    with hydro.Runtime():
        assert signal.getsignal(signal.SIGUSR1) is hydro._pause._arm
        signal.raise_signal(signal.SIGUSR1)
        assert _C.pause_state()["pending"] and _C.operator_pause_armed()
        resume()
        wait_for(lambda: not _C.pause_state()["armed"])  # the watcher, late, arms and disarms in turn
    # Closed: the signals' Python handlers are the default again (SIGTSTP stops, SIGUSR1 kills).
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTSTP) == signal.SIG_DFL


def test_a_users_python_handler_for_a_pause_signal_is_kept_and_still_called(env):
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with hydro.Runtime():
            assert signal.getsignal(signal.SIGUSR1) is not hydro._pause._arm
            pause()  # armed by the watcher
            assert seen == [signal.SIGUSR1]
            resume()
        assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_with_pause_off_no_python_handler_is_installed(env):
    env.setenv("HYDRO_PAUSE", "off")
    with hydro.Runtime():
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


# A pause signal whose Python handler runs only after the Runtime closed (it came during close())
# must not arm the pause: no resume could release it any more, and the next operator would hang.
def test_a_late_python_handler_after_close_does_not_arm_the_pause(env):
    with hydro.Runtime():
        pause()
    assert _C.pause_state()["pending"] and not _C.operator_pause_armed()
    _C.arm_pause_now(signal.SIGUSR1)  # what the late handler calls
    assert not _C.operator_pause_armed()
    torch.ones(2).add_(1)  # an operator: runs
    with hydro.Runtime():
        resume()


# A Runtime closed on another thread cannot give the signals back to Python's default there (only
# the main thread may set handlers): the first such signal does it instead, and is dropped.
def test_after_a_close_on_another_thread_the_next_pause_signal_restores_the_default(env):
    rt = hydro.Runtime()
    t = threading.Thread(target=rt.close)
    t.start()
    t.join(60)
    assert signal.getsignal(signal.SIGUSR1) is hydro._pause._arm
    signal.raise_signal(signal.SIGUSR1)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert not _C.pause_state()["pending"]


# A handler set in C, which Python's signal.getsignal() does not see (faulthandler here), is not
# replaced: hydro's C handler chains to it, and the watcher arms the pause.
def test_a_handler_set_in_c_for_a_pause_signal_is_not_replaced(env, tmp_path):
    with open(tmp_path / "tracebacks", "w") as out:
        faulthandler.register(signal.SIGUSR1, file=out, chain=False)
        try:
            with hydro.Runtime():
                assert signal.getsignal(signal.SIGUSR1) is not hydro._pause._arm
                pause()
                resume()
        finally:
            faulthandler.unregister(signal.SIGUSR1)
    assert "Current thread" in (tmp_path / "tracebacks").read_text()
