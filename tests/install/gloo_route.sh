#!/usr/bin/env bash
# gloo_route.sh PYTHON ROUTE: a clean build directory configured against PYTHON's torch picks
# join_gloo_group's ROUTE ("gloo": c10d's Gloo; "store": hydro's collectives over the TCPStore)
# whatever else this host has installed. Debian's gloo headers (libgloo-dev, which scripts/setup
# installs for the oldest tier) must be here: with them a PyPI torch's tier must still take the
# store route, as it does where scripts/demo built it before they were installed (issue 54).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
python=${1:-} route=${2:-}
case "$route" in
  gloo) want="join_gloo_group runs c10d's Gloo" ;;
  store) want="join_gloo_group runs hydro's collectives over the TCPStore" ;;
  *) echo "usage: gloo_route.sh PYTHON gloo|store" >&2; exit 2 ;;
esac
[ -f /usr/include/gloo/algorithm.h ] ||
  { echo "FAIL: no /usr/include/gloo/algorithm.h: install libgloo-dev (scripts/setup) for this test to mean anything"; exit 1; }
work=$(mktemp -d /tmp/hydro-gloo-route.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake -S "$src" -B "$work" -DHYDRO_PYTHON="$python" -DHYDRO_BUILD_PYTHON=ON -DHYDRO_BUILD_CORE_TESTS=OFF \
  >"$work/configure.log" 2>&1 || { tail -20 "$work/configure.log"; echo "FAIL: configuring against $python"; exit 1; }
got=$(grep -o 'join_gloo_group runs [^(]*' "$work/configure.log" || echo "no route line")
grep -qF "$want" <<<"$got" || { echo "FAIL: $python's tier: $got, expected: $want"; exit 1; }
echo "PASS: a clean configure against $python: $got"
