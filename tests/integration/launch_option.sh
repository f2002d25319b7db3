#!/usr/bin/env bash
# --hydro-launch (issue 56): the plugin runs each task under hydro-launch, found on the task's PATH
# (spank_prepend_task_argv, Slurm 23.11 and later), so a job's command names only its program, as
# with pyxis, where hydro-launch is inside the image.
#   - srun --hydro-launch PROGRAM: hydro-launch starts the program, which ends with the weights of
#     a run never interrupted;
#   - sbatch --requeue --hydro-launch, the batch script exec'ing the program: suspended, resumed,
#     requeued by Slurm, resumed by hydro-launch from the checkpoint it took, bit-for-bit;
#   - a step that a wrapped batch script starts is not wrapped again.
# Before 23.11 the option is refused at submit time, naming the release it needs.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"
make_work
release=$(srun --version | grep -oP '[0-9]+\.[0-9]+' | head -1)
if [ "$(printf '%s\n' "$release" 23.11 | sort -V | head -1)" != 23.11 ]; then
  if err=$(srun --hydro-launch true 2>&1); then fail "srun --hydro-launch ran on Slurm $release"; fi
  grep -qF -- "--hydro-launch needs Slurm 23.11 or later" <<<"$err" || fail "no clear refusal on Slurm $release: $err"
  note "Slurm $release refuses --hydro-launch: $(grep -oF -- '--hydro-launch needs Slurm 23.11 or later' <<<"$err")"
  echo "PASS launch_option ($release: refused)"
  exit 0
fi
export PATH="$(dirname "$launch"):$PATH"  # where each task finds hydro-launch
args=(--steps 1500 --log-every 25 "${model[@]}")
want=$(reference_run -n 1 -- "${args[@]}") || fail "no weights_digest in the reference run"

note "srun --hydro-launch: the program under hydro-launch"
out=$(srun --hydro-launch --hydro-pause=on "$train" "${args[@]}" 2>&1) || fail "srun --hydro-launch failed: $out"
grep -qE "^hydro-launch\[[0-9]+\] .*: started $train " <<<"$out" || fail "hydro-launch did not start the program: $out"
[ "$(grep -oP '^weights_digest=\K\w+' <<<"$out")" = "$want" ] || fail "srun --hydro-launch ended with other weights"
note "$(grep -E '^hydro-launch\[[0-9]+\] .*: started' <<<"$out")"

note "sbatch --hydro-launch: suspend, resume and requeue"
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
export HYDRO_SUSPEND_CHECKPOINT=off
exec "$train" ${args[*]} --step-ms $(paced 10)
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append --hydro-launch --hydro-pause=on -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
wait_steps "$log" 50
grep -qE '^hydro-launch\[[0-9]+\] .*: started ' "$log" || fail "the batch script does not run under hydro-launch"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_for "$log" 'forwarding SIGTSTP' 10
wait_for "$log" 'paused at (operator |the end of step)' 10
scontrol resume "$job"
wait_for "$log" 'resumed at (operator |the end of step)' 10
wait_steps "$log" 50
scontrol requeue "$job"
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
ck=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
resume_requeued "$job" "$log" 1 "$ck"
wait_for "$log" "resuming from step $ck " 30
expect_weights "$job" "$log" "$want"
note "weights_digest=$got equals the uninterrupted run; hydro-launch, started by the plugin, resumed it at step $ck"

note "a step of a wrapped batch script is not wrapped again"
job=$(sbatch --parsable --hydro-launch -o "$work/nested.log" --wrap "srun --hydro-launch env") || fail "sbatch failed"
wait_state "$job" COMPLETED 60
started=$(grep -E '^hydro-launch\[[0-9]+\] .*: started ' "$work/nested.log" || true)
[[ $started == *'started '*slurm_script' as pid'* && $(wc -l <<<"$started") = 1 ]] ||
  fail "not the batch script alone under hydro-launch in the nested job: $(cat "$work/nested.log")"
echo "PASS launch_option ($release)"
