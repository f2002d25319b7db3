# Sourced by scripts/slurm-local: the nodes of a multi-host local cluster (start --nodes N).
#
# Each node is a host of its own on this machine: a network namespace (hydro-nodeI) with its own
# address on a bridge (hydro-br0) that slurmctld listens on, a UTS namespace (`hostname` is nodeI),
# and a mount namespace with the cluster's hosts file on /etc/hosts and a private /local (its
# node-local directory, $dir/local/nodeI underneath). With proctrack/cgroup each node also has a
# cgroup namespace rooted at hydro-nodeI in every v1 hierarchy, with the hierarchies mounted again
# from inside it, so each slurmd sees and manages only its own node's job cgroups.
# munged's Unix socket and the rest of the filesystem ($dir/checkpoints: the shared directory) are
# the same for every node. Everything made here is undone by nodes_down, even after a failed test;
# the mounts live in the nodes' mount namespaces and go with their last process.

node_bridge=hydro-br0
node_net=10.218.0            # the bridge is .1, nodeI is .(10+I): addresses only on this machine
node_ctl_addr=$node_net.1

node_name() { echo "node$1"; }
node_ns() { echo "hydro-node$1"; }
node_addr() { echo "$node_net.$((10 + $1))"; }

source "$top/scripts/cgroups.sh"  # a node's cgroups: cgroup_hierarchies, join_cgroups, remount_cgroups

# nodes_up N: the bridge, and per node its namespace, link, address and hosts file.
nodes_up() {
  local n=$1 i ns
  nodes_down
  mkdir -p /local  # an empty mount point on this host; each node mounts its own directory there
  ip link add "$node_bridge" type bridge || die "could not make the bridge $node_bridge"
  ip addr add "$node_ctl_addr/24" dev "$node_bridge" || die "could not address the bridge $node_bridge"
  ip link set "$node_bridge" up || die "could not bring up the bridge $node_bridge"
  {
    echo "127.0.0.1 localhost"
    echo "$node_ctl_addr $(hostname -s)"
    for ((i = 1; i <= n; i++)); do echo "$(node_addr $i) $(node_name $i)"; done
  } >"$dir/hosts"
  for ((i = 1; i <= n; i++)); do
    ns=$(node_ns $i)
    ip netns add "$ns" || die "could not make the network namespace $ns"
    { ip link add "hydro-v$i" type veth peer name eth0 netns "$ns" &&
      ip link set "hydro-v$i" master "$node_bridge" up &&
      ip -n "$ns" addr add "$(node_addr $i)/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up; } || die "could not link $ns to the bridge $node_bridge"
    mkdir -p "$dir/local/$(node_name $i)"
    chmod 1777 "$dir/local/$(node_name $i)"  # like $dir/checkpoints: each job's directory is made below it
  done
}

# nodes_down: every namespace, link and cgroup nodes_up and the nodes made (none is an error).
nodes_down() {
  local ns h d link
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^hydro-node[0-9]+$/ {print $1}'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  # A namespace goes away in the background; its veth with it. Delete the links now instead, so
  # that a start right after a stop finds their names free.
  for link in $(ip -o link show 2>/dev/null | grep -oP '^[0-9]+: \Khydro-v[0-9]+'); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$node_bridge" 2>/dev/null || true
  for h in $(cgroup_hierarchies); do
    for d in /sys/fs/cgroup/"$h"/hydro-node*; do
      [ -d "$d" ] || continue
      xargs -r kill -KILL <"$d/cgroup.procs" 2>/dev/null || true
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  done
}

# nodes_conf N: slurm.conf's node lines, each node with this machine's CPUs and memory.
nodes_conf() {
  local n=$1 hw i
  hw=$(slurmd -C | sed -n 1p | sed 's/^NodeName=[^ ]* //')
  for ((i = 1; i <= n; i++)); do echo "NodeName=$(node_name $i) NodeAddr=$(node_addr $i) $hw State=UNKNOWN"; done
}

# nodes_start N: one slurmd per node, inside the node's namespaces (see node_enter).
nodes_start() {
  local n=$1 i
  for ((i = 1; i <= n; i++)); do
    (
      [ "$proctrack" = cgroup ] && join_cgroups "$(node_ns "$i")"
      local ns_opts=(--uts --mount --propagation slave)
      [ "$proctrack" = cgroup ] && ns_opts+=(--cgroup)
      exec nsenter --net="/run/netns/$(node_ns $i)" unshare "${ns_opts[@]}" -- "$top/scripts/slurm-local" _node "$i" --dir "$dir" --proctrack "$proctrack"
    ) || die "slurmd of $(node_name $i) did not start (see $dir/log/slurmd-$(node_name $i).log)"
  done
}

# node_enter I: run inside nodeI's new namespaces: its hostname, hosts file, /local, its own
# view of the cgroup hierarchies, then slurmd.
node_enter() {
  local i=$1 name
  name=$(node_name "$i")
  hostname "$name"
  mount --bind "$dir/hosts" /etc/hosts
  mount --bind "$dir/local/$name" /local
  [ "$proctrack" != cgroup ] || remount_cgroups
  exec slurmd -f "$conf" 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
}
