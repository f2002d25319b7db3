#!/usr/bin/env bash
# The watchdog across hosts: 2 nodes x 2 tasks, each task's hydro-launch serving its own timer FIFO
# and the example arming a timer around each step (--step-timeout).
# - A suspend longer than the timer is no hang: hydro-launch holds the timers while paused.
# - Rank 3 (on node2) then hangs (SIGSTOP): its timer expires and its hydro-launch kills it. Its
#   peers wait for it in their collective under timers of the same step. Rank 3's timer is 3 s and
#   theirs 8 s, so its own hydro-launch sees the hang first: with one length for all, any rank may
#   expire first and its requeue may end rank 3's step before rank 3's timer does (CI, stop 69).
#   The example re-arms one timer at each step's start, never disarmed between steps: a SIGSTOP
#   that landed between a step's disarm and the next one's arm left rank 3 with no timer, and its
#   peers' 8 s timers ran out instead (a loaded run, 7 December 2026).
#   Every task that saw a hang asks for the requeue, the first one requeues the job and the others
#   find it requeued already. The job resumes from its last periodic checkpoint and ends
#   with the weights of a run never interrupted.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack" --nodes 2

steps=${HYDRO_TEST_STEPS:-1500}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
shape=(-N 2 --ntasks-per-node=2)
ranks=(0 1 2 3)
rank_log() { echo "$work/rank$1.log"; }
every_rank() {  # every_rank FUNCTION ARGS...: FUNCTION LOG ARGS... for each rank's log
  local r
  for r in "${ranks[@]}"; do "$1" "$(rank_log "$r")" "${@:2}"; done
}

note "reference: 2 nodes x 2 tasks, never interrupted"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -o "$work/rank%t.log" --open-mode=append \
  bash -c 'exec "\$0" "\$@" --step-timeout \$((SLURM_PROCID == 3 ? 3 : 8))' \
  "$launch" --watchdog-file "$work/watchdog-%j.%t.fifo" -- "$train" ${args[*]} --step-ms $(paced 5)
JOB
log=$work/batch.log
export HYDRO_TEST_LOGS="$log $(every_rank echo | tr '\n' ' ')"
job=$(sbatch --parsable --requeue --open-mode=append --hydro-pause=on --hydro-checkpoint-every=100 "${shape[@]}" \
  -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING
for r in "${ranks[@]}"; do wait_for "$(rank_log "$r")" '^step ' 120; done
every_rank wait_steps 50
note "job $job trains on node1 and node2, each step under a watchdog timer (rank 3: 3 s, the others: 8 s)"

note "scontrol suspend for 12 s, longer than the timers: no rank is killed"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
every_rank wait_for 'watchdog: timers held while the program is paused' 20
sleep 12
scontrol resume "$job"
wait_state "$job" RUNNING
every_rank wait_for 'watchdog: timers run again' 20
every_rank wait_steps 50
grep -l 'watchdog expired' "$work"/rank*.log && fail "the watchdog killed a rank that was only suspended"

note "rank 3 on node2 hangs (SIGSTOP to its program)"
pid=$(grep -oP 'hydro-launch\[[0-9]+\] .*: started \S+ as pid \K[0-9]+' "$(rank_log 3)" | tail -1)
kill -STOP "$pid" || fail "could not stop pid $pid"
wait_for "$(rank_log 3)" "watchdog expired: pid $pid scope 'step'" 30
for _ in $(seq 600); do grep -q "job $job requeued" "$work"/rank*.log && break; sleep 0.1; done
release "$job"
wait_for "$log" '^restart count: 1$' 60
for r in "${ranks[@]}"; do
  ! grep -q "error: .*scontrol requeue" "$(rank_log "$r")" || fail "rank $r's hydro-launch failed to requeue the job"
done
requeued_by=$(grep -l "job $job requeued\$" "$work"/rank*.log | xargs -rn1 basename | tr '\n' ' ')
[ -n "$requeued_by" ] || fail "no task's hydro-launch requeued job $job"
note "rank 3's hydro-launch killed it; the job was requeued (by ${requeued_by}), and no task failed to"
every_rank wait_for 'resumed from .* at step [0-9]+$' 120
wait_state "$job" COMPLETED 600
got=$(cat "$work"/rank*.log | grep -oP '^weights_digest=\K\w+' | sort -u)
[ "$(cat "$work"/rank*.log | grep -c '^weights_digest=')" = 4 ] || fail "not every rank printed a weights_digest"
[ "$got" = "$want" ] || fail "weights differ: hung and requeued $got, uninterrupted $want"
resumed=$(grep -oP 'resumed from .* at step \K[0-9]+' "$(rank_log 0)" | tail -1)
note "every rank resumed at step $resumed; weights_digest=$got equals the uninterrupted run"
echo "PASS multinode_watchdog ($proctrack)"
