"""The training loop the test workers share (compiled_train.py, fsdp_train.py): each step's batch is
drawn from a generator seeded by the step, so every run, every rank and every resume draws the
same ones."""
import torch


def train(rt, opt, loss_of, shapes, steps, resumed=None):
    """From rt.resume()'s step to `steps`: x and y of `shapes` drawn for the step, loss_of(x, y),
    backward and opt.step(); prints "step N" after each. Returns False once rt.step_end() asks the
    program to exit (a checkpoint committed after SIGTERM), True at the end. resumed(), if given,
    is called after a resume from a checkpoint."""
    step = rt.resume()
    if step and resumed is not None:
        resumed()
    while step < steps:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(*shapes[0], generator=g)
        y = torch.randn(*shapes[1], generator=g)
        loss = loss_of(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step}", flush=True)
        if not rt.step_end(step):
            return False
    return True
