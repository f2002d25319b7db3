#!/usr/bin/env bash
# --hydro-pause reaches the task; a bad value is refused at submit time, naming the option.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-linuxproc}"

out=$(srun --hydro-pause=on env) || fail "srun --hydro-pause=on failed"
grep -qx 'HYDRO_PAUSE=on' <<<"$out" || fail "HYDRO_PAUSE=on did not reach the task: $out"
grep -qE '^HYDRO_JOB_ID=[0-9]+$' <<<"$out" || fail "no HYDRO_JOB_ID in the task"
grep -qx 'HYDRO_STEP_ID=0' <<<"$out" || fail "no HYDRO_STEP_ID=0 in the task"
grep -qx 'HYDRO_RESTART_COUNT=0' <<<"$out" || fail "no HYDRO_RESTART_COUNT=0 in the task"
grep -qE "^HYDRO_CKPT_DIR=$HYDRO_SLURM_DIR/checkpoints/root/[0-9]+$" <<<"$out" || fail "no HYDRO_CKPT_DIR from the admin template"
note "srun --hydro-pause=on: the task sees HYDRO_PAUSE=on and the job's settings"

out=$(srun --hydro-pause=off env) || fail "srun --hydro-pause=off failed"
grep -qx 'HYDRO_PAUSE=off' <<<"$out" || fail "HYDRO_PAUSE=off did not reach the task"
out=$(srun env) || fail "srun without the option failed"
grep -qx 'HYDRO_PAUSE=off' <<<"$out" || fail "the admin default (default_pause=off) did not reach the task"
out=$(HYDRO_PAUSE=on srun env) || fail "srun with HYDRO_PAUSE=on in the environment failed"
grep -qx 'HYDRO_PAUSE=on' <<<"$out" || fail "the user's HYDRO_PAUSE=on lost to the admin default"
note "precedence: command line, then environment, then the admin's default"

if err=$(srun --hydro-pause=banana true 2>&1); then fail "srun --hydro-pause=banana was accepted"; fi
grep -q "hydro: option: --hydro-pause: 'banana' is not on or off" <<<"$err" || fail "unexpected message: $err"
if err=$(sbatch --hydro-pause=banana --wrap true 2>&1); then fail "sbatch --hydro-pause=banana was accepted"; fi
grep -q "\-\-hydro-pause: 'banana' is not on or off" <<<"$err" || fail "unexpected sbatch message: $err"
note "--hydro-pause=banana is refused at submit time by srun and sbatch, naming the option"

# Whole outputs first: under pipefail, grep -q on a pipe fails when it stops reading early.
help=$(srun --help 2>&1) || true
grep -q -- '--hydro-pause=on|off' <<<"$help" || fail "srun --help does not list --hydro-pause"
help=$(sbatch --help 2>&1) || true
grep -q -- '--hydro-pause=on|off' <<<"$help" || fail "sbatch --help does not list --hydro-pause"
note "srun --help and sbatch --help list --hydro-pause"
echo "PASS option ($1)"
