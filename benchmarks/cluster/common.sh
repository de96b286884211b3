# Sourced by the SLURM batch scripts in this directory: where the binaries
# are, which provider and interface to use, the two nodes of the allocation,
# and helpers to run one program on one node. Settings (environment):
#
#   RFAAS_BUILD      build tree of rFaaS built on (or for) the cluster nodes
#                    (default: build/ next to benchmarks/)
#   RFAAS_PROVIDER   libfabric provider: verbs, efa, "verbs;ofi_rxm", tcp ...
#                    (default: verbs); with the verbs backend: verbs
#   RFAAS_ENDPOINT   connected or rdm (default: rdm for efa and *ofi_rxm,
#                    else connected)
#   RFAAS_IFACE      network interface whose IPv4 address names the node on
#                    the fabric: ib0 for InfiniBand (IPoIB), the ENI (ens5,
#                    eth0) on AWS; unused by the raw baseline on efa
#   RFAAS_OUT        results directory on a file system both nodes see
#                    (default: rfaas-bench-<job id> in the submit directory)
#   RFAAS_REPEAT     runs of each program, alternating (default: 3)
#   RFAAS_SIZES      payload sizes (default: 8,1K,64K,1M)
#   RFAAS_PORT       TCP port for the benchmarks' out-of-band connection and
#                    the executor manager (default: 18515; +1 for the manager)
#   RFAAS_TIMEOUT    deadline of one program run, seconds (default: 300)
#   RFAAS_NAMES      1: exchange the providers' endpoint names instead of IP
#                    addresses, as on efa (default: 1 on efa, else 0)
#   RFAAS_SERVER_CORE, RFAAS_CLIENT_CORE
#                    CPU each ping-pong side is pinned to on its node (default:
#                    0; pick one on the NIC's NUMA node)
set -euo pipefail

die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${RFAAS_BUILD:=$here/../../build}"
RFAAS_BUILD=$(cd "$RFAAS_BUILD" 2>/dev/null && pwd) || die "RFAAS_BUILD: no such directory"
: "${RFAAS_PROVIDER:=verbs}"
if [[ -z ${RFAAS_ENDPOINT:-} ]]; then
  case $RFAAS_PROVIDER in
  efa | *ofi_rxm*) RFAAS_ENDPOINT=rdm ;;
  *) RFAAS_ENDPOINT=connected ;;
  esac
fi
: "${RFAAS_IFACE:=}"
: "${RFAAS_OUT:=${SLURM_SUBMIT_DIR:-$PWD}/rfaas-bench-${SLURM_JOB_ID:-local}}"
: "${RFAAS_REPEAT:=3}"
: "${RFAAS_SIZES:=8,1K,64K,1M}"
: "${RFAAS_PORT:=18515}"
: "${RFAAS_TIMEOUT:=300}"
: "${RFAAS_SERVER_CORE:=0}"
: "${RFAAS_CLIENT_CORE:=0}"

[[ -n ${SLURM_JOB_NODELIST:-} ]] || die "run inside a SLURM allocation of two nodes (sbatch or salloc)"
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
((${#nodes[@]} >= 2)) || die "needs two nodes, the allocation has ${#nodes[@]} (${nodes[*]})"
server_node=${nodes[0]}
client_node=${nodes[1]}
# The address the server's out-of-band TCP port is reached at: the node's
# NodeAddr in slurm.conf (its name unless the site set another; several
# slurmd on one test host share 127.0.0.1 under names no resolver knows).
server_oob=$(scontrol show node "$server_node" 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' || true)
: "${server_oob:=$server_node}"
bench=$RFAAS_BUILD/benchmarks
[[ -x $bench/raw_libfabric_pingpong || -x $bench/rdmalib_pingpong ]] ||
  die "no benchmarks in $bench: build rFaaS there first (RFAAS_BUILD=<build tree>)"
mkdir -p "$RFAAS_OUT"

# Run a command on one node of the allocation (one task):
#   "${on_node[@]}" --nodelist=NODE COMMAND...
# An array, not a function, so that `... &` leaves $! on srun itself: srun
# passes the signals it gets on to the remote task. --overlap: the manager
# and a ping-pong server share the first node (Slurm 20.11 or later).
on_node=(srun --nodes=1 --ntasks=1 --overlap --kill-on-bad-exit=1)

# The node's IPv4 address on $RFAAS_IFACE, read on that node.
fabric_address() {
  [[ -n $RFAAS_IFACE ]] || die "set RFAAS_IFACE to the interface that carries the fabric's addresses (e.g. ib0)"
  local a
  a=$("${on_node[@]}" --nodelist="$1" ip -4 -o addr show dev "$RFAAS_IFACE" | awk '{split($4, p, "/"); print p[1]; exit}')
  [[ -n $a ]] || die "node $1 has no IPv4 address on $RFAAS_IFACE"
  echo "$a"
}

# Providers whose endpoints are not named by IP address (efa): their device
# entries have no ip_address, and peers exchange the provider's own endpoint
# names (the "ofi:" addresses rdmalib prints; docs/rdmalib.md).
named_by_ip() {
  if [[ -n ${RFAAS_NAMES:-} ]]; then
    [[ $RFAAS_NAMES != 1 ]]
    return
  fi
  case $RFAAS_PROVIDER in
  efa) return 1 ;;
  *) return 0 ;;
  esac
}

# --host of the raw baseline, which names IP endpoints by their address even
# when rFaaS is told to exchange endpoint names (RFAAS_NAMES=1 on an IP
# provider); on efa it ignores --host.
raw_host() { # node
  if [[ -n $RFAAS_IFACE ]]; then fabric_address "$1"; else echo 127.0.0.1; fi
}

# For the scripts' summaries: an awk function, median(list), of a list of
# numbers separated by spaces; put it before the awk program that calls it.
# It asks benchmarks/rfaas_stats.py, the one definition of the benchmarks'
# statistics (a few calls per table).
stats_py=$(cd "$RFAAS_CLUSTER_DIR/.." && pwd)/rfaas_stats.py
[[ -f $stats_py ]] || die "no $stats_py: run the scripts from benchmarks/cluster/ of an rFaaS tree"
awk_median='
  function median(list,   cmd, m) {
    cmd = "/usr/bin/python3 \"'"$stats_py"'\" median " list
    cmd | getline m
    close(cmd)
    return m
  }
'

echo "nodes: server $server_node, client $client_node; provider $RFAAS_PROVIDER" \
  "($RFAAS_ENDPOINT); results in $RFAAS_OUT"
