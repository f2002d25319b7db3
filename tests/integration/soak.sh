#!/usr/bin/env bash
# Issue 36's soak test on a real Slurm: 2 jobs of 2 tasks each (the Python loop, DDP over Gloo,
# under hydro-launch --restarts) for MINUTES minutes of random events, one at a time, each on a job
# drawn at random: suspend and resume, `scontrol requeue`, `hydroctl pause` and resume, `hydroctl
# checkpoint`, a `kill -9` of one rank, the checkpoint file system full for 10 s, and a slurmd
# restart; the second job runs with a 3-minute time limit and --hydro-time-limit-margin, so the
# time limit requeues it all along (every requeue counts against hydro-launch's --max-restarts, 3
# by default, which ended that job in a first 30-minute run: both run with 1000). The one node offers 4 CPUs (slurm-local --cpus) on this
# machine's 2, so that both jobs run side by side. Then both run to their end: each ends with the
# digest of a run never interrupted, and nothing of hydro is left behind (no process of the jobs,
# no report directory of hydro-launch, nothing but checkpoints in the checkpoint directories).
# Prints each event's count and outcome (an event runs in a subshell: one that goes wrong is
# counted and logged, and the soak goes on). An event that a requeue of its job overtook (the time
# limit's, say, while a `hydroctl pause` waited to resume) is counted apart, as overtaken: the job
# then trains again from its checkpoint, and its end is checked as any other's.
#   soak.sh [MINUTES]
source "$(dirname "$0")/lib.sh"
minutes=${1:-30}
[ "${HYDRO_TEST_PROGRAM:-}" = python ] || fail "soak.sh runs the Python example (HYDRO_TEST_PROGRAM=python)"
start_cluster cgroup --cpus 4

make_work
ckfs=$work/ckfs  # the checkpoints' own small file system, filled by the disk event
mkdir -p "$ckfs" && mount -t tmpfs -o size=32m hydro-soak "$ckfs" || fail "cannot mount a tmpfs on $ckfs"
trap 'rc=$?; set +e; umount -l "$ckfs" 2>/dev/null; (exit $rc); stop_cluster' EXIT
steps=$((minutes * 60 * 25))  # at most 25 a second paced: the jobs outlast the events
args=(--steps "$steps" --hidden 64 --log-every 50)
echo 40 >"$work/pace"  # --step-ms while the events come; 0 for the last run

note "reference: two ranks, $steps steps, never interrupted"
reference_limit=$((300 + minutes * 30))  # $steps unpaced, which grow with MINUTES
want=$(reference_run -n 2 -- "${args[@]}")
note "reference weights_digest=$want"

# submit K SBATCH_OPTION...: job K, 2 tasks, each task's output appended to $work/jobK.rankR.log.
jobs=()
submit() {
  local k=$1
  shift
  cat >"$work/job$k.sh" <<JOB
#!/bin/bash
export HYDRO_CKPT_DIR=$ckfs/job$k HYDRO_CKPT_EVERY=50 HYDRO_KEEP_LAST=2
exec srun -n 2 bash -c 'exec $launch --restarts 1000 --max-restarts 1000 -- $train ${args[*]} --step-ms \$(cat $work/pace) >>$work/job$k.rank\$SLURM_PROCID.log 2>&1'
JOB
  jobs[k]=$(sbatch --parsable --requeue --open-mode=append -n 2 --hydro-pause=on "$@" -o "$work/job$k.batch.log" \
    "$work/job$k.sh") || fail "sbatch failed"
}
submit 0
submit 1 -t 3 --hydro-time-limit-margin=40
export HYDRO_TEST_LOGS="$work/job0.rank0.log $work/job0.rank1.log $work/job1.rank0.log $work/job1.rank1.log"
for k in 0 1; do
  wait_state "${jobs[k]}" RUNNING
  wait_for "$work/job$k.rank1.log" '^step ' 120
