#!/usr/bin/env bash
# Two ranks on a real Slurm (srun -n 2, a Gloo process group over a TCPStore): `scontrol suspend`
# pauses every rank before the freeze and `scontrol resume` releases every rank; a user's
# `scancel --signal=USR1/USR2` does the same; no rank times out because a peer paused; both ranks
# end with the weights of a run never paused.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-linuxproc}
start_cluster "$proctrack"

steps=${HYDRO_TEST_STEPS:-4000}
make_work
# With --hydro-pause, the process group survives a pause of any length (hydro/distributed.h).
args=(--steps "$steps" --log-every 25 --pg-timeout 300)

# Each rank writes its own log (lib.sh's submit_ranks, rank_log): output that srun or slurmstepd
# forwards can wait until the resume (the srun in the batch script gets SIGTSTP too and stops).
# rank_step RANK: the last step RANK printed.
rank_step() { last_step "$(rank_log "$1")"; }
# paused_lines: "paused at" lines of all ranks.
paused_lines() { cat "$(rank_log 0)" "$(rank_log 1)" | count /dev/stdin 'paused at'; }

note "reference: two ranks, never paused"
srun -n 2 --label --hydro-pause=on "$train" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
mapfile -t want < <(grep -oP '^[0-9]+: weights_digest=\K\w+' "$work/reference.log")
[ ${#want[@]} = 2 ] || fail "the reference run printed ${#want[@]} digests, not 2"
[ "${want[0]}" = "${want[1]}" ] || fail "the reference ranks disagree: ${want[*]}"
note "reference: both ranks weights_digest=${want[0]}"

submit_ranks 2 --hydro-pause=on -- "${args[@]}"
note "job $job submitted: srun -n 2 inside sbatch -n 2"
wait_state "$job" RUNNING
wait_for "$(rank_log 1)" '^step ' 60
wait_ranks_advance 100

note "scontrol suspend: every rank is asked to pause before the freeze"
scontrol suspend "$job"
wait_state "$job" SUSPENDED
# SIGSTOP (or the cgroup freeze) comes 2 s after SIGTSTP; a frozen rank writes nothing, so these
# lines, once there, were written before the freeze.
wait_every_rank 'pause requested by SIGTSTP' 1 20
for ((i = 0; i < 100; i++)); do [ "$(paused_lines)" -ge 1 ] && break; sleep 0.1; done
[ "$(paused_lines)" -ge 1 ] || fail "no rank paused at an operator or step end before the freeze"
grep -HE 'pause requested by SIGTSTP|paused at' "$(rank_log 0)" "$(rank_log 1)" | sed "s|$work/||; s/^/    | /"
frozen=("$(rank_step 0)" "$(rank_step 1)")
scontrol resume "$job"
wait_state "$job" RUNNING
wait_every_rank 'resume requested by SIGCONT' 1 20
wait_ranks_advance 100
note "resumed: rank 0 went on from step ${frozen[0]}, rank 1 from step ${frozen[1]}"

note "a user's pause: scancel --signal=USR1 (to the steps), then USR2"
paused_before=$(paused_lines)
scancel --signal=USR1 "$job"
wait_every_rank 'pause requested by SIGUSR1' 1 20
for ((i = 0; i < 200; i++)); do [ "$(paused_lines)" -gt "$paused_before" ] && break; sleep 0.1; done
[ "$(paused_lines)" -gt "$paused_before" ] || fail "no rank paused after SIGUSR1"
# Every rank stops: one at an operator, a peer at its next operator or inside the collective
# that waits for it. Neither prints another step while paused.
stuck=("$(rank_step 0)" "$(rank_step 1)")
sleep 1
[ "$(rank_step 0)" = "${stuck[0]}" ] && [ "$(rank_step 1)" = "${stuck[1]}" ] ||
  fail "a rank went on training while paused (steps ${stuck[*]} -> $(rank_step 0) $(rank_step 1))"
note "both ranks hold (steps ${stuck[0]} and ${stuck[1]})"
scancel --signal=USR2 "$job"
wait_every_rank 'resume requested by SIGUSR2' 1 20
wait_ranks_advance 50

wait_state "$job" COMPLETED 600
grep -qiE 'timed out|Connection closed|hang:' "$(rank_log 0)" "$(rank_log 1)" &&
  fail "a rank timed out while its peer paused"
mapfile -t got < <(cat "$(rank_log 0)" "$(rank_log 1)" | grep -oP '^weights_digest=\K\w+')
[ ${#got[@]} = 2 ] || fail "the job printed ${#got[@]} digests, not 2"
[ "${got[0]}" = "${want[0]}" ] && [ "${got[1]}" = "${want[0]}" ] ||
  fail "weights differ from the run never paused: ${got[*]} vs ${want[0]}"
note "both ranks weights_digest=${got[0]} equal the run never paused; 0 steps lost (nothing restarted)"
echo "PASS: multi-rank suspend/resume and user pause/resume ($proctrack)"
