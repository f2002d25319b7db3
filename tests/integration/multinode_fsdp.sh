#!/usr/bin/env bash
# A model sharded by FSDP2 across hosts (issue 34; examples/loop.py --fsdp, CPU and Gloo) on a
# multi-host local cluster (scripts/slurm-local --nodes 2), with a checkpoint directory every node
# shares:
#  1. 4 tasks (2 nodes x 2): a requested checkpoint, a suspend and a resume, then a suspend whose
#     checkpoint commits before the freeze and a requeue while suspended; every rank resumes its own
#     shards at the suspend's step, and the job ends with the weights of a run never interrupted.
#  2. 2 -> 4 ranks: a job of 2 tasks (one a node) ends with a checkpoint of its 2 ranks' shards; a job
#     of 4 tasks resumes it, resharded, with the saved weights exactly (it runs no step: it prints
#     the weights it resumed); a job of 4 tasks in async mode trains on from it, checkpointing every
#     50 steps on each rank's background thread; and a job of 4 tasks resumes that async checkpoint
#     with the weights it ended with.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}" --nodes 2
[ "${HYDRO_TEST_PROGRAM:-}" = python ] && [[ " ${program_args[*]} " == *" --fsdp "* ]] ||
  fail "multinode_fsdp.sh runs the Python example with --fsdp (HYDRO_TEST_PROGRAM=python, HYDRO_TEST_ARGS)"

# The first run steps no faster than 80 ms until the requeue, which lands well before step 400
# (its events took 126 steps here, 3 December 2026); the resumed run and the reference, unpaced,
# are most of the test's CPU.
steps=${HYDRO_TEST_STEPS:-400}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${program_args[@]}" "${model[@]}")
four=(-N 2 --ntasks-per-node=2)
two=(-N 2 --ntasks-per-node=1)

note "reference: 4 ranks on 2 nodes, never interrupted"
want=$(reference_run "${four[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"
[ "$(grep -c '^weights_digest=' "$work/reference.log")" = 4 ] || fail "not every reference rank printed a weights_digest"

note "1. 4 ranks: suspend, resume, then suspended and requeued"
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -o "$work/rank%t.log" --open-mode=append "$launch" -- "$train" ${args[*]} --step-ms $(paced 80)
JOB
rank_count=4
HYDRO_TEST_LOGS="$work/batch.log $(for r in 0 1 2 3; do rank_log $r; done | tr '\n' ' ')"
export HYDRO_TEST_LOGS
job=$(sbatch --parsable --requeue --exclusive --open-mode=append --hydro-pause=on "${four[@]}" -o "$work/batch.log" \
  "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING
for r in 0 1 2 3; do wait_for "$(rank_log $r)" '^step ' 180; done
wait_ranks_advance 50
"$hydroctl" checkpoint "$job" || fail "hydroctl checkpoint failed"  # times a save: the suspend's then fits
wait_every_rank 'checkpoint of step [0-9]+ committed .*\(requested\)' 1 60
wait_ranks_advance 25  # the next vote tells every rank that the suspend's checkpoint fits
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_every_rank 'checkpoint of step [0-9]+ committed .* before the suspend' 1 20
scontrol resume "$job"
wait_state "$job" RUNNING
wait_every_rank 'resume requested by SIGCONT' 1 30
wait_ranks_advance 25
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_every_rank 'checkpoint of step [0-9]+ committed .* before the suspend' 2 20
ck=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed .* before the suspend)' "$(rank_log 0)" | tail -1)
scontrol requeue "$job"  # of a suspended job: SIGKILL with no warning, and the job is held
wait_state "$job" 'PENDING|REQUEUE_HOLD|REQUEUED' 60
scontrol release "$job" 2>/dev/null || true
release "$job"
wait_for "$work/batch.log" '^restart count: 1$' 60
wait_every_rank "resumed from .* at step $ck\$" 1 180
wait_state "$job" COMPLETED 900
ranks_digest "$want"
note "every rank resumed its shards at the suspend's step $ck and ended with weights_digest=$want"

note "2. a checkpoint of 2 ranks resumed on 4, then async saves across hosts"
ck_dir=$work/reshard
run_job() {  # run_job NAME SRUN_OPTIONS... -- LOOP_ARGS...: one job, its output in $work/NAME.log
  local name=$1 opts=()
  shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  HYDRO_TEST_LOGS=$work/$name.log
  srun "${opts[@]}" --hydro-checkpoint-dir="$ck_dir" "$train" "$@" >"$work/$name.log" 2>&1 || fail "job $name failed"
}
digest_of() {  # digest_of NAME RANKS: the one weights_digest every rank of job NAME printed
  local got
  got=$(grep -oP '^weights_digest=\K\w+' "$work/$1.log" | sort -u)
  [ "$(grep -c '^weights_digest=' "$work/$1.log")" = "$2" ] && [ "$(echo "$got" | wc -l)" = 1 ] ||
    fail "job $1: not every rank printed one weights_digest: $got"
  echo "$got"
}
base=(--log-every 25 --pg-timeout 300 "${program_args[@]}")
HYDRO_CKPT_EVERY=100 run_job two "${two[@]}" -- --steps 200 "${base[@]}"
saved=$(digest_of two 2)
run_job resumed "${four[@]}" -- --steps 200 "${base[@]}"
[ "$(grep -c 'resharded: checkpoint of 2 ranks, this job has 4' "$work/resumed.log")" = 4 ] ||
  fail "not every rank of 4 said it resharded the checkpoint of 2"
[ "$(grep -cE 'resumed from .* at step 200$' "$work/resumed.log")" = 4 ] || fail "not every rank resumed at step 200"
[ "$(digest_of resumed 4)" = "$saved" ] || fail "4 ranks resumed other weights than the 2 saved"
note "4 ranks resumed the 2 ranks' checkpoint with its weights, weights_digest=$saved"
HYDRO_CKPT_MODE=async HYDRO_CKPT_EVERY=50 run_job async "${four[@]}" -- --steps 300 "${base[@]}"
[ "$(grep -cE 'resumed from .* at step 200$' "$work/async.log")" = 4 ] || fail "not every async rank resumed at step 200"
[ "$(grep -c 'async checkpoint of step 300 committed' "$work/async.log")" = 1 ] ||
  fail "rank 0 did not report the async checkpoint of step 300 committed"
trained=$(digest_of async 4)
run_job again "${four[@]}" -- --steps 300 "${base[@]}"
[ "$(grep -cE 'resumed from .* at step 300$' "$work/again.log")" = 4 ] || fail "not every rank resumed at step 300"
[ "$(digest_of again 4)" = "$trained" ] || fail "the async checkpoint of 4 ranks resumed other weights than it saved"
manifest=$(cat "$ck_dir"/step-000000000300/manifest.json)
grep -qE '"world_size": ?4([^0-9]|$)' <<<"$manifest" || fail "the async checkpoint of step 300 is not of 4 ranks' shards"
note "4 ranks in async mode saved their shards across hosts; resumed with weights_digest=$trained"
echo "PASS multinode_fsdp"
