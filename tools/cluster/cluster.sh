#!/usr/bin/env bash
# tools/cluster/cluster.sh — a simulated cluster on one Linux machine, for multi-node tests and
# benchmarks (docs/multinode.md "The simulated cluster"). Developers and CI only; needs root.
#
# A node is a network namespace plus a UTS namespace (its own hostname) and a mount namespace (its
# own /dev/shm, and /etc/hosts naming every node), held by one sleeping process per node whose pid
# the state dir keeps (entered through /proc/PID/ns, which every node can see).
# Nodes hang on a bridge in the root namespace by veth pairs; the bridge has no address and no IPv6
# on it or the veths, so the nodes reach each other and nothing else (10.213.K.0/24, inside the
# namespaces this script made). With --slurm, a head node NAME-ctl (10.213.K.254, made the same way)
# runs MUNGE, slurmctld and the client commands, and every node a slurmd (tools/cluster/slurm.sh).
# `--rate` limits each node's link both ways with a tbf qdisc (netem is not in every kernel): the
# inter-node link is the slow one, while ranks inside a node talk over shared memory.
#
#   cluster.sh up NAME NODES [--rate RATE] [--slurm]
#                                            make NAME (letters/digits, <= 6) with NODES nodes; RATE
#                                            as tc writes it (200mbit, 1gbit); fails if NAME exists;
#                                            --slurm: Slurm too, up once every node is idle
#   cluster.sh rate NAME RATE|none           change (or remove) the limit on every node's link
#   cluster.sh exec NAME I CMD...            run CMD in node I (0-based), in the caller's directory
#   cluster.sh mpirun NAME ARGS...           from node 0: tools/job_guard.py mpirun with the
#                                            cluster's hostfile (one slot per rank: --ranks-per-node
#                                            R before ARGS, default 2), MPI's TCP between nodes,
#                                            shared memory inside, then ARGS (the guard's
#                                            --grace from JOB_GUARD_GRACE, default 5 s)
#   cluster.sh mpiexec NAME ARGS...          the same for an MPICH build: MPICH's hydra
#                                            (tools/mpiexec_mpich.sh, which takes mpirun's -np, -x,
#                                            --oversubscribe) with a hydra hostfile (NAME-nI:R), the
#                                            cluster's rsh agent as its launcher, -iface eth0
#                                            (UCX takes shared memory between these nodes too)
#   cluster.sh slurm NAME CMD...             a Slurm command (sbatch, srun, sinfo, scontrol) on the
#                                            head node, in the caller's directory
#   cluster.sh cut NAME I | heal NAME I      take node I's link down / up (a cable pulled, put back);
#                                            heal also starts node I's slurmd if it was killed
#   cluster.sh signal NAME I SIG             kill -SIG every process of node I (STOP, CONT, KILL)
#   cluster.sh private NAME I DIR            node I sees an empty tmpfs over DIR (another file system)
#   cluster.sh host NAME I                   print node I's hostname
#   cluster.sh down NAME                     kill node processes, delete links, namespaces, mounts
#                                            and state; idempotent, also after a failed `up`
#   cluster.sh check                         exit 0 if namespaces can be made here, else say why, 77
#
# State: $LLMTRAIN_CLUSTER_DIR (default /run/llmtrain-cluster)/NAME. Interfaces: bridge lc-NAME,
# veth lc-NAME-I on the bridge side and eth0 in the node. Hostnames NAME-nI.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE_ROOT=${LLMTRAIN_CLUSTER_DIR:-/run/llmtrain-cluster}
# shellcheck source=tools/cluster/slurm.sh
source "$ROOT/tools/cluster/slurm.sh"

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '15,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_name() {
    [[ ${1:-} =~ ^[a-z][a-z0-9]{0,5}$ ]] || die "cluster name '${1:-}': expected 1-6 lowercase letters/digits, starting with a letter"
}
ns_of() { echo "lc-$1-n$2"; }       # network namespace of node I
veth_of() { echo "lc-$1-$2"; }      # bridge-side veth of node I
nodes_of() { cat "$STATE_ROOT/$1/nodes" 2>/dev/null || die "no cluster '$1' (cluster.sh up $1 N first)"; }

