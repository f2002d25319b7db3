#!/usr/bin/env bash
# The layers are physical: every public header of hydro's core (runtime/include/hydro) compiles on
# its own, with only that directory on the include path, and includes nothing of libtorch (ATen,
# c10, torch), directly or through another header. The torch layer's headers live in
# runtime/torch/include/hydro, which only hydro::runtime puts on its users' path.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cxx=${CXX:-c++}
fail() { echo "FAIL: $*" >&2; exit 1; }
n=0
for h in "$top"/runtime/include/hydro/*.h; do
  name=hydro/$(basename "$h")
  trace=$(echo "#include \"$name\"" | "$cxx" -std=c++17 -fsyntax-only -H -I "$top/runtime/include" -x c++ - 2>&1) ||
    fail "$name does not compile on its own: $trace"
  torch=$(grep -E '^\.+ .*/(ATen|c10|torch)/' <<<"$trace" | head -3 || true)
  [ -z "$torch" ] || fail "$name, a core header, includes libtorch: $torch"
  n=$((n + 1))
done
for h in runtime.h sampler.h sharded_dataset.h job.h distributed.h; do
  [ ! -e "$top/runtime/include/hydro/$h" ] || fail "hydro/$h needs libtorch and belongs in runtime/torch/include/hydro"
  [ -e "$top/runtime/torch/include/hydro/$h" ] || fail "runtime/torch/include/hydro/$h is missing"
done
echo "PASS core_headers: $n core headers compile alone, without libtorch"
