#!/usr/bin/env bash
# The resource manager's slurm node provider against a real SLURM (a
# two-node cluster on this machine, slurm-up.sh), over tcp on loopback:
#   grow    the provider starts from zero nodes: the example client's lease
#           request is answered "provisioning", a pilot job is submitted,
#           its executor manager registers with the pilot's secret, the lease
#           is granted and the client's calls run;
#   idle    that pilot, idle for nodes.slurm.idle_timeout_ms, is cancelled
#           and its node removed;
#   secret  an executor manager naming that pilot's job with another secret
#           is refused and never becomes a node;
#   scancel a pilot cancelled with scancel in the middle of a client's calls
#           ends the client (non-zero, with the error, within its deadline),
#           ends its lease (REST: node_down) and records why (GET /pilots);
#   restart the resource manager killed (SIGKILL) while a client's pilot
#           runs finds the pilot again in SQLite, its executor manager
#           registers again, and the client's calls go on;
#   stop    SIGTERM to the resource manager cancels its pilots, and that
#           client ends with an error;
#   min     with min_nodes 1 a pilot starts with the resource manager and a
#           lease is granted without a provisioning wait;
# and afterwards no process of this build is left. The cluster is stopped on
# every exit path.
#
#   provider_test.sh BUILD_DIR
# Exit 77 (skipped, with the reason) when not root or SLURM is not installed.
set -uo pipefail
build=$(realpath "${1:?usage: provider_test.sh BUILD_DIR}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PATH=$PATH:/usr/sbin
t0=$SECONDS

skip() {
  echo "SKIP: slurm provider: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "needs root (slurmd and munged run as root on this test cluster)"
for tool in munged mungekey slurmctld slurmd sbatch srun squeue scancel scontrol curl; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool not found (Debian packages: slurmctld slurmd slurm-client munge curl; scripts/install-deps.sh)"
done
library=$build/examples/functions/libfunctions.so
client=$build/examples/client/rfaas-example-client
rm_bin=$build/server/resource_manager/resource_manager
for f in "$build/tools/rfaas-slurm" "$rm_bin" "$build/server/executor_manager/executor_manager" \
  "$client" "$library"; do
  [[ -e $f ]] || { echo "FAIL: slurm provider: $f is missing: build it first"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-slurm-provider.XXXXXX")
chmod 755 "$tmp"
cluster=$tmp/cluster
rm_pid=""

# shellcheck source=lib.sh
source "$here/lib.sh"
cleanup() {
  local rc=$?
  if [[ -n $rm_pid ]] && kill -0 "$rm_pid" 2>/dev/null; then
    kill -TERM "$rm_pid" 2>/dev/null
    wait "$rm_pid" 2>/dev/null
  fi
  "$here/slurm-down.sh" "$cluster" >/dev/null 2>&1
  kill_leftovers "slurm provider" || rc=1
  [[ -n ${RFAAS_SLURM_TEST_KEEP:-} ]] && echo "slurm provider: kept $tmp" || rm -rf "$tmp"
  echo "slurm provider: $((SECONDS - t0)) s in all"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: slurm provider: $*"
  local f
  for f in "$tmp"/rm*.log "$tmp"/client*.txt "$tmp"/pilots/pilot-*/job-*.out \
    "$tmp"/pilots/pilot-*/job-*/logs/*.log; do
    [[ -s $f ]] && { echo "--- $f (last lines)"; tail -n 25 "$f"; }
  done
  exit 1
}
step() { echo "slurm provider: [$((SECONDS - t0)) s] $*"; }

step "starting the cluster"
env=$("$here/slurm-up.sh" "$cluster" 2>"$tmp/up.log") || { cat "$tmp/up.log"; fail "the cluster did not start"; }
eval "$env"

# ---- the resource manager with the slurm provider, zero nodes -------------
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
printf 'Authorization: Bearer %s\n' "$(cat "$tmp/token")" >"$tmp/auth"
cat >"$tmp/devices.json" <<'JSON'
{ "devices": [ { "name": "lo-tcp", "provider": "tcp", "ip_address": "127.0.0.1", "port": 0,
                 "default_receive_buffer_size": 32, "endpoint": "connected" } ] }
JSON
cat >"$tmp/rm.json" <<JSON
{
  "database": "$tmp/rm.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "threads": 2, "token_file": "$tmp/token" },
  "fabric": { "device_database": "$tmp/devices.json", "device": "lo-tcp", "host": "127.0.0.1",
              "port": 0, "heartbeat_ms": 200 },
  "nodes": {
    "heartbeat_timeout_ms": 3000,
    "provider": "slurm",
    "slurm": {
      "min_nodes": 0, "max_nodes": 2, "nodes_per_job": 1,
      "idle_timeout_ms": 1000, "time_limit": "00:10:00",
      "work_dir": "$tmp/pilots",
      "rfaas_slurm": "$build/tools/rfaas-slurm",
      "pilot_options": ["--provider", "tcp", "--interface", "lo", "--same-host", "--cores", "1",
                        "--timeout", "30"],
      "retry_after_ms": 100, "poll_ms": 100, "command_timeout_ms": 5000,
      "start_timeout_ms": 30000
    }
  },
  "tick_ms": 50
}
JSON

start_rm() { # log
  rm_log=$1
  "$rm_bin" --config "$tmp/rm.json" 2>"$rm_log" &
  rm_pid=$!
  wait_for 10 "the resource manager's readiness line" grep -qs 'ready, REST on' "$rm_log"
  rm_addr=$(sed -n 's/^resource_manager: fabric on \([^ ]*\) .*/\1/p' "$rm_log")
  rest=$(sed -n 's/^resource_manager: ready, REST on \(.*\)$/\1/p' "$rm_log")
  [[ -n $rm_addr && -n $rest ]] || fail "no fabric address or REST in $rm_log"
}
get() { curl -sS -H @"$tmp/auth" "$rest$1"; }
node_up() { get /nodes | grep -q '"state":"up"'; }
# Pilot jobs of this resource manager that SLURM still runs or queues.
live_pilots() { squeue -h -o '%i %j %T' | awk '$2 ~ /^rfaas-pilot-/ && $3 != "COMPLETING"'; }
no_live_pilot() { [[ -z $(live_pilots) ]]; }
client_cmd=("$client" --devices "$tmp/devices.json" --device lo-tcp --library "$library"
  --hot-timeout 0 --resource-manager)

start_rm "$tmp/rm1.log"
[[ $(get /nodes) == "[]" ]] || fail "the slurm provider should start with no node: $(get /nodes)"
no_live_pilot || fail "a pilot runs before any lease was asked for: $(live_pilots)"

# ---- grow: a lease from zero nodes ----------------------------------------
step "grow: a lease with no node starts a pilot"
start=$SECONDS
timeout 60 "${client_cmd[@]}" "$rm_addr" --repetitions 200 --log-level info >"$tmp/client1.txt" 2>&1 ||
  fail "grow: the client failed: $(tail -n 5 "$tmp/client1.txt")"
grep -Eq '^verified [0-9]+ results, 0 failures' "$tmp/client1.txt" ||
  fail "grow: the client did not verify its results"
grep -q 'provisioning: ' "$tmp/client1.txt" ||
  fail "grow: the client was never told that nodes were provisioning"
grep -q 'slurm: submitting pilot 1 ' "$tmp/rm1.log" || fail "grow: no pilot was submitted"
node1=$(sed -n 's/^lease [0-9]*: 1 core(s) on node \([^ ]*\) .*/\1/p' "$tmp/client1.txt")
[[ $node1 =~ -j[0-9]+$ ]] || fail "grow: the lease is not on a pilot's node ($node1)"
step "grow: lease on $node1 after $((SECONDS - start)) s"

# ---- idle: the pilot is cancelled -----------------------------------------
step "idle: the idle pilot is cancelled"
wait_for 20 "the idle pilot's cancellation" no_live_pilot
wait_for 5 "the idle pilot's end in GET /pilots" \
  bash -c "curl -sS -H @'$tmp/auth' '$rest/pilots' | grep -q 'held no lease'"
wait_for 5 "the idle pilot's node removed" bash -c "[[ \$(curl -sS -H @'$tmp/auth' '$rest/nodes') == '[]' ]]"

# ---- scancel: a pilot ends under a client ----------------------------------
step "scancel: a pilot cancelled in the middle of a client's calls"
timeout 60 "${client_cmd[@]}" "$rm_addr" --repetitions 100000000 >"$tmp/client2.txt" 2>&1 &
client_pid=$!
# The client's calls run once its node's executor manager has made the
# allocation (a zygote's spare executor is not enough: it waits for one).
allocated() {
  node=$(get "/leases" | sed -n 's/.*"node":"\([^"]*\)".*/\1/p' | head -n 1)
  [[ -n $node ]] && grep -qs 'allocation .* executor pid' "$tmp"/pilots/pilot-*/job-"${node##*-j}"/logs/*.log
}
wait_for 30 "the second client's allocation" allocated
job=${node##*-j}

# An executor manager that names the pilot's job but holds another secret
# is refused, and never becomes a node.
step "secret: a node of job $job with the wrong secret is refused"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/wrong.secret"
chmod 600 "$tmp/wrong.secret"
em_json=$(ls "$tmp"/pilots/pilot-*/job-"$job"/nodes/*.json | grep -v devices | head -n 1)
sed -e "s|\"node\": \"[^\"]*\"|\"node\": \"intruder-j$job\"|" \
  -e "s|\"secret_file\": \"[^\"]*\"|\"secret_file\": \"$tmp/wrong.secret\"|" "$em_json" >"$tmp/intruder.json"
"$build/server/executor_manager/executor_manager" --config "$tmp/intruder.json" \
  >"$tmp/intruder.out" 2>"$tmp/intruder.log" &
intruder=$!
wait_for 20 "the intruder's refusal" grep -qs "refused this node's registration" "$tmp/intruder.log"
kill -TERM "$intruder"
wait "$intruder" 2>/dev/null
grep -q "node intruder-j$job claims pilot job $job but its proof does not verify" "$rm_log" ||
  fail "secret: the resource manager did not say why it refused the intruder"
get /nodes | grep -q intruder && fail "secret: the intruder became a node: $(get /nodes)"

step "scancel: cancelling pilot job $job"
cancelled_at=$SECONDS
scancel "$job"
client_rc=0
wait "$client_pid" || client_rc=$?
((client_rc != 0 && client_rc != 124)) ||
  fail "scancel: the client exited with $client_rc (0: it did not notice; 124: it hung)"
took=$((SECONDS - cancelled_at))
grep -Eq 'FAILED|went down|rfaas: ' "$tmp/client2.txt" ||
  fail "scancel: the client gave no error: $(tail -n 5 "$tmp/client2.txt")"
step "scancel: the client ended with status $client_rc ${took} s after scancel: $(grep -E 'FAILED|rfaas: ' "$tmp/client2.txt" | head -n 2 | tr '\n' ' ')"
lease2=$(sed -n 's/^lease \([0-9]*\): .*/\1/p' "$tmp/client2.txt")
wait_for 10 "job $job's end in GET /pilots" \
  bash -c "curl -sS -H @'$tmp/auth' '$rest/pilots' | grep -q '\"job_id\":$job,[^}]*CANCELLED'"
[[ -n $lease2 ]] || fail "scancel: the client did not print its lease"
leases=$(get "/leases?state=all")
state=$(/usr/bin/python3 -c 'import json, sys
print(next((l["state"] for l in json.load(sys.stdin) if l["id"] == int(sys.argv[1])), "missing"))' \
  "$lease2" <<<"$leases")
[[ $state == node_down ]] || fail "scancel: lease $lease2 is $state, not node_down: $leases"

# ---- restart: the pilot is found again --------------------------------------
step "restart: a client's pilot survives a killed resource manager"
timeout 60 "${client_cmd[@]}" "$rm_addr" --repetitions 100000000 >"$tmp/client3.txt" 2>&1 &
client_pid=$!
wait_for 30 "the third client's allocation" allocated
job=${node##*-j}
{ kill -KILL "$rm_pid" && wait "$rm_pid"; } 2>/dev/null
# The same port: the pilot's executor manager reconnects to it.
port=${rm_addr##*:}
sed -i "s/\"port\": 0, \"heartbeat_ms\"/\"port\": $port, \"heartbeat_ms\"/" "$tmp/rm.json"
start_rm "$tmp/rm2.log"
grep -q "job $job, .*watched again" "$tmp/rm2.log" || fail "restart: pilot job $job was not found again"
wait_for 20 "node $node registering again" grep -q "node $node registered" "$tmp/rm2.log"
kill -0 "$client_pid" 2>/dev/null || fail "restart: the client ended with the resource manager: $(tail -n 3 "$tmp/client3.txt")"

# ---- stop: SIGTERM cancels the pilots --------------------------------------
step "stop: SIGTERM to the resource manager cancels its pilots (the client's too)"
live_pilots | grep -q . || fail "stop: no pilot is running to be cancelled"
kill -TERM "$rm_pid"
wait "$rm_pid" 2>/dev/null
rm_pid=""
grep -q "slurm: cancelled pilot job(s) $job" "$tmp/rm2.log" || fail "stop: the pilots were not cancelled"
client_rc=0
wait "$client_pid" || client_rc=$?
((client_rc != 0 && client_rc != 124)) ||
  fail "stop: the client exited with $client_rc (0: it did not notice; 124: it hung)"
wait_for 20 "the pilots leaving the queue" no_live_pilot

# ---- min_nodes: a node up before any request ------------------------------
step "min_nodes: one node kept up; a lease is granted without waiting"
sed -i 's/"min_nodes": 0/"min_nodes": 1/' "$tmp/rm.json"
start_rm "$tmp/rm3.log"
wait_for 20 "the min_nodes pilot's node" node_up
timeout 60 "${client_cmd[@]}" "$rm_addr" --repetitions 10 --log-level info >"$tmp/client4.txt" 2>&1 ||
  fail "min_nodes: the client failed: $(tail -n 5 "$tmp/client4.txt")"
grep -q 'provisioning: ' "$tmp/client4.txt" && fail "min_nodes: the client had to wait for a pilot"
grep -q 'below nodes.slurm.min_nodes' "$tmp/rm3.log" || fail "min_nodes: no pilot for min_nodes"
kill -TERM "$rm_pid"
wait "$rm_pid" 2>/dev/null
rm_pid=""
wait_for 20 "the min_nodes pilot leaving the queue" no_live_pilot
no_rfaas() { [[ -z $(ours) ]]; }
wait_for 20 "every process of this build ending" no_rfaas
grep -rlE '[0-9a-f]{64}' "$tmp/pilots" 2>/dev/null | grep -v '/pilot.sh$' | grep -q . &&
  fail "a pilot's secret is left in $(grep -rlE '[0-9a-f]{64}' "$tmp/pilots")"
step "passed"
