#!/usr/bin/env bash
# Path 5, a user's own signals, as a second Unix user (hydro-alice) who owns the job:
# `hydroctl checkpoint JOBID` commits a checkpoint and training goes on; `hydroctl status JOBID`
# lists it; `hydroctl pause|resume JOBID` hold and release training. Another user (hydro-mallory)
# is refused by hydroctl, naming the owner, and by Slurm. The weights equal a run never touched.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack"

steps=${HYDRO_TEST_STEPS:-3000}
make_work
chmod 0777 "$work"
args=(--steps "$steps" --log-every 25 "${model[@]}")
ctl=$build/ctl/hydroctl
make_users hydro-alice hydro-mallory
as() { local u=$1; shift; (cd /tmp && runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" "$@"); }
# hydroctl status JOBID finds the directory from the admin's template, as slurm-local sets it.
printf 'checkpoint_dir: %s/checkpoints/%%u/%%j\n' "$HYDRO_SLURM_DIR" >"$work/hydro.yaml"

note "reference: the same example, never touched"
srun "$train" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
want=$(grep -oP '^weights_digest=\K\w+' "$work/reference.log") || fail "no weights_digest in the reference run"

cat >"$work/job.sh" <<JOB
#!/bin/bash
exec "$launch" -- "$train" ${args[*]} --step-ms 5
JOB
chmod 0755 "$work/job.sh"
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(as hydro-alice sbatch --parsable --requeue --hydro-pause=on -o "$log" "$work/job.sh") || fail "sbatch as hydro-alice failed"
wait_state "$job" RUNNING
wait_steps "$log" 100
note "hydro-alice's job $job is training"

out=$(as hydro-alice "$ctl" checkpoint "$job") || fail "hydroctl checkpoint as the owner failed: $out"
wait_for "$log" 'checkpoint requested by SIGWINCH' 20
wait_for "$log" 'checkpoint of step [0-9]+ committed' 30
grep -q 'exiting' <<<"$(grep 'committed' "$log")" && fail "a checkpoint-now must not end the job"
wait_steps "$log" 50
show_new "$log"
ck=$(grep -oP 'checkpoint of step \K[0-9]+' "$log" | tail -1)
table=$(as hydro-alice "$ctl" --config "$work/hydro.yaml" status "$job") || fail "hydroctl status $job failed: $table"
echo "$table" | sed 's/^/    | /'
grep -qE "^\s*$ck\s.*verified.*latest" <<<"$table" || grep -qE "$ck.*verified" <<<"$table" || fail "status does not list step $ck as verified"
note "hydroctl checkpoint: step $ck committed, training went on; hydroctl status $job lists it"
report_path checkpoint_now "$log" 'checkpoint requested by SIGWINCH'

pauses=$(count "$log" 'paused at (operator|the end of step)')
as hydro-alice "$ctl" pause "$job" >/dev/null || fail "hydroctl pause as the owner failed"
wait_count "$log" 'paused at (operator|the end of step)' $((pauses + 1)) 20
holds "$log" "paused"
note "hydroctl pause: held at step $held"

if err=$(as hydro-mallory "$ctl" resume "$job" 2>&1); then fail "hydro-mallory resumed hydro-alice's job"; fi
grep -qF "hydroctl: job $job belongs to hydro-alice (uid $(id -u hydro-alice)); only its owner or root may resume it" <<<"$err" ||
  fail "unexpected refusal: $err"
if err=$(as hydro-mallory scancel --signal=USR2 "$job" 2>&1); then fail "Slurm let hydro-mallory signal the job"; fi
sleep 1
[ "$(last_step "$log")" = "$held" ] || fail "hydro-mallory's attempt resumed training"
note "hydro-mallory is refused by hydroctl (naming the owner) and by Slurm ($(tr '\n' ' ' <<<"$err"))"

as hydro-alice "$ctl" resume "$job" >/dev/null || fail "hydroctl resume as the owner failed"
wait_steps "$log" 50
expect_weights "$job" "$log" "$want"
note "weights_digest=$got equals the untouched run"
echo "PASS user_signals ($proctrack)"
