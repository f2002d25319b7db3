# Helpers for the integration tests: a private one-node Slurm per test, and waits that poll
# for behaviour (never for a duration).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$top/scripts/paths.sh"                   # $build: HYDRO_BUILD_DIR, or the main tier's
# Slurm tests run side by side: one that ctest gave a slot (one of its "slurm" resources,
# tests/CMakeLists.txt) runs in a host of its own (own_host.sh). One with no slot (run by hand,
# or pip.install and package.install, which run alone) shares this host's ports and cgroups, so
# it waits for any other such test first (a lock that the test's own processes do not inherit).
if [ -z "${HYDRO_TEST_SLOT:-}" ]; then
  if [[ ${CTEST_RESOURCE_GROUP_0_SLURM:-} =~ ^id:([0-9]+), ]]; then
    exec "$top/tests/integration/own_host.sh" "${BASH_REMATCH[1]}" "$0" "$@"
  fi
  export HYDRO_TEST_SLOT=host
  exec flock -o /run/hydro-test-slurm.lock "$0" "$@"
fi
# The interpreter this build's Python binding is for (or HYDRO_TEST_PYTHON: one with hydro
# installed by pip) runs every Python program of a test; it is first on PATH, so examples/loop.py
# (#!/usr/bin/env python3) runs on it as a program, as a user runs it from an activated virtual
# environment.
python=${HYDRO_TEST_PYTHON:-$(build_python "$build")}
python=${python:-/usr/bin/python3}
export PATH="$(dirname "$python"):$PATH"

source "$top/tests/integration/show_waits.sh"  # show_waits, for fail
source "$top/tests/integration/figures.sh"     # ms_between, report_figure, report_path

fail() {
  echo "FAIL: $*" >&2
  show_waits >&2 || true
  for f in ${HYDRO_TEST_LOGS:-}; do [ -f "$f" ] && { echo "----- $f" >&2; grep -vE '^([0-9]+: )?step' "$f" | tail -"${HYDRO_TEST_LOG_LINES:-40}" >&2; }; done
  exit 1
}
note() { echo "== $*"; }

launch=${HYDRO_TEST_LAUNCH:-$build/launcher/hydro-launch}  # pip_install.sh: the venv's
hydroctl=$build/ctl/hydroctl
# HYDRO_TEST_IMAGE=LAYER (the container tests, tests/container): each job's tasks use the image
# make_image.sh made in LAYER, as HYDRO_TEST_RUNTIME says; start_cluster checks the image first.
#   - enroot (the default): the whole task in the container as pyxis runs it, hydro-launch the
#     image's (tests/container/hydro-launch, an exec chain as enroot's);
#   - crun, podman: hydro-launch outside, the build's, and the program inside, run by crun as
#     `hydro-launch -- apptainer exec IMG PROGRAM` runs it (tests/container/oci-run), or by podman
#     (podman-run); tests/container/oci-program, below.
# in_image: what runs the program alone in the image (a reference run), empty where $train does.
in_image=()
if [ -n "${HYDRO_TEST_IMAGE:-}" ] && [ "${HYDRO_TEST_RUNTIME:-enroot}" = enroot ]; then
  launch=$top/tests/container/hydro-launch
  in_image=("$top/tests/container/enter" "$HYDRO_TEST_IMAGE")
fi
plugstack=()                                     # slurm-local writes one that loads the build's plugin
train=$build/examples/hydro-example-loop        # the few-lines loop: --steps, --step-ms, ...
# HYDRO_TEST_PROGRAM=python: the same paths with its Python twin (DistributedDataParallel over
# Gloo with several tasks), run by $python through hydro's Python binding.
# HYDRO_TEST_PROGRAM=lightning: the same job as a PyTorch Lightning fit with hydro's callback
# (examples/lightning_loop.py; Lightning's DDP over Gloo with several tasks).
# HYDRO_TEST_PROGRAM=transformers: the same job as a Hugging Face Trainer run under
# hydro.transformers.train (examples/hf_trainer.py; one task or several, DDP over Gloo).
# HYDRO_TEST_PROGRAM=torchrun: the Python example as torchrun runs it, 2 workers per task
# (torchrun_loop.sh; one task).
case "${HYDRO_TEST_PROGRAM:-cpp}" in
  python) train=$top/examples/loop.py module=hydro ;;
  lightning) train=$top/examples/lightning_loop.py module=hydro.lightning ;;
  transformers) train=$top/examples/hf_trainer.py module=hydro.transformers ;;
  torchrun) train=$top/tests/integration/torchrun_loop.sh module=hydro ;;
  *) module= ;;
