#!/usr/bin/env bash
# Issue 32, Slurm's own suspends (scripts/slurm-local's partitions; docs/admins-guide.md, "Suspend
# preemption and gang scheduling"): the example ($train: C++, or Python with
# HYDRO_TEST_PROGRAM=python) on TASKS tasks, its process group's timeout 3 s, is suspended by Slurm
# itself, each time for longer than that timeout:
#   partition: a job of the "high" partition (PriorityTier 2) suspends it in "low"
#              (PreemptMode=SUSPEND), twice; the gang scheduler resumes it when the preemptor ends;
#   gang:      it shares the CPUs of the "slice" partition (OverSubscribe=FORCE:2) with another job,
#              taking turns of SchedulerTimeSlice (5 s), suspended at the end of each of its turns,
#              until the test cancels the other job after two.
# Every rank logs a pause before each freeze (each one the test saw: a suspend lasts 4 s or more),
# and the weights equal a run never suspended.
#   suspend_preempt.sh PROCTRACK partition|gang TASKS
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup} mode=${2:-partition} tasks=${3:-1}
case "$mode" in partition|gang) ;; *) fail "suspend_preempt.sh: mode must be partition or gang, not '$mode'" ;; esac
start_cluster "$proctrack"

make_work
# 50 ms a step (a sleep after it, which leaves the weights as they are): the job trains for 25 s
# at least, through two turns of gang time slicing; the reference run, without it, is quick.
args=(--steps "${HYDRO_TEST_STEPS:-500}" --log-every 1 --pg-timeout 3 "${model[@]}")
note "reference: $tasks task(s), never suspended"
want=$(reference_run -n "$tasks" --hydro-pause=on -- "${args[@]}")
note "reference weights_digest=$want"

# paused_while_frozen N: each rank has logged its Nth pause, and the job is still suspended: a
# frozen rank writes nothing, so the line came before the freeze (SIGSTOP, 2 s after SIGTSTP).
paused_while_frozen() {
  wait_every_rank 'pause requested by SIGTSTP' "$1" 4
  [ "$(job_state "$job")" = SUSPENDED ] || fail "the job was resumed before every rank logged its pause $1"
}

partition=low
[ "$mode" = gang ] && partition=slice
submit_ranks "$tasks" -p "$partition" --hydro-pause=on -- "${args[@]}" --step-ms 50
note "job $job: $tasks task(s) in partition $partition, the process group's timeout 3 s"
wait_state "$job" RUNNING 60
wait_for "$(rank_log $((tasks - 1)))" '^step ' 120
wait_ranks_advance 5

if [ "$mode" = partition ]; then
  for i in 1 2; do
    high=$(sbatch --parsable -p high --exclusive -o "$work/high$i.log" --wrap 'echo preemptor ran; sleep 6') ||
      fail "sbatch -p high failed"
    wait_state "$job" SUSPENDED 60
    freezes=$i
    paused_while_frozen "$i"
    note "preemptor $high (partition high) suspended job $job at step $(last_step "$(rank_log 0)")"
    wait_state "$high" COMPLETED 60
    grep -q 'preemptor ran' "$work/high$i.log" || fail "the preemptor did not run"
    wait_state "$job" RUNNING 60
    wait_every_rank 'resume requested by SIGCONT' "$i"
    note "the gang scheduler resumed job $job once the preemptor ended"
    wait_ranks_advance 5
  done
else
  other=$(sbatch --parsable -p slice -n 2 -o "$work/other.log" --wrap 'sleep 300') || fail "sbatch -p slice failed"
  note "job $other (partition slice, every CPU) now takes turns with job $job"
  for i in 1 2; do
    wait_state "$job" SUSPENDED 60
    freezes=$i
    paused_while_frozen "$i"
    note "job $job suspended at the end of its turn, at step $(last_step "$(rank_log 0)")"
    wait_state "$job" RUNNING 60
  done
  scancel "$other"
  note "job $other cancelled: job $job trains alone again"
fi

wait_state "$job" COMPLETED 300
for ((r = 0; r < tasks; r++)); do
  paused=$(count "$(rank_log $r)" 'pause requested by SIGTSTP')
  [ "$paused" -ge "$freezes" ] || fail "rank $r logged $paused pauses for $freezes suspends of its job"
done
grep -hiE 'timed out|timeout waiting|Connection closed|hang:' "$work"/rank*.log &&
  fail "a rank timed out or was taken for hung while the job was suspended"
ranks_digest "$want"
note "every rank paused before each of $freezes suspends by Slurm ($mode) and ended with weights_digest=$want"
echo "PASS suspend_preempt ($proctrack, $mode, $tasks task(s))"
