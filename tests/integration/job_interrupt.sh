#!/usr/bin/env bash
# Issue 5's promise on a real Slurm: hydro-example-train (a folder of sample files, the distributed
# sampler, the JobRunner, dropout) is requeued K=3 times at random steps (SIGTERM, a checkpoint,
# restart from it) and ends with the same weights digest and the same per-epoch loss means,
# bit for bit, as a run never interrupted. With a second argument of 2: srun -n 2 and Gloo.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
tasks=${2:-1}
start_cluster "$proctrack"

job_bin=$job_example
make_work
"$job_bin" --make-data 512 --data "$work/data" >/dev/null || fail "could not write the sample files"
args=(--data "$work/data" --epochs 4 --batch 8 --log-every 2 --pg-timeout 300)

note "reference: never interrupted ($tasks task(s))"
srun -n "$tasks" "$job_bin" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
want=$(grep -E '^(epoch [0-9]+ loss_mean|weights_digest=)' "$work/reference.log" | sort -u)
[ -n "$want" ] || fail "the reference printed no epochs"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -n $tasks "$launch" -- "$job_bin" ${args[*]} --step-ms 30
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append -n "$tasks" -o "$log" "$work/job.sh") || fail "sbatch failed"
at=()
for k in 1 2 3; do
  wait_state "$job" RUNNING 120
  # 10-29 steps past the last one printed: three runs of at most 29 leave 41 of the 128 steps
  # (two tasks) for the signals' lag, at 30 ms a step.
  wait_steps "$log" $((10 + RANDOM % 20))
  scontrol requeue "$job"
  wait_count "$log" 'checkpoint of step [0-9]+ committed.*exiting' "$((k * tasks))" 60
  at+=("$(grep -oP 'checkpoint of step \K[0-9]+(?= committed.*exiting)' "$log" | tail -1)")
  release "$job"
  wait_for "$log" "^restart count: $k\$" 60
done
wait_state "$job" COMPLETED 300
show_new "$log"
got=$(grep -E '^(epoch [0-9]+ loss_mean|weights_digest=)' "$log" | sort -u)
[ "$got" = "$want" ] || fail "interrupted at steps ${at[*]}: results differ:
$got
uninterrupted:
$want"
echo "$got" | sed 's/^/    | /'
note "requeued at steps ${at[*]}: the same weights digest and epoch loss means as the uninterrupted run"
echo "PASS job_interrupt ($proctrack, $tasks task(s))"
