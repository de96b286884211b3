#!/usr/bin/env bash
# Starts a real SLURM cluster on this one machine, entirely inside DIR: its
# own munged (key, socket, pid and log in DIR/munge), its own slurm.conf,
# state, spool and log directories, a slurmctld and one slurmd per compute
# node (Debian's slurmd runs several nodes on one host: `slurmd -N NAME`, a
# port each). Nothing goes to /etc and no systemd is needed. Waits until every
# node is idle (sinfo polling, 30 s at most), then prints
#   export SLURM_CONF=DIR/slurm.conf
# for `eval`. Stop it with slurm-down.sh DIR, which also runs when this
# script fails after starting anything.
#
#   eval "$(tests/slurm/slurm-up.sh /tmp/cluster)"; srun -N2 hostname
#   tests/slurm/slurm-down.sh /tmp/cluster
#
# Environment:
#   RFAAS_SLURM_NODES  compute nodes (default 2)
#   RFAAS_SLURM_CPUS   CPUs each node declares (default: this machine's, so
#                      that slurmd accepts the node; all nodes share them)
#   RFAAS_SLURM_PORT   first of the cluster's TCP ports (slurmctld, then one
#                      per slurmd; default: a free range chosen here)
#
# Node names carry the port base (rf16800n1, rf16800n2, ...): the cgroups
# proctrack/cgroup creates are named after the node, so two clusters on one
# machine must not share node names. Needs root (slurmd and munged run as
# root here, SlurmUser=root).
set -euo pipefail

dir=$(realpath -m "${1:?usage: slurm-up.sh DIR}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nodes=${RFAAS_SLURM_NODES:-2}
cpus=${RFAAS_SLURM_CPUS:-$(nproc)}
[[ $nodes =~ ^[1-9][0-9]?$ ]] || { echo "slurm-up.sh: RFAAS_SLURM_NODES must be 1..99" >&2; exit 2; }

for tool in munged mungekey slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "slurm-up.sh: $tool not found (Debian packages: slurmctld slurmd slurm-client munge)" >&2; exit 3; }
done

# True when no socket listens on any of the ports base..base+count-1.
ports_free() { # base count
  local used
  used=$(ss -Htln 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
  local p
  for ((p = $1; p < $1 + $2; ++p)); do
    grep -qx "$p" <<<"$used" && return 1
  done
  return 0
}
if [[ -n ${RFAAS_SLURM_PORT:-} ]]; then
  base=$RFAAS_SLURM_PORT
else
  # Below the kernel's ephemeral range, so that no outgoing connection takes
  # one of them meanwhile.
  base=
  for _ in $(seq 1 50); do
    b=$((16000 + (RANDOM % 400) * 32))
    ports_free "$b" $((nodes + 1)) && { base=$b; break; }
  done
  [[ -n $base ]] || { echo "slurm-up.sh: found no free port range" >&2; exit 1; }
fi
prefix=rf${base}n

mkdir -p "$dir"/{munge,state,log,run,spool}
# munged refuses a socket directory others cannot traverse and a key
# directory others can write to.
chmod 755 "$dir"
chmod 711 "$dir/munge"
echo "$prefix" >"$dir/node-prefix"
echo "$nodes" >"$dir/node-count"

started=0
on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && $started == 1 ]]; then
    echo "slurm-up.sh: failed (status $rc); stopping what was started" >&2
    for f in "$dir"/log/*.log "$dir"/munge/munged.log; do
      [[ -s $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    "$here/slurm-down.sh" "$dir" >&2 || true
  fi
}
trap on_exit EXIT

[[ -f $dir/munge/munge.key ]] || mungekey -c -k "$dir/munge/munge.key"
started=1
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed"

: >"$dir/plugstack.conf"
# slurmd reads cgroup.conf from slurm.conf's directory.
printf 'CgroupPlugin=autodetect\nCgroupAutomount=no\n' >"$dir/cgroup.conf"
cat >"$dir/slurm.conf" <<CONF
# Written by tests/slurm/slurm-up.sh: a test cluster on one host.
ClusterName=rfaas${base}
SlurmctldHost=localhost
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
# The only tracker that ended every child of a cancelled job here (setsid
# and double-forked ones included); proctrack/pgid missed setsid children.
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=5
# A batch job starts in the scheduling pass right after submission; the
# backfill scheduler, the only one that starts heterogeneous jobs, runs every
# second (default 30 s).
SchedulerParameters=batch_sched_delay=0,bf_interval=1
NodeName=${prefix}[1-$nodes] NodeHostName=localhost NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + nodes))] CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
for ((i = 1; i <= nodes; ++i)); do mkdir -p "$dir/spool/slurmd-$prefix$i"; done

slurmctld -f "$SLURM_CONF" -i
for ((i = 1; i <= nodes; ++i)); do
  slurmd -f "$SLURM_CONF" -N "$prefix$i"
done

# Idle = registered with slurmctld and schedulable. Bounded, polled.
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  if [[ $idle == "$nodes" ]]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.1
done
echo "slurm-up.sh: the nodes were not idle within 30 s:" >&2
sinfo -N >&2 || true
exit 1
