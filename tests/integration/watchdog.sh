#!/usr/bin/env bash
# Path 6, a hung worker on a real Slurm: a Python worker using torch elastic's own FileTimerClient
# hangs inside `expires(after=1)` with a child in its process group; hydro-launch --watchdog-file
# kills the whole group and requeues the job; the restarted job finishes.
source "$(dirname "$0")/lib.sh"
proctrack=${1:-cgroup}
start_cluster "$proctrack"
"$python" -c 'import torch.distributed.elastic.timer' 2>/dev/null ||
  fail "$python has no torch.distributed.elastic.timer (run scripts/setup)"

make_work
worker=$top/tests/unit/watchdog_worker.py
cat >"$work/job.sh" <<JOB
#!/bin/bash
mode=hang; [ "\${SLURM_RESTART_COUNT:-0}" -ge 1 ] && mode=finish
echo "restart count: \${SLURM_RESTART_COUNT:-0}, worker mode \$mode"
exec "$launch" --watchdog-file "$work/watchdog-%j.%t.fifo" --max-restarts 2 -- "$python" "$worker" \$mode "$work"
JOB
log=$work/job.log
export HYDRO_TEST_LOGS=$log
job=$(sbatch --parsable --requeue --open-mode=append -o "$log" "$work/job.sh") || fail "sbatch failed"
wait_for "$log" "watchdog expired: pid [0-9]+ scope 'hung step'" 60
grep -q "timers are read from $work/watchdog-$job.0.fifo" "$log" || fail "--watchdog-file's %j.%t did not expand to $job.0"
wait_for "$log" "job $job requeued" 30
sleeper=$(cat "$work/sleeper.pid")
for _ in $(seq 100); do
  st=$(awk '{print $3}' "/proc/$sleeper/stat" 2>/dev/null || echo gone)
  [ "$st" = gone ] || [ "$st" = Z ] && break
  sleep 0.1
done
[ "$st" = gone ] || [ "$st" = Z ] || fail "the hung worker's child $sleeper survived (state $st)"
show_new "$log"
note "the hung worker and its child were killed and the job requeued"
release "$job"
wait_state "$job" COMPLETED 120
[ -f "$work/done" ] || fail "the restarted worker did not finish"
[ ! -e "$work/watchdog-$job.0.fifo" ] || fail "hydro-launch left its FIFO behind"
show_new "$log"
note "the restarted job finished"
echo "PASS watchdog ($proctrack)"
