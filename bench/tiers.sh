#!/usr/bin/env bash
# The C++ benches of both torch tiers in one run (scripts/paths.sh: the main tier's build against
# torch 2.15.0 from PyPI, the oldest tier's against Debian's libtorch 1.13.1), each bench run
# main, oldest, oldest, main, so a slow spell of the machine falls on both alike; every run's own
# table is printed under its tier's name.
#
#   bench/tiers.sh [BENCH...]   pause, checkpoint, async, restart (default: all four), at small sizes
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
source "$top/scripts/paths.sh"
case "${1:-}" in -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(pause checkpoint async restart)
declare -A args=([pause]="10 300" [checkpoint]="/tmp/hydro-bench-tiers 10 100" [async]="/tmp/hydro-bench-tiers 10 100"
                 [restart]="/tmp/hydro-bench-tiers 10 100")
for b in "${benches[@]}"; do
  [ -n "${args[$b]:-}" ] || { echo "tiers: no bench '$b' (pause, checkpoint, async, restart)" >&2; exit 2; }
  for tier in main oldest oldest main; do
    dir=$build
    [ "$tier" = oldest ] && dir=$oldest_build
    exe=$dir/bench/hydro-bench-$b
    [ -x "$exe" ] || { echo "tiers: no $exe: run scripts/setup" >&2; exit 1; }
    echo "== hydro-bench-$b ${args[$b]} on the $tier tier (torch $("$(build_python "$dir")" -c 'import torch; print(torch.__version__)'))"
    # shellcheck disable=SC2086
    "$exe" ${args[$b]} 2>/dev/null
    rm -rf /tmp/hydro-bench-tiers
  done
done
