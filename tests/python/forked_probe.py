"""tests/python/test_forkserver.py's program: prints what a fresh interpreter would give it (argv,
directory, environment, stdio, imports), then exits as its arguments say."""
import os
import signal
import sys
import time

import numpy

print("argv", sys.argv, "orig_argv", sys.orig_argv[1:])
print("cwd", os.getcwd(), "path0", sys.path[0], "name", __name__)
print("env", os.environ.get("HYDRO_PROBE"), os.environ.get("OTHER"))
for name, f in (("stdout", sys.stdout), ("stderr", sys.stderr)):
    print(name, type(f.buffer).__name__, f.write_through, f.line_buffering, f.encoding, f.errors)
print("numpy", numpy.__version__, "hydro" in sys.modules)
sys.stdout.flush()
how = sys.argv[1]
if how == "exit":
    sys.exit(int(sys.argv[2]))
if how == "raise":
    raise RuntimeError("raised by the probe")
if how == "wait":
    print("pid", os.getpid(), os.getppid(), flush=True)
    time.sleep(600)
if how == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
