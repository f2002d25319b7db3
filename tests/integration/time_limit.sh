#!/usr/bin/env bash
# Path 4, the time limit: `sbatch -t 1 --hydro-time-limit-margin=40`: 40 s before the job's
# EndTime hydro-launch has the program checkpoint, then requeues its own job, again and again
# until training is done, within --hydro-max-restarts; the weights equal a run never stopped.
# Then a job whose restarts are used up is not requeued, and says why.
# Not Slurm's `--signal=URG@45` here: with a 1-minute limit slurmctld sends it at once ("up to 60 s
# early"), so every run would checkpoint at its first step; in one CI run it never came at all.
# hydro-launch --requeue-signal is tested with a stand-in scontrol (tests/unit/launcher_test.cpp).
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
tasks=${2:-1}  # 2: srun -n 2 hydro-launch ..., a Gloo process group
nodes=${3:-1}  # 2: the tasks spread over 2 hosts of a multi-host cluster (scripts/slurm-local --nodes)
where=${4:-shared}  # local: each host's own checkpoint directory (/local/%u/%j), with --nodes
case "$nodes:$where" in
  *:shared) start_spread "$proctrack" "$tasks" "$nodes" ;;
  1:local) fail "a node-local checkpoint directory needs several nodes" ;;
  *:local) start_spread "$proctrack" "$tasks" "$nodes" --checkpoint-dir '/local/%u/%j' ;;
  *) fail "the fourth argument is shared or local, not '$where'" ;;
esac

steps=${HYDRO_TEST_STEPS:-4000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
if [ "$tasks" = 1 ]; then
  run=(exec)  # hydro-launch is the batch shell
else
  run=(exec srun "${shape[@]}")  # hydro-launch is each task of a step
fi
asked='time limit: --time-limit-margin 40 s before the job.s end: (asking the program|the program.s hydro runtime is not up yet; asking it) to checkpoint and exit'

note "reference: the same example, never stopped"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"

# Paced in its first two runs, at least 10 ms a step and 30 s of sleep in all, whatever the
# machine's speed: the margin comes 20 s into each run, so the job needs more than one allocation,
# and is requeued at least once with SLURM_RESTART_COUNT set. (Lightning's 1200 steps at 10 ms once
# ended in 18 s on a fast run, before the margin.)
step_ms=$(((30000 + steps - 1) / steps))
[ "$step_ms" -ge 10 ] || step_ms=10
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
${run[*]} "$launch" -- "$train" ${args[*]} --step-ms $(paced "$step_ms" 2)
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" -t 1 --hydro-time-limit-margin=40 \
  --hydro-max-restarts=20 -o "$log" "$work/job.sh") || fail "sbatch failed"
note "job $job: a 1-minute limit, checkpoint and requeue 40 s before it"
for run in $(seq 21); do
  wait_state "$job" 'RUNNING|PENDING|COMPLETED|FAILED|TIMEOUT' 60
  for _ in $(seq 1200); do
    s=$(job_state "$job")
    [[ $s =~ ^(COMPLETED|FAILED|TIMEOUT|CANCELLED)$ ]] && break
    [ "$(count "$log" "$(launcher_requeued "$job")")" -ge "$run" ] && break
    sleep 0.1
  done
  show_new "$log"
  [ "$s" = TIMEOUT ] && fail "job $job ran into its time limit: nothing made it checkpoint and requeue"
  [[ $s =~ ^(COMPLETED|FAILED|CANCELLED)$ ]] && break
  wait_count "$log" "$asked" "$run" 5
  release "$job"
done
wait_state "$job" COMPLETED 120
show_new "$log"
restarts=$(count "$log" "$(launcher_requeued "$job")")
[ "$restarts" -ge 1 ] || fail "the job finished without ever reaching its time limit; make it longer"
got=$(grep -oP '^weights_digest=\K\w+' "$log" | sort -u) || fail "the job printed no weights_digest"
[ "$(grep -c '^weights_digest=' "$log")" = "$tasks" ] || fail "not every rank printed a weights_digest"
[ "$got" = "$want" ] || fail "weights differ: stopped $restarts times $got, uninterrupted $want"
note "weights_digest=$got equals the uninterrupted run after $restarts time-limit requeues"
report_path "time_limit(n=$tasks,nodes=$nodes)" "$log" 'checkpoint-and-exit requested by SIGTERM'

note "restarts used up: --hydro-max-restarts=0 checkpoints and ends without a requeue"
log2=$work/job2.log
export HYDRO_TEST_LOGS=$log2
job2=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" -t 1 --hydro-time-limit-margin=40 \
  --hydro-max-restarts=0 -o "$log2" "$work/job.sh") || fail "sbatch failed"
wait_for "$log2" "$asked" 90
wait_for "$log2" 'not requeueing: the job has been restarted 0 times \(SLURM_RESTART_COUNT\) and --max-restarts is 0' 30
wait_state "$job2" 'FAILED|COMPLETED' 60
grep -q 'checkpoint of step [0-9]* committed' "$log2" || fail "no checkpoint before giving up"
show_new "$log2"
echo "PASS time_limit ($proctrack, $tasks task(s), $nodes node(s))"
