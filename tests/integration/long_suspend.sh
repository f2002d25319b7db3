#!/usr/bin/env bash
# Issue 32 on a real Slurm: a 2-task Python job whose own process group (torch's
# init_process_group, --pg-timeout T) is held longer than T, again and again, and ends bit-for-bit.
# Rank 1 is the slower, before its backward pass (--rank-skew-ms) and in operators after its
# optimizer step (--rank-skew-end-ms), so rank 0 waits for it inside the collective or in the step
# end's vote on the ranks' store (HYDRO_STORE_TIMEOUT, shorter than a hold too) when a hold
# lands. Each hold is `scontrol suspend` at a random moment, HOLD seconds, then `scontrol resume`;
# the last is `hydroctl pause`/`resume`. No rank times out; each logs a pause before each freeze
# and that hydro watches the groups' timeout in running time; the digests equal a run never held.
#   long_suspend.sh PROCTRACK PG_TIMEOUT HOLD SUSPENDS
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup} pg_timeout=${2:-5} hold=${3:-12} suspends=${4:-2}
[ "${HYDRO_TEST_PROGRAM:-}" = python ] || fail "long_suspend.sh runs the Python example (HYDRO_TEST_PROGRAM=python)"
start_cluster "$proctrack"

make_work
base=(--steps "${HYDRO_TEST_STEPS:-60}" --log-every 1 --pg-timeout "$pg_timeout" "${program_args[@]}")
args=("${base[@]}" --rank-skew-ms 200 --rank-skew-end-ms 300)

# The skew changes no weight (loop.py), so the reference runs without it, in seconds instead of 30.
note "reference: two ranks, never held, no skew"
want=$(reference_run -n 2 --hydro-pause=on -- "${base[@]}")
note "reference weights_digest=$want"

export HYDRO_STORE_TIMEOUT=$((pg_timeout + 3))  # the ranks connect to it at their start: some room
submit_ranks 2 --hydro-pause=on -- "${args[@]}"
note "job $job: 2 tasks, torch's own process group with a ${pg_timeout} s timeout, the ranks' store with $HYDRO_STORE_TIMEOUT s; $suspends suspends of ${hold} s"
wait_state "$job" RUNNING
wait_for "$(rank_log 1)" '^step ' 60
wait_every_rank "watched by hydro in running time" 1

for ((i = 1; i <= suspends; i++)); do
  wait_ranks_advance 5
  sleep "0.$((RANDOM % 10))"  # a random moment in the step
  scontrol suspend "$job"
  wait_state "$job" SUSPENDED
  wait_every_rank 'pause requested by SIGTSTP' "$i"
  note "suspend $i: frozen at steps $(last_step "$(rank_log 0)") and $(last_step "$(rank_log 1)"); held ${hold} s (the timeout is ${pg_timeout} s)"
  sleep "$hold"
  scontrol resume "$job"
  wait_state "$job" RUNNING
  wait_every_rank 'resume requested by SIGCONT' "$i"
done

wait_ranks_advance 5
note "hydroctl pause for ${hold} s"
"$hydroctl" pause "$job" || fail "hydroctl pause $job failed"
wait_every_rank 'pause requested by SIGUSR1' 1
sleep "$hold"
"$hydroctl" resume "$job" || fail "hydroctl resume $job failed"
wait_every_rank 'resume requested by SIGUSR2' 1
wait_ranks_advance 5

wait_state "$job" COMPLETED 600
cat "$(rank_log 0)" "$(rank_log 1)" | grep -iE 'timed out|timeout waiting|Connection closed|hang:' &&
  fail "a rank timed out or was taken for hung while the job was held"
ranks_digest "$want"
note "both ranks weights_digest=$want after $suspends suspends and a hydroctl pause of ${hold} s each, ${pg_timeout} s timeout"
echo "PASS long_suspend ($proctrack, timeout ${pg_timeout} s, holds of ${hold} s)"
