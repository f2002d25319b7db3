#!/usr/bin/env bash
# run_target.sh TARGET SEEDS SECONDS: runs a fuzz target for SECONDS (HYDRO_FUZZ_SECONDS instead,
# where set: CI's budget, from scripts/test) on a copy of its seeds (the tree's corpus stays as it
# is), then prints what it did: executions, coverage (edges and features) and the corpus's size.
# A crash or a failed property fails the test, with the input.
set -euo pipefail
target=$1 seeds=$2 seconds=${HYDRO_FUZZ_SECONDS:-$3}
work=$(mktemp -d /tmp/hydro-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
[ -d "$seeds" ] && cp -r "$seeds"/. "$work/corpus/"
cd "$work"
"$target" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" >"$work/log" 2>&1 || {
  tail -40 "$work/log" >&2
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do [ -f "$f" ] && { echo "input $f:" >&2; od -c "$f" | head -20 >&2; }; done
  exit 1
}
runs=$(grep -oP 'stat::number_of_executed_units:\s*\K\d+' "$work/log")
cov=$(grep -oP '#\d+\s+DONE\s+cov: \K\d+' "$work/log" || grep -oP 'cov: \K\d+' "$work/log" | tail -1)
ft=$(grep -oP '#\d+\s+DONE.*ft: \K\d+' "$work/log" || true)
echo "$(basename "$target"): $runs executions in ${seconds}s, coverage $cov edges${ft:+, $ft features}, corpus $(ls "$work/corpus" | wc -l) inputs"
