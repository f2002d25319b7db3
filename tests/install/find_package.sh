#!/usr/bin/env bash
# cmake --install lays out bin/, lib/slurm/, include/hydro/, lib/cmake/hydro/ and etc/hydro/, and a
# user's project builds against it with find_package(hydro) and runs.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${HYDRO_BUILD_DIR:?}
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
echo "PASS install layout and find_package(hydro)"
