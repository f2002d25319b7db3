# A stand-in training process using torch elastic's own client, run by the build's interpreter (HYDRO_PYTHON) under
# hydro-launch --watchdog-file (which exports TORCHELASTIC_TIMER_FILE):
#   watchdog_worker.py hang DIR    starts `sleep 1000` (a DataLoader-like child in the same process
#                                  group), writes DIR/sleeper.pid, then hangs inside expires(after=1)
#   watchdog_worker.py finish DIR  leaves expires(after=3) in time, outlives the deadline, writes
#                                  DIR/done and exits 0
import os
import subprocess
import sys
import time

from torch.distributed.elastic import timer

mode, out = sys.argv[1], sys.argv[2]
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))


def write(name, text):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(out, name + ".tmp"), os.path.join(out, name))


# The test's files are written before the 1 s timer is armed, and the quick step does nothing
# inside its 3 s: on a loaded machine the timer must not run out first.
if mode == "hang":
    sleeper = subprocess.Popen(["sleep", "1000"])
    write("sleeper.pid", str(sleeper.pid))
    write("worker.pid", str(os.getpid()))
    with timer.expires(after=1, scope="hung step"):
        time.sleep(1000)
elif mode == "finish":
    with timer.expires(after=3, scope="quick step"):
        pass
    time.sleep(4)
    write("done", "done")
else:
    sys.exit("unknown mode " + mode)
