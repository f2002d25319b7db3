#!/usr/bin/env bash
# A requeue with no scontrol where the task runs (issue 56), as in a container: hydro-launch decides
# to requeue the job (here on --requeue-signal USR1), its `scontrol requeue` cannot run (the step's
# PATH has none), so it exits 85, and the host requeues the job, exactly once per event:
#   - a job with --hydro-pause=on: hydro's plugin, in slurmstepd, when the task exits 85; slurm.conf's
#     RequeueExit=85 is set too, and then finds the job requeued already (Restarts= counts each
#     event once). Twice, each resumed from its checkpoint, bit-for-bit;
#   - a job with hydro off (no --hydro-pause, no --hydro-launch): the plugin leaves it, and
#     RequeueExit=85 requeues it when its batch script exits 85. Bit-for-bit.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}" --requeue-exit 85
make_work
args=(--steps 1500 --log-every 25 "${model[@]}")
want=$(reference_run -n 1 -- "${args[@]}") || fail "no weights_digest in the reference run"
slurmd_log=$(ls "$HYDRO_SLURM_DIR"/log/slurmd*.log | head -1)

# submit PAUSE RUNS: a job whose one task runs hydro-launch and the example with no scontrol on its
# PATH, paced in its first RUNS runs; sets job and log.
submit() {
  cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun ${1:+--hydro-pause=$1} /usr/bin/env PATH=/var/empty "$launch" --requeue-signal USR1 -- \
  "$train" ${args[*]} --step-ms $(paced 10 "$2")
JOB
  log=$work/job-${1:-off}.log
  export HYDRO_TEST_LOGS=$log
  job=$(sbatch --parsable --requeue --open-mode=append -o "$log" "$work/job.sh") || fail "sbatch failed"
  wait_state "$job" RUNNING
}

# requeue_by_host JOB LOG N: USR1 to the step, whose hydro-launch checkpoints the program and, with
# no scontrol, exits 85; the host requeues the job, and its Nth restart resumes from that checkpoint.
requeue_by_host() {
  wait_steps "$2" 50
  scancel --signal=USR1 "$1"
  wait_count "$2" 'exiting 85 for the host to requeue the job' "$3" 30
  show_new "$2"
  ck=$(grep -oP 'checkpoint of step \K[0-9]+' "$2" | tail -1)
  resume_requeued "$1" "$2" "$3" "$ck"
}

restarts() { scontrol show job "$1" | grep -oP '(^|\s)Restarts=\K[0-9]+'; }

note "hydro on: the plugin requeues, RequeueExit=85 set too; two events"
submit on 2
for n in 1 2; do
  requeue_by_host "$job" "$log" "$n"
  [ "$(restarts "$job")" = "$n" ] || fail "job $job restarted $(restarts "$job") times after $n requeues"
done
expect_weights "$job" "$log" "$want"
requeued=$(grep -cE "hydro: task 0 of job $job exited 85 .*: job requeued" "$slurmd_log" || true)
[ "$requeued" = 2 ] || fail "the plugin requeued job $job $requeued times, not 2: $(grep "job $job" "$slurmd_log")"
note "weights_digest=$got equals the uninterrupted run; the plugin requeued it twice, Restarts=$(restarts "$job")"

note "hydro off: RequeueExit=85 alone requeues"
submit "" 1
requeue_by_host "$job" "$log" 1
expect_weights "$job" "$log" "$want"
[ "$(restarts "$job")" = 1 ] || fail "job $job restarted $(restarts "$job") times after one requeue"
! grep -qE "hydro: task [0-9]+ of job $job " "$slurmd_log" || fail "the plugin acted on job $job, which has hydro off"
note "weights_digest=$got equals the uninterrupted run; requeued by RequeueExit alone, Restarts=1"
echo "PASS host_requeue"
