#!/usr/bin/env bash
# An executor manager in one network namespace and the example client in
# another, joined by a veth pair with their own addresses (10.213.0.1 and
# 10.213.0.2): the client's listener, the workers' connections back to it and
# the manager's address are real, non-loopback addresses.
#
# Usage: netns-test.sh MANAGER CLIENT LIBRARY MANAGER_CONFIG
# Exit 77 (skipped, with the reason printed) without root or ip netns.
set -uo pipefail
manager=$1 client=$2 library=$3 config=$4

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "the ip command (iproute2) is missing"

id=$$
srv=rfaas-srv-$id cli=rfaas-cli-$id
vs=rfs$id vc=rfc$id
work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-netns.XXXXXX")
# shellcheck source=../../scripts/lib/manager.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/manager.sh"
manager_pid=
cleanup() {
  stop_manager
  ip netns del "$srv" 2>/dev/null
  ip netns del "$cli" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if ! ip netns add "$srv" 2>"$work/err"; then
  skip "ip netns add failed: $(cat "$work/err")"
fi
set -e
ip netns add "$cli"
ip link add "$vs" type veth peer name "$vc"
ip link set "$vs" netns "$srv"
ip link set "$vc" netns "$cli"
ip -n "$srv" addr add 10.213.0.1/24 dev "$vs"
ip -n "$cli" addr add 10.213.0.2/24 dev "$vc"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link set "$vs" up
ip -n "$cli" link set "$vc" up

cat >"$work/devices.json" <<JSON
{ "devices": [
  { "name": "srv-tcp", "provider": "tcp", "ip_address": "10.213.0.1", "endpoint": "connected" },
  { "name": "cli-tcp", "provider": "tcp", "ip_address": "10.213.0.2", "endpoint": "connected" }
] }
JSON

cpus=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))' 2>/dev/null || echo 0)
set +e
if ! start_manager "$work/manager.log" 60 ip netns exec "$srv" "$manager" --config "$config" \
  --skip-resource-manager --devices "$work/devices.json" --device srv-tcp --host 10.213.0.1 \
  --port 0 --cores "$cpus"; then
  echo "FAIL: the manager did not start in its namespace" >&2
  cat "$work/manager.log" >&2
  exit 1
fi
address=$manager_address
echo "$manager_line (namespace $srv)"

ip netns exec "$cli" "$client" --devices "$work/devices.json" --device cli-tcp \
  --manager "$address" --library "$library" --cores 1 --slots 2 --hot-timeout 0 --repetitions 200
status=$?
if [[ $status -ne 0 ]]; then
  echo "FAIL: the client in $cli failed (status $status); manager log:" >&2
  tail -n 30 "$work/manager.log" >&2
  exit 1
fi
echo "netns test: ok"
