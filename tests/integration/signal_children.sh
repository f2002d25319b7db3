#!/usr/bin/env bash
# SignalChildrenProcesses=yes (cgroup.conf, Slurm 23.11 and later; issue 55): proctrack/cgroup then
# sends Slurm's signals to every process of the step, not only to slurmstepd's children. Under
# sbatch with hydro-launch, the training program (hydro-launch's child) gets each signal twice, from
# Slurm and from hydro-launch, and its DataLoader workers get them too: SIGTSTP at a suspend, SIGCONT
# at the resume, SIGTERM at the requeue. The Python example reads its batches through
# hydro.DataLoader with 2 workers; it pauses, resumes, checkpoints and requeues as without the
# setting, and the job ends bit-for-bit. slurmstepd's log shows SIGTSTP sent to both workers and
# to the program, and SIGTERM to the program; a worker that died of SIGTERM would fail the step.
#   signal_children.sh          (proctrack/cgroup, a Slurm of 23.11 or later: the Debian 13 tier's)
export HYDRO_TEST_PROGRAM=python
source "$(dirname "$0")/lib.sh"
start_cluster cgroup --signal-children --slurmd-debug debug2
slurmd_log=$HYDRO_SLURM_DIR/log/$(ls "$HYDRO_SLURM_DIR/log" | grep -m1 '^slurmd')
grep -qx SignalChildrenProcesses=yes "$HYDRO_SLURM_DIR/cgroup.conf" || fail "cgroup.conf lacks SignalChildrenProcesses=yes"

steps=${HYDRO_TEST_STEPS:-600}
make_work
args=(--steps "$steps" --log-every 10 --workers 2 "${model[@]}")
log=$work/job.log
note "reference: the same example, never interrupted"
want=$(reference_run -n 1 -- "${args[@]}") || fail "no weights_digest in the reference run"
note "reference weights_digest=$want"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
export HYDRO_SUSPEND_CHECKPOINT=off
exec "$launch" -- "$train" ${args[*]} --step-ms $(paced 30)
JOB
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append --hydro-pause=on -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 30
show_new "$log"

# program: the example's pid, as hydro-launch logged it; workers: its children (the DataLoader's).
program() { grep -oP 'started .* as pid \K[0-9]+' "$log" | tail -1; }
workers() { pgrep -P "$(program)" || true; }
signalled() { grep -q "sending process $1 (inherited_task) signal $2\b" "$slurmd_log"; }

note "scontrol suspend: SIGTSTP to the program (from Slurm and from hydro-launch) and to its workers"
# The workers of an epoch end with it (not persistent): a suspend that lands between two epochs
# finds other workers than those Slurm signalled. Resume and suspend again then.
for attempt in $(seq 5); do
  pauses=$(count "$log" 'paused at (operator |the end of step)')
  scontrol suspend "$job"
  wait_state "$job" SUSPENDED
  wait_count "$log" 'paused at (operator |the end of step)' $((pauses + 1)) 10
  mapfile -t suspended_workers < <(workers)
  for _ in $(seq 30); do
    all=1
    for w in "${suspended_workers[@]}"; do signalled "$w" 20 || all=0; done
    [ "$all" = 1 ] && break
    sleep 0.1
  done
  [ "${#suspended_workers[@]}" = 2 ] && [ "$all" = 1 ] && break
  [ "$attempt" = 5 ] && fail "in 5 suspends, never 2 workers that slurmstepd sent SIGTSTP: ${suspended_workers[*]}"
  note "workers ${suspended_workers[*]} are not those signalled (an epoch's end): resume and suspend again"
  scontrol resume "$job"
  wait_count "$log" 'resumed at (operator |the end of step)' $((pauses + 1)) 10
  wait_steps "$log" 20
done
signalled "$(program)" 20 || fail "slurmstepd sent no SIGTSTP to the program, hydro-launch's child"
grep -q "forwarding SIGTSTP to pid $(program)" "$log" || fail "hydro-launch did not forward SIGTSTP too"
note "slurmstepd sent SIGTSTP to the workers ${suspended_workers[*]} and to the program $(program), which hydro-launch sent it too"
holds "$log" "suspended"
frozen=$held
show_new "$log"

note "scontrol resume: SIGCONT to all; training goes on"
scontrol resume "$job"
wait_for "$log" 'resumed at (operator |the end of step)' 10
wait_steps "$log" 30
show_new "$log"

note "scontrol requeue: SIGTERM to the program (from Slurm and hydro-launch) and its workers; it checkpoints and requeues"
scontrol requeue "$job"
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
signalled "$(program)" 15 || fail "slurmstepd sent no SIGTERM to the program, hydro-launch's child"
! grep -qiE 'DataLoader worker .* (killed|exited unexpectedly)' "$log" || fail "a DataLoader worker died of Slurm's SIGTERM"
ck=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
resume_requeued "$job" "$log" 1 "$ck"
expect_weights "$job" "$log" "$want"
note "weights_digest=$got equals the uninterrupted run (suspended at step $frozen, requeued at $ck, 2 workers signalled by Slurm)"
echo "PASS signal_children"
