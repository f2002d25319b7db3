# Sourced by lib.sh: what a failed Slurm test shows of its processes before its logs.
source "$top/scripts/cgroups.sh"  # cgroup_hierarchies
# Every Python program of a test (its jobs' too: Slurm passes the environment on) writes each
# thread's stack on SIGABRT, which show_waits sends to a failed test's programs.
export PYTHONFAULTHANDLER=1

# show_waits: where each process of this test's host waits, thread by thread (its state and the
# kernel's wait channel, counted); then its Python programs' stacks, which SIGABRT has them write
# to their logs (PYTHONFAULTHANDLER), so that a failed test whose job hung says which rank waited
# where. Only in a host of its own (own_host.sh), whose cgroups hold this test's processes alone.
show_waits() {
  [[ ${HYDRO_TEST_SLOT:-} =~ ^[0-9]+$ ]] || return 0
  local h pid t programs=()
  h=$(cgroup_hierarchies | head -1)
  echo "----- where this test's processes wait (each thread's state:wait channel, counted)"
  for pid in $(find "/sys/fs/cgroup/$h" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un); do
    [ -d "/proc/$pid" ] && [ "$pid" != "$BASHPID" ] && [ "$pid" != $$ ] || continue
    printf '%s %s:' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-100)"
    for t in /proc/$pid/task/*; do
      echo "$(sed -n 's/^State:\s*\(.\).*/\1/p' "$t/status" 2>/dev/null):$(cat "$t/wchan" 2>/dev/null)"
    done | sort | uniq -c | awk '{ printf " %s x%d", $2, $1 }'
    echo
    [[ "$(readlink "/proc/$pid/exe")" != */python3* ]] || programs+=("$pid")
  done
  [ ${#programs[@]} -gt 0 ] || return 0
  echo "----- SIGABRT to the Python programs ${programs[*]}: their stacks are in their logs, below"
  kill -CONT "${programs[@]}" 2>/dev/null
  kill -ABRT "${programs[@]}" 2>/dev/null
  sleep 2
}