esac
# (In a container test, the image's python3 must: check_image.)
[ -z "$module" ] || [ -n "${HYDRO_TEST_IMAGE:-}" ] || "$python" -c "import $module" ||
  fail "$python cannot import $module (run scripts/setup)"
if [ -n "${HYDRO_TEST_IMAGE:-}" ] && [ "${HYDRO_TEST_RUNTIME:-enroot}" != enroot ]; then
  export HYDRO_TEST_INNER=$train  # the program, for oci-program
  train=$top/tests/container/oci-program
fi
# model: the width of the program's model in the tests whose jobs are paced (paced, paced_program)
# until their signals land, then run their last steps, and their reference runs, unpaced: a
# quarter of the examples' default (512), which makes a step of the C++ loop about 3 times
# cheaper. The Trainer's example is narrower by default (64). Unpaced tests keep the default:
# their jobs must still be training when the test's signals land.
model=(--hidden 128)
[ "${HYDRO_TEST_PROGRAM:-cpp}" != transformers ] || model=()
# HYDRO_TEST_ARGS: more options for the program in every run of a test whose script appends
# "${program_args[@]}" (its reference's too): --fsdp, the Python loop's model sharded by FSDP2.
read -ra program_args <<<"${HYDRO_TEST_ARGS:-}"
job_example=$build/examples/hydro-example-train  # the JobRunner example: --data, --epochs, ...
# HYDRO_TEST_INSTALLED=1 (tests/package): what the Debian packages installed, and nothing of the
# build: /usr/bin's programs, the plugin through Debian's /etc/slurm/plugstack.conf, and the
# example loop.py the python3-hydro package ships, copied as a user would.
if [ "${HYDRO_TEST_INSTALLED:-0}" = 1 ]; then
  launch=/usr/bin/hydro-launch
  hydroctl=/usr/bin/hydroctl
  plugstack=(--plugstack /etc/slurm/plugstack.conf)
  [ "${HYDRO_TEST_PROGRAM:-}" = python ] || fail "HYDRO_TEST_INSTALLED=1 runs the Python example (HYDRO_TEST_PROGRAM=python)"
  train=$(mktemp /tmp/hydro-loop.XXXXXX.py)
  ex=/usr/share/doc/python3-hydro/examples/loop.py
  if [ -f "$ex" ]; then cp "$ex" "$train"; else zcat "$ex.gz" >"$train"; fi || fail "python3-hydro ships no $ex"
  chmod 0755 "$train"
fi

# start_cluster PROCTRACK [SLURM_LOCAL_ARGS...]: starts a private cluster (one node, or with
# --nodes N several hosts); a test that needs Slurm fails without it.
# HYDRO_TEST_TASK_PLUGIN=affinity binds each task to its CPUs.
start_cluster() {
  command -v slurmctld >/dev/null || fail "Slurm is not installed (run scripts/setup)"
  [ "$(id -u)" = 0 ] || fail "the Slurm integration tests need root"
  export HYDRO_SLURM_DIR=${HYDRO_SLURM_DIR:-/tmp/hydro-test-slurm}
  trap stop_cluster EXIT
  local out
  out=$("$top/scripts/slurm-local" start --proctrack "$1" --task "${HYDRO_TEST_TASK_PLUGIN:-none}" --dir "$HYDRO_SLURM_DIR" \
    "${plugstack[@]}" "${@:2}") ||
    fail "could not start Slurm"
  eval "$out"
  [ -n "${SLURM_CONF:-}" ] || fail "slurm-local printed no SLURM_CONF"
  note "cluster up: proctrack/$1 ${*:2}, SLURM_CONF=$SLURM_CONF"
  [ -z "${HYDRO_TEST_IMAGE:-}" ] || check_image
}

