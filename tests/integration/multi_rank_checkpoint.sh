#!/usr/bin/env bash
# Sharded checkpoints of two ranks on a real Slurm (srun -n 2, Gloo), with HYDRO_CKPT_MODE=sync_all
# and sync_any: SIGTERM to the job's steps makes the ranks agree on one step, each writes its shard,
# `latest` moves once both are durable, both exit 75 and the batch script's next srun resumes every
# rank from its shard, ending with the weights of a run never interrupted. Then a rank killed in the
# middle of a save: `latest` does not move.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-linuxproc}
start_cluster "$proctrack"

steps=${HYDRO_TEST_STEPS:-1000}
make_work
chmod 755 "$work"
# The narrow model (lib.sh's model); the first srun of each job steps no faster than 20 ms, so that
# it is still training when SIGTERM lands, and the second, which runs to the end, unpaced.
args=(--steps "$steps" --log-every 10 --pg-timeout 300 "${model[@]}")
rank_log() { echo "$work/$1.rank$2.log"; }

note "reference: two ranks, never interrupted"
srun -n 2 --label "$train" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
want=$(grep -oP '^0: weights_digest=\K\w+' "$work/reference.log") || fail "no reference digest"
note "reference: weights_digest=$want"

for mode in sync_all sync_any; do
  ck=$work/ck-$mode
  export HYDRO_CKPT_DIR=$ck HYDRO_CKPT_EVERY=250 HYDRO_CKPT_MODE=$mode HYDRO_STORE_TIMEOUT=60
  # srun exits 75 (hydro::kExitRequeue) when the ranks checkpointed on SIGTERM: run them again.
  cat >"$work/$mode.sh" <<SCRIPT
#!/bin/bash
for attempt in 1 2 3; do
  srun -n 2 bash -c "exec $train ${args[*]} --step-ms \$((attempt == 1 ? 20 : 0)) >>$work/$mode.rank\\\$SLURM_PROCID.log 2>&1"
  rc=\$?
  [ \$rc = 0 ] && exit 0
  [ \$rc = 75 ] || exit \$rc
done
exit 1
SCRIPT
  export HYDRO_TEST_LOGS="$(rank_log "$mode" 0) $(rank_log "$mode" 1) $work/$mode.batch.log"
  job=$(sbatch --parsable -n 2 -o "$work/$mode.batch.log" "$work/$mode.sh") || fail "sbatch failed"
  note "$mode: job $job: srun -n 2, a checkpoint every 250 steps"
  wait_state "$job" RUNNING
  wait_for "$(rank_log "$mode" 1)" '^step 3[0-9]0' 120
  note "$mode: SIGTERM to the job's steps (scancel --signal=TERM)"
  scancel --signal=TERM "$job"
  wait_state "$job" COMPLETED 600
  for r in 0 1; do
    grep -q 'exiting with status 75' "$(rank_log "$mode" $r)" || fail "$mode: rank $r did not checkpoint and exit 75"
  done
  exit_step=$(grep -oP 'checkpoint of step \K[0-9]+(?= committed)' "$(rank_log "$mode" 0)" | tail -1)
  for r in 0 1; do
    grep -q "resumed from $ck/step-0*$exit_step at step $exit_step" "$(rank_log "$mode" $r)" ||
      fail "$mode: rank $r did not resume from step $exit_step"
  done
  manifest=$ck/latest/manifest.json  # (step $exit_step itself may be pruned by keep_last by now)
  grep -q '"sharded": true' "$manifest" && grep -q '"rank-0/model.pt"' "$manifest" && grep -q '"rank-1/model.pt"' "$manifest" ||
    fail "$mode: $manifest does not list both ranks' shards"
  kept=$(find "$ck" -maxdepth 1 -name 'step-*' | wc -l)  # HYDRO_KEEP_LAST's default, 3, of 4 or more commits
  [ "$kept" -le 3 ] || fail "$mode: $kept checkpoints kept: the committing rank did not prune to HYDRO_KEEP_LAST=3"
  "$build/ctl/hydroctl" status "$ck" | sed 's/^/    | /'
  grep -q corrupt <<<"$("$build/ctl/hydroctl" status "$ck")" && fail "$mode: a checkpoint does not verify"
  got=$(grep -oP '^weights_digest=\K\w+' "$(rank_log "$mode" 0)" "$(rank_log "$mode" 1)" | sort -u | cut -d: -f2 | sort -u)
  [ "$got" = "$want" ] || fail "$mode: weights differ from the run never interrupted: $got vs $want"
  note "$mode: one checkpoint of step $exit_step with both shards; both ranks resumed; weights_digest=$got equals the reference; 0 steps lost"
done

note "a rank killed in the middle of a save: latest stays on the last complete checkpoint"
ck=$work/ck-kill
# The store's timeout, which rank 0 waits for rank 1's shard of step 1000, also bounds its wait
# for the shard of step 500: 20 s, so that a slow disk's save of that one fits.
store_timeout=20
export HYDRO_CKPT_DIR=$ck HYDRO_CKPT_EVERY=500 HYDRO_CKPT_MODE=sync_all HYDRO_STORE_TIMEOUT=$store_timeout
srun -n 2 --label "$build/tests/hydro_kill_in_save" 1 1000 "$steps" >"$work/kill.log" 2>&1 &&
  fail "the job with a killed rank succeeded"
sed 's/^/    | /' "$work/kill.log" | grep -iE 'not committed|error|kill' | head -5 || true  # shown only; head may close the pipe early
[ "$(readlink "$ck/latest")" = step-000000000500 ] || fail "latest is $(readlink "$ck/latest"), not step-000000000500"
[ ! -e "$ck/step-000000001000" ] || fail "the half-written step 1000 was committed"
grep -q '^\.tmp-' <<<"$(ls -a "$ck")" && fail "staging left behind: $(ls -a "$ck")"
grep -q "rank 1 did not report its shard durable within $store_timeout s" "$work/kill.log" ||
  fail "rank 0 did not say which rank failed"
note "rank 1 killed while writing step 1000: latest still step-000000000500, no staging left"
echo "PASS: multi-rank sharded checkpoints, sync_all and sync_any ($proctrack)"