# Runs "$@" inside node I's network, UTS and mount namespaces.
in_node() {
    local name=$1 i=$2
    shift 2
    local pid
    pid=$(cat "$STATE_ROOT/$name/n$i.pid" 2>/dev/null) || die "cluster '$name' has no node $i"
    nsenter -t "$pid" --net --uts --mount -- "$@"
}

# tc's tbf on one interface: rate RATE, a bucket of 4 ms at that rate (>= 64 KiB), 100 ms of queue.
set_rate() {
    local dev=$1 rate=$2
    shift 2
    "$@" tc qdisc del dev "$dev" root 2>/dev/null || true
    [[ $rate == none ]] && return 0
    local bits
    bits=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+(?:\.\d+)?)([kmg]?)bit', sys.argv[1].lower())
if not m: sys.exit('rate: expected a number and kbit/mbit/gbit, got ' + sys.argv[1])
print(int(float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]]))" "$rate") || die "bad --rate '$rate' (expected e.g. 200mbit, 1gbit)"
    local burst=$((bits / 8 / 250))
    ((burst < 65536)) && burst=65536
    "$@" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

cmd_check() {
    [[ $(id -u) == 0 ]] || { echo "cluster.sh: skipped: needs root to make network namespaces"; exit 77; }
    for t in ip tc nsenter unshare python3; do
        command -v "$t" >/dev/null || { echo "cluster.sh: skipped: '$t' not found"; exit 77; }
    done
    local probe="lc-probe-$$"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "cluster.sh: skipped: cannot make a network namespace here (ip netns add failed)"
        exit 77
    fi
    local ok=1
    unshare --uts --mount true 2>/dev/null || ok=0
    ip link add "lcp$$a" type veth peer name "lcp$$b" 2>/dev/null || ok=0
    ip link del "lcp$$a" 2>/dev/null || true
    ip netns del "$probe"
    ((ok)) || { echo "cluster.sh: skipped: cannot make UTS/mount namespaces or veth pairs here"; exit 77; }
}

# ipv6_off <dev> [CMD...]: no IPv6 on the interface (run through CMD, e.g. ip netns exec NS), so no
# link-local address lets a node reach the host's services; nothing to do where the kernel has none.
ipv6_off() {
    local dev=$1
    shift
    "$@" sh -c "[ ! -e /proc/sys/net/ipv6/conf/$dev ] || echo 1 > /proc/sys/net/ipv6/conf/$dev/disable_ipv6"
}

# make_node <name> <i> <address> <hostname>: namespace, veth on the bridge, holder process.
make_node() {
    local name=$1 i=$2 addr=$3 host=$4 dir="$STATE_ROOT/$1"
    local ns veth br="lc-$1"
    ns=$(ns_of "$name" "$i")
    veth=$(veth_of "$name" "$i")
    ip netns add "$ns"
    ipv6_off all nsenter --net="/run/netns/$ns"
    ipv6_off default nsenter --net="/run/netns/$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ipv6_off "$veth"
    ip link set "$veth" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    # Own hostname, own /dev/shm, /etc/hosts naming the nodes, held by a sleeping process that
    # writes its pid once they are ready. (The host's boot id stays: UCX, MPICH's transport, takes
    # the nodes for one machine by it; docs/multinode.md "OpenMPI and MPICH" says why.)
    setsid nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private sh -c "
        hostname '$host' && mount -t tmpfs -o size=4g tmpfs /dev/shm && mount --bind '$dir/hosts' /etc/hosts &&
        echo \$\$ > '$dir/n$i.pid.tmp' && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    disown  # its end, at `down`, is no news to this shell
    local t
    for ((t = 0; t < 100; t++)); do [[ -s $dir/n$i.pid.tmp ]] && break; sleep 0.05; done
    mv "$dir/n$i.pid.tmp" "$dir/n$i.pid" || die "node $i did not start"
}