# check_image: a task in the image has no scontrol, and imports hydro from pip's install there, and
# the test's program's module (hydro.lightning: Lightning is in the image).
check_image() {
  local out run=("$top/tests/container/enter" "$HYDRO_TEST_IMAGE" /bin/sh)
  [ "${HYDRO_TEST_RUNTIME:-enroot}" = enroot ] || run=(env HYDRO_TEST_INNER=/bin/sh "$top/tests/container/oci-program")
  out=$(srun "${run[@]}" -c \
    "command -v scontrol srun || true; python3 -c 'import hydro, ${module:-hydro}; print(hydro.__file__)'" 2>&1) ||
    fail "no task starts in the image $HYDRO_TEST_IMAGE (tests/container/make_image.sh): $out"
  [[ $out == /opt/hydro/lib/python3*/site-packages/hydro/__init__.py ]] ||
    fail "a task in the image finds Slurm's client, or no hydro of pip's: $out"
  note "a task in the image (${HYDRO_TEST_RUNTIME:-enroot}): no scontrol, hydro from $out"
}

# start_spread PROCTRACK TASKS [NODES [SLURM_LOCAL_ARGS...]]: start_cluster for TASKS tasks on NODES
# hosts (1, the default: the one-node cluster; more: scripts/slurm-local --nodes), with the rest of
# slurm-local's arguments, and shape=(-N NODES -n TASKS), the job's shape for sbatch, srun and
# reference_run.
start_spread() {
  local nodes=${3:-1}
  shape=(-N "$nodes" -n "$2")
  if [ "$nodes" = 1 ]; then start_cluster "$1" "${@:4}"; else start_cluster "$1" --nodes "$nodes" "${@:4}"; fi
}

stop_cluster() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -n "${HYDRO_SLURM_DIR:-}" ]; then
    for f in "$HYDRO_SLURM_DIR"/log/slurmd*.log; do echo "----- $(basename "$f") (tail)" >&2; tail -15 "$f" >&2 || true; done
  fi
  "$top/scripts/slurm-local" stop --dir "$HYDRO_SLURM_DIR" || true
  remove_work "$rc"
  exit $rc
}

# make_work: $work, the test's own directory (/tmp/hydro-it.XXXXXX), made after start_cluster,
# whose EXIT trap (stop_cluster, once its jobs are gone) removes it however the test ends, killed
# or failed too (fail shows the logs first); HYDRO_TEST_KEEP=1 keeps a failed test's.
made_work=
make_work() {
  work=$(mktemp -d /tmp/hydro-it.XXXXXX) || fail "could not make the test's directory in /tmp"
  made_work=$work
}
remove_work() {  # remove_work RC
  [ -n "$made_work" ] || return 0
  if [ "$1" != 0 ] && [ "${HYDRO_TEST_KEEP:-0}" = 1 ]; then echo "kept $made_work (HYDRO_TEST_KEEP=1)" >&2; return 0; fi
  rm -rf "$made_work"
}

# paced MS [RUNS]: a job script's --step-ms, as shell text that the job's batch shell expands: MS
# in the job's first RUNS runs (default 1), which must still be training when the test's signals
# land; 0 once Slurm has requeued it RUNS times, when the test only waits for the end.
paced() { printf '$([ "${SLURM_RESTART_COUNT:-0}" -lt %d ] && echo %d || echo 0)' "${2:-1}" "$1"; }

# paced_program K MS PROGRAM ARGS...: for hydro-launch's command line in a job script, PROGRAM with
# --step-ms MS in hydro-launch's generations before K (HYDRO_RESTART_GENERATION; unset in the
# first), which must still be training when the test's signals land, and 0 from generation K on,
# when the test only waits for the end. bash execs PROGRAM: its pid is the one hydro-launch logs.
paced_program() {
  printf "bash -c 'exec \"\$0\" \"\$@\" --step-ms \$((\${HYDRO_RESTART_GENERATION:-0} < %d ? %d : 0))'" "$1" "$2"
  printf ' %q' "${@:3}"
}

# reference_run SRUN_OPTION... -- ARGS...: runs the example ($train) with those srun options (the
# job's shape: -n 2, -N 2 --ntasks-per-node=2, ...), never interrupted, its output in
# $work/reference.log, and prints its weights_digest; fails unless every rank printed the same one.
# A run that has not ended after $reference_limit seconds (300 unless the test sets it) fails while
# it still runs, so that fail shows where its processes wait, and the log its Python ranks' stacks.
reference_run() {
  local opts=() want pid limit=${reference_limit:-300} rc=0 deadline
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  srun "${opts[@]}" "${in_image[@]}" "$train" "$@" >"$work/reference.log" 2>&1 &
  pid=$! deadline=$((SECONDS + limit))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then  # fail's report, then srun (and so the step) ended too
    (HYDRO_TEST_LOGS="${HYDRO_TEST_LOGS:-} $work/reference.log" HYDRO_TEST_LOG_LINES=400 \
      fail "the reference run had not ended after ${limit}s") || { kill "$pid" 2>/dev/null; exit 1; }
  fi
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || fail "reference run failed ($rc): $(tail -5 "$work/reference.log")"
  want=$(grep -oP '^weights_digest=\K\w+' "$work/reference.log" | sort -u)
  [ -n "$want" ] && [ "$(echo "$want" | wc -l)" = 1 ] || fail "the reference ranks did not print one weights_digest: $want"
  echo "$want"
}

