#!/bin/bash
# A client whose executor dies right after it got its LaunchSpec, while the
# client waits for the executor's workers: a real executor_manager
# (standalone, pool of 1) on DEVICE; the zygote's test hook
# (RFAAS_TEST_POOL_STALL_FILE saying "after-spec",
# server/executor/test_hooks.hpp) makes the first pooled executor hold
# after its LaunchSpec, before its workers connect, and the test kills it
# with SIGKILL. The
# client's allocate() must fail promptly (the manager tells it; without that
# it hangs until its 10 s workers deadline: here it must end within 5 s)
# with an error naming the allocation, the node and the cause, and the same
# rfaas::executor must then allocate again and run an invocation. That
# second executor is killed too, after its workers connected: the client's
# next invocation (2 s deadline) must not succeed, and its status and time
# are printed (closed at once on tcp; on shm, which reports no dead peer,
# timeout at the deadline).
#
#   dead_executor_test.sh MANAGER CLIENT DEVICES LIBRARY DEVICE
set -u
MANAGER=$1 CLIENT=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/lib/manager.sh
. "$ROOT/scripts/lib/manager.sh"
# shellcheck source=tests/servers/executor/standalone_manager.sh
. "$ROOT/tests/servers/executor/standalone_manager.sh"
WORK=$(mktemp -d /tmp/rfaas-deadexec.XXXXXX)
MPID='' CPID=''
cleanup() {
  for p in $CPID $MPID; do
    kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  done
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "dead_executor: FAIL: $*"
  echo "---- client"
  cat "$WORK/client.out" 2>/dev/null
  echo "---- executor_manager log"
  cat "$WORK/manager.err"
  exit 1
}

echo after-spec >"$WORK/hook-stall"
start_standalone_manager dead_executor ',
  "listen": { "host": "127.0.0.1", "port": 0 },
  "executor": { "zygote": true, "pool": 1 },
  "log": { "level": "debug" }' \
  env RFAAS_TEST_POOL_STALL_FILE="$WORK/hook-stall"
for _ in $(seq 400); do
  grep -q 'test hook: pooled executor .* after it got its LaunchSpec' "$WORK/manager.err" && break
  sleep 0.05
done
grep -q 'test hook: pooled executor' "$WORK/manager.err" || fail "the zygote did not take the test hook"
mkfifo "$WORK/client.in"
"$CLIENT" "$DEVICES" "$DEVICE" "$ADDRESS" "$LIBRARY" <"$WORK/client.in" >"$WORK/client.out" 2>&1 &
CPID=$!
exec {TO_CLIENT}>"$WORK/client.in"

# The executor holds (the hook's line), after the manager's allocation line
# named the pid it knows it by: kill that one.
PID=
for _ in $(seq 400); do
  if grep -q 'test hook: holding before the workers connect' "$WORK/manager.err"; then
    PID=$(sed -n 's/.*\] allocation [0-9a-f]*: .* executor pid \([0-9]*\).*/\1/p' \
      "$WORK/manager.err" | head -1)
    break
  fi
  kill -0 "$CPID" 2>/dev/null || fail "the client ended before its executor held"
  sleep 0.05
done
[ -n "$PID" ] || fail "the executor never reached the hook, or no allocation line"
kill -KILL "$PID" || fail "cannot kill executor $PID"
echo "dead_executor: killed executor $PID while its client waited for its workers"

# The second allocation's executor dies once its workers are connected: the
# client is past its wait and learns it from the workers' links.
for _ in $(seq 400); do
  grep -q '^second allocation ok' "$WORK/client.out" && break
  kill -0 "$CPID" 2>/dev/null || fail "the second allocation did not work"
  sleep 0.05
done
grep -q '^second allocation ok' "$WORK/client.out" || fail "no second allocation within 20 s"
PID2=$(sed -n 's/.*\] allocation [0-9a-f]*: .* executor pid \([0-9]*\).*/\1/p' \
  "$WORK/manager.err" | sed -n 2p)
[ -n "$PID2" ] || fail "no allocation line for the second allocation"
kill -KILL "$PID2" || fail "cannot kill executor $PID2"
for _ in $(seq 200); do
  grep -q "allocation .* ended: executor killed by signal 9" "$WORK/manager.err" &&
    [ "$(grep -c 'ended: executor killed by signal 9' "$WORK/manager.err")" -ge 2 ] && break
  sleep 0.05
done
echo go >&"$TO_CLIENT"
exec {TO_CLIENT}>&-

wait_gone "$CPID" 30 || fail "the client did not end within 30 s"
wait "$CPID"
rc=$?
CPID=
cat "$WORK/client.out"
[ $rc -eq 0 ] || fail "the client exited with $rc"
LINE=$(grep '^failed after ' "$WORK/client.out")
[ -n "$LINE" ] || fail "no failure line from the client"
S=${LINE#failed after }
S=${S%% *}
echo "dead_executor: allocate() failed after $S s"
awk -v s="$S" 'BEGIN { exit !(s < 5) }' ||
  fail "allocate() took $S s: it waited for its workers deadline instead of the manager's notice"
for part in 'ended before its workers connected' 'the executor on node ' 'killed by signal 9'; do
  [[ $LINE == *"$part"* ]] || fail "the error does not say '$part'"
done
AFTER=$(grep '^invocation after the kill: ' "$WORK/client.out")
[ -n "$AFTER" ] || fail "no invocation after the second executor was killed"
S2=${AFTER##* after }
S2=${S2%% *}
[[ $AFTER == *": ok after"* ]] && fail "an invocation on a killed executor succeeded"
awk -v s="$S2" 'BEGIN { exit !(s < 5) }' || fail "the invocation on a killed executor took $S2 s"
echo "dead_executor: ${AFTER#invocation after the kill: } (executor killed after its workers connected)"
echo "dead_executor: PASS"
