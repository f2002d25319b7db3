#!/usr/bin/env bash
# `hydroctl pause` in a job's first seconds, while its Python program is still importing torch
# (hydro's runtime not up yet): every process of the job starts with the pause signals blocked
# (blocked and ignored: the plugin, hydro-launch), so the pause waits instead of killing anything, and the program takes
# it at its first operators. The batch shell and a `tee` in the pipe live on; `hydroctl resume`
# releases the pause and the job ends with status 0.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"

make_work
chmod 755 "$work"
log=$work/train.log
export HYDRO_TEST_LOGS="$log $work/batch.log"
# /bin/sh (dash, as `sbatch --wrap` runs) clears its signal mask at start: the plugin's "ignored"
# is what keeps it alive there.
cat >"$work/job.sh" <<SCRIPT
#!/bin/sh
srun "$launch" -- "$python" "$top/examples/loop.py" --steps 300 --log-every 10 2>&1 | tee "$log"
echo "batch shell: the pipe ended with status \$?"
SCRIPT
job=$(sbatch --parsable --hydro-pause=on -o "$work/batch.log" "$work/job.sh") || fail "sbatch failed"
note "job $job: srun hydro-launch -- $python examples/loop.py | tee"
wait_state "$job" RUNNING
wait_for "$log" "started $python as pid" 60
grep -q '^step ' "$log" && fail "the program trained before the test could pause it early"
note "hydroctl pause, before the program's first step (it is importing torch)"
"$build/ctl/hydroctl" pause "$job" || fail "hydroctl pause failed"
wait_for "$log" 'pause requested by SIGUSR1' 120
wait_for "$log" 'paused at operator' 60
grep -E 'pause requested|paused at' "$log" | sed 's/^/    | /'
holds "$log" "paused"
[ "$(job_state "$job")" = RUNNING ] || fail "the job is $(job_state "$job"), not RUNNING"
note "paused at step ${held:-0}; the job, its batch shell and the tee live on"
"$build/ctl/hydroctl" resume "$job" || fail "hydroctl resume failed"
wait_state "$job" COMPLETED 300
grep -q 'weights_digest=' "$log" || fail "the program's last line never came through the tee"
grep -q 'batch shell: the pipe ended with status 0' "$work/batch.log" || fail "the batch shell saw: $(cat "$work/batch.log")"
note "resumed; the program ended with status 0 and the tee passed its last line"
note "PASS"
