# shellcheck shell=bash
# tools/cluster/slurm.sh — Slurm on the simulated cluster (sourced by tools/cluster/cluster.sh; a test
# harness for developers and CI, not a deployment: docs/multinode.md "Slurm on the simulated cluster").
#
# Debian's slurm-wlm 22.05 with MUNGE, laid out as on a small real cluster:
# - the head node (namespace NAME-ctl, 10.213.K.254 on the bridge) runs munged, slurmctld and the
#   client commands (sbatch, srun, squeue: `cluster.sh slurm NAME CMD...`);
# - each node runs `slurmd -N NAME-nI` in its own namespaces.
# No cgroups (proctrack/linuxproc, task/none, no accounting): a node's processes are the ones in its
# namespaces. Every file lives under the cluster's state dir ($dir/slurm, $dir/munge): its own MUNGE
# key and socket (AuthInfo socket=), slurm.conf, per-node spool dirs, logs. Each slurmd reads its own
# copy of the config dir, identical but for mpi.conf's PMIxCliTmpDirBase: the pmix plugin's per-step
# client dirs (spmix_appdir_<uid>_<job>.<step>) would collide in the one /tmp that all nodes share.
# Timers are short so a lost node is seen in seconds, not minutes (SlurmdTimeout 10 s, MessageTimeout
# 5 s, KillWait 2 s); the node is then marked DOWN and a requeued job goes to the nodes left.
# SLURM_DEFAULT_TIMERS=1 at `up` keeps Slurm's defaults instead (300 s, 10 s, 30 s), as most sites.

SLURM_LIB=/usr/lib/x86_64-linux-gnu/slurm-wlm

slurm_check() {  # prints why Slurm cannot run here, returns 1; returns 0 when it can
    local t
    for t in munged mungekey slurmctld slurmd srun sbatch scontrol; do
        command -v "$t" >/dev/null || { echo "'$t' not found (tools/setup.sh installs slurmd slurmctld slurm-client munge)"; return 1; }
    done
    [[ -e $SLURM_LIB/mpi_pmix.so ]] || { echo "Slurm's pmix plugin ($SLURM_LIB/mpi_pmix.so) not found"; return 1; }
}

# slurm_conf <dir> <name> <nodes> <subnet> <ranks per node>: writes $dir/slurm/slurm.conf.
slurm_conf() {
    local dir=$1 name=$2 n=$3 k=$4 cpus=$5 i
    local s="$dir/slurm"
    cat <<EOF
# Written by tools/cluster/cluster.sh for cluster $name (a test harness: docs/multinode.md).
ClusterName=$name
SlurmctldHost=$name-ctl(10.213.$k.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket,cred_expire=10
StateSaveLocation=$s/ctld
SlurmctldPidFile=$s/slurmctld.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdSpoolDir=$s/%n/spool
SlurmdPidFile=$s/%n/slurmd.pid
SlurmdLogFile=$s/%n/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
$(if [[ ${SLURM_DEFAULT_TIMERS:-0} != 1 ]]; then
    printf '%s\n' SlurmctldTimeout=10 SlurmdTimeout=10 MessageTimeout=5 KillWait=2
fi)
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
NodeName=DEFAULT CPUs=$cpus RealMemory=1000 State=UNKNOWN
EOF
    for ((i = 0; i < n; i++)); do echo "NodeName=$name-n$i NodeAddr=10.213.$k.$((i + 1))"; done
    echo "PartitionName=nodes Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

# slurm_up <name>: MUNGE, slurmctld on the head node, slurmd on every node; waits until all are idle.
slurm_up() {
    local name=$1 dir="$STATE_ROOT/$1" n k i
    n=$(nodes_of "$name")
    k=$(cat "$dir/subnet")
    local why
    why=$(slurm_check) || die "slurm: $why"
    mkdir -p -m 700 "$dir/munge"
    mkdir -p "$dir/slurm/ctld"
    mungekey --create --keyfile="$dir/munge/key" >/dev/null
    chmod 600 "$dir/munge/key"
    slurm_conf "$dir" "$name" "$n" "$k" "${SLURM_CPUS_PER_NODE:-2}" >"$dir/slurm/slurm.conf"
    for ((i = 0; i < n; i++)); do
        local nd="$dir/slurm/$name-n$i"
        mkdir -p "$nd/spool" "$nd/conf" "$nd/pmix"
        ln -sf ../../slurm.conf "$nd/conf/slurm.conf"
        echo "PMIxCliTmpDirBase=$nd/pmix" >"$nd/conf/mpi.conf"
    done
    in_node "$name" c munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/key" \
        --pid-file="$dir/munge/pid" --log-file="$dir/munge/log" --seed-file="$dir/munge/seed" ||
        die "slurm: munged did not start ($dir/munge/log)"
    in_node "$name" c env SLURM_CONF="$dir/slurm/slurm.conf" slurmctld -i </dev/null >/dev/null 2>&1 ||
        die "slurm: slurmctld did not start ($dir/slurm/slurmctld.log)"
    for ((i = 0; i < n; i++)); do slurmd_up "$name" "$i"; done
    local t idle=0
    for ((t = 0; t < 150; t++)); do
        idle=$(slurm_client "$name" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | grep -c . || true)
        ((idle == n)) && break
        sleep 0.2
    done
    ((idle == n)) || die "slurm: $idle of $n nodes idle after 30 s ($(slurm_client "$name" sinfo -N 2>&1 | tr '\n' ';'))"
}

# slurmd_up <name> <i>: starts node I's slurmd unless it runs (its pid file names a live slurmd).
slurmd_up() {
    local name=$1 i=$2 nd="$STATE_ROOT/$1/slurm/$1-n$2" pid
    pid=$(cat "$nd/slurmd.pid" 2>/dev/null || true)
    [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == slurmd* && $(awk '{print $3}' "/proc/$pid/stat") != Z ]] && return 0
    in_node "$name" "$i" env SLURM_CONF="$nd/conf/slurm.conf" slurmd -N "$name-n$i" -f "$nd/conf/slurm.conf" \
        </dev/null >/dev/null 2>&1 || die "slurm: slurmd on node $i did not start ($nd/slurmd.log)"
}

# slurm_client <name> CMD...: a Slurm command on the head node, in the caller's directory.
slurm_client() {
    local name=$1
    shift
    in_node "$name" c /usr/bin/env -C "$PWD" SLURM_CONF="$STATE_ROOT/$name/slurm/slurm.conf" "$@"
}
