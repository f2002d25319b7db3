#!/usr/bin/env bash
# Bit-for-bit needs the same CPUs (docs/users-guide-slurm.md, "What bit-for-bit needs"). On a real
# Slurm whose tasks are bound to their CPUs (task/affinity): a job with --cpus-per-task=2
# checkpoints at step 200. Resumed with 2 CPUs again, it ends with the weights of a run never
# interrupted, and warns of nothing. Resumed with 1 CPU: where the loop's libtorch sums through
# OpenBLAS (Debian's), whose pool is sized by the CPUs, it says which thread counts changed and how
# to fix them; where it sums through MKL (pip's torch), whose pool is ATen's (the loop sets it to
# one thread), nothing changes: the same weights, and no warning.
source "$(dirname "$0")/lib.sh"
export HYDRO_TEST_TASK_PLUGIN=affinity
start_cluster "${1:-cgroup}"

make_work
args=(--steps 400 --log-every 50)
unset OPENBLAS_NUM_THREADS OMP_NUM_THREADS
srun -c 2 "$train" "${args[@]}" >"$work/reference.log" 2>&1 || fail "reference run failed"
want=$(grep -oP '^weights_digest=\K\w+' "$work/reference.log") || fail "no weights_digest in the reference run"

log=$work/first.log
HYDRO_CKPT_DIR=$work/two HYDRO_CKPT_EVERY=200 srun -c 2 "$launch" -- "$train" --steps 200 --log-every 50 >"$log" 2>&1 ||
  fail "the first run failed: $(tail -5 "$log")"
[ -f "$work/two/step-000000000200/manifest.json" ] || fail "no checkpoint of step 200: $(ls "$work/two")"
cp -a "$work/two" "$work/one"
note "a run with --cpus-per-task=2 committed step 200"

export HYDRO_TEST_LOGS="$work/same.log $work/fewer.log"
HYDRO_CKPT_DIR=$work/two srun -c 2 "$launch" -- "$train" "${args[@]}" >"$work/same.log" 2>&1 || fail "the resume on 2 CPUs failed"
grep -q 'resuming from step 200' "$work/same.log" || fail "the resume on 2 CPUs did not resume from step 200"
grep -q 'other thread counts' "$work/same.log" && fail "a resume on the same CPUs warned of other thread counts"
got=$(grep -oP '^weights_digest=\K\w+' "$work/same.log")
[ "$got" = "$want" ] || fail "weights on the same CPUs differ: $got, uninterrupted $want"
note "resumed with --cpus-per-task=2: weights_digest=$got equals the run never interrupted, no warning"

HYDRO_CKPT_DIR=$work/one srun -c 1 "$launch" -- "$train" "${args[@]}" >"$work/fewer.log" 2>&1 || fail "the resume on 1 CPU failed"
if ! grep -q libopenblas <<<"$(ldd "$train")"; then
  grep -q 'other thread counts' "$work/fewer.log" && fail "a resume on 1 CPU warned, with no pool sized by the CPUs"
  got=$(grep -oP '^weights_digest=\K\w+' "$work/fewer.log")
  [ "$got" = "$want" ] || fail "weights on 1 CPU differ with the same thread counts: $got, uninterrupted $want"
  note "resumed with --cpus-per-task=1, no OpenBLAS: weights_digest=$got equals the run never interrupted, no warning"
  echo "PASS cpu_count (${1:-cgroup})"
  exit 0
fi
warning=$(grep -m1 'warning: this run splits sums over other thread counts' "$work/fewer.log") ||
  fail "a resume on 1 CPU did not say that its thread counts differ"
grep -qE "threads 2 then, 1 now" <<<"$warning" || fail "the warning does not name the counts: $warning"
grep -qF -- '--cpus-per-task' <<<"$warning" || fail "the warning does not say how to fix it: $warning"
note "resumed with --cpus-per-task=1: ${warning#*: }"
echo "PASS cpu_count (${1:-cgroup})"
