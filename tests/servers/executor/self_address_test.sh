#!/bin/bash
# A local client names one of the executor manager's own endpoints as its
# listener in an AllocationRequest and disconnects at once, ROUNDS times in a
# row (probe scenario self-address, REQUESTS requests a round). On shm 1.17
# that crashed the manager (SIGSEGV at pthread_spin_lock in the provider,
# under Listener::next_request or RequestImpl::reject) or left its listener's
# region locked for good. Checks: the manager lives through every round,
# refuses each such request before it starts an executor, and serves a
# legitimate client afterwards; it stops on SIGTERM and leaves no process.
#
#   self_address_test.sh MANAGER PROBE DEVICES LIBRARY DEVICE [ROUNDS] [REQUESTS]
set -u
MANAGER=$1 PROBE=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5 ROUNDS=${6:-3} REQUESTS=${7:-20}
DEVICES=$(realpath "$DEVICES")
WORK=$(mktemp -d /tmp/rfaas-self-address.XXXXXX)
MPID=''
cleanup() {
  for pid in $MPID; do
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "self-address: FAIL: $*"
  echo "---- executor_manager log (last 40 lines)"
  tail -n 40 "$WORK/manager.err"
  exit 1
}
alive() {
  kill -0 "$MPID" 2>/dev/null && return 0
  wait "$MPID"
  fail "executor_manager died (status $?)"
}
# shellcheck source=bounded.sh
source "$(dirname "$0")/bounded.sh"
# shellcheck source=../../../scripts/lib/manager.sh
source "$(dirname "$0")/../../../scripts/lib/manager.sh"
# probe SECONDS OUT ARGS...: the probe, bounded (its stacks go to OUT when it
# hangs past SECONDS, and it is killed).
probe() {
  local limit=$1 out=$2
  shift 2
  bounded "$limit" "$out" "$PROBE" --devices "$DEVICES" --device "$DEVICE" --manager "$ADDRESS" \
    --library "$LIBRARY" "$@"
}

start_probe_manager self-address

T0=$(date +%s%N)
for round in $(seq "$ROUNDS"); do
  probe 60 "$WORK/self.out" --scenario self-address --rounds "$REQUESTS" --name-regions-of "$MPID"
  STATUS=$?
  alive
  [ "$STATUS" -eq 0 ] || fail "round $round: the probe exited $STATUS: $(cat "$WORK/self.out")"
done
MS=$((($(date +%s%N) - T0) / 1000000))
echo "self-address: $ROUNDS x $REQUESTS requests naming the manager's own address in $MS ms;" \
  "$(sed -n 's/^self-address: //p' "$WORK/self.out") (last round)"
# Refused at intake: no executor was started for any of them.
STARTED=$(grep -c '\] allocation [0-9a-f]*: [0-9]* core(s)' "$WORK/manager.err")
[ "$STARTED" -eq 0 ] || fail "$STARTED executor(s) started for requests naming the manager itself"
grep -q "names this executor manager's own endpoint" "$WORK/manager.err" ||
  fail "the manager logged no refusal of a request naming its own endpoint"

probe 60 "$WORK/legit.out" --scenario latency --iterations 200 ||
  fail "a legitimate client failed afterwards: $(cat "$WORK/legit.out")"
echo "self-address: the same executor_manager (pid $MPID) served a legitimate client afterwards"

kill -TERM "$MPID"
wait_gone "$MPID" 10 || fail "the manager did not stop within 10 s of SIGTERM"
wait "$MPID"
MPID=''
echo "self-address: PASS"
