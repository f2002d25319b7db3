#!/usr/bin/env bash
# In-job restart of several tasks (hydro-launch --restarts N, srun -n 2 with a Gloo group): rank 1's
# program is killed with SIGKILL at a random step, then rank 0's hangs (SIGSTOP) and the watchdog
# kills it. Each time every task's program starts again together, inside the same allocation (the
# same job, no requeue: SLURM_RESTART_COUNT stays 0), from the newest periodic checkpoint, and the
# job ends with the weights of a run never interrupted. With a second argument of 2 the job runs on
# 2 hosts of a multi-host cluster (one task each). Prints the time from the kill to the first step
# of the new generation.
# With a third argument of hang_watch (issue 32): no step timer; rank 0's program is stopped
# (SIGSTOP) alone, and rank 1, waiting for it in a collective, finds the hang with its hang watch
# (the process group's timeout, 4 s of running time): it logs "hang: no step ended", its
# hydro-launch kills it, and every task's program starts again. Prints the running time it took.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
nodes=${2:-1}
mode=${3:-watchdog}
case "$mode" in watchdog|hang_watch) ;; *) fail "in_job_restart_ranks.sh: mode must be watchdog or hang_watch, not '$mode'" ;; esac
if [ "$nodes" = 1 ]; then start_cluster "$proctrack"; else start_cluster "$proctrack" --nodes "$nodes"; fi

steps=${HYDRO_TEST_STEPS:-3000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
step_timer=(--step-timeout 8) job_opts=()
if [ "$mode" = hang_watch ]; then  # hydro watches the groups' timeout under --hydro-pause=on
  args=(--steps "$steps" --log-every 25 --pg-timeout 4 "${model[@]}")
  step_timer=() job_opts=(--hydro-pause=on)
fi
shape=(-N "$nodes" -n 2)
ranks=(0 1)
every_rank() {  # every_rank FUNCTION ARGS...: FUNCTION LOG ARGS... for each rank's log
  local r
  for r in "${ranks[@]}"; do "$1" "$(rank_log "$r")" "${@:2}"; done
}
program_pid() { grep -oP 'hydro-launch\[[0-9]+\] .*: started \S+ as pid \K[0-9]+' "$(rank_log "$1")" | tail -1; }

note "reference: 2 tasks, never interrupted"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

restarts=2
[ "$mode" = hang_watch ] && restarts=1
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -o "$work/rank%t.log" --open-mode=append "$launch" --restarts 2 --watchdog-file "$work/watchdog-%j.%t.fifo" \
  -- $(paced_program "$restarts" 5 "$train" "${args[@]}" "${step_timer[@]}")
JOB
log=$work/batch.log
export HYDRO_TEST_LOGS="$log $(every_rank echo | tr '\n' ' ')"
job=$(sbatch --parsable --requeue --open-mode=append --hydro-checkpoint-every=100 "${job_opts[@]}" "${shape[@]}" -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
for r in "${ranks[@]}"; do wait_for "$(rank_log "$r")" '^step ' 120; done
RANDOM=${HYDRO_TEST_SEED:-$$}
note "job $job trains on 2 tasks with a checkpoint every 100 steps (seed $RANDOM for the kills)"

# generation K: every task's program ended and started again, and trains.
new_generation() {
  local k=$1
  every_rank wait_for "every task's program of generation $((k - 1)) has ended: starting generation $k" 60
  every_rank wait_count 'resumed from .* at step [0-9]+$' "$k" 60
  every_rank wait_count 'first step done' $((k + 1)) 60
}

# interrupt K RANK SIGNAL WHAT: a random stretch of training later, SIGNAL to rank RANK's program;
# every task's program then starts again as generation K.
interrupt() {
  local k=$1 rank=$2 sig=$3 what=$4 pid
  every_rank wait_steps $((150 + RANDOM % 200))
  pid=$(program_pid "$rank")
  note "rank $rank's program (pid $pid) $what near step $(last_step "$(rank_log "$rank")")"
  kill -"$sig" "$pid" || fail "could not signal pid $pid"
  new_generation "$k"
  note "every task's program started again as generation $k:"
  grep -h "generation $k called\|next generation was called" "$work"/rank*.log | tail -2 | sed 's/^/    | /'
}
if [ "$mode" = watchdog ]; then
  interrupt 1 1 KILL "is killed with SIGKILL"
  interrupt 2 0 STOP "hangs (SIGSTOP): the watchdog kills it"
else
  interrupt 1 0 STOP "is stopped alone (SIGSTOP): rank 1 waits for it in a collective"
  wait_for "$(rank_log 1)" 'hang: no step ended in .* over the process groups. timeout of 4\.0 s' 1
  grep -h 'hang: no step ended' "$(rank_log 1)" | sed 's/^/    | /'
fi

wait_state "$job" COMPLETED 300
[ "$(grep -c '^restart count:' "$log")" = 1 ] || fail "the job was requeued: $(grep '^restart count:' "$log" | tr '\n' ' ')"
! grep -h 'requeue' "$work"/rank*.log || fail "a task asked for a requeue"
got=$(cat "$work"/rank*.log | grep -oP '^weights_digest=\K\w+' | sort -u)
[ "$(cat "$work"/rank*.log | grep -c '^weights_digest=')" = 2 ] || fail "not every rank printed a weights_digest"
[ "$got" = "$want" ] || fail "weights differ: restarted $restarts time(s) $got, uninterrupted $want"
note "weights_digest=$got equals the uninterrupted run; the same job (no requeue), $restarts restart(s) of both tasks"
if [ "$mode" = watchdog ]; then
  restart_ms=$(ms_between "$(rank_log 1)" 'the program was killed by SIGKILL' 'first step done')
  report_figure "FIGURE path=in_job_restart_ranks(nodes=$nodes) kill_to_first_step_ms=$restart_ms"
else
  found=$(grep -oP 'hang: no step ended in \K[0-9.]+ s' "$(rank_log 1)" | head -1)
  report_figure "FIGURE path=hang_watch(nodes=$nodes) timeout=4s hang_found_after_running=$found"
fi
echo "PASS in_job_restart_ranks ($proctrack, $nodes node(s), $mode)"
