#!/usr/bin/env bash
# Path 3, preemption (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE, GraceTime=30 on the
# debug partition; see scripts/slurm-local): a job in the "high" partition needs the node, Slurm
# sends the hydro job SIGTERM, the job checkpoints within the grace time, is requeued, and after
# the preemptor ends resumes and finishes with the weights of a run never preempted.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
tasks=${2:-1}  # 2: srun -n 2, a Gloo process group; one consistent checkpoint, every rank resumed
nodes=${3:-1}  # 2 or more: the tasks spread over that many hosts (scripts/slurm-local --nodes)
start_spread "$proctrack" "$tasks" "$nodes"

steps=${HYDRO_TEST_STEPS:-6000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
# The job sleeps 5 ms a step, so that it is still training when the preemption comes.

note "reference: the same example, never interrupted"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
# Preemption signals the job's steps, not the batch shell: run hydro-launch as a step.
exec srun ${shape[*]} "$launch" -- "$train" ${args[*]} --step-ms $(paced 5)
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --exclusive --open-mode=append -p debug "${shape[@]}" -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 200
note "job $job is training; a job in the high partition now needs the whole node"

high=$(sbatch --parsable --exclusive -p high -o "$work/high.log" --wrap 'echo preemptor ran; sleep 2') ||
  fail "sbatch -p high failed"
wait_for "$log" 'checkpoint-and-exit requested by SIGTERM' 30
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
show_new "$log"
wait_state "$high" 'RUNNING|COMPLETED' 60
wait_state "$high" COMPLETED 60
grep -q 'preemptor ran' "$work/high.log" || fail "the preemptor did not run"
note "the preemptor $high ran and ended; job $job was requeued"
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_count "$log" 'resumed from .* at step [0-9]+$' "$tasks" 60
expect_weights "$job" "$log" "$want" "$tasks"
note "weights_digest=$got equals the uninterrupted run"
report_path "preemption(n=$tasks)" "$log" 'checkpoint-and-exit requested by SIGTERM'
echo "PASS preempt ($proctrack, $tasks task(s))"
