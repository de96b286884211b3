#!/bin/bash
# End-to-end check of the server side with real processes: starts
# executor_manager (standalone, port 0) on loopback, waits for its readiness
# line, runs the protocol probe client against it, stops the manager and checks
# that no executor is left behind.
#
#   e2e_test.sh MANAGER PROBE DEVICES LIBRARY DEVICE ZYGOTE SCENARIO [PROBE ARGS...]
#
# ZYGOTE is true or false (executor.zygote). SCENARIO is a probe scenario;
# for "busy-disconnect" the manager's log must also show that it terminated
# the executor.
set -u
# shellcheck source=../../../scripts/lib/manager.sh
source "$(dirname "$0")/../../../scripts/lib/manager.sh"
MANAGER=$1 PROBE=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5 ZYGOTE=$6 SCENARIO=$7
shift 7
WORK=$(mktemp -d /tmp/rfaas-e2e.XXXXXX)
MPID=
cleanup() {
  if [ -n "$MPID" ] && kill -0 "$MPID" 2>/dev/null; then
    kill -KILL "$MPID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "e2e: FAIL: $*"
  echo "---- executor_manager log"
  cat "$WORK/manager.err"
  exit 1
}

# Workers may use any CPU this test may use.
CORES=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
cat > "$WORK/manager.json" <<JSON
{
  "device_database": "$DEVICES",
  "device": "$DEVICE",
  "listen": { "host": "127.0.0.1", "port": 0 },
  "resources": { "cores": "$CORES", "memory_mib": 1024, "max_allocations": 4 },
  "executor": { "zygote": $ZYGOTE },
  "deadlines_ms": { "shutdown_grace": 1000 }
}
JSON

"$MANAGER" --config "$WORK/manager.json" --skip-resource-manager >"$WORK/manager.out" \
  2>"$WORK/manager.err" &
MPID=$!
# Readiness: the manager prints its address once it accepts clients.
for _ in $(seq 200); do
  grep -q '^executor_manager: listening on ' "$WORK/manager.out" && break
  kill -0 "$MPID" 2>/dev/null || fail "executor_manager exited before it was ready"
  sleep 0.1
done
LINE=$(grep '^executor_manager: listening on ' "$WORK/manager.out") ||
  fail "no readiness line within 20 s"
ADDRESS=${LINE##* }
echo "e2e: $LINE"

timeout 120 "$PROBE" --devices "$DEVICES" --device "$DEVICE" --manager "$ADDRESS" \
  --library "$LIBRARY" --scenario "$SCENARIO" "$@"
RC=$?
[ $RC -eq 0 ] || fail "probe client exited with $RC"

if [ "$SCENARIO" = busy-disconnect ]; then
  for _ in $(seq 100); do
    grep -q 'ended: executor exited on SIGTERM' "$WORK/manager.err" && break
    sleep 0.1
  done
  grep -q 'ended: executor exited on SIGTERM' "$WORK/manager.err" ||
    fail "the manager did not terminate the busy executor of a vanished client"
fi

if [ "$SCENARIO" = oversized ]; then
  # The peer that overran the manager's receive is logged and dropped; the
  # probe's normal lease afterwards passed above.
  grep -q 'message truncated.*dropping it' "$WORK/manager.err" ||
    fail "the manager did not log and drop the client that sent an oversized request"
fi

# Every allocation must have ended (and been accounted) before we stop.
for _ in $(seq 50); do
  STARTED=$(grep -c '\] allocation [0-9a-f]*: [0-9]* core(s)' "$WORK/manager.err")
  ENDED=$(grep -c '\] allocation [0-9a-f]* ended: ' "$WORK/manager.err")
  [ "$STARTED" -eq "$ENDED" ] && break
  sleep 0.1
done
[ "$STARTED" -eq "$ENDED" ] || fail "$STARTED allocation(s) started, $ENDED ended"
[ "$STARTED" -ge 1 ] || fail "no allocation was made"

CHILDREN=$(pgrep -P "$MPID" | tr '\n' ' ')
# The zygote's children too (the spare executor, opened ahead on shm).
GRANDCHILDREN=$(for c in $CHILDREN; do pgrep -P "$c"; done | tr '\n' ' ')
T0=$(date +%s%N)
kill -TERM "$MPID"
wait_gone "$MPID" 5 || fail "executor_manager did not stop within 5 s of SIGTERM"
STOP_MS=$((($(date +%s%N) - T0) / 1000000))
echo "e2e: executor_manager stopped $STOP_MS ms after SIGTERM"
if [ "$SCENARIO" = oversized ] && [ "$STOP_MS" -gt 1000 ]; then
  fail "executor_manager took $STOP_MS ms to stop after SIGTERM (limit 1000 ms)"
fi
wait "$MPID"
MPID=
for pid in $CHILDREN; do
  [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status && fail "process $pid outlived the manager"
done
# Nor a shared-memory region (shm names an endpoint's region by its pid, or
# the listener's by its address): every process the manager started, logged
# or still running at the stop, ended with its endpoints closed.
PIDS="$MPID $CHILDREN $GRANDCHILDREN $(grep -o '\[\(manager\|zygote\|executor\) [0-9]*\]' \
  "$WORK/manager.err" | tr -dc '0-9\n' | sort -u | tr '\n' ' ')"
for pid in $PIDS; do
  LEFT=$(ls /dev/shm | grep "^$pid:")
  [ -z "$LEFT" ] || fail "process $pid left shared-memory regions behind:" $LEFT
done
PORT=${ADDRESS##*:}
[ -e "/dev/shm/rdmalib-127.0.0.1-$PORT" ] && fail "the listener's region rdmalib-127.0.0.1-$PORT is left"
grep 'ended:' "$WORK/manager.err"
echo "e2e: PASS"
