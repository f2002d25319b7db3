# Sourced by scripts/slurm-nodes.sh (a multi-host cluster's nodes) and tests/integration/own_host.sh
# (a Slurm test's host of its own): a cgroup v1 subtree that a set of processes sees as the root.

# v1_hierarchies: the cgroup v1 hierarchies mounted here, one name a line (name=systemd's as
# "systemd"), not the cgroup2 one.
v1_hierarchies() {
  local m
  for m in /sys/fs/cgroup/*/; do
    m=${m%/}
    mountpoint -q "$m" && [ "$(stat -f -c %T "$m")" = cgroupfs ] && basename "$m"
  done
}

# join_v1_cgroups NAME: makes cgroup NAME below the root of every hierarchy (cpuset's with its
# parent's CPUs and memory nodes) and moves the calling shell into it.
join_v1_cgroups() {
  local h d
  for h in $(v1_hierarchies); do
    d=/sys/fs/cgroup/$h/$1
    mkdir -p "$d"
    if [ -f "$d/cpuset.cpus" ]; then
      cat "/sys/fs/cgroup/$h/cpuset.cpus" >"$d/cpuset.cpus"
      cat "/sys/fs/cgroup/$h/cpuset.mems" >"$d/cpuset.mems"
    fi
    echo "$BASHPID" >"$d/cgroup.procs"
  done
}

# remount_v1_hierarchies: in a new mount and cgroup namespace, every hierarchy mounted again, so
# that it shows the namespace's cgroup as its root.
remount_v1_hierarchies() {
  local h opts
  for h in $(v1_hierarchies); do
    opts=$h
    [[ $h == systemd ]] && opts=none,name=systemd
    umount -l "/sys/fs/cgroup/$h"
    mount -t cgroup -o "$opts" cgroup "/sys/fs/cgroup/$h"
  done
}