# reference_digest TASKS ARGS...: reference_run on TASKS tasks.
reference_digest() {
  local tasks=$1
  shift
  reference_run -n "$tasks" -- "$@"
}

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches.
wait_for() {
  local file=$1 re=$2 limit=${3:-60} i
  for ((i = 0; i < limit * 10; i++)); do
    grep -qE "$re" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no line matching '$re' in $file after ${limit}s"
}

# count FILE REGEX: lines of FILE matching.
count() {
  local n
  n=$(grep -cE "$2" "$1" 2>/dev/null) || true
  echo "${n:-0}"
}

# make_users NAME...: local users for a test's jobs. Tests that run at once share /etc/passwd: a lock
# on /etc (its own in the Debian 13 root), so that two never both find a user missing and both add
# it (the second's useradd fails).
make_users() {
  local u
  for u in "$@"; do
    flock /etc sh -c 'id "$1" >/dev/null 2>&1 || useradd --no-create-home --shell /bin/sh "$1"' _ "$u" ||
      fail "could not add the user $u"
  done
}

# wait_count FILE REGEX N [SECONDS]: until at least N lines match.
wait_count() {
  local file=$1 re=$2 n=$3 limit=${4:-60} i
  for ((i = 0; i < limit * 10; i++)); do
    [ "$(count "$file" "$re")" -ge "$n" ] && return 0
    sleep 0.1
  done
  fail "fewer than $n lines matching '$re' in $file after ${limit}s"
}

# launcher_requeued JOB: a regex for hydro-launch's line when it requeued JOB itself, or, with no
# scontrol where it runs (in a container), left the requeue to the host (hydro's plugin, RequeueExit);
# one line a requeue: not another task's "requeued already".
launcher_requeued() { echo "job $1 requeued\$|exiting 85 for the host to requeue the job"; }

job_state() { scontrol show job "$1" 2>/dev/null | grep -oP 'JobState=\K\S+' || echo UNKNOWN; }

# wait_state JOB REGEX [SECONDS]
wait_state() {
  local job=$1 re=$2 limit=${3:-60} i s
  for ((i = 0; i < limit * 10; i++)); do
    s=$(job_state "$job")
    [[ $s =~ ^($re)$ ]] && return 0
    sleep 0.1
  done
  fail "job $job is $s, expected $re, after ${limit}s"
}

# last_step FILE: the last "step N" the example printed.
last_step() { { grep -oE '^step [0-9]+' "$1" 2>/dev/null || true; } | tail -1 | cut -d' ' -f2; }

# holds FILE WHAT [STEPS]: the example of FILE trains no further than STEPS (default 0) past its
# last step for a second, while WHAT holds it ("suspended", "paused by the user"); $held is that
# step.
holds() {
  local now
  held=$(last_step "$1")
  sleep 1
  now=$(last_step "$1")
  [ "${now:-0}" -le $((${held:-0} + ${3:-0})) ] || fail "training advanced while $2 (step ${held:-none} -> $now)"
}

# wait_steps FILE N [FROM]: until the example has printed a step at least N past FROM (default:
# where it is now).
wait_steps() {
  local file=$1 n=$2 from=${3:-} i now
  [ -n "$from" ] || { from=$(last_step "$file"); from=${from:-0}; }
  for ((i = 0; i < 600; i++)); do
    now=$(last_step "$file"); now=${now:-0}
    [ "$now" -ge $((from + n)) ] && return 0
    sleep 0.1
  done
  fail "training did not advance $n steps past $from in $file"
}