done
note "jobs ${jobs[*]}: 2 tasks each, job ${jobs[1]} with a 3-minute time limit; $minutes minutes of events"

# running K: job K runs again (a requeue's wait cut short); false if it cannot be made to.
running() {
  local job=${jobs[$1]} state
  for _ in $(seq 300); do
    state=$(job_state "$job")
    case "$state" in
      RUNNING) return 0 ;;
      PENDING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED) release "$job" ;;
      SUSPENDED) scontrol resume "$job" ;;
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 1 ;;
    esac
    sleep 1
  done
  return 1
}
rank_pid() {  # rank_pid K R: the training process of job K's rank R (hydro-launch's child)
  local f
  for f in /proc/[0-9]*/environ; do
    grep -qzx "SLURM_JOB_ID=${jobs[$1]}" "$f" 2>/dev/null && grep -qzx "SLURM_PROCID=$2" "$f" 2>/dev/null || continue
    f=${f#/proc/} && f=${f%/environ}
    [ "$(cat "/proc/$(awk '{ print $4 }' "/proc/$f/stat" 2>/dev/null)/comm" 2>/dev/null)" = hydro-launch ] &&
      grep -qz "examples/loop.py" "/proc/$f/cmdline" 2>/dev/null && { echo "$f"; return 0; }
  done
  return 1
}
log0() { echo "$work/job$1.rank0.log"; }
requeues() { scontrol show job "${jobs[$1]}" 2>/dev/null | grep -oP 'Restarts=\K[0-9]+' || echo 0; }

ev_suspend() {
  scontrol suspend "${jobs[$1]}" && wait_state "${jobs[$1]}" SUSPENDED 30 && sleep $((2 + RANDOM % 20)) &&
    scontrol resume "${jobs[$1]}" && wait_state "${jobs[$1]}" RUNNING 30
}
ev_requeue() { scontrol requeue "${jobs[$1]}" && wait_state "${jobs[$1]}" 'PENDING|REQUEUED' 120 && running "$1"; }
ev_pause() {
  "$hydroctl" pause "${jobs[$1]}" >/dev/null && sleep $((2 + RANDOM % 20)) && "$hydroctl" resume "${jobs[$1]}" >/dev/null
}
ev_checkpoint() {
  local n
  n=$(count "$(log0 "$1")" 'committed .*\(requested\)')
  "$hydroctl" checkpoint "${jobs[$1]}" >/dev/null && wait_count "$(log0 "$1")" 'committed .*\(requested\)' $((n + 1)) 60
}
# A rank killed: the job trains again, in place (hydro-launch --restarts), or requeued when the
# time limit's requeue came at the same moment.
ev_kill9() {
  local r=$((RANDOM % 2)) pid n
  pid=$(rank_pid "$1" "$r") || return 1
  n=$(count "$(log0 "$1")" 'resuming from step|the program starts fresh')
  kill -9 "$pid" || return 1
  for _ in $(seq 180); do
    [ "$(count "$(log0 "$1")" 'resuming from step|the program starts fresh')" -gt "$n" ] && return 0
    case "$(job_state "${jobs[$1]}")" in PENDING | REQUEUED) release "${jobs[$1]}" ;; esac
    sleep 1
  done
  return 1
}
ev_disk() {
  dd if=/dev/zero of="$ckfs/fill" bs=1M status=none 2>/dev/null
  sleep 10
  rm -f "$ckfs/fill"
  running "$1"
}
ev_slurmd() {
  local pidfile=$HYDRO_SLURM_DIR/run/slurmd.pid pid
  pid=$(cat "$pidfile") && kill "$pid" || return 1
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  slurmd -f "$SLURM_CONF" || return 1
  for _ in $(seq 100); do
    grep -qE '^(mixed|allocated|idle)$' <<<"$(sinfo -h -N -o %T 2>/dev/null)" && return 0
    sleep 0.2
  done
  return 1
}

