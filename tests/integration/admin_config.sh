#!/usr/bin/env bash
# The admin's config on a real Slurm: a YAML file named in plugstack.conf, plugstack arguments over
# it, the user's options and environment over both; bad config refused at submit time naming the
# file, line and key; the per-job checkpoint directory made as the job's (non-root) user, mode
# 0700; the admin's signal map followed by the runtime, hydro-launch and hydroctl; a config broken
# after submit fails the job, never the node; and a symlink planted by another user refused, its
# target untouched.
source "$(dirname "$0")/lib.sh"
start_cluster "${1:-cgroup}"

plugin=$build/spank/spank_hydro.so
plugstack=$HYDRO_SLURM_DIR/plugstack.conf
make_work
chmod 0755 "$work"
yaml=$work/hydro.yaml
base=$work/scratch
mkdir -p "$base" && chmod 1777 "$base"
cat >"$yaml" <<YAML
default_pause: on
checkpoint_dir: $base/%u/%j
checkpoint_every: 250
keep_last: 2
checkpoint_mode: sync_all
signals: "pause=TSTP,PWR;resume=CONT,URG"
YAML
echo "required $plugin config=$yaml keep_last=4" >"$plugstack"

out=$(srun env) || fail "srun under the YAML config failed"
for want in HYDRO_PAUSE=on HYDRO_CKPT_EVERY=250 HYDRO_KEEP_LAST=4 HYDRO_CKPT_MODE=sync_all; do
  grep -qx "$want" <<<"$out" || fail "$want did not reach the task: $(grep HYDRO_ <<<"$out")"
done
grep -qE "^HYDRO_CKPT_DIR=$base/root/[0-9]+$" <<<"$out" || fail "no per-job HYDRO_CKPT_DIR: $(grep HYDRO_ <<<"$out")"
note "YAML settings reach the task; keep_last=4 on the plugstack line overrides the file's 2"

out=$(HYDRO_KEEP_LAST=6 srun env) || fail "srun with HYDRO_KEEP_LAST=6 failed"
grep -qx HYDRO_KEEP_LAST=6 <<<"$out" || fail "the job's environment lost to the admin config"
out=$(HYDRO_KEEP_LAST=6 srun --hydro-keep-last=7 --hydro-checkpoint-mode=async --hydro-pause=off --hydro-gpu-release=full env) ||
  fail "srun with options failed"
for want in HYDRO_KEEP_LAST=7 HYDRO_CKPT_MODE=async HYDRO_PAUSE=off HYDRO_GPU_RELEASE=full; do
  grep -qx "$want" <<<"$out" || fail "$want (command line) did not win: $(grep HYDRO_ <<<"$out")"
done
out=$(srun --hydro-checkpoint-dir="$work/mine" env) || fail "srun --hydro-checkpoint-dir failed"
grep -qx "HYDRO_CKPT_DIR=$work/mine" <<<"$out" || fail "--hydro-checkpoint-dir did not reach the task"
job=$(sbatch --parsable --hydro-keep-last=8 -o "$work/batch.out" --wrap 'env')
wait_state "$job" COMPLETED 60
grep -qx HYDRO_KEEP_LAST=8 "$work/batch.out" || fail "sbatch --hydro-keep-last=8 did not reach the batch script"
note "precedence: option, then environment, then plugstack arguments, then the YAML file (srun and sbatch)"

# The admin's signal map (off SIGUSR1/SIGUSR2): hydroctl's verbs send PWR and URG, hydro-launch
# forwards them, the runtime pauses and resumes on them.
grep -qx 'HYDRO_SIGNALS=pause=TSTP,PWR;resume=CONT,URG' <<<"$out" || fail "the admin's signals did not reach the task"
printf '#!/bin/bash\nexec %q -- %q --steps 1000000 --log-every 25 --step-ms 5\n' "$launch" "$train" >"$work/loop.sh"
chmod 0755 "$work/loop.sh"
log=$work/loop.log
job=$(sbatch --parsable -o "$log" "$work/loop.sh") || fail "sbatch of the loop failed"
wait_state "$job" RUNNING
wait_steps "$log" 50
ctl=(env -u HYDRO_SIGNALS "$build/ctl/hydroctl" --config "$yaml")
out=$("${ctl[@]}" pause "$job") || fail "hydroctl pause failed: $out"
grep -qF "sent SIGPWR to job $job (pause)" <<<"$out" || fail "hydroctl pause sent: $out"
wait_for "$log" 'paused at (operator|the end of step)' 20
holds "$log" "paused"
out=$("${ctl[@]}" resume "$job") || fail "hydroctl resume failed: $out"
grep -qF "sent SIGURG to job $job (resume)" <<<"$out" || fail "hydroctl resume sent: $out"
wait_steps "$log" 50
grep -q 'forwarding SIGPWR' "$log" && grep -q 'forwarding SIGURG' "$log" || fail "hydro-launch did not forward PWR and URG"
scancel "$job"
wait_state "$job" CANCELLED 60
note "the admin's signals: hydroctl paused job $job with SIGPWR at step $held and resumed it with SIGURG, through hydro-launch"

