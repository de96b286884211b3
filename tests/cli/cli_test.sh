#!/usr/bin/env bash
# Command-line conventions and user-facing errors, on the real binaries.
#
#   cli_test.sh conventions NAME BINARY [log-level]   --help, --version, exit 0/1/2
#   cli_test.sh manager     MANAGER                   manager usage errors, port in use
#   cli_test.sh client      MANAGER CLIENT LIBRARY    log level reaches the executor,
#                                                     library logs on stderr only,
#                                                     unknown_function names the function
#   cli_test.sh info        RFAAS_INFO                provider that cannot serve a device
# SRC (the source tree) must be set.
set -uo pipefail

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# run WHAT EXPECTED_RC CMD...: stdout and stderr land in $tmp/out and $tmp/err.
run() {
  local what=$1 want=$2
  shift 2
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$what: exit $rc, expected $want; stderr: $(head -c 600 "$tmp/err")"
    return 1
  fi
  pass "$what (exit $rc)"
}
expect_in() { # FILE TEXT WHAT
  if grep -qF -- "$2" "$1"; then
    pass "$3"
  else
    fail "$3: no \"$2\" in $(basename "$1"): $(head -c 600 "$1")"
  fi
}
expect_not_in() { # FILE REGEX WHAT
  if grep -qE -- "$2" "$1"; then
    fail "$3: $(grep -E -- "$2" "$1" | head -3)"
  else
    pass "$3"
  fi
}

# start_manager TAG CMD...: sets mgr_pid and mgr_port; logs in $tmp/mgr.TAG.*.
start_manager() {
  local tag=$1
  shift
  "$@" >"$tmp/mgr.$tag.out" 2>"$tmp/mgr.$tag.err" &
  mgr_pid=$!
  pids+=("$mgr_pid")
  for _ in $(seq 200); do
    if grep -q "listening on" "$tmp/mgr.$tag.out"; then
      mgr_port=$(sed -n 's/.*listening on [^ ]* [^ ]*:\([0-9]*\)$/\1/p' "$tmp/mgr.$tag.out" | head -1)
      return 0
    fi
    kill -0 "$mgr_pid" 2>/dev/null || break
    sleep 0.05
  done
  fail "manager $tag did not start: $(cat "$tmp/mgr.$tag.err")"
  return 1
}

mode=$1
shift
case $mode in
conventions)
  name=$1 bin=$2 log=${3:-}
  run "$name --help" 0 "$bin" --help
  expect_in "$tmp/out" "--version" "$name --help lists --version"
  run "$name --version" 0 "$bin" --version
  expect_in "$tmp/out" "rFaaS" "$name --version names rFaaS"
  expect_in "$tmp/out" "backend" "$name --version names the backend"
  run "$name unknown option" 2 "$bin" --no-such-option
  expect_in "$tmp/err" "--help" "$name unknown option points to --help"
  if [ "$log" = log-level ]; then
    run "$name --log-level verbose" 2 "$bin" --log-level verbose
    expect_in "$tmp/err" "trace, debug, info, warn, error, critical, off" \
      "$name names the valid levels"
  fi
  ;;
manager)
  mgr=$1
  cfg=$SRC/config/executor_manager.json
  run "manager without --config" 2 "$mgr"
  expect_in "$tmp/err" "--config FILE is required" "missing --config names the option"
  run "manager with a missing config file" 1 "$mgr" --config "$tmp/none.json"
  RFAAS_LOG_LEVEL=loud run "manager with a bad RFAAS_LOG_LEVEL" 2 "$mgr" --config "$cfg"
  expect_in "$tmp/err" "RFAAS_LOG_LEVEL" "bad environment level names the variable"
  start_manager first "$mgr" --config "$cfg" --port 0 --skip-resource-manager || exit 1
  run "second manager on the same port" 1 "$mgr" --config "$cfg" --port "$mgr_port" \
    --skip-resource-manager
  expect_in "$tmp/err" "--port 0" "port in use suggests --port 0"
  echo "  prints: $(cat "$tmp/err")"
  ;;