events=(suspend requeue pause checkpoint kill9 disk slurmd)
declare -A ok bad overtaken
end=$((SECONDS + minutes * 60))
while ((SECONDS < end)); do
  k=$((RANDOM % 2))
  if ! (running "$k"); then
    [ "$(job_state "${jobs[k]}")" = COMPLETED ] || fail "job ${jobs[k]} is $(job_state "${jobs[k]}"), not running"
    note "job ${jobs[k]} completed before the events' end"
    [ "$(job_state "${jobs[1 - k]}")" = COMPLETED ] && break
    continue
  fi
  ev=${events[RANDOM % ${#events[@]}]}
  before=$(requeues "$k")
  if ("ev_$ev" "$k"); then ok[$ev]=$((${ok[$ev]:-0} + 1)); elif [ "$ev" != requeue ] && [ "$(requeues "$k")" -gt "$before" ]; then
    overtaken[$ev]=$((${overtaken[$ev]:-0} + 1))
    note "event $ev on job ${jobs[k]}: overtaken by a requeue of the job (job $(job_state "${jobs[k]}"))"
  else
    bad[$ev]=$((${bad[$ev]:-0} + 1))
    note "event $ev on job ${jobs[k]}: failed (job $(job_state "${jobs[k]}"))"
  fi
  sleep $((3 + RANDOM % 10))
done

note "events over: a last run of each job, unpaced, to its end"
echo 0 >"$work/pace"
for k in 0 1; do running "$k" && { ev_requeue "$k" || fail "the last requeue of job ${jobs[k]}"; }; done
for k in 0 1; do
  for _ in $(seq 60); do
    [ "$(job_state "${jobs[k]}")" = COMPLETED ] && break
    running "$k" || true
    sleep 10
  done
  [ "$(job_state "${jobs[k]}")" = COMPLETED ] || fail "job ${jobs[k]} did not complete: $(job_state "${jobs[k]}")"
done

for k in 0 1; do
  for r in 0 1; do
    got=$(grep -oP '^weights_digest=\K\w+' "$work/job$k.rank$r.log" | tail -1 || true)
    [ "$got" = "$want" ] || fail "job ${jobs[k]} rank $r: weights_digest '$got', not the uninterrupted run's $want"
  done
done
left=$(grep -lzE "^SLURM_JOB_ID=(${jobs[0]}|${jobs[1]})$" /proc/[0-9]*/environ 2>/dev/null || true)
[ -z "$left" ] || fail "processes of the jobs left behind: $left"
compgen -G "${TMPDIR:-/tmp}/hydro-launch.*" >/dev/null && fail "hydro-launch report directories left: $(ls -d "${TMPDIR:-/tmp}"/hydro-launch.*)"
stray=$(find "$ckfs"/job0 "$ckfs"/job1 -mindepth 1 -maxdepth 1 ! -name 'step-*' ! -name latest 2>&1 || true)
[ -z "$stray" ] || fail "files left in the checkpoint directories: $stray"

timelimit=$(cat "$work"/job1.rank0.log | grep -c 'time limit: --time-limit-margin' || true)
restarts=$(cat "$work"/job[01].rank0.log | grep -c 'resuming from step' || true)
report_figure "soak: $minutes minutes, 2 jobs of 2 tasks; events (ok/overtaken/failed):$(for e in "${events[@]}"; do
  printf ' %s %d/%d/%d' "$e" "${ok[$e]:-0}" "${overtaken[$e]:-0}" "${bad[$e]:-0}"; done); time-limit requeues of job ${jobs[1]}: $timelimit; resumes: $restarts"
failed=0
for e in "${events[@]}"; do failed=$((failed + ${bad[$e]:-0})); done
[ "$failed" = 0 ] || fail "$failed events did not end as they should"
note "both jobs, both ranks weights_digest=$want"
echo "PASS soak ($minutes minutes)"
