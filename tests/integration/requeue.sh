#!/usr/bin/env bash
# Path 2, `scontrol requeue`: SIGTERM, a checkpoint within KillWait, the job requeued by Slurm,
# restarted from that checkpoint. With a second argument of 2: srun -n 2 hydro-launch ..., a Gloo
# process group, one consistent sharded checkpoint, every rank resumed.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
tasks=${2:-1}
nodes=${3:-1}  # 2 or more: the tasks spread over that many hosts (scripts/slurm-local --nodes)
start_spread "$proctrack" "$tasks" "$nodes"

steps=${HYDRO_TEST_STEPS:-3000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")

note "reference: the same example, never interrupted ($tasks task(s))"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun ${shape[*]} "$launch" -- "$train" ${args[*]} --step-ms $(paced 5)
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 200
note "job $job is training; scontrol requeue"
scontrol requeue "$job"
wait_count "$log" 'checkpoint-and-exit requested by SIGTERM' "$tasks" 30
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
show_new "$log"
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_count "$log" 'resumed from .* at step [0-9]+$' "$tasks" 60
wait_state "$job" COMPLETED 300
show_new "$log"
[ "$(grep -c '^weights_digest=' "$log")" = "$tasks" ] || fail "not every rank printed a weights_digest"
got=$(grep -oP '^weights_digest=\K\w+' "$log" | sort -u)
[ "$got" = "$want" ] || fail "weights differ: requeued $got, uninterrupted $want"
note "weights_digest=$got equals the uninterrupted run"
report_path "requeue(n=$tasks)" "$log" 'checkpoint-and-exit requested by SIGTERM'
echo "PASS requeue ($proctrack, $tasks task(s))"
