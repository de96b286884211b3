#!/usr/bin/env bash
# The project's main job: set up a Debian 12 machine, build, and run a function
# through a lease on loopback (default device of the example configurations:
# tcp): start a resource manager (REST and fabric on ports the OS chooses),
# add a node to it through its REST API with a freshly generated node secret
# and operator token, start an executor manager registered with it as that
# node, run the example client with --resource-manager (lease one core, then
# synchronous, asynchronous and parallel calls of echo, sum_squares and
# expand, every output verified, then release), show the resource manager's
# view of nodes, leases and accounting, and stop everything (on every exit
# path). Secrets, configurations and logs live in a temporary directory that
# is removed at the end.
#
# Usage: scripts/main-job.sh [CLIENT ARGS...]   ARGS go to rfaas-example-client
#        (e.g. --repetitions 5000, --size 1024; see its --help)
#
# Environment:
#   RFAAS_MAIN_STANDALONE=1 the old path: no resource manager; the executor
#                          manager runs standalone (--skip-resource-manager)
#                          and the client connects to it directly (--manager)
#   RFAAS_MAIN_BUILD_DIR   build directory (default: build/main)
#   RFAAS_MAIN_JOBS        build parallelism (default: nproc)
#   RFAAS_MAIN_DEVICE      device entry of config/devices.json (default: lo-tcp)
#   RFAAS_MAIN_PINGPONG=1  also run the rdmalib vs raw libfabric ping-pong
#                          (benchmarks/run-pingpong.sh) over tcp afterwards
#   RFAAS_SKIP_DEPS=1      do not run scripts/install-deps.sh
#   RFAAS_MAIN_AUTH        munge or none (default: munge when munged is here)
#
# Client identity: when this host's munged answers (its default socket, or
# RFAAS_MUNGE_SOCKET), or munged and mungekey are installed and this job may
# start one of its own (a fresh key and socket in the job's directory), the
# resource manager runs with auth "munge" and the client leases with a MUNGE
# credential; otherwise with auth "none" (anonymous clients). The job says
# which.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

build=${RFAAS_MAIN_BUILD_DIR:-build/main}
jobs=${RFAAS_MAIN_JOBS:-$(nproc)}
device=${RFAAS_MAIN_DEVICE:-lo-tcp}

step() { echo "==> main-job.sh: $*"; }

if [[ ${RFAAS_SKIP_DEPS:-0} != 1 ]]; then
  step "installing Debian packages"
  scripts/install-deps.sh
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

step "configuring $build (Release, libfabric backend, tests off)"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRFAAS_NETWORK_BACKEND=libfabric -DRFAAS_BUILD_BENCHMARKS=ON -DRFAAS_BUILD_TESTS=OFF
standalone=${RFAAS_MAIN_STANDALONE:-0}
# rfaas-info too: with it, the build holds everything `cmake --install` installs.
targets=(executor_manager executor resource_manager rfaas-info rfaas_example_functions
  rfaas-example-client)
