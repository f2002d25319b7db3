#!/usr/bin/env bash
# In-job restart (hydro-launch --restarts N): the training program is killed with SIGKILL at a
# random step, twice; hydro-launch starts it again inside the same allocation (the same job, no
# requeue: SLURM_RESTART_COUNT stays 0) from its newest periodic checkpoint, and the job ends with
# the weights of a run never interrupted. Prints the time from the kill to the first step after the
# restart.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack"

steps=${HYDRO_TEST_STEPS:-3000}
make_work
args=(--steps "$steps" --log-every 25 "${model[@]}")

note "reference: the same example, never interrupted"
want=$(reference_digest 1 "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec "$launch" --restarts 2 -- $(paced_program 2 5 "$train" "${args[@]}")
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append --hydro-checkpoint-every=100 -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
RANDOM=${HYDRO_TEST_SEED:-$$}
note "job $job trains with a checkpoint every 100 steps (seed $RANDOM for the kills)"
for k in 1 2; do
  wait_steps "$log" $((150 + RANDOM % 200))
  pid=$(grep -oP 'hydro-launch\[[0-9]+\] .*: started \S+ as pid \K[0-9]+' "$log" | tail -1)
  at=$(last_step "$log")
  note "kill $k: SIGKILL to the program (pid $pid) near step $at"
  kill -KILL "$pid" || fail "could not kill pid $pid"
  wait_for "$log" "the program was killed by SIGKILL; restart $k of --restarts 2 \\(generation $k\\)" 30
  wait_count "$log" 'resumed from .* at step [0-9]+$' "$k" 60
  wait_count "$log" 'first step done' $((k + 1)) 60
  show_new "$log"
done
wait_state "$job" COMPLETED 300
show_new "$log"
[ "$(grep -c '^restart count:' "$log")" = 1 ] || fail "the job was requeued: $(grep '^restart count:' "$log" | tr '\n' ' ')"
got=$(grep -oP '^weights_digest=\K\w+' "$log") || fail "the job printed no weights_digest"
[ "$got" = "$want" ] || fail "weights differ: restarted twice $got, uninterrupted $want"
note "weights_digest=$got equals the uninterrupted run; the same job (no requeue), two in-job restarts"
restart_ms=$(ms_between "$log" 'the program was killed by SIGKILL; restart 2' 'first step done')
report_figure "FIGURE path=in_job_restart failure_to_first_step_ms=$restart_ms (a requeue waits for Slurm: see requeue's restart_to_first_step_ms plus the queue)"
echo "PASS in_job_restart ($proctrack)"
