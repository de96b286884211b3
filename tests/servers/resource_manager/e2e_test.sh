#!/usr/bin/env bash
# End-to-end check of the real resource_manager binary on loopback: command
# line and exit codes, the REST API through curl (token required for changes),
# SIGTERM within a second, and a restart on the same SQLite file that shows
# the state again.
#
# Usage: e2e_test.sh RESOURCE_MANAGER_BINARY EXAMPLE_CONFIG
set -euo pipefail

rm_bin=$1
example=$2
work=$(mktemp -d /tmp/rfaas-rm-e2e-XXXXXX)
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}

token=e2e-token-$RANDOM-0123456789
reader=e2e-reader-$RANDOM-0123456789
cat >"$work/rm.json" <<JSON
{
  "database": "state/rm.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "threads": 2, "token": "$token",
            "read_token": "$reader" },
  "placement": "pack",
  "tick_ms": 50
}
JSON
mkdir "$work/state"

# ---- command line ----------------------------------------------------------------
"$rm_bin" --help | grep -q -- "--config" || fail "--help does not list --config"
"$rm_bin" --version | grep -q "resource_manager" || fail "--version"
set +e
"$rm_bin" 2>"$work/usage.log"; rc=$?
[[ $rc == 2 ]] || fail "no --config: exit $rc, expected 2"
"$rm_bin" --config "$work/rm.json" --bogus 2>"$work/usage.log"; rc=$?
[[ $rc == 2 ]] || fail "unknown option: exit $rc, expected 2"
echo '{"http": {"token": "0123456789abcdef"}, "placment": "pack"}' >"$work/bad.json"
"$rm_bin" --config "$work/bad.json" 2>"$work/bad.log"; rc=$?
[[ $rc == 1 ]] || fail "bad config: exit $rc, expected 1"
grep -q "placment: unknown key" "$work/bad.log" || fail "bad config: the key is not named"
"$rm_bin" --config "$example" --help >/dev/null || fail "--help with --config"
# The shipped example's placeholder token is refused, not served with.
"$rm_bin" --config "$example" 2>"$work/example.log"; rc=$?
[[ $rc == 1 ]] || fail "the example with its placeholder token: exit $rc, expected 1"
grep -q "http.token: the placeholder token of the shipped example" "$work/example.log" ||
  fail "the placeholder token is not named: $(cat "$work/example.log")"
set -e

# ---- start, wait for the readiness line ------------------------------------------
start() {
  local log=$1
  # Created here: the background child opens it later, and a sed on a file
  # that does not exist yet would end the script (set -e).
  : >"$log"
  "$rm_bin" --config "$work/rm.json" 2>"$log" &
  pid=$!
  port=
  for _ in $(seq 1 100); do
    port=$(sed -n 's|^resource_manager: ready, REST on http://127.0.0.1:\([0-9]*\)$|\1|p' "$log")
    [[ -n $port ]] && break
    kill -0 "$pid" 2>/dev/null || fail "resource_manager exited before it was ready"
    sleep 0.05
  done
  [[ -n $port && $port != 0 ]] || fail "no readiness line within 5 s"
  base=http://127.0.0.1:$port
}

stop() {
  local sig=$1
  kill "-$sig" "$pid"
  local t0=$(date +%s%N)
  local rc=0
  wait "$pid" || rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  pid=
  [[ $rc == 0 ]] || fail "$sig: exit status $rc"
  ((ms < 1000)) || fail "$sig: took $ms ms to stop"
  echo "stopped on $sig in $ms ms"
}