# expect_weights JOB LOG WANT [TASKS]: waits for JOB to complete, then fails unless each of its TASKS
# tasks (default 1) printed the weights_digest WANT, the run never interrupted's; sets got.
expect_weights() {
  wait_for "$2" '^weights_digest=' 300
  wait_state "$1" COMPLETED 60
  show_new "$2"
  got=$(grep -oP '^weights_digest=\K\w+' "$2" | sort -u) || fail "the job printed no weights_digest"
  [ "$(grep -c '^weights_digest=' "$2")" = "${4:-1}" ] || fail "not every task printed a weights_digest"
  [ "$got" = "$3" ] || fail "weights differ: interrupted $got, uninterrupted $3"
}

# resume_requeued JOB LOG N STEP: releases the requeued JOB, whose Nth restart then resumes from STEP.
resume_requeued() {
  release "$1"
  wait_for "$2" "^restart count: $3\$" 60
  wait_for "$2" "resumed from .* at step $4\$" 60
}

# release JOB: a requeued job waits ~121 s to be eligible; start it now. slurmd refuses a launch
# whose credential is from the same second as the requeue's revocation ("already killed, do not
# launch batch job"), so let the second pass, and ask again if the job is sent back to wait. A job
# may start by itself meanwhile (seen under load: Slurm refuses the update, "Job is no longer
# pending execution"), which is what was asked: the state decides, not the update's status.
release() {
  local job=$1 i s
  wait_state "$job" PENDING 60
  sleep 1.1
  for ((i = 0; i < 10; i++)); do
    scontrol update JobId="$job" StartTime=now || true
    for _ in $(seq 30); do
      s=$(job_state "$job")
      [ "$s" = PENDING ] || return 0
      sleep 0.1
    done
  done
  fail "job $job stayed PENDING after StartTime=now"
}

# show_new FILE: prints the lines of FILE not shown before (hydro's own lines, and the last
# training step), indented, so a person can follow the job.
declare -A shown_lines
show_new() {
  local file=$1 from=${shown_lines[$1]:-0} total
  total=$(wc -l <"$file" 2>/dev/null || echo 0)
  [ "$total" -gt "$from" ] || return 0
  sed -n "$((from + 1)),${total}p" "$file" |
    awk '/^step /{last=$0; next} {if (last) {print "    | " last; last=""} print "    | " $0} END{if (last) print "    | " last}'
  shown_lines[$1]=$total
}

# A job of several ranks whose tasks each write their own log, $work/rankN.log: output that srun
# or slurmstepd forwards can wait until a resume (the srun in the batch script is stopped too).
# submit_ranks TASKS SBATCH_OPTION... -- ARGS...: submits the example ($train ARGS) as one step of
# TASKS tasks with those sbatch options; sets $job to its id, and names the logs for fail().
rank_count=1
rank_log() { echo "$work/rank$1.log"; }
submit_ranks() {
  local opts=() r
  rank_count=$1
  shift
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  HYDRO_TEST_LOGS="$work/batch.log"
  for ((r = 0; r < rank_count; r++)); do HYDRO_TEST_LOGS+=" $(rank_log $r)"; done
  export HYDRO_TEST_LOGS
  job=$(sbatch --parsable -n "$rank_count" "${opts[@]}" -o "$work/batch.log" \
    --wrap "srun -n $rank_count bash -c 'exec $train $* >$work/rank\$SLURM_PROCID.log 2>&1'") || fail "sbatch failed"
}
# wait_ranks_advance N: until every rank has printed a step N past where it is now.
# (Each rank from where it is when called: the ranks step together, so waiting for each in turn
# from where it then is would take up to rank_count times N steps.)
wait_ranks_advance() {
  local r from=()
  for ((r = 0; r < rank_count; r++)); do from+=("$(last_step "$(rank_log $r)")"); done
  for ((r = 0; r < rank_count; r++)); do wait_steps "$(rank_log $r)" "$1" "${from[r]:-0}"; done
}
# wait_every_rank REGEX N [SECONDS]: until each rank has printed at least N lines matching REGEX.
wait_every_rank() { local r; for ((r = 0; r < rank_count; r++)); do wait_count "$(rank_log $r)" "$1" "$2" "${3:-30}"; done; }
# ranks_digest WANT: fails unless every rank printed weights_digest=WANT.
ranks_digest() {
  local r got
  for ((r = 0; r < rank_count; r++)); do
    got=$(grep -oP '^weights_digest=\K\w+' "$(rank_log $r)" || true)
    [ "$got" = "$1" ] || fail "rank $r's weights differ from the run never held: '$got' vs $1"
  done
}
