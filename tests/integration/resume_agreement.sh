#!/usr/bin/env bash
# Two tasks under hydro-launch with node-local checkpoint directories (one per task here, as on two
# nodes), HYDRO_CKPT_MODE=sync_all: each task's hydro-launch sees only its own directory. When node
# 1 lost its copy of the newest checkpoint, both ranks resume from the newest step BOTH have, and
# end with the weights of a run never interrupted; when node 1 has none, both start fresh at once
# (instead of rank 1 waiting out the store for a round rank 0 never joins).
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"

make_work
chmod 755 "$work"
# No signal lands in these jobs, so they run the narrow model (lib.sh's model) and few steps: a
# checkpoint every 100, the newest at 200.
args=(--log-every 10 --pg-timeout 120 "${model[@]}")
export HYDRO_CKPT_EVERY=100 HYDRO_CKPT_MODE=sync_all HYDRO_STORE_TIMEOUT=60
run_tasks() {  # run_tasks NAME STEPS: srun -n 2, each task's hydro-launch on its own "node's" directory
  export HYDRO_TEST_LOGS="$work/$1.rank0.log $work/$1.rank1.log"
  srun -n 2 bash -c "exec $launch --checkpoint-dir $work/node\$SLURM_PROCID -- $train --steps $2 ${args[*]} \
    >$work/$1.rank\$SLURM_PROCID.log 2>&1" || fail "$1: srun failed"
}
digest_of() { grep -oP '^weights_digest=\K\w+' "$work/$1.rank0.log" "$work/$1.rank1.log" | cut -d: -f2 | sort -u; }

want=$(reference_digest 2 --steps 300 "${args[@]}") || fail "no reference digest"
note "reference: two ranks, 300 steps, never interrupted: weights_digest=$want"

run_tasks first 200
for r in 0 1; do [ -d "$work/node$r/step-000000000200" ] || fail "node $r has no step 200: $(ls "$work/node$r")"; done
note "both nodes hold steps 100 and 200; node 1 loses its copy of step 200"
rm -rf "$work/node1/step-000000000200"
ln -sfn step-000000000100 "$work/node1/latest"

run_tasks second 300
grep -q 'resuming from step 200' "$work/second.rank0.log" || fail "rank 0's hydro-launch did not find step 200"
grep -q 'resuming from step 100' "$work/second.rank1.log" || fail "rank 1's hydro-launch did not find step 100"
for r in 0 1; do
  grep -q "resumed from $work/node$r/step-000000000100 at step 100" "$work/second.rank$r.log" ||
    fail "rank $r did not resume from step 100 of its node"
done
grep -h 'not every rank can load it' "$work/second.rank0.log" | sed 's/^/    | /'
got=$(digest_of second)
[ "$got" = "$want" ] || fail "weights differ from the run never interrupted: $got vs $want"
note "hydro-launch chose 200 on node 0 and 100 on node 1; both ranks resumed from 100; weights_digest=$got equals the reference"

rm -rf "$work/node1"
run_tasks third 300
for r in 0 1; do
  grep -q 'no checkpoint to resume from: starting at step 0' "$work/third.rank$r.log" || fail "rank $r did not start fresh"
done
got=$(digest_of third)
[ "$got" = "$want" ] || fail "weights differ from the run never interrupted: $got vs $want"
note "node 1 empty: both ranks started at step 0 together; weights_digest=$got equals the reference"
echo "PASS: ranks under hydro-launch agree on the step they resume from"