cmd_up() {
    local name=${1:-} n=${2:-} rate=none slurm=0
    need_name "$name"
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 16)) || die "NODES: expected 1..16, got '$n'"
    shift 2
    while (($#)); do
        case $1 in
            --rate) rate=${2:?--rate needs a value}; shift 2 ;;
            --slurm) slurm=1; shift ;;
            *) die "up: unknown option '$1'" ;;
        esac
    done
    local dir="$STATE_ROOT/$name"
    [[ -e $dir ]] && die "cluster '$name' exists ($dir): cluster.sh down $name first"
    if ((slurm)); then
        local why
        why=$(slurm_check) || die "slurm: $why"
    fi
    mkdir -p "$STATE_ROOT"
    # The subnet index: the lowest one no other cluster here holds.
    local k=1
    while grep -qx "$k" "$STATE_ROOT"/*/subnet 2>/dev/null; do k=$((k + 1)); done
    ((k <= 250)) || die "no free subnet (250 clusters up?)"
    mkdir -p "$dir"
    echo "$k" >"$dir/subnet"
    echo "$n" >"$dir/nodes"
    # Whatever fails from here on (a command, or die's exit) tears the half-made cluster down.
    UP_NAME=$name
    trap 'if [[ -n ${UP_NAME:-} ]]; then echo "cluster.sh: up failed; tearing down $UP_NAME" >&2; cmd_down "$UP_NAME"; fi' EXIT
    ip link add "lc-$name" type bridge
    ipv6_off "lc-$name"
    ip link set "lc-$name" up
    {
        echo "127.0.0.1 localhost"
        for ((i = 0; i < n; i++)); do echo "10.213.$k.$((i + 1)) $name-n$i"; done
        ((slurm)) && echo "10.213.$k.254 $name-ctl"
    } >"$dir/hosts"
    for ((i = 0; i < n; i++)); do
        make_node "$name" "$i" "10.213.$k.$((i + 1))" "$name-n$i"
        set_rate "$(veth_of "$name" "$i")" "$rate"
        set_rate eth0 "$rate" ip netns exec "$(ns_of "$name" "$i")"
    done
    echo "$rate" >"$dir/rate"
    # The launchers' agent: "rsh HOST COMMAND..." runs COMMAND in that node's namespaces.
    {
        echo '#!/usr/bin/env bash'
        echo "# Written by tools/cluster/cluster.sh: OpenMPI's plm_rsh_agent and hydra's -launcher-exec for cluster $name."
        echo 'host=$1; shift'
        printf 'exec %q exec %q "${host##*-n}" /bin/sh -c "$*"\n' "$ROOT/tools/cluster/cluster.sh" "$name"
    } >"$dir/rsh"
    chmod +x "$dir/rsh"
    if ((slurm)); then
        make_node "$name" c "10.213.$k.254" "$name-ctl"
        slurm_up "$name"
    fi
    UP_NAME=
    trap - EXIT
    echo "cluster.sh: $name up: $n nodes ($name-n0 .. $name-n$((n - 1)), 10.213.$k.0/24), link rate $rate$( ((slurm)) && echo ", Slurm (head node $name-ctl)")"
}

cmd_rate() {
    local name=${1:-} rate=${2:?rate: expected RATE or none}
    need_name "$name"
    local n
    n=$(nodes_of "$name")
    for ((i = 0; i < n; i++)); do
        set_rate "$(veth_of "$name" "$i")" "$rate"
        set_rate eth0 "$rate" ip netns exec "$(ns_of "$name" "$i")"
    done
    echo "$rate" >"$STATE_ROOT/$name/rate"
}

cmd_exec() {
    local name=${1:-} i=${2:-}
    need_name "$name"
    shift 2
    in_node "$name" "$i" /usr/bin/env -C "$PWD" "$@"
}

cmd_mpirun() {
    local name=${1:-} rpn=2
    need_name "$name"
    shift
    if [[ ${1:-} == --ranks-per-node ]]; then rpn=$2; shift 2; fi
    local dir="$STATE_ROOT/$name" n k
    n=$(nodes_of "$name")
    k=$(cat "$dir/subnet")
    for ((i = 0; i < n; i++)); do echo "$name-n$i slots=$rpn"; done >"$dir/hostfile"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # by-slot mapping fills node 0 first: ranks node by node, as Topology expects. No binding: the
    # nodes share this machine's cores.
    cmd_exec "$name" 0 python3 "$ROOT/tools/job_guard.py" --grace "${JOB_GUARD_GRACE:-5}" mpirun --hostfile "$dir/hostfile" \
        --mca plm_rsh_agent "$dir/rsh" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "10.213.$k.0/24" --mca btl_tcp_if_include "10.213.$k.0/24" \
        --mca btl self,vader,tcp --map-by slot --bind-to none "$@"
}

# MPICH's hydra from node 0, as cmd_mpirun: one proxy per node started through the rsh agent (hydra's
# "-launcher rsh" runs "AGENT HOST COMMAND..."), the control connections on eth0. The ranks fill node
# 0's R slots first (the hostfile's NAME-nI:R), then node 1's: the order Topology expects.
cmd_mpiexec() {
    local name=${1:-} rpn=2
    need_name "$name"
    shift
    if [[ ${1:-} == --ranks-per-node ]]; then rpn=$2; shift 2; fi
    local dir="$STATE_ROOT/$name" n
    n=$(nodes_of "$name")
    for ((i = 0; i < n; i++)); do echo "$name-n$i:$rpn"; done >"$dir/hostfile.hydra"
    cmd_exec "$name" 0 python3 "$ROOT/tools/job_guard.py" --grace "${JOB_GUARD_GRACE:-5}" \
        bash "$ROOT/tools/mpiexec_mpich.sh" -f "$dir/hostfile.hydra" -launcher rsh -launcher-exec "$dir/rsh" \
        -iface eth0 "$@"
}

cmd_cut() { need_name "${1:-}"; ip link set "$(veth_of "$1" "${2:?node}")" down; }
cmd_heal() {
    local name=${1:-} i=${2:?node}
    need_name "$name"
    ip link set "$(veth_of "$name" "$i")" up
    [[ -e $STATE_ROOT/$name/slurm/slurm.conf ]] && slurmd_up "$name" "$i"
    return 0
}

cmd_signal() {
    local name=${1:-} i=${2:?node} sig=${3:?signal}
    need_name "$name"
    local pids holder
    holder=$(cat "$STATE_ROOT/$name/n$i.pid")
    pids=$(ip netns pids "$(ns_of "$name" "$i")" 2>/dev/null | grep -vx "$holder" || true)
    [[ -z $pids ]] || kill "-$sig" $pids 2>/dev/null || true
    # KILL returns once they are gone (or zombies), so what is started next does not race them.
    if [[ $sig == KILL || $sig == 9 ]]; then
        local t p
        for ((t = 0; t < 60; t++)); do
            local alive=0
            for p in $pids; do
                [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) =~ ^[^ZX]$ ]] && alive=1
            done
            ((alive)) || break
            sleep 0.05
        done
    fi
}

cmd_private() {
    local name=${1:-} i=${2:?node} path=${3:?directory}
    need_name "$name"
    [[ -d $path ]] || die "private: '$path' is not a directory (make it first: the cluster creates nothing outside its state)"
    in_node "$name" "$i" mount -t tmpfs -o size=64m tmpfs "$path"
}

cmd_slurm() {
    local name=${1:-}
    need_name "$name"
    shift
    [[ -e $STATE_ROOT/$name/slurm/slurm.conf ]] || die "cluster '$name' has no Slurm (cluster.sh up $name N --slurm)"
    slurm_client "$name" "$@"
}

cmd_host() { need_name "${1:-}"; echo "$1-n${2:?node}"; }

cmd_down() {
    local name=${1:-}
    need_name "$name"
    local dir="$STATE_ROOT/$name" i
    # Nodes by what exists, not by the state file (a failed `up` may have stopped half way).
    for i in $(seq 0 15) c; do
        local ns
        ns=$(ns_of "$name" "$i")
        if [[ -e /run/netns/$ns ]]; then
            local pids
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            if [[ -n $pids ]]; then
                kill -CONT $pids 2>/dev/null || true
                kill -KILL $pids 2>/dev/null || true
            fi
            ip netns del "$ns" 2>/dev/null || true
        fi
        # A namespace some process's mount namespace still holds outlives `ip netns del`: delete the
        # link from this side too, so the bridge and the addresses go whatever else lingers.
        ip link del "$(veth_of "$name" "$i")" 2>/dev/null || true
    done
    ip link del "lc-$name" 2>/dev/null || true
    rm -rf "$dir"
    return 0
}

[[ $# -ge 1 ]] || usage
cmd=$1
shift
case $cmd in
    up | rate | exec | mpirun | mpiexec | slurm | cut | heal | signal | private | host | down | check)
        [[ $cmd == check || $(id -u) == 0 ]] || die "needs root (network namespaces)"
        "cmd_$cmd" "$@" ;;
    *) usage ;;
esac
