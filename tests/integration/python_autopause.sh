#!/usr/bin/env bash
# Zero lines for pause on a real Slurm: an unchanged Python training script (it never imports
# hydro) under `sbatch --hydro-pause=on` pauses at an operator on scontrol suspend and on hydroctl
# pause, and resumes. The build's interpreter ($python) finds hydro's .pth hook where scripts/setup put it.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack"
"$python" -c 'import hydro' || fail "$python cannot import hydro (run scripts/setup)"

make_work
cat >"$work/job.sh" <<JOB
#!/bin/bash
unset PYTHONPATH
# exec: the script itself is the task that Slurm signals (with proctrack/cgroup only the batch
# step's direct child gets SIGTSTP), and it writes its log lines straight to the job's file.
exec "$python" "$top/tests/python/plain_train.py" 100000000
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --hydro-pause=on -o "$log" "$work/job.sh") || fail "sbatch failed"
note "job $job: an unchanged script, sbatch --hydro-pause=on"
wait_state "$job" RUNNING
wait_steps "$log" 100
wait_for "$log" 'pausing at operators \(HYDRO_PAUSE=on\)' 10
show_new "$log"

note "scontrol suspend"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
wait_for "$log" 'hydro\[[0-9]+\] .*: paused at operator ' 10
sleep 3  # past the freeze, 2 s after SIGTSTP
holds "$log" "suspended"
show_new "$log"
note "scontrol resume"
scontrol resume "$job"
wait_for "$log" 'resumed at operator ' 10
wait_steps "$log" 100
show_new "$log"

note "hydroctl pause, then resume"
pauses=$(count "$log" 'paused at operator ')
"$build/ctl/hydroctl" pause "$job" || fail "hydroctl pause $job failed"
wait_count "$log" 'paused at operator ' $((pauses + 1)) 10
holds "$log" "paused by hydroctl" 1
"$build/ctl/hydroctl" resume "$job" || fail "hydroctl resume $job failed"
wait_steps "$log" 100
show_new "$log"

scancel "$job"
wait_state "$job" 'CANCELLED|COMPLETED|FAILED' 60
echo "PASS python_autopause ($proctrack)"