# curl METHOD PATH [BODY] [TOKEN] -> prints the body; the status goes to a
# file, since the call often runs in a $(...) subshell
call() {
  local method=$1 path=$2 body=${3:-} auth=${4:-}
  local args=(-sS -X "$method" -o "$work/body" -w '%{http_code}')
  [[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data "$body")
  [[ -n $auth ]] && args+=(-H "Authorization: Bearer $auth")
  curl "${args[@]}" "$base$path" >"$work/code"
  cat "$work/body"
}
expect() {
  local code
  code=$(cat "$work/code")
  [[ $code == "$1" ]] || fail "$2: HTTP $code, expected $1: $(cat "$work/body")"
}

start "$work/run1.log"
call GET /health >/dev/null
expect 200 "GET /health"
grep -q '"journal_mode":"wal"' "$work/body" || fail "health does not report WAL"
call GET /nodes >/dev/null
expect 401 "GET /nodes without a token"
call GET /leases "" wrong-token-0123456789 >/dev/null
expect 401 "GET /leases with a wrong token"
[[ $(call GET /nodes "" "$reader") == "[]" ]] || fail "nodes not empty at start"
[[ $(call GET /leases "" "$token") == "[]" ]] || fail "leases not empty at start"

node='{"name":"node1","address":"10.0.0.1:10000","cores":8,"memory_mib":16384}'
call POST /nodes "$node" >/dev/null
expect 401 "POST /nodes without a token"
call POST /nodes "$node" wrong-token-0123456789 >/dev/null
expect 401 "POST /nodes with a wrong token"
call POST /nodes "$node" "$reader" >/dev/null
expect 401 "POST /nodes with the read-only token"
call POST /nodes "$node" "$token" >/dev/null
expect 201 "POST /nodes"
secret=$(sed -n 's/.*"secret":"\([0-9a-f]*\)".*/\1/p' "$work/body")
[[ ${#secret} == 64 ]] || fail "POST /nodes did not return a secret"
call POST /nodes '{"name":"node2","address":"10.0.0.2:10000","cores":4,"memory_mib":8192}' \
  "$token" >/dev/null
expect 201 "POST /nodes node2"
call POST /nodes/node1/drain "" >/dev/null
expect 401 "drain without a token"
call POST /nodes/node1/drain "" "$token" >/dev/null
expect 200 "drain"
call DELETE /nodes/node2 "" >/dev/null
expect 401 "DELETE without a token"
call DELETE /nodes/node2 "" "$token" >/dev/null
expect 200 "DELETE /nodes/node2"
call DELETE /leases/12345 "" "$token" >/dev/null
expect 404 "revoke an unknown lease"

nodes=$(call GET /nodes "" "$reader")
grep -q '"name":"node1"' <<<"$nodes" || fail "node1 missing: $nodes"
grep -q '"drained":true' <<<"$nodes" || fail "node1 not drained: $nodes"
grep -q 'node2' <<<"$nodes" && fail "node2 still listed: $nodes"
grep -q 'secret' <<<"$nodes" && fail "GET /nodes shows a secret"

metrics=$(call GET /metrics)
expect 200 "GET /metrics"
for line in 'rfaas_rm_nodes_registered 1' 'rfaas_rm_leases_active 0' \
  'rfaas_rm_leases_granted_total 0' 'rfaas_rm_nodes{state="drained"} 1' \
  'rfaas_rm_request_duration_seconds_count{interface="http",kind="write"}'; do
  grep -qF "$line" <<<"$metrics" || fail "metrics lack '$line'"
done
call GET /accounting.csv >/dev/null
expect 401 "GET /accounting.csv without a token"
csv=$(call GET /accounting.csv "" "$reader")
expect 200 "GET /accounting.csv"
[[ $csv == lease,node,client,* ]] || fail "CSV header: $csv"
stop TERM

# ---- restart on the same file: the state is back ---------------------------------
start "$work/run2.log"
nodes=$(call GET /nodes "" "$token")
grep -q '"name":"node1"' <<<"$nodes" || fail "node1 lost across a restart: $nodes"
grep -q '"drained":true' <<<"$nodes" || fail "drain lost across a restart: $nodes"
grep -q 'node2' <<<"$nodes" && fail "node2 came back after a restart: $nodes"
# The node keeps its secret: adding it again conflicts instead of re-keying it.
call POST /nodes "$node" "$token" >/dev/null
expect 409 "POST /nodes for a known node after a restart"
stop INT
echo "resource_manager e2e: ok"
