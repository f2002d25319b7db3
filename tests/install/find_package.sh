#!/usr/bin/env bash
# cmake --install lays out bin/, lib/slurm/, include/hydro/, lib/cmake/hydro/, etc/hydro/ and the
# Python package; a user's project builds against it with find_package(hydro) and runs, and
# the build's interpreter (its HYDRO_PYTHON) imports the installed hydro and checkpoints.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/scripts/paths.sh"
python=$(build_python "$build")
work=$(mktemp -d /tmp/hydro-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/hydro-launch bin/hydro-example-train bin/hydro-example-loop lib/slurm/spank_hydro.so include/hydro/runtime.h \
         lib/cmake/hydro/hydroConfig.cmake etc/hydro/hydro.yaml etc/hydro/plugstack.conf.d/hydro.conf; do
  [ -e "$work/prefix/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
out=$("$work/prefix/bin/hydro-launch" --help)
grep -q -- '--requeue-signal' <<<"$out" || { echo "FAIL: installed hydro-launch --help"; exit 1; }
out=$("$work/prefix/bin/hydro-example-loop" --steps 20 --log-every 10 2>/dev/null)
grep -q '^weights_digest=' <<<"$out" || { echo "FAIL: installed hydro-example-loop did not run"; exit 1; }
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
out=$(HYDRO_CKPT_DIR=$work/ck "$work/consumer/consumer" 2>/dev/null)
grep -qx 'consumer: trained to step 3' <<<"$out" || { echo "FAIL: the consumer did not train"; exit 1; }
# The Python package and its zero-lines pause hook, in the interpreter's site directory under the prefix.
pth=$(find "$work/prefix" -name hydro-autopause.pth)
[ -n "$pth" ] && [ -f "$(dirname "$pth")/hydro/__init__.py" ] || { echo "FAIL: the Python package is not installed"; exit 1; }
out=$(cd / && env -u PYTHONPATH HYDRO_CKPT_DIR="$work/pyck" "$python" -c "
import sys; sys.path.insert(0, '$(dirname "$pth")')
import hydro
assert hydro.__file__.startswith('$work/prefix'), hydro.__file__
import torch
rt = hydro.Runtime(); rt.track('m', torch.nn.Linear(2, 2)); print(rt.save(1))" 2>/dev/null)
[ "$out" = "$work/pyck/step-000000000001" ] || { echo "FAIL: the installed Python package did not checkpoint ($out)"; exit 1; }
echo "PASS install layout, find_package(hydro) and the Python package"
