#!/usr/bin/env bash
# Issue 35 on a real Slurm: torchrun under hydro-launch, one task that runs 2 workers (DDP over
# Gloo), the way torchrun is used under Slurm: `srun hydro-launch -- torchrun --nproc-per-node=2
# loop.py`. torchrun starts its workers in sessions of their own, with their descriptors closed,
# forwards neither SIGUSR1 nor SIGUSR2, and kills its workers 30 s after its own SIGTERM.
#   - a pause (scancel --signal=USR1) as torchrun starts, before its workers are up, holds both
#     once they are (at an operator, or inside a collective that waits for the other), and its
#     resume lets them go (torchrun's agent itself takes no pause hook);
#   - `scontrol suspend` longer than the process group's timeout, and resume: both go on;
#   - `scontrol requeue`: both workers checkpoint and exit 75, hydro-launch stops torchrun (run with
#     --max-restarts=3, it would start them again), torchrun ends with 1, hydro-launch
#     reads the workers' reports, requeues, and the job resumes;
#   - the weights equal those of the same torchrun job never interrupted.
#   torchrun.sh PROCTRACK
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
[ "${HYDRO_TEST_PROGRAM:-}" = python ] || fail "torchrun.sh runs the Python example (HYDRO_TEST_PROGRAM=python)"
torchrun=$(dirname "$python")/torchrun
[ -x "$torchrun" ] || fail "no torchrun beside $python (run scripts/setup)"
start_cluster "$proctrack"

make_work
hold=8 pg_timeout=5
args=(--steps "${HYDRO_TEST_STEPS:-600}" --log-every 10 --pg-timeout "$pg_timeout" "${model[@]}")
run=("$torchrun" --standalone --nproc-per-node=2 --max-restarts=3 "$train")
digests() { grep -oE 'weights_digest=[0-9a-f]+' "$1" | cut -d= -f2 | sort | uniq -c | awk '{print $1, $2}'; }

note "reference: srun -n 1 -c 2 torchrun --nproc-per-node=2, never interrupted"
srun -n 1 -c 2 --hydro-pause=on "${run[@]}" "${args[@]}" >"$work/reference.log" 2>&1 || { HYDRO_TEST_LOGS=$work/reference.log; fail "reference run failed"; }
want=$(digests "$work/reference.log")
[ "${want%% *}" = 2 ] || fail "the reference workers did not print one weights_digest twice: $want"

cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "restart count: \${SLURM_RESTART_COUNT:-0}"
exec srun -n 1 -c 2 "$launch" -- ${run[*]} ${args[*]} --step-ms $(paced 20)
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append --hydro-pause=on -n 1 -c 2 -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_state "$job" RUNNING

# As torchrun starts: its workers do not exist yet, or have not imported torch. hydro-launch holds
# the pause for them: blocked in the processes there are, and sent again to each worker that
# comes up while it lasts.
wait_for "$log" 'started .*torchrun as pid' 60
note "job $job: a pause (scancel --signal=USR1) as torchrun starts, before its workers are up; then USR2"
scancel --signal=USR1 "$job"
wait_count "$log" 'hydro\[[0-9]+\] .*pause requested by SIGUSR1' 2 60
# Each worker stops at its next operator, or inside the collective that waits for the other one
# (CI's stop 59: rank 0 paused in DDP's start as rank 1 waited in its broadcast), so one "paused at"
# line at least, and no step while paused.
wait_count "$log" 'hydro\[[0-9]+\] .*paused at ' 1 60
sleep 2
[ "$(count "$log" '^step ')" = 0 ] || fail "a worker trained on through the pause"
scancel --signal=USR2 "$job"
wait_count "$log" 'hydro\[[0-9]+\] .*resume requested by SIGUSR2' 2 30
wait_steps "$log" 30
show_new "$log"

note "scontrol suspend for ${hold} s (the process group's timeout is ${pg_timeout} s), then resume"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
sleep "$hold"
scontrol resume "$job"
wait_state "$job" RUNNING
# A worker that waited for the other inside a collective was frozen there, with no operator to
# pause at: each takes the resume, and the training goes on.
wait_count "$log" 'hydro\[[0-9]+\] .*resume requested by SIGCONT' 2 30
wait_steps "$log" 20
show_new "$log"

note "scontrol requeue: both workers checkpoint, torchrun ends, hydro-launch requeues"
scontrol requeue "$job"
wait_count "$log" 'checkpoint-and-exit requested by SIGTERM' 2 30
# torchrun runs with --max-restarts=3: once both workers checkpointed to exit, hydro-launch stops
# torchrun, which would otherwise start them again in place (slurm.torchrun.time_limit, where
# Slurm signals no one, fails without it).
wait_for "$log" 'every worker of the program \(2\) checkpointed to exit: SIGTERM to pid [0-9]+, their launcher' 60
wait_for "$log" '2 of the program.s 2 workers checkpointed to exit for a requeue' 60
show_new "$log"
release "$job"
wait_for "$log" '^restart count: 1$' 60
wait_count "$log" 'resumed from .* at step [0-9]+$' 2 60
wait_state "$job" COMPLETED 600
show_new "$log"
grep -iE 'timed out|timeout waiting|Connection closed' "$log" && fail "a worker timed out after the suspend"
got=$(digests "$log")
[ "$got" = "$want" ] || fail "weights differ: requeued '$got', uninterrupted '$want' (count digest)"
note "both workers' weights_digest=${want#* } equals the run never interrupted"
report_path "torchrun(n=2)" "$log" 'checkpoint-and-exit requested by SIGTERM'
echo "PASS torchrun ($proctrack)"
