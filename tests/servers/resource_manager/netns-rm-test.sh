#!/usr/bin/env bash
# A deployment over network namespaces: the resource manager, two executor
# managers and the example client each in a namespace of its own, joined by
# veth pairs to a bridge in a hub namespace (10.214.0.0/24), tcp provider.
# The managers register with the resource manager over the fabric; the client
# leases through --resource-manager, allocates on the node the lease names,
# runs the example functions (verifying every result) and releases. The REST
# API, asked with curl from the resource manager's namespace, lists both nodes
# up and refuses a change without the token; after the release it shows no
# active lease, the lease as released and the node's final accounting for it.
#
# Usage: netns-rm-test.sh RESOURCE_MANAGER EXECUTOR_MANAGER CLIENT LIBRARY
# Exit 77 (skipped, with the reason printed) without root, ip netns or curl.
set -uo pipefail
rm_bin=$1 manager_bin=$2 client=$3 library=$4

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is missing"
command -v curl >/dev/null || skip "curl is missing"

id=$$
hub=rfaas-hub-$id
declare -A ns=([rm]=rfaas-rm-$id [n1]=rfaas-n1-$id [n2]=rfaas-n2-$id [cli]=rfaas-cli-$id)
declare -A addr=([rm]=10.214.0.1 [n1]=10.214.0.11 [n2]=10.214.0.12 [cli]=10.214.0.21)
work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-netns-rm.XXXXXX")
token=netns-rm-token-$RANDOM$RANDOM-0123456789
# shellcheck source=../../../scripts/lib/manager.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib/manager.sh"
rm_pid=
manager_pids=()
keep=0

cleanup() {
  local pid
  for pid in "${manager_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${manager_pids[@]}"; do wait "$pid" 2>/dev/null; done
  if [[ -n $rm_pid ]]; then
    kill -TERM "$rm_pid" 2>/dev/null
    wait "$rm_pid" 2>/dev/null
  fi
  # Deleting a namespace deletes its end of each veth pair, and so the pair.
  for n in "${ns[@]}" "$hub"; do ip netns del "$n" 2>/dev/null; done
  if ((keep)); then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f $f ]] && { echo "--- $f (end)" >&2; tail -n 25 "$f" >&2; }
  done
  keep=1
  exit 1
}

if ! ip netns add "$hub" 2>"$work/err"; then
  skip "ip netns add failed: $(cat "$work/err")"
fi
# ---- the network: one bridge in the hub, one veth pair per namespace ---------------
setup_network() {
  set -e
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  ip -n "$hub" link set lo up
  local role inner outer
  for role in rm n1 n2 cli; do
    ip netns add "${ns[$role]}"
    inner=v$id$role outer=h$id$role
    ip link add "$inner" type veth peer name "$outer"
    ip link set "$inner" netns "${ns[$role]}"
    ip link set "$outer" netns "$hub"
    ip -n "$hub" link set "$outer" master br0
    ip -n "$hub" link set "$outer" up
    ip -n "${ns[$role]}" addr add "${addr[$role]}/24" dev "$inner"
    ip -n "${ns[$role]}" link set "$inner" up
    ip -n "${ns[$role]}" link set lo up
  done
  set +e
}
(setup_network) 2>"$work/net.log" || fail "setting up the namespaces: $(cat "$work/net.log")"
# (A bridge without STP forwards as soon as its ports are up.)

cat >"$work/devices.json" <<JSON
{ "devices": [
  { "name": "rm-tcp", "provider": "tcp", "ip_address": "${addr[rm]}", "endpoint": "connected" },
  { "name": "n1-tcp", "provider": "tcp", "ip_address": "${addr[n1]}", "endpoint": "connected" },
  { "name": "n2-tcp", "provider": "tcp", "ip_address": "${addr[n2]}", "endpoint": "connected" },
  { "name": "cli-tcp", "provider": "tcp", "ip_address": "${addr[cli]}", "endpoint": "connected" }
] }
JSON

# ---- the resource manager: fabric on its namespace's address, REST on its lo --------
cat >"$work/rm.json" <<JSON
{
  "database": "rm.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "token": "$token" },
  "fabric": { "device_database": "$work/devices.json", "device": "rm-tcp",
              "host": "${addr[rm]}", "port": 0, "heartbeat_ms": 500 },
  "tick_ms": 100,
  "log": { "level": "info" }
}
JSON
fifo=$work/rm-ready
mkfifo "$fifo"
ip netns exec "${ns[rm]}" "$rm_bin" --config "$work/rm.json" 2>"$fifo" &
rm_pid=$!
exec {fd}<"$fifo"
rm -f "$fifo"
fabric='' rest=''
while [[ -z $fabric || -z $rest ]]; do
  read -r -t 30 -u "$fd" line || fail "the resource manager printed no readiness line in 30 s"
  echo "$line" >>"$work/rm.log"
  case $line in
  *"resource_manager: fabric on "*) fabric=${line#*fabric on }; fabric=${fabric%% *} ;;
  *"resource_manager: ready, REST on "*) rest=http://127.0.0.1:${line##*:} ;;
  esac
done
cat <&"$fd" >>"$work/rm.log" &
exec {fd}<&-
[[ $fabric == "${addr[rm]}:"* ]] || fail "the fabric listens on $fabric, not on ${addr[rm]}"
echo "resource manager: fabric $fabric (namespace ${ns[rm]}), REST $rest"

