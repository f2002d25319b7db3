"""Zero lines for pause: with HYDRO_PAUSE=on (srun/sbatch --hydro-pause=on), a Python program that
was not changed pauses at the next ATen operator on every thread on scontrol suspend or hydroctl
pause, and resumes. hydro-autopause.pth imports this module at interpreter start only when
HYDRO_PAUSE=on; it then waits for `torch` to be imported and starts hydro's pause (no checkpoints:
those need hydro.Runtime). A program that never imports torch pays nothing but this wait."""
import importlib.abc
import importlib.util
import sys


def _launches_workers():
    """torchrun's agent (or torch.distributed.launch's): it trains nothing, and its workers inherit
    from it the pause signals that hydro-launch holds blocked until a runtime takes them. A handler
    here would unblock them, and a pause that came before a worker had imported torch would end
    it."""
    launchers = ("torch.distributed.run", "torch.distributed.launch")
    # python -m torch.distributed.run: runpy imports torch while sys.argv[0] is still "-m". The
    # interpreter's own options only: they end at the script, -c or -m.
    argv = list(getattr(sys, "orig_argv", None) or [])[1:]
    while argv and argv[0].startswith("-") and argv[0] != "-c":
        opt = argv.pop(0)
        if opt.startswith("-m"):
            return (opt[2:] or (argv[0] if argv else "")) in launchers
        if opt in ("-W", "-X") and argv:
            argv.pop(0)
    main = (getattr(sys, "argv", None) or [""])[0]
    return main.rsplit("/", 1)[-1] == "torchrun" or main.endswith(("torch/distributed/run.py",
                                                                   "torch/distributed/launch.py"))


def _start():
    if _launches_workers():
        return
    try:
        from hydro import _C, _pause
        _pause.install()
        if _C.start_pause_only():
            _C.log("pausing at operators (HYDRO_PAUSE=on); checkpoints need hydro.Runtime")
    except Exception as e:  # never break the user's import of torch
        try:
            _pause.uninstall()
        except Exception:
            pass
        sys.stderr.write(f"hydro: warning: the pause for this program is off: {e}\n")


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `torch` is imported, wraps its loader to start hydro after it."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            _start()

        spec.loader.exec_module = exec_module
        return spec


if "torch" in sys.modules:
    _start()
else:
    sys.meta_path.insert(0, _AfterTorch())
