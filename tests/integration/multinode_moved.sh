#!/usr/bin/env bash
# Node-local checkpoints and a requeue that lands the job on other hosts: a job of 2 nodes x 2
# tasks checkpoints into each node's own /local on node1 and node2, is requeued, and starts again
# on node2 and node3. node3 has none of the checkpoint and node2 holds the shards of other ranks,
# so every rank stops with a message that names the hosts, instead of training again from step 0.
# Put back on node1 and node2 (what the message tells the user), the job resumes from its
# checkpoint and ends with the weights of a run never interrupted.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack" --nodes 3 --checkpoint-dir '/local/%u/%j'

steps=${HYDRO_TEST_STEPS:-1000}
make_work
args=(--steps "$steps" --log-every 25 --pg-timeout 300 "${model[@]}")
shape=(-N 2 --ntasks-per-node=2)

note "reference: 2 nodes x 2 tasks, never interrupted"
want=$(reference_run "${shape[@]}" -w node1,node2 -- "${args[@]}") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0} on \$SLURM_JOB_NODELIST"
exec srun --label "$launch" -- "$train" ${args[*]} --step-ms 5
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append "${shape[@]}" -w node1,node2 -o "$log" "$work/job.sh") ||
  fail "sbatch failed"
wait_state "$job" RUNNING
wait_for "$log" '^restart count: 0 on node\[1-2\]$' 30
wait_count "$log" '^[0-9]+: step ' 40 120
note "job $job trains on node1 and node2, checkpointing into each node's own /local"

scontrol requeue "$job"
wait_count "$log" 'checkpoint of step [0-9]+ committed.*exiting' 4 60
ck=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed.*exiting)' "$log" | sort -u)
[ "$(echo "$ck" | wc -l)" = 1 ] || fail "the ranks committed different steps: $ck"
note "requeued at step $ck; while it waits, the job may only go to node2 and node3"
wait_state "$job" PENDING 60
scontrol update JobId="$job" ReqNodeList=node2,node3 || fail "scontrol update ReqNodeList failed"
release "$job"
wait_for "$log" '^restart count: 1 on node\[2-3\]$' 60
wait_state "$job" 'FAILED|COMPLETED' 120
show_new "$log"
[ "$(job_state "$job")" = FAILED ] || fail "on other hosts the job did not fail (it is $(job_state "$job"))"
wait_count "$log" "resume: the checkpoint of step $ck cannot be loaded by every rank: rank 0 wrote its shard on host node1 and runs on node2 now" 4 5
after=$(sed -n '/^restart count: 1 /,$p' "$log" | grep -cE '^[0-9]+: step ') || true
[ "$after" = 0 ] || fail "the job trained $after logged steps on the other hosts (from step 0)"
note "every rank stopped with the hosts named; no step trained from scratch"

note "back on node1 and node2 (as the message says), the job resumes from step $ck"
scontrol requeue "$job" || fail "scontrol requeue of the failed job failed"
wait_state "$job" 'PENDING|REQUEUE_HOLD|REQUEUED' 60
scontrol update JobId="$job" ReqNodeList=node1,node2 || fail "scontrol update ReqNodeList failed"
scontrol release "$job" 2>/dev/null || true
release "$job"
wait_for "$log" '^restart count: 2 on node\[1-2\]$' 60
wait_count "$log" "resumed from .* at step $ck\$" 4 120
wait_state "$job" COMPLETED 600
show_new "$log"
got=$(grep -oP '^[0-9]+: weights_digest=\K\w+' "$log" | sort -u)
[ "$(grep -cE '^[0-9]+: weights_digest=' "$log")" = 4 ] || fail "not every rank printed a weights_digest"
[ "$got" = "$want" ] || fail "weights differ: moved and back $got, uninterrupted $want"
note "weights_digest=$got on every rank equals the uninterrupted run"
echo "PASS multinode_moved ($proctrack)"