# curl in the resource manager's namespace (REST is bound to its loopback).
rmcurl() { ip netns exec "${ns[rm]}" curl -s --max-time 10 "$@"; }

# ---- two nodes: added by the operator, then their executor managers register -------
cpus=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))' 2>/dev/null || echo 0)
for node in n1 n2; do
  secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  (umask 077 && echo "$secret" >"$work/$node.secret")
  code=$(rmcurl -o "$work/add-$node.out" -w '%{http_code}' -X POST -H "Authorization: Bearer $token" \
    "$rest/nodes" -d "{\"name\":\"$node\",\"address\":\"${addr[$node]}:1\",\"cores\":2,\"memory_mib\":2048,\"secret\":\"$secret\"}")
  [[ $code == 201 ]] || fail "adding $node: HTTP $code $(cat "$work/add-$node.out")"
  cat >"$work/$node.json" <<JSON
{
  "device_database": "$work/devices.json",
  "device": "$node-tcp",
  "listen": { "host": "${addr[$node]}", "port": 0 },
  "resource_manager": { "enabled": true, "address": "$fabric",
                        "secret_file": "$work/$node.secret", "node": "$node" },
  "resources": { "cores": [$cpus], "memory_mib": 2048 },
  "log": { "level": "info" }
}
JSON
  manager_pid=
  if ! start_manager "$work/$node.log" 60 ip netns exec "${ns[$node]}" "$manager_bin" \
    --config "$work/$node.json"; then
    [[ -n $manager_pid ]] && manager_pids+=("$manager_pid")
    fail "the executor manager of $node did not start in ${ns[$node]}"
  fi
  manager_pids+=("$manager_pid")
  echo "$node: $manager_line (namespace ${ns[$node]})"
done

# Both nodes up, at the addresses their managers listen on (a bounded wait on
# the REST API: registration has no line the test can read).
nodes=''
for _ in $(seq 1 300); do
  nodes=$(rmcurl -H "Authorization: Bearer $token" "$rest/nodes")
  python3 - "$nodes" "${addr[n1]}" "${addr[n2]}" <<'PY' && break
import json, sys
nodes = {n["name"]: n for n in json.loads(sys.argv[1])}
ok = all(nodes.get(name, {}).get("state") == "up" and
         nodes[name]["address"].startswith(ip + ":") and not nodes[name]["address"].endswith(":1")
         for name, ip in (("n1", sys.argv[2]), ("n2", sys.argv[3])))
sys.exit(0 if ok else 1)
PY
  sleep 0.1
done
python3 - "$nodes" "${addr[n1]}" "${addr[n2]}" <<'PY' || fail "the nodes did not both register in 30 s: $nodes"
import json, sys
nodes = {n["name"]: n for n in json.loads(sys.argv[1])}
sys.exit(0 if all(nodes.get(n, {}).get("state") == "up" for n in ("n1", "n2")) else 1)
PY
echo "GET /nodes: $nodes"
code=$(rmcurl -o /dev/null -w '%{http_code}' -X POST "$rest/nodes/n1/drain")
[[ $code == 401 ]] || fail "POST /nodes/n1/drain without the token: HTTP $code, expected 401"

# ---- the client: lease, allocate on the named node, invoke, release -----------------
ip netns exec "${ns[cli]}" "$client" --devices "$work/devices.json" --device cli-tcp \
  --resource-manager "$fabric" --library "$library" --cores 1 --slots 2 --hot-timeout 0 \
  --repetitions 100 >"$work/client.out" 2>"$work/client.log"
status=$?
cat "$work/client.out"
[[ $status -eq 0 ]] || fail "the client in ${ns[cli]} failed (status $status)"
lease=$(sed -n 's/^lease \([0-9]*\): .* on node \(n[12]\) (\(.*\))$/\1 \2 \3/p' "$work/client.out")
read -r lease_id lease_node lease_endpoint <<<"$lease"
[[ -n $lease_id ]] || fail "the client printed no lease line"
[[ $lease_endpoint == "${addr[$lease_node]}:"* ]] ||
  fail "lease $lease_id names $lease_node at $lease_endpoint, not at ${addr[$lease_node]}"
grep -q "^lease $lease_id released$" "$work/client.out" || fail "the client did not release lease $lease_id"
grep -q "^verified [1-9][0-9]* results, 0 failures$" "$work/client.out" ||
  fail "the client did not verify its results"

# ---- after the release: no active lease, the lease released, its accounting --------
active=$(rmcurl -H "Authorization: Bearer $token" "$rest/leases")
[[ $active == "[]" ]] || fail "GET /leases after the release: $active"
released=$(rmcurl -H "Authorization: Bearer $token" "$rest/leases?state=released")
[[ $released == *"\"id\":$lease_id,"* && $released == *"\"node\":\"$lease_node\""* ]] ||
  fail "lease $lease_id is not listed as released on $lease_node: $released"
accounting=''
for _ in $(seq 1 200); do
  accounting=$(rmcurl -H "Authorization: Bearer $token" "$rest/accounting?lease=$lease_id")
  [[ $accounting == *'"final":true'* ]] && break
  sleep 0.1
done
[[ $accounting == *'"final":true'* && $accounting == *"\"node\":\"$lease_node\""* ]] ||
  fail "no final accounting from $lease_node for lease $lease_id: $accounting"
echo "GET /leases?state=released: $released"
echo "GET /accounting?lease=$lease_id: $accounting"
echo "netns resource-manager test: ok"
