#!/usr/bin/env bash
# The peers for hydro's framework integrations (issue 35): the same job, requeued once at the same
# step, on the local Slurm (scripts/slurm-local, as the tests run it), the framework alone against
# the framework under hydro-launch with hydro's integration. FRAMEWORK:
#   lightning:    examples/lightning_loop.py, one task started by srun in the batch script, as
#                 Lightning asks. Alone (--no-hydro: SLURMEnvironment's auto-requeue):
#                 `scancel --signal=USR1`, what `#SBATCH --signal=USR1@90` sends before the time
#                 limit; Lightning saves hpc_ckpt_1.ckpt inside its handler and runs `scontrol
#                 requeue`; Slurm ends the job (SIGTERM, then SIGKILL after KillWait); the next run
#                 resumes from that file. With hydro: the callback.
#   transformers: examples/hf_trainer.py. Alone (--no-hydro): the Trainer's own checkpoints every
#                 100 steps (save_steps), `scontrol requeue` (SIGTERM, which the Trainer does not
#                 handle), the next run resumes with resume_from_checkpoint=True. With hydro:
#                 hydro.transformers.train.
# With hydro, `scontrol requeue`: the checkpoint at the step's end, exit 75, the next run resumes
# from it. For each: the steps trained twice (the last step printed before the requeue, less the
# step the next run resumed at) and whether the weights equal that program's run never interrupted.
# Needs root (a private Slurm) and the main tier's build.
# Usage: bench/framework_peer.sh lightning|transformers [STEP]
set -euo pipefail
framework=${1:-}
case "$framework" in
  lightning | transformers) export HYDRO_TEST_PROGRAM=$framework ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) echo "usage: bench/framework_peer.sh lightning|transformers [STEP]" >&2; exit 2 ;;
esac
source "$(dirname "$0")/../tests/integration/lib.sh"
at=${2:-300}
start_cluster cgroup
work=$(mktemp -d /tmp/hydro-peer.XXXXXX)
args=(--steps 1200 --log-every 1)

# run KIND: the reference, then the requeued job; prints "KIND lost=N equal=yes|no".
run() {
  local kind=$1 flags=() launcher=() signal want log job first resumed
  if [ "$kind" = alone ]; then flags=(--no-hydro); else launcher=("$launch" --); fi
  want=$(HYDRO_CKPT_DIR=$work/$kind-ref reference_digest 1 "${args[@]}" "${flags[@]}")
  log=$work/$kind.log
  cat >"$work/$kind.sh" <<JOB
#!/bin/bash
export HYDRO_CKPT_DIR=$work/$kind-ckpt
exec srun -n 1 ${launcher[*]} $train ${args[*]} ${flags[*]} --step-ms $(paced 20)
JOB
  job=$(sbatch --parsable --requeue --open-mode=append -o "$log" "$work/$kind.sh")
  wait_state "$job" RUNNING
  wait_for "$log" "^step $at " 120
  if [ "$kind$framework" = alonelightning ]; then scancel --signal=USR1 "$job"; else scontrol requeue "$job"; fi
  wait_state "$job" 'PENDING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED' 120
  first=$(last_step "$log")
  release "$job"
  wait_state "$job" COMPLETED 600
  resumed=$(awk -v first="$first" '/^step [0-9]+ /{ if (seen && !found) { print $2 - 1; found = 1 } if ($2 == first) seen = 1 }' "$log")
  got=$(grep -oP '^weights_digest=\K\w+' "$log" | tail -1)
  echo "$framework $kind: signal at step $at, last step before the requeue $first, next run's first step $((resumed + 1)):" \
    "steps trained twice $((first - resumed)); weights $([ "$got" = "$want" ] && echo "equal to" || echo "differ from")" \
    "its run never interrupted ($got, $want)"
}

note "$framework alone, then with hydro: one requeue at step $at"
run alone
run hydro
rm -rf "$work"
