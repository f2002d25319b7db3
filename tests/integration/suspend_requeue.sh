#!/usr/bin/env bash
# The walking skeleton end to end on a real Slurm: an sbatch --requeue job running hydro-launch
# with the example is suspended, resumed, requeued by Slurm, requeued by hydro-launch itself,
# and finishes with the same weights as a run never interrupted.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-linuxproc}
start_cluster "$proctrack"

steps=${HYDRO_TEST_STEPS:-6000}
make_work
args=(--steps "$steps" --log-every 25)

note "reference: the same example, never interrupted"
srun --hydro-pause=on "${in_image[@]}" "$train" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
want=$(grep -oP '^weights_digest=\K\w+' "$work/reference.log") || fail "no weights_digest in the reference run"
note "reference weights_digest=$want"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
# The operator-boundary pause; the checkpoint at suspend is tested in suspend_checkpoint.sh.
export HYDRO_SUSPEND_CHECKPOINT=off
exec "$launch" --requeue-signal URG -- "$train" ${args[*]}
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append --hydro-pause=on -o "$log" "$work/job.sh") || fail "sbatch failed"
note "job $job submitted"
wait_state "$job" RUNNING
wait_steps "$log" 100
show_new "$log"

note "scontrol suspend: pause at an operator before the freeze"
# A pause takes hold at the next operator or at the end of the step, whichever comes first; the
# end of a step wins when SIGTSTP lands just before it. Try again (after a resume) until the
# operator wins (it does most times: the end of a step wins only while the watcher thread wakes).
for attempt in $(seq 10); do
  scontrol suspend "$job"
  wait_state "$job" SUSPENDED
  # SIGSTOP (or the cgroup freeze) lands 2 s after SIGTSTP, and a frozen process writes nothing:
  # a "paused at" line that is there after the freeze was written before it.
  wait_for "$log" 'hydro\[[0-9]+\] .*: paused at (operator |the end of step)' 10
  sleep 3
  grep -q 'pause requested by SIGTSTP' "$log" || fail "the pause was not requested by SIGTSTP"
  holds "$log" "suspended"
  show_new "$log"
  if grep -qE 'paused at operator ' "$log"; then break; fi
  [ "$attempt" = 10 ] && fail "the pause never took hold at an operator in 10 suspends"
  note "paused at the end of a step this time; resume and suspend again"
  scontrol resume "$job"
  wait_for "$log" "resumed at the end of step" 10
  wait_steps "$log" 50
done
note "paused at operator $(grep -oP 'paused at operator \K.*(?= \(thread)' "$log" | tail -1) at step $held; the job is frozen"

paused_ms=$(ms_between "$log" 'pause requested by SIGTSTP' 'paused at (operator|the end of step)')
echo "FIGURE path=suspend steps_lost=0 signal_to_paused_ms=$paused_ms (the freeze comes 2000 ms after SIGTSTP)"
[ -z "${HYDRO_FIGURES:-}" ] || echo "FIGURE path=suspend steps_lost=0 signal_to_paused_ms=$paused_ms" >>"$HYDRO_FIGURES"
note "scontrol resume: training continues"
scontrol resume "$job"
wait_for "$log" 'resumed at operator ' 10
wait_steps "$log" 100
show_new "$log"

note "a user's own pause and resume: scancel -b --signal=USR1, then USR2"
pauses=$(count "$log" 'paused at (operator|the end of step)')
scancel -b --signal=USR1 "$job"
wait_for "$log" 'pause requested by SIGUSR1' 10
wait_count "$log" 'paused at (operator|the end of step)' $((pauses + 1)) 10
holds "$log" "paused by the user"
scancel -b --signal=USR2 "$job"
wait_for "$log" 'resume requested by SIGUSR2' 10
wait_steps "$log" 50
show_new "$log"

note "the same with hydroctl pause|resume JOBID"
pauses=$(count "$log" 'paused at (operator|the end of step)')
resumes=$(count "$log" 'resume requested by SIGUSR2')
"$hydroctl" pause "$job" || fail "hydroctl pause $job failed"
wait_count "$log" 'paused at (operator|the end of step)' $((pauses + 1)) 10
"$hydroctl" resume "$job" || fail "hydroctl resume $job failed"
wait_count "$log" 'resume requested by SIGUSR2' $((resumes + 1)) 10
wait_steps "$log" 50
show_new "$log"

note "scontrol requeue: checkpoint within KillWait, restart with SLURM_RESTART_COUNT=1"
scontrol requeue "$job"
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
ck1=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_for "$log" "resuming from step $ck1 " 30
wait_for "$log" "resumed from .* at step $ck1\$" 30
wait_steps "$log" 100
show_new "$log"
report_path requeue "$log" 'checkpoint-and-exit requested by SIGTERM'

note "the launcher's own requeue (as sbatch --signal=B:URG@T does before a time limit): URG to the batch shell"
scancel -b --signal=URG "$job"
wait_for "$log" 'SIGURG: asking the program to checkpoint and exit' 30
wait_for "$log" "$(launcher_requeued "$job")" 30
ck2=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
[ "$ck2" -gt "$ck1" ] || fail "no new checkpoint after URG (last was step $ck1)"
resume_requeued "$job" "$log" 2 "$ck2"
expect_weights "$job" "$log" "$want"
resumed=$(grep -oP 'resumed from .* at step \K[0-9]+' "$log" | tr '\n' ' ')
note "weights_digest=$got equals the uninterrupted run; checkpoints at steps $ck1 $ck2, resumed at steps $resumed: 0 steps lost"
echo "PASS suspend_requeue ($proctrack)"
