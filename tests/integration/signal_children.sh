#!/usr/bin/env bash
# SignalChildrenProcesses=yes (cgroup.conf, Slurm 23.11 and later; issue 55): proctrack/cgroup then
# sends Slurm's signals to every process of the step, not only to slurmstepd's children. Under
# sbatch with hydro-launch, the training program (hydro-launch's child) gets each signal twice, from
# Slurm and from hydro-launch, and its DataLoader workers get them too: SIGTSTP at a suspend, SIGCONT
# at the resume, SIGTERM at the requeue. The Python example reads its batches through
# hydro.DataLoader with 2 workers; it pauses, resumes, checkpoints and requeues as without the
# setting, slurmstepd's log shows the workers signalled, and the job ends bit-for-bit.
#   signal_children.sh          (proctrack/cgroup, a Slurm of 23.11 or later: the Debian 13 tier's)
export HYDRO_TEST_PROGRAM=python
source "$(dirname "$0")/lib.sh"
start_cluster cgroup --signal-children --slurmd-debug debug2
slurmd_log=$HYDRO_SLURM_DIR/log/$(ls "$HYDRO_SLURM_DIR/log" | grep -m1 '^slurmd')
grep -qx SignalChildrenProcesses=yes "$HYDRO_SLURM_DIR/cgroup.conf" || fail "cgroup.conf lacks SignalChildrenProcesses=yes"

steps=${HYDRO_TEST_STEPS:-600}
work=$(mktemp -d /tmp/hydro-it.XXXXXX)
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

# workers: the pids of the example's children (its DataLoader's workers), by the pid hydro-launch logged.
workers() { pgrep -P "$(grep -oP 'started .* as pid \K[0-9]+' "$log" | tail -1)" || true; }

note "scontrol suspend: SIGTSTP to the program (twice) and to its workers; the pause holds"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_for "$log" 'hydro\[[0-9]+\] .*: paused at (operator |the end of step)' 10
mapfile -t suspended_workers < <(workers)
[ "${#suspended_workers[@]}" = 2 ] || fail "the example has ${#suspended_workers[@]} workers, not 2: ${suspended_workers[*]}"
for w in "${suspended_workers[@]}"; do
  wait_for "$slurmd_log" "sending process $w \(inherited_task\) signal 20\b" 10
done
note "slurmstepd sent SIGTSTP to the workers ${suspended_workers[*]}: $(grep -c 'inherited_task) signal 20' "$slurmd_log") inherited processes in all"
frozen=$(last_step "$log")
sleep 1
[ "$(last_step "$log")" = "$frozen" ] || fail "training advanced while suspended"
show_new "$log"

note "scontrol resume: SIGCONT to all; training goes on"
scontrol resume "$job"
wait_for "$log" 'resumed at (operator |the end of step)' 10
wait_steps "$log" 30
show_new "$log"

note "scontrol requeue: SIGTERM to the program (twice) and its workers; it checkpoints and requeues"
scontrol requeue "$job"
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
grep -q 'inherited_task) signal 15\b' "$slurmd_log" || fail "slurmstepd sent no SIGTERM to the step's inherited processes"
! grep -qiE 'DataLoader worker .* (killed|exited unexpectedly)' "$log" || fail "a DataLoader worker died of Slurm's SIGTERM"
ck=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
resume_requeued "$job" "$log" 1 "$ck"
expect_weights "$job" "$log" "$want"
note "weights_digest=$got equals the uninterrupted run (suspended at step $frozen, requeued at $ck, 2 workers signalled by Slurm)"
rm -rf "$work"
echo "PASS signal_children"