expect_refused() {  # expect_refused MESSAGE CMD...: CMD fails at submit time and prints MESSAGE
  local msg=$1 err
  shift
  if err=$("$@" 2>&1); then fail "'$*' was accepted"; fi
  grep -qF -- "$msg" <<<"$err" || fail "'$*': expected '$msg', got: $err"
}
expect_refused "hydro: option: --hydro-keep-last=-1 is out of range [0, 1000000]" srun --hydro-keep-last=-1 true
expect_refused "--hydro-checkpoint-dir='rel/dir' must be an absolute path" sbatch --hydro-checkpoint-dir=rel/dir --wrap true
expect_refused "--hydro-checkpoint-mode='fast' is not sync_any, sync_all or async" salloc --hydro-checkpoint-mode=fast true
expect_refused "hydro: option: --hydro-signals: unknown signal 'NAP'" srun --hydro-signals='pause=NAP' true
expect_refused "hydro: option: --hydro-gpu-release='on' is not off, cache or full" srun --hydro-gpu-release=on true
printf 'keep_last: 2\ncolour: blue\n' >"$yaml"
expect_refused "hydro: init: $yaml: line 2: unknown key 'colour'" srun true
expect_refused "$yaml: line 2: unknown key 'colour'" sbatch --wrap true
printf 'keep_last: [1, 2\n' >"$yaml"
expect_refused "hydro: init: $yaml: line 2: not valid YAML" srun true
printf 'keep_last: 2\n' >"$yaml"
echo "required $plugin config=$yaml bogus=1" >"$plugstack"
expect_refused "hydro: init: plugstack.conf: unknown spank_hydro.so key 'bogus'" srun true
note "bad options, a bad YAML file and an unknown plugstack key are refused at submit time, named"

# A config broken after the job was submitted: slurmstepd's plugin cannot start it. The job fails,
# its output names the cause, and the node is never drained (Slurm drains it when a
# required plugin's init fails: hydro fails the task in task_init, and from Slurm 25.05 it also sets
# slurm_spank_init_failure_mode to fail the job, not the node).
printf 'keep_last: 2\n' >"$yaml"
echo "required $plugin config=$yaml" >"$plugstack"
job=$(sbatch --parsable -H -o "$work/held.out" --wrap 'echo ran') || fail "sbatch -H failed"
printf 'keep_last: [1, 2\n' >"$yaml"
scontrol release "$job"
wait_state "$job" FAILED 60
! grep -qx ran "$work/held.out" || fail "the job ran under a broken config"
grep -qF "the admin's hydro config is invalid, so the job cannot start: $yaml: line 2: not valid YAML" "$work/held.out" ||
  fail "the job's output does not name the cause: $(cat "$work/held.out")"
state=$(sinfo -h -o %t)
[[ $state != *drain* && $state != drng ]] || fail "the node is $state after the broken config: $(sinfo -h -o %E)"
note "a config broken after submit fails job $job, naming $yaml's line 2; the node stays $state"

# A second Unix user runs a job: the directory is made as that user, mode 0700.
make_users hydro-alice hydro-mallory
printf 'checkpoint_dir: %s/%%u/%%j\n' "$base" >"$yaml"
echo "required $plugin config=$yaml" >"$plugstack"
as() { local u=$1; shift; runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" "$@"; }
out=$(cd /tmp && as hydro-alice srun env) || fail "srun as hydro-alice failed"
dir=$(grep -oP '^HYDRO_CKPT_DIR=\K.*' <<<"$out")
[[ $dir =~ ^$base/hydro-alice/[0-9]+$ ]] || fail "hydro-alice's HYDRO_CKPT_DIR is '$dir'"
[ "$(stat -c '%U %a' "$dir")" = "hydro-alice 700" ] || fail "$dir is $(stat -c '%U %a' "$dir"), not hydro-alice 700"
[ "$(stat -c '%U %a' "$base/hydro-alice")" = "hydro-alice 700" ] || fail "$base/hydro-alice is not hydro-alice 700"
note "hydro-alice's job directory $dir was made as hydro-alice, mode 0700"

# The attack: before hydro-alice's next job, hydro-mallory plants a symlink where her directory goes.
rm -rf "$base/hydro-alice"
as hydro-mallory mkdir -m 0777 "$base/loot"
as hydro-mallory ln -s "$base/loot" "$base/hydro-alice"
if err=$(cd /tmp && as hydro-alice srun env 2>&1); then fail "hydro-alice's job ran through a planted symlink: $err"; fi
[ -z "$(ls -A "$base/loot")" ] || fail "the plugin followed the symlink: $(ls -la "$base/loot")"
[ -L "$base/hydro-alice" ] || fail "the planted symlink was replaced"
wait_for "$HYDRO_SLURM_DIR/log/slurmd.log" "$base/hydro-alice is a symlink; hydro does not follow it" 20
note "a symlink planted by hydro-mallory fails hydro-alice's job with a clear message; its target stays empty"
echo "PASS admin_config ($1)"
