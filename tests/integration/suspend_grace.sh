#!/usr/bin/env bash
# Slurm's suspend grace time (issue 55): from Slurm 23.11, `scontrol suspend` sends SIGTSTP and
# freezes the job PreemptParameters=suspend_grace_time seconds later (default 2). The plugin reads
# it from the slurm.conf slurmd read and hands it to each task (HYDRO_SUSPEND_GRACE); the suspend
# checkpoint plans against it. The job's steps take about 3 s (paced), its checkpoint milliseconds:
#   GRACE 6: SIGTSTP lets the step end and a checkpoint commit before the freeze (3 s is within
#     3/4 of 6 s), and the log names the 6 s and slurm.conf. Requeued while suspended (SIGKILL),
#     the job resumes at that step and ends with the weights of a run never interrupted.
#   GRACE 2 (slurm.conf sets none: Slurm's default): no checkpoint first, and the log says why
#     (the last step and checkpoint took more than 3/4 of 2 s).
#   suspend_grace.sh PROCTRACK GRACE      (a Slurm of 23.11 or later: the Debian 13 tier's)
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
grace=${2:-6}
conf_args=()
[ "$grace" = 2 ] || conf_args=(--suspend-grace "$grace")
start_spread "$proctrack" 1 1 "${conf_args[@]}"

steps=${HYDRO_TEST_STEPS:-300}
make_work
args=(--steps "$steps" --log-every 1 "${program_args[@]}" "${model[@]}")
log=$work/job.log
if [ "$grace" != 2 ]; then
  note "reference: the same example, never interrupted"
  want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"
fi

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec "$launch" -- "$train" ${args[*]} --step-ms $(paced 3000)
JOB
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" --hydro-pause=on -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 1
# The first checkpoint measures how long one takes; until then SIGTSTP pauses at an operator.
scancel -b --signal=WINCH "$job" 2>/dev/null || scancel -b --signal=28 "$job"
wait_count "$log" 'checkpoint of step [0-9]+ committed .*\(requested\)' 1 30
# A step is timed at its end, from the end before (a step prints its line first, then ends): two
# more lines, and the step after the checkpoint has been timed.
wait_steps "$log" 2

note "scontrol suspend with suspend_grace_time=$grace"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
window="within the $grace s of Slurm's suspend grace time \\(HYDRO_SUSPEND_GRACE, from slurm.conf's PreemptParameters \\($SLURM_CONF\\)\\)"
if [ "$grace" = 2 ]; then
  why="no checkpoint first: the last step and checkpoint took [0-9.]+ s, more than 3/4 of the suspend grace time \\(1.50 s\\) \\(the 2 s of Slurm's suspend grace time \\(HYDRO_SUSPEND_GRACE, from Slurm's default \\($SLURM_CONF sets no PreemptParameters=suspend_grace_time\\)\\)\\)"
  wait_for "$log" "pause requested by SIGTSTP; $why" 10 || fail "SIGTSTP's line does not say why no checkpoint comes first"
  show_new "$log"
  ! grep -q 'before the suspend' "$log" || fail "a checkpoint was taken before the suspend with the default 2 s"
  scontrol resume "$job"
  scancel "$job"
  echo "PASS suspend_grace ($proctrack, Slurm's default 2 s: no suspend checkpoint, and why)"
  exit 0
fi
wait_for "$log" "pause requested by SIGTSTP; the step ends and a checkpoint commits first, $window" 10 ||
  fail "SIGTSTP's line does not name the $grace s window from slurm.conf"
wait_count "$log" 'checkpoint of step [0-9]+ committed in .* before the suspend' 1 10
wait_for "$log" 'paused at the end of step' 10
ck=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed in .* before the suspend)' "$log")
commit_ms=$(ms_between "$log" 'pause requested by SIGTSTP' 'before the suspend')
show_new "$log"
[ "$commit_ms" -gt 2000 ] || note "(the step ended sooner than 2 s after SIGTSTP this time: ${commit_ms} ms)"
note "checkpoint of step $ck committed ${commit_ms} ms after SIGTSTP (the freeze comes at $((grace * 1000)) ms)"

note "scontrol requeue while suspended: SIGKILL with no warning; the job resumes at step $ck"
scontrol requeue "$job"
wait_state "$job" 'PENDING|REQUEUE_HOLD|REQUEUED' 60
scontrol release "$job" 2>/dev/null || true
resume_requeued "$job" "$log" 1 "$ck"
expect_weights "$job" "$log" "$want"
report_figure "FIGURE path=suspend_grace(grace=${grace}s) signal_to_commit_ms=$commit_ms"
echo "PASS suspend_grace ($proctrack, suspend_grace_time=$grace: a checkpoint of a 3 s step before the freeze)"