client)
  mgr=$1 client=$2 lib=$3
  cfg=$SRC/config/executor_manager.json
  # --log-level beats RFAAS_LOG_LEVEL, which beats the config's "info".
  RFAAS_LOG_LEVEL=error start_manager dbg "$mgr" --config "$cfg" --port 0 \
    --skip-resource-manager --log-level debug || exit 1
  RFAAS_LOG_LEVEL=debug run "example client with the shipped defaults" 0 "$client" \
    --devices "$SRC/config/devices.json" --manager "127.0.0.1:$mgr_port" --library "$lib" \
    --repetitions 20
  cp "$tmp/out" "$tmp/client.out"
  cp "$tmp/err" "$tmp/client.err"
  expect_in "$tmp/client.out" "median hot latency" "client prints its latency"
  expect_not_in "$tmp/client.out" '\[(trace|debug|info|warning|error)\]|rdmalib' \
    "no library log line on the client's stdout"
  expect_in "$tmp/client.err" "[rdmalib" "the rdmalib logger logs on stderr"
  expect_in "$tmp/client.err" "[debug]" "RFAAS_LOG_LEVEL=debug reaches librfaas"
  expect_in "$tmp/client.err" '"no_such_function" is not a function' \
    "unknown_function names the function"
  echo "  prints: $(grep -F no_such_function "$tmp/client.err" | head -1)"
  # A client on shm against this tcp manager: a clear error at once, not a
  # handshake timeout after the 5 s connect deadline.
  start=$(date +%s%N)
  run "shm client against a tcp manager" 1 "$client" --devices "$SRC/config/devices.json" \
    --device lo-shm --manager "127.0.0.1:$mgr_port" --library "$lib"
  took=$((($(date +%s%N) - start) / 1000000))
  expect_in "$tmp/err" "nothing listens at 127.0.0.1:$mgr_port over shm" \
    "shm client is told nothing listens over shm"
  if [ "$took" -lt 4000 ]; then pass "shm client fails in $took ms"; else fail "shm client took $took ms"; fi
  echo "  prints: $(cat "$tmp/err")"
  # RFAAS_RESOURCE_MANAGER (rfaas-slurm exports it): with no address given the
  # client leases from it (librfaas reads it for an empty address); nobody
  # listens there, and the error must say it was the resource manager.
  RFAAS_RESOURCE_MANAGER=127.0.0.1:1 run "client given only RFAAS_RESOURCE_MANAGER" 1 "$client" \
    --devices "$SRC/config/devices.json" --library "$lib"
  expect_in "$tmp/err" "cannot reach the resource manager" "RFAAS_RESOURCE_MANAGER names the resource manager"
  RFAAS_RESOURCE_MANAGER=127.0.0.1:1 run "--manager beats RFAAS_RESOURCE_MANAGER" 0 "$client" \
    --devices "$SRC/config/devices.json" --manager "127.0.0.1:$mgr_port" --library "$lib" --repetitions 5
  kill "$mgr_pid"
  wait "$mgr_pid"
  expect_in "$tmp/mgr.dbg.err" "[manager" "the manager logs through its named logger"
  expect_in "$tmp/mgr.dbg.err" "[debug]" "--log-level debug beats RFAAS_LOG_LEVEL=error"
  if grep -E '\[executor [0-9]+\] \[debug\]' "$tmp/mgr.dbg.err" >/dev/null; then
    pass "the log level reaches the executor"
  else
    fail "no debug line from the executor: $(grep -F executor "$tmp/mgr.dbg.err" | head -5)"
  fi
  ;;
info)
  info=$1
  run "rfaas-info with a provider that cannot serve the device" 1 "$info" \
    --devices "$SRC/config/devices.json" --device lo-tcp --provider verbs
  cat "$tmp/out" "$tmp/err" >"$tmp/all"
  expect_in "$tmp/all" "cannot serve device 'lo-tcp'" "the error says the provider cannot serve"
  echo "  prints: $(grep -F "cannot serve" "$tmp/all")"
  ;;
*)
  echo "cli_test.sh: unknown mode $mode" >&2
  exit 2
  ;;
esac
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
