#!/usr/bin/env bash
# Path 1 with a requeue while suspended: `scontrol suspend` sends SIGTSTP, then SIGSTOP (or the
# cgroup freeze) 2 s later. The example's state checkpoints in milliseconds, so with
# HYDRO_SUSPEND_CHECKPOINT=auto (the default) SIGTSTP lets the step end, commits a checkpoint, then
# pauses. `scontrol requeue` of the suspended job kills it with SIGKILL and no warning; the job is
# held; released, it resumes from the suspend's checkpoint: no step lost. Weights equal a run
# never interrupted.
# With a second argument of 2: srun -n 2 hydro-launch ..., a Gloo process group, sync_any: the
# ranks agree at each step-end vote that the checkpoint fits, checkpoint the same step together
# on SIGTSTP, and both pause there.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
tasks=${2:-1}
nodes=${3:-1}  # 2 or more: the tasks spread over that many hosts (scripts/slurm-local --nodes)
start_spread "$proctrack" "$tasks" "$nodes"

# The narrow model (lib.sh's model); the job's first run steps no faster than 20 ms (paced), so that
# it is still training when the suspend lands, and after the requeue runs unpaced to the end.
steps=${HYDRO_TEST_STEPS:-2000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${program_args[@]}" "${model[@]}")
log=$work/job.log
if [ "$tasks" = 1 ]; then
  run="exec" wake=(-b)  # hydro-launch is the batch shell
else
  # hydro-launch is each task of a step, and appends to the log itself: output relayed through
  # slurmstepd and srun (which the suspend stops too) would show only after the resume.
  run="exec srun ${shape[*]} bash -c 'exec \"\$@\" >>$log 2>&1' task" wake=()
fi

note "reference: the same example, never interrupted ($tasks task(s))"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
$run "$launch" -- "$train" ${args[*]} --step-ms $(paced 20)
JOB
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" --hydro-pause=on -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 300
# The first periodic or requested checkpoint measures how long one takes; until then SIGTSTP
# pauses at an operator. Ask for one now.
scancel "${wake[@]}" --signal=WINCH "$job" 2>/dev/null || scancel "${wake[@]}" --signal=28 "$job"
wait_count "$log" 'checkpoint of step [0-9]+ committed .*\(requested\)' "$tasks" 30
wait_steps "$log" 100

note "scontrol suspend: the step ends, a checkpoint commits, then the pause, all before the freeze"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_count "$log" 'checkpoint of step [0-9]+ committed in .* before the suspend' "$tasks" 10
# Every rank with its SIGTSTP by the end of the save pauses at that step; one whose signal came
# later waits in the next step's collective instead (runtime.cpp), so at least one line.
wait_count "$log" 'paused at the end of step' 1 10
ck=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed in .* before the suspend)' "$log" | sort -u)
paused=$(grep -oP 'paused at the end of step \K[0-9]+' "$log" | sort -u)
[ "$(echo "$ck" | wc -l)" = 1 ] || fail "the ranks checkpointed different steps: $ck"
[ "$ck" = "$paused" ] || fail "checkpointed step $ck but paused at step(s) $paused"
commit_ms=$(ms_between "$log" 'pause requested by SIGTSTP' 'before the suspend')
show_new "$log"
note "checkpoint of step $ck committed ${commit_ms} ms after SIGTSTP (the freeze comes at 2000 ms)"

note "scontrol requeue while suspended: SIGKILL with no warning; the job is held"
scontrol requeue "$job"
wait_state "$job" 'PENDING|REQUEUE_HOLD|REQUEUED' 60
scontrol release "$job" 2>/dev/null || true
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_count "$log" "resumed from .* at step $ck\$" "$tasks" 60
wait_count "$log" '^weights_digest=' "$tasks" 300
wait_state "$job" COMPLETED 60
show_new "$log"
got=$(grep -oP '^weights_digest=\K\w+' "$log" | sort -u)
[ "$got" = "$want" ] || fail "weights differ: $got, uninterrupted $want"
restart_ms=$(ms_between "$log" 'hydro-launch\[[0-9]+\] .*resuming from step' 'first step done')
report_figure "FIGURE path=suspend_then_requeue(n=$tasks) steps_lost=$((paused - ck)) signal_to_commit_ms=$commit_ms restart_to_first_step_ms=$restart_ms"
note "weights_digest=$got equals the uninterrupted run; resumed at the suspend's step $ck"
echo "PASS suspend_checkpoint ($proctrack, $tasks task(s))"
