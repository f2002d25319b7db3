#!/usr/bin/env bash
# Another Unix user tries to steer a two-task job through the ranks' store, as in issue 15's
# reproduction: uid nobody adds votes for the coming rounds with torch's own TCPStore client, then
# with a client that sends a valid MUNGE credential of its own uid. Neither gets in: rank 0's store
# logs each refusal, no rank hears of an exit request, and the job goes on training.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"

make_work
chmod 755 "$work"
port=29640
export HYDRO_CKPT_DIR=$work/ck HYDRO_CKPT_EVERY=100000 HYDRO_CKPT_MODE=sync_any HYDRO_STORE_TIMEOUT=60 MASTER_PORT=$port
args=(--steps 1000000 --log-every 10 --pg-timeout 300)
rank_log() { echo "$work/rank$1.log"; }
export HYDRO_TEST_LOGS="$(rank_log 0) $(rank_log 1) $work/batch.log"
# A failure must not leave the training running past the cluster (it would hold the ports).
trap 'rc=$?; [ -n "${job:-}" ] && scancel "$job" 2>/dev/null && wait_state "$job" "CANCELLED|COMPLETED|FAILED" 60; (exit $rc); stop_cluster' EXIT
job=$(sbatch --parsable -n 2 -o "$work/batch.log" \
  --wrap "srun -n 2 bash -c 'exec $train ${args[*]} >$work/rank\$SLURM_PROCID.log 2>&1'") || fail "sbatch failed"
note "job $job: two ranks, sync_any, the ranks' store at 127.0.0.1:$((port + 1))"
wait_state "$job" RUNNING
for r in 0 1; do wait_steps "$(rank_log $r)" 50; done

note "uid nobody adds 3 + 9 to hydro/<round>/vote with torch's TCPStore client"
if runuser -u nobody -- /usr/bin/python3 - "$((port + 1))" >"$work/attack-torch.log" 2>&1 <<'PY'; then
import datetime, sys
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=10))
for r in range(1000):
    store.add(f"hydro/{r}/vote", 3 + 9)
print("let in")
PY
  fail "torch's TCPStore client, as uid nobody, used the job's store: $(tail -3 "$work/attack-torch.log")"
fi
note "refused: $(tail -1 "$work/attack-torch.log")"

note "uid nobody speaks hydro's handshake with its own valid MUNGE credential"
cp "$build/tests/hydro_store_probe" "$work/probe"  # a copy nobody can reach, wherever the build is
if runuser -u nobody -- "$work/probe" attack 127.0.0.1 "$((port + 1))" "job $job step 0" \
  >"$work/attack-probe.log" 2>&1; then
  fail "a client of uid nobody used the job's store: $(cat "$work/attack-probe.log")"
fi
note "$(cat "$work/attack-probe.log")"
wait_for "$(rank_log 0)" "refused a client: MUNGE decode: Unauthorized credential" 30 ||
  fail "rank 0's store did not log refusing the credential of uid nobody"

for r in 0 1; do wait_steps "$(rank_log $r)" 200; done
[ "$(job_state "$job")" = RUNNING ] || fail "the job is $(job_state "$job"), not RUNNING"
grep -h 'requested by another rank\|checkpoint-and-exit requested\|exiting with status' "$(rank_log 0)" "$(rank_log 1)" &&
  fail "a rank was steered"
note "both ranks trained on, 200 steps past the attacks, with no exit request: ranks at $(last_step "$(rank_log 0)") and $(last_step "$(rank_log 1)")"
scancel "$job"
wait_state "$job" "CANCELLED|COMPLETED" 120
note "PASS"
