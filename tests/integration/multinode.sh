#!/usr/bin/env bash
# Every Slurm path across hosts: a job of 2 nodes x 2 tasks (`sbatch -N 2 --ntasks-per-node=2`,
# `srun hydro-launch -- ...`, a Gloo group whose rendezvous is node1, hydro's store there) on a
# multi-host local cluster (scripts/slurm-local --nodes 2: each slurmd a host of its own) is
# suspended and resumed, paused, resumed and checkpointed by hydroctl, suspended then requeued,
# and preempted, and ends with the weights of a run never interrupted.
# Second argument: shared (the admin's checkpoint_dir on a filesystem every node sees) or local
# (/local/%u/%j: each node its own directory, so each node commits its own ranks' shards).
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
where=${2:-shared}
case "$where" in
  shared) start_cluster "$proctrack" --nodes 2 ;;
  local) start_cluster "$proctrack" --nodes 2 --checkpoint-dir '/local/%u/%j' ;;
  *) fail "the second argument is shared or local, not '$where'" ;;
esac

steps=${HYDRO_TEST_STEPS:-1500}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
ranks=(0 1 2 3)
shape=(-N 2 --ntasks-per-node=2)

rank_log() { echo "$work/rank$1.log"; }
every_rank() {  # every_rank FUNCTION ARGS...: FUNCTION LOG ARGS... for each rank's log
  local r
  for r in "${ranks[@]}"; do "$1" "$(rank_log "$r")" "${@:2}"; done
}
advance() { every_rank wait_steps "$1"; }
# hosts: the distinct hosts the ranks said they run on (the "rank R on HOST" lines).
hosts() { grep -ohP '^rank [0-9]+ on \K\S+' "$work"/rank*.log | sort -u | tr '\n' ' '; }

note "reference: 2 nodes x 2 tasks, never interrupted"
want=$(reference_run "${shape[@]}" -- "${args[@]}") || fail "no weights_digest in the reference run"
[ "$(grep -c '^weights_digest=' "$work/reference.log")" = 4 ] || fail "not every reference rank printed a weights_digest"
note "reference: every rank weights_digest=$want"

# Each task writes its own log (appended across restarts) and first says where it runs.
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0} on \$SLURM_JOB_NODELIST"
exec srun -o "$work/rank%t.log" --open-mode=append bash -c 'echo "rank \$SLURM_PROCID on \$(hostname)"; exec "$launch" -- "$train" ${args[*]} --step-ms 5'
JOB
log=$work/batch.log
export HYDRO_TEST_LOGS="$log $(every_rank echo | tr '\n' ' ')"
job=$(sbatch --parsable --requeue --exclusive --open-mode=append --hydro-pause=on "${shape[@]}" -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
for r in "${ranks[@]}"; do wait_for "$(rank_log "$r")" '^step ' 120; done
advance 50
[ "$(hosts)" = "node1 node2 " ] || fail "the ranks ran on '$(hosts)', not on node1 and node2"
note "job $job trains on $(hosts)(2 ranks each)"

note "scontrol suspend: every rank on both hosts pauses before the freeze; scontrol resume"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
every_rank wait_count 'pause requested by SIGTSTP' 1 20
scontrol resume "$job"
wait_state "$job" RUNNING
every_rank wait_count 'resume requested by SIGCONT' 1 20
advance 50

note "hydroctl pause / resume / checkpoint $job: every rank on both hosts"
"$hydroctl" pause "$job" || fail "hydroctl pause failed"
every_rank wait_count 'pause requested by SIGUSR1' 1 20
held=$(every_rank last_step | tr '\n' ' ')
sleep 1
[ "$(every_rank last_step | tr '\n' ' ')" = "$held" ] || fail "a rank trained on while paused ($held)"
"$hydroctl" resume "$job" || fail "hydroctl resume failed"
every_rank wait_count 'resume requested by SIGUSR2' 1 20
advance 25
"$hydroctl" checkpoint "$job" || fail "hydroctl checkpoint failed"
every_rank wait_for 'checkpoint of step [0-9]+ committed .*\(requested\); training goes on' 60
advance 25

note "suspended, then requeued: the checkpoint before the freeze (Slurm kills a suspended job outright)"
# With a save time known (the checkpoint above), the step end and a checkpoint fit in the 2 s
# between SIGTSTP and SIGSTOP (HYDRO_SUSPEND_CHECKPOINT=auto): every rank commits before the freeze.
scontrol suspend "$job"
wait_state "$job" SUSPENDED
every_rank wait_for 'checkpoint of step [0-9]+ committed .* before the suspend' 20
ck1=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed .* before the suspend)' "$(rank_log 0)" | tail -1)
scontrol requeue "$job"  # of a suspended job: SIGKILL with no warning, and the job is held
wait_state "$job" 'PENDING|REQUEUE_HOLD|REQUEUED' 60
scontrol release "$job" 2>/dev/null || true
release "$job"
wait_for "$log" '^restart count: 1 ' 60
every_rank wait_for "resumed from .* at step $ck1\$" 120
note "every rank resumed at step $ck1"
advance 25

note "preempted: a job of the high partition needs both nodes"
high=$(sbatch --parsable --exclusive -p high -N 2 -o "$work/high.log" --wrap 'srun hostname') || fail "sbatch -p high failed"
every_rank wait_count 'checkpoint of step [0-9]+ committed.*exiting' 1 60
ck2=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed.*exiting)' "$(rank_log 0)" | tail -1)
[ "$ck2" -gt "$ck1" ] || fail "no new checkpoint at the preemption (last was step $ck1)"
wait_state "$high" COMPLETED 120
[ "$(sort -u "$work/high.log" | tr '\n' ' ')" = "node1 node2 " ] || fail "the preemptor did not run on both nodes"
release "$job"
wait_for "$log" '^restart count: 2 ' 60
every_rank wait_for "resumed from .* at step $ck2\$" 120
note "the preemptor ran on both nodes; every rank resumed at step $ck2"

wait_state "$job" COMPLETED 600
got=$(cat "$work"/rank*.log | grep -oP '^weights_digest=\K\w+' | sort -u)
[ "$(cat "$work"/rank*.log | grep -c '^weights_digest=')" = 4 ] || fail "not every rank printed a weights_digest"
[ "$got" = "$want" ] || fail "weights differ: interrupted $got, uninterrupted $want"
note "weights_digest=$got on every rank equals the uninterrupted run"

if [ "$where" = local ]; then
  # Each node's own /local holds the checkpoints of its own ranks, and nothing is on the shared disk.
  for n in 1 2; do
    d=$HYDRO_SLURM_DIR/local/node$n/root/$job
    shards=$(find "$d" -mindepth 2 -maxdepth 2 -path '*/step-*/rank-*' -type d -printf '%f\n' 2>/dev/null | sort -u | tr '\n' ' ')
    note "node$n's /local/root/$job holds the shards of: $shards"
    case "$n:$shards" in
      "1:rank-0 rank-1 " | "2:rank-2 rank-3 ") ;;
      *) fail "node$n's own directory holds '$shards'" ;;
    esac
  done
  shared=$HYDRO_SLURM_DIR/checkpoints/root/$job
  [ ! -e "$shared" ] || fail "job $job has checkpoints on the shared disk too: $shared"
fi
echo "PASS multinode ($proctrack, $where)"