[[ ${RFAAS_MAIN_PINGPONG:-0} == 1 ]] && targets+=(rdmalib_pingpong raw_libfabric_pingpong)
step "building ${targets[*]} with $jobs jobs"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-main-job.XXXXXX")
# shellcheck source=lib/manager.sh
source scripts/lib/manager.sh
manager_pid=
rm_pid=
munged_pid=
# Stops the resource manager (SIGTERM; it stops within a second), waiting
# for it; SIGKILL if it is still there after 10 s.
stop_rm() {
  [[ -n $rm_pid ]] || return 0
  kill -TERM "$rm_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$rm_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$rm_pid" 2>/dev/null || true
  wait "$rm_pid" 2>/dev/null || true
  rm_pid=
}
cleanup() {
  stop_manager
  stop_rm
  if [[ -n $munged_pid ]]; then
    kill "$munged_pid" 2>/dev/null || true
    wait "$munged_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "main-job.sh: $1" >&2
  local f
  for f in "$work"/*.log; do
    [[ -s $f ]] && { echo "--- ${f##*/} (last lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

manager_args=(--config config/executor_manager.json --skip-resource-manager)
client_target=()
if [[ $standalone != 1 ]]; then
  # 64 hex digits from the kernel's generator: the operator token and the
  # node secret (docs/resource_manager.md, "Running a lease end to end").
  random_hex() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }
  token=$(random_hex)
  random_hex >"$work/node.secret"
  chmod 600 "$work/node.secret"
  # Client identity: this host's munged, one of our own, or none.
  auth=${RFAAS_MAIN_AUTH:-}
  munge_socket=${RFAAS_MUNGE_SOCKET:-/run/munge/munge.socket.2}
  if [[ $auth != none ]] && command -v munge >/dev/null &&
    munge -n -S "$munge_socket" 2>/dev/null | unmunge -S "$munge_socket" >/dev/null 2>&1; then
    auth=munge
  elif [[ $auth != none ]] && command -v munged >/dev/null && command -v mungekey >/dev/null; then
    # munged refuses a socket directory others cannot traverse.
    chmod 755 "$work"
    mkdir -m 711 "$work/munge"
    munge_socket=$work/munge/munge.sock
    mungekey -c -k "$work/munge/munge.key"
    munged --foreground --key-file="$work/munge/munge.key" --socket="$munge_socket" \
      --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
      --seed-file="$work/munge/munged.seed" 2>"$work/munged.log" &
    munged_pid=$!
    for _ in $(seq 1 100); do
      [[ -S $munge_socket ]] && break
      sleep 0.1
    done
    [[ -S $munge_socket ]] && auth=munge || fail "munged did not start"
  elif [[ $auth == munge ]]; then
    fail "RFAAS_MAIN_AUTH=munge, but no munged answers and none can be started here"
  else
    auth=none
  fi
  if [[ $auth == munge ]]; then
    export RFAAS_MUNGE_SOCKET=$munge_socket
    step "client identity: MUNGE (munged at $munge_socket); the lease records the client's uid"
  else
    step "client identity: none (no munged here, or RFAAS_MAIN_AUTH=none); clients are anonymous"
  fi
  cat >"$work/resource_manager.json" <<JSON
{
  "database": "$work/resource_manager.sqlite",
  "auth": "$auth",
  "munge_socket": "$munge_socket",
  "http": { "host": "127.0.0.1", "port": 0, "threads": 2, "token": "$token" },
  "fabric": { "device_database": "$repo/config/devices.json", "device": "$device",
              "host": "127.0.0.1", "port": 0, "heartbeat_ms": 1000 },
  "placement": "spread",
  "log": { "level": "info" }
}
JSON
  step "starting resource_manager on loopback (device $device, ports chosen by the OS)"
  "$build/server/resource_manager/resource_manager" --config "$work/resource_manager.json" \
    2>"$work/resource_manager.log" &
  rm_pid=$!
  # Its readiness lines go to its log (stderr); wait for them, bounded.
  rest=
  for _ in $(seq 1 300); do
    rest=$(sed -n 's|^resource_manager: ready, REST on \(http://[0-9.]*:[0-9]*\)$|\1|p' \
      "$work/resource_manager.log")
    [[ -n $rest ]] && break
    kill -0 "$rm_pid" 2>/dev/null || fail "the resource manager exited before it was ready"
    sleep 0.1
  done
  [[ -n $rest ]] || fail "the resource manager was not ready within 30 s"
  fabric=$(sed -n 's|^resource_manager: fabric on \([^ ]*\) .*$|\1|p' "$work/resource_manager.log")
  [[ -n $fabric ]] || fail "the resource manager did not say its fabric address"
  grep -h "^resource_manager: \(fabric on\|ready\)" "$work/resource_manager.log"

  step "adding node node1 through REST (POST $rest/nodes with the operator token)"
  code=$(curl -sS -o "$work/node.json" -w '%{http_code}' -X POST \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$rest/nodes" \
    --data "{\"name\":\"node1\",\"address\":\"127.0.0.1:1\",\"cores\":1,\"memory_mib\":1024,\"secret\":\"$(cat "$work/node.secret")\"}") ||
    fail "curl could not reach $rest"
  [[ $code == 201 ]] || fail "POST /nodes answered $code: $(cat "$work/node.json")"

  # The example configuration with its resource_manager block enabled; the
  # address the node registers with is the one it listens on.
  sed -e 's|"enabled": false|"enabled": true|' \
    -e "s|\"address\": \"[^\"]*\"|\"address\": \"$fabric\"|" \
    -e "s|\"secret_file\": \"[^\"]*\"|\"secret_file\": \"$work/node.secret\"|" \
    -e "s|\"device_database\": \"devices.json\"|\"device_database\": \"$repo/config/devices.json\"|" \
    config/executor_manager.json >"$work/executor_manager.json"
  grep -q '"enabled": true' "$work/executor_manager.json" ||
    fail "could not enable the resource_manager block of config/executor_manager.json"
  manager_args=(--config "$work/executor_manager.json")
  client_target=(--resource-manager "$fabric")
fi

mode="standalone"
[[ $standalone != 1 ]] && mode="registered with the resource manager as node1"
step "starting executor_manager on loopback (device $device, $mode)"
if ! start_manager "$work/manager.log" 30 "$build/server/executor_manager/executor_manager" \
  "${manager_args[@]}" --device "$device" --host 127.0.0.1 --port 0; then
  fail "the executor manager did not become ready"
fi
address=$manager_address
echo "$manager_line"
[[ $standalone == 1 ]] && client_target=(--manager "$address")

if [[ $standalone != 1 ]]; then
  # Registration follows the listening line: wait until the node is up.
  up=0
  for _ in $(seq 1 300); do
    curl -sS -H "Authorization: Bearer $token" "$rest/nodes" >"$work/nodes.json" 2>/dev/null &&
      grep -q '"name":"node1"[^}]*"state":"up"\|"state":"up"[^}]*"name":"node1"' "$work/nodes.json" &&
      { up=1; break; }
    kill -0 "$manager_pid" 2>/dev/null || fail "the executor manager exited"
    sleep 0.1
  done
  [[ $up == 1 ]] || fail "node1 did not come up within 30 s"
  echo "GET $rest/nodes: $(cat "$work/nodes.json")"
fi

step "running the example client (${client_target[*]})"
status=0
"$build/examples/client/rfaas-example-client" --devices config/devices.json --device "$device" \
  "${client_target[@]}" --library "$build/examples/functions/libfunctions.so" \
  --cores 1 --repetitions 2000 "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "main-job.sh: the example client failed (status $status)" >&2
  for f in "$work"/*.log; do
    [[ -s $f ]] && { echo "--- ${f##*/} (last lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit "$status"
fi

if [[ $standalone != 1 ]]; then
  # The lease's end reaches the node, which reports its accounting: show the
  # resource manager's view once that report is final (bounded wait).
  for _ in $(seq 1 100); do
    curl -sS -H "Authorization: Bearer $token" "$rest/accounting" >"$work/accounting.json" 2>/dev/null &&
      grep -q '"final":true' "$work/accounting.json" && break
    sleep 0.1
  done
  echo "GET $rest/leases?state=all: $(curl -sS -H "Authorization: Bearer $token" "$rest/leases?state=all")"
  echo "GET $rest/accounting: $(cat "$work/accounting.json")"
  grep -q '"final":true' "$work/accounting.json" ||
    fail "the node's final accounting for the lease did not reach the resource manager"
fi

if [[ ${RFAAS_MAIN_PINGPONG:-0} == 1 ]]; then
  step "running benchmarks/run-pingpong.sh (tcp on loopback; rdmalib against raw libfabric)"
  bash benchmarks/run-pingpong.sh --bin-dir "$build/benchmarks" --providers tcp \
    --csv "$build/pingpong-tcp.csv"
fi
step "done"
