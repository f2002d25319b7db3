# Sourced by scripts/slurm-nodes.sh (a multi-host cluster's nodes) and tests/integration/own_host.sh
# (a Slurm test's host of its own): a cgroup subtree that a set of processes sees as the root, in
# every cgroup v1 hierarchy mounted here or, where /sys/fs/cgroup is cgroup v2 alone (the Debian
# 13 tier's root, scripts/debian13), in that one hierarchy.

# unified_only: /sys/fs/cgroup is cgroup v2's one hierarchy, with no v1 hierarchy beside it.
unified_only() { [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; }

# cgroup_hierarchies: the hierarchies below /sys/fs/cgroup, one a line: each cgroup v1 one's name
# (name=systemd's as "systemd"), not the cgroup2 one beside them; or "." where cgroup v2 is alone.
cgroup_hierarchies() {
  local m
  if unified_only; then echo .; return; fi
  for m in /sys/fs/cgroup/*/; do
    m=${m%/}
    mountpoint -q "$m" && [ "$(stat -f -c %T "$m")" = cgroupfs ] && basename "$m"
  done
}

# join_cgroups NAME: makes cgroup NAME below the root of every hierarchy (cpuset's with its
# parent's CPUs and memory nodes) and moves the calling shell into it.
join_cgroups() {
  local h d
  for h in $(cgroup_hierarchies); do
    d=/sys/fs/cgroup/$h/$1
    mkdir -p "$d"
    if [ -f "$d/cpuset.cpus" ] && [ "$h" != . ]; then
      cat "/sys/fs/cgroup/$h/cpuset.cpus" >"$d/cpuset.cpus"
      cat "/sys/fs/cgroup/$h/cpuset.mems" >"$d/cpuset.mems"
    fi
    echo "$BASHPID" >"$d/cgroup.procs"
  done
}

# cgroup_cpu_usec NAME: the CPU time, in microseconds, that the processes of cgroup NAME and of
# every cgroup below it have used: cgroup v2's cpu.stat, or the v1 cpuacct hierarchy's count (none
# where no such hierarchy is mounted).
cgroup_cpu_usec() {
  local h
  if unified_only; then awk '$1 == "usage_usec" { print $2 }' "/sys/fs/cgroup/$1/cpu.stat"; return; fi
  for h in $(cgroup_hierarchies); do
    if [ -f "/sys/fs/cgroup/$h/$1/cpuacct.usage" ]; then echo $(($(cat "/sys/fs/cgroup/$h/$1/cpuacct.usage") / 1000)); return; fi
  done
}

# remount_cgroups: in a new mount and cgroup namespace, every hierarchy mounted again, so that it
# shows the namespace's cgroup as its root.
remount_cgroups() {
  local h opts
  for h in $(cgroup_hierarchies); do
    if [ "$h" = . ]; then
      umount -l /sys/fs/cgroup
      mount -t cgroup2 cgroup2 /sys/fs/cgroup
      # Out of the namespace's root into a leaf (as systemd's init.scope), so that slurmd's own
      # (slurm-local's slurmd_alone) is beside it, not below it.
      mkdir -p /sys/fs/cgroup/hydro-init
      echo "$BASHPID" >/sys/fs/cgroup/hydro-init/cgroup.procs
      continue
    fi
    opts=$h
    [[ $h == systemd ]] && opts=none,name=systemd
    umount -l "/sys/fs/cgroup/$h"
    mount -t cgroup -o "$opts" cgroup "/sys/fs/cgroup/$h"
  done
}
