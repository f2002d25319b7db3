#!/usr/bin/env bash
# In-job restart when a task fails after another task's program has ended well (as a crash in
# teardown does): srun -n 2 hydro-launch --restarts 1, rank 1's task exits 3 after its program's
# last step, in generation 0 only, once rank 0's task has ended well (its hydro-launch reaped it).
# Rank 0's hydro-launch stays in the restart group until every task's program has ended, so both
# start again together as generation 1 from the newest checkpoint, inside the same allocation (no
# requeue), and end with the weights of a run never interrupted.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"

steps=${HYDRO_TEST_STEPS:-400}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300)
note "reference: 2 tasks, never interrupted"
want=$(reference_run -n 2 -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/fails_at_end.sh" <<'TASK'
#!/bin/bash
dir=$(dirname "$0")
[ "${HYDRO_RESTART_GENERATION:-0}" = 0 ] && echo $$ >"$dir/task$SLURM_PROCID.pid"
"$@"
rc=$?
if [ "$rc" = 0 ] && [ "$SLURM_PROCID" = 1 ] && [ "${HYDRO_RESTART_GENERATION:-0}" = 0 ]; then
  for _ in $(seq 3000); do  # until rank 0's task is gone (a zombie still answers kill -0), up to 300 s
    p=$(cat "$dir/task0.pid" 2>/dev/null) && [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null && break
    sleep 0.1
  done
  echo "rank 1: the task fails after its program ended well"
  exit 3
fi
exit $rc
TASK
chmod 0755 "$work/fails_at_end.sh"
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -o "$work/rank%t.log" --open-mode=append "$launch" --restarts 1 -- "$work/fails_at_end.sh" "$train" ${args[*]}
JOB
log=$work/batch.log
export HYDRO_TEST_LOGS="$log $work/rank0.log $work/rank1.log"
job=$(sbatch --parsable --requeue --open-mode=append --hydro-checkpoint-every=150 -n 2 -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
note "job $job: 2 tasks, a checkpoint every 150 of $steps steps; rank 1's task fails once its program has ended"
wait_state "$job" COMPLETED 300
for r in 0 1; do
  wait_for "$work/rank$r.log" "starting generation 1" 10
  wait_for "$work/rank$r.log" "resumed from .* at step 300$" 10
done
grep -q "generation 1 was called after this task's program ended well" "$work/rank0.log" ||
  fail "rank 0 did not follow the call after its program ended well"
[ "$(grep -c '^restart count:' "$log")" = 1 ] || fail "the job was requeued: $(grep '^restart count:' "$log" | tr '\n' ' ')"
! grep -h 'requeue' "$work"/rank*.log || fail "a task asked for a requeue"
got=$(grep -hoP '^weights_digest=\K\w+' "$work"/rank*.log | sort -u)
[ "$(cat "$work"/rank*.log | grep -c '^weights_digest=')" = 4 ] ||
  fail "not every rank printed a weights_digest in both generations"
[ "$got" = "$want" ] || fail "weights differ: $got against the uninterrupted $want"
note "both tasks started again as generation 1 after rank 0's program had ended; weights_digest=$got as uninterrupted"
echo "PASS in_job_restart_end"
