#!/usr/bin/env bash
# A cluster whose admin set no checkpoint_dir, a user's job with --hydro-pause=on and no
# --hydro-checkpoint-dir: hydro checkpoints into <submit dir>/hydro-checkpoints/<job id>, made as
# the user, mode 0700, and says so; `scontrol requeue` then loses no work, and the weights equal a
# run never interrupted. (Before, such a job restarted from step 0.)
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"
echo "required $build/spank/spank_hydro.so" >"$HYDRO_SLURM_DIR/plugstack.conf"  # no checkpoint_dir

make_users hydro-alice
make_work
chmod 755 "$work"
submit=$work/alice
mkdir "$submit" && chown hydro-alice "$submit"
as_alice() { (cd "$submit" && runuser -u hydro-alice -- env SLURM_CONF="$SLURM_CONF" "$@"); }
args=(--steps 3000 --log-every 25 "${model[@]}")
want=$(reference_digest 1 "${args[@]}") || fail "no weights_digest in the reference run"
note "reference: weights_digest=$want"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec "$launch" -- "$train" ${args[*]} --step-ms $(paced 5)
JOB
chmod 755 "$work/job.sh"
log=$submit/job.log
export HYDRO_TEST_LOGS=$log
job=$(as_alice sbatch --parsable --requeue --hydro-pause=on --open-mode=append -o "$log" "$work/job.sh") ||
  fail "sbatch as hydro-alice failed"
dir=$submit/hydro-checkpoints/$job
wait_state "$job" RUNNING
wait_steps "$log" 200
grep -q "checkpoints go to $dir, hydro's default" "$log" || fail "hydro did not announce its default directory $dir"
[ "$(stat -c '%U %a' "$dir")" = "hydro-alice 700" ] || fail "$dir is $(stat -c '%U %a' "$dir"), not hydro-alice 700"
show_new "$log"
note "job $job checkpoints into $dir (hydro-alice, 0700); scontrol requeue"
scontrol requeue "$job"
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_for "$log" "resumed from $dir/step-[0-9]+ at step [1-9][0-9]*$" 60
wait_state "$job" COMPLETED 300
show_new "$log"
got=$(grep -oP '^weights_digest=\K\w+' "$log")
[ "$got" = "$want" ] || fail "weights differ: requeued $got, uninterrupted $want"
report_path "requeue(default dir)" "$log" 'checkpoint-and-exit requested by SIGTERM'
note "the requeued job resumed from its default directory; weights_digest=$got equals the uninterrupted run"
echo "PASS: a job with no checkpoint directory set keeps its work across a requeue"
