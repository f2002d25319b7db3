#!/usr/bin/env bash
# A host of its own for one Slurm test, so that several run at once: ctest gives each Slurm test
# one of its "slurm" resources (tests/CMakeLists.txt, scripts/test's resource file), and lib.sh
# runs the test through this script in that slot.
#
#   own_host.sh SLOT SCRIPT ARGS...   SCRIPT ARGS in slot SLOT's namespaces
#   own_host.sh --clean SLOT...       kills what a test killed mid-way left in those slots
#
# SCRIPT runs in network, mount and cgroup namespaces of its own. Its slurmctld, slurmd, jobs and
# ranks listen where no other slot's see: its own loopback, and with --nodes its own bridge and
# node namespaces (/run/netns is its own too). Its processes, Slurm's job cgroups included, are
# under hydro-slotN in every cgroup v1 hierarchy (or in cgroup v2's, where it is alone:
# scripts/cgroups.sh), which it sees as the root: slurm-local's clean-up of frozen jobs and of node
# cgroups finds only its own. Its Slurm directory is /tmp/hydro-test-slurm-N. munged stays the
# host's, started here first (one key, one socket).
# Whatever a test that was killed left in its slot (daemons, jobs, frozen tasks) is killed before
# the next test takes the slot, and by scripts/test at its end.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)

die() { echo "own_host: $*" >&2; exit 1; }

source "$top/scripts/cgroups.sh"  # cgroup_hierarchies, join_cgroups, remount_cgroups

slot_cgroup() { echo "/sys/fs/cgroup/$1/hydro-slot$2"; }  # HIERARCHY SLOT

# clean SLOT: every process under the slot's cgroups killed (frozen ones thawed, so that the
# kill lands: v1's freezer, or v2's cgroup.freeze), then the cgroups removed.
clean() {
  local slot=$1 h d left i
  for i in $(seq 50); do
    left=0
    for h in $(cgroup_hierarchies); do
      d=$(slot_cgroup "$h" "$slot")
      [ -d "$d" ] || continue
      find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      [ "$h" != freezer ] || find "$d" -name freezer.state -exec sh -c 'for f; do echo THAWED >"$f"; done' _ {} + 2>/dev/null || true
      [ "$h" != . ] || find "$d" -name cgroup.freeze -exec sh -c 'for f; do echo 0 >"$f"; done' _ {} + 2>/dev/null || true
      [ -z "$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] || left=1
    done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  [ "$left" = 0 ] || die "slot $slot: processes left in its cgroups after SIGKILL"
  for h in $(cgroup_hierarchies); do
    d=$(slot_cgroup "$h" "$slot")
    [ ! -d "$d" ] || find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# note_cpu SLOT: the CPU time the test used, everything in its slot's cgroups (its script, its
# Slurm's daemons and jobs), against its wall time: a line in its output, and with
# HYDRO_TEST_CPU_LOG (scripts/test) "TEST CPU_S WALL_S" there, the test named by HYDRO_TEST_NAME
# (tests/CMakeLists.txt), so that the tests that wait more than they compute are known.
note_cpu() {
  local usec cpu
  usec=$(cgroup_cpu_usec "hydro-slot$1")
  [ -n "$usec" ] || return 0
  cpu=$((usec / 1000000)).$((usec / 100000 % 10))
  echo "own_host: slot $1: $cpu s of CPU in $SECONDS s"
  [ -z "${HYDRO_TEST_CPU_LOG:-}" ] || echo "${HYDRO_TEST_NAME:-?} $cpu $SECONDS" >>"$HYDRO_TEST_CPU_LOG"
}

# inside SCRIPT ARGS...: run in the new namespaces: loopback up, and an address that is not
# loopback (Slurm binds its ports through getaddrinfo with AI_ADDRCONFIG, which finds no address
# where loopback is all there is): a veth pair, both ends here. Then a /run/netns of its own, and
# each hierarchy mounted again so that it shows the slot's cgroup as its root; then SCRIPT.
inside() {
  ip link set lo up
  ip link add hydro-own type veth peer name hydro-own-peer
  ip addr add 10.219.0.1/24 dev hydro-own
  ip link set hydro-own up
  ip link set hydro-own-peer up
  mkdir -p /run/netns
  mount -t tmpfs -o mode=0755 hydro-netns /run/netns
  remount_cgroups
  exec "$@"
}

case "${1:-}" in
  --clean)
    shift
    for s in "$@"; do clean "$s"; done ;;
  _inside)
    shift
    inside "$@" ;;
  [0-9]*)
    slot=$1
    shift
    [ $# -gt 0 ] || die "usage: own_host.sh SLOT SCRIPT ARGS... | --clean SLOT..."
    [ "$(id -u)" = 0 ] || die "a host of its own needs root"
    # One munged for every slot: started here, outside the slot, once.
    "$top/scripts/slurm-local" munge
    clean "$slot"
    join_cgroups "hydro-slot$slot"  # made afresh: clean removed it
    export HYDRO_TEST_SLOT=$slot HYDRO_SLURM_DIR=/tmp/hydro-test-slurm-$slot
    rc=0
    unshare --net --mount --cgroup -- "$0" _inside "$@" || rc=$?
    note_cpu "$slot" || true
    exit "$rc" ;;
  *) die "usage: own_host.sh SLOT SCRIPT ARGS... | --clean SLOT..." ;;
esac
