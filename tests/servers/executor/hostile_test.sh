#!/bin/bash
# Hostile clients against a real executor_manager: malformed hellos, absurd
# and random requests, peers vanishing at each setup step (and a flooding
# process killed with SIGKILL), half-open raw TCP connections (tcp devices),
# and a flood of idle connections (a valid hello, then nothing). Checks that
# the manager lives, serves a legitimate client during and after the flood,
# returns near its memory and descriptor baseline once the flood is gone,
# stops on SIGTERM and leaves no process behind. Requesters killed right
# after their request check that an answer to a dead process holds the
# manager's loop no longer than deadlines_ms.connect.
#
#   hostile_test.sh MANAGER PROBE DEVICES LIBRARY DEVICE FLOOD_DEVICE FLOOD_SIZE [NO_VANISH_REASON]
#
# FLOOD_DEVICE is the device entry the flood connects from (a second loopback
# address for IP providers, so that the flood is one peer and the legitimate
# client another). NO_VANISH_REASON, when given, leaves out the peers that
# vanish right after connecting and right after requesting (printed as the
# reason; the flood killed with SIGKILL still runs).
set -u
MANAGER=$1 PROBE=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5 FLOOD_DEVICE=$6 FLOOD=$7 NO_VANISH=${8:-}
DEVICES=$(realpath "$DEVICES")
WORK=$(mktemp -d /tmp/rfaas-hostile.XXXXXX)
MPID='' FPID='' KPID=''
cleanup() {
  for pid in $FPID $KPID $MPID; do
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "hostile: FAIL: $*"
  echo "---- executor_manager log (last 60 lines)"
  tail -n 60 "$WORK/manager.err"
  exit 1
}
rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$MPID/status"; }
fds() { ls "/proc/$MPID/fd" | wc -l; }
alive() { kill -0 "$MPID" 2>/dev/null || fail "executor_manager died"; }
# shellcheck source=bounded.sh
source "$(dirname "$0")/bounded.sh"
# shellcheck source=../../../scripts/lib/manager.sh
source "$(dirname "$0")/../../../scripts/lib/manager.sh"
legit() { # a normal lease with a few invocations; its output goes to $1
  timeout 60 "$PROBE" --devices "$DEVICES" --device "$DEVICE" --manager "$ADDRESS" \
    --library "$LIBRARY" --scenario latency --iterations 200 >"$WORK/$1" 2>&1
}
allocations_ended() {
  for _ in $(seq 100); do
    # Only the start lines ("allocation ID: N core(s), ..."): the manager's
    # warnings about an allocation ("allocation ID: executor ignored SIGTERM")
    # name it the same way.
    STARTED=$(grep -c '\] allocation [0-9a-f]*: [0-9]* core(s)' "$WORK/manager.err")
    ENDED=$(grep -c '\] allocation [0-9a-f]* ended: ' "$WORK/manager.err")
    [ "$STARTED" -eq "$ENDED" ] && return 0
    sleep 0.1
  done
  fail "$STARTED allocation(s) started, $ENDED ended"
}

start_probe_manager hostile ', "stats_interval_s": 1'

# Baseline: after one lease, so that what the first lease allocates for good
# (zygote pipes, provider pools) is part of it.
legit warmup.out || fail "the warm-up lease failed: $(cat "$WORK/warmup.out")"
allocations_ended
BASE_RSS=$(rss_kb) BASE_FDS=$(fds)
echo "hostile: baseline RSS $BASE_RSS KiB, $BASE_FDS descriptors"

# Malformed hellos, absurd and random requests, vanishing peers.
VANISH=()
if [ -n "$NO_VANISH" ]; then
  echo "hostile: peers vanishing right after connecting or requesting: skipped: $NO_VANISH"
  VANISH=(--no-vanish)
fi
bounded 120 "$WORK/attack.out" "$PROBE" --devices "$DEVICES" --device "$DEVICE" \
  --manager "$ADDRESS" --library "$LIBRARY" --scenario attack "${VANISH[@]}" ||
  fail "attack scenario: $(grep -v '^PASS' "$WORK/attack.out")"
grep -E '^(PASS|random|vanishing)' "$WORK/attack.out" | sed 's/^/hostile: attack: /'
alive

# Requests that name the manager's own endpoints as the client's listener:
# self_address_test.sh (the manager refuses them before any fabric call).
tr '\0' ' ' <"/proc/$MPID/cmdline" | grep -q "^$MANAGER " ||
  fail "process $MPID is no longer the executor_manager"

# A write-with-immediate aimed at the guard page between the client's own
# input slots: the provider copies it into the executor's memory itself
# (shm, tcp and tcp;ofi_rxm alike) and faulted there, outside the crash guard,
# which passed the fault on to a library handler that exits with 1 ("setup
# failed"). Now the crash guard lets the copy finish into the guard page, and
# the worker refuses it: Shutdown{bad_request} to the client (the probe
# checks it), a log line naming the write, exit ExitRemoteWriteFault (6).
allocations_ended
bounded 60 "$WORK/guard.out" "$PROBE" --devices "$DEVICES" --device "$DEVICE" \
  --manager "$ADDRESS" --library "$LIBRARY" --scenario guard-write ||
  { alive; fail "guard-write scenario: $(cat "$WORK/guard.out")"; }
alive
allocations_ended
sed -n 's/^guard-write: /hostile: guard-write: /p' "$WORK/guard.out"
grep -q 'the client wrote outside its input slots (into the guard page at byte' \
  "$WORK/manager.err" || fail "no executor line names the write into a guard page"
ENDED_LINE=$(grep '\] allocation [0-9a-f]* ended: ' "$WORK/manager.err" | tail -n 1)
echo "hostile: guard-write: ${ENDED_LINE#*\] }"
case "$ENDED_LINE" in
*"setup failed"*) fail "the allocation its client ended by a write outside its slots was logged as a failed setup" ;;
*"code 6"* | *"outside its input slots"*) ;;
*) fail "the allocation ended by a write outside its slots: unexpected end: $ENDED_LINE" ;;
esac

# Requesters killed (SIGKILL) right after their request left: the answer goes
# to a dead process. Where the provider already took the peer for gone
# (tcp;ofi_rxm reconnects, answering "try again"), the manager's loop waits
# for that post at most deadlines_ms.connect (500 ms here), so a request
# right after is answered within 3 s, not after the 5 s default
# post deadline. Whether an answer finds the provider reconnecting is a
# race; the manager logs those that did ("cannot send the
# AllocationResponse"), which says whether this run exercised the bound.
STALLS_BEFORE=$(grep -c 'cannot send the AllocationResponse' "$WORK/manager.err")
SLOWEST=0
for i in 1 2 3 4 5 6; do
  "$PROBE" --devices "$DEVICES" --device "$DEVICE" --manager "$ADDRESS" --library "$LIBRARY" \
    --scenario killed-requester >"$WORK/killed.out" 2>&1
  STATUS=$?
  [ "$STATUS" -eq 137 ] || fail "the killed requester exited $STATUS, not by SIGKILL: $(cat "$WORK/killed.out")"
  bounded 30 "$WORK/refused.out" "$PROBE" --devices "$DEVICES" --device "$DEVICE" \
    --manager "$ADDRESS" --library "$LIBRARY" --scenario refused ||
    fail "a request after a killed requester: $(cat "$WORK/refused.out")"
  MS=$(sed -n 's/^refused request answered in \([0-9]*\) ms$/\1/p' "$WORK/refused.out")
  [ -n "$MS" ] || fail "no answer time from the probe: $(cat "$WORK/refused.out")"
  [ "$MS" -gt "$SLOWEST" ] && SLOWEST=$MS
done
STALLS=$(($(grep -c 'cannot send the AllocationResponse' "$WORK/manager.err") - STALLS_BEFORE))
echo "hostile: 6 requesters killed before their answer: the manager logged $STALLS answer(s) it" \
  "could not send (rate-limited log; 0: no answer found the provider reconnecting in this run);" \
  "the next request was answered within $SLOWEST ms at worst"
[ "$SLOWEST" -lt 3000 ] ||
  fail "a request waited $SLOWEST ms behind an answer to a killed requester (deadlines_ms.connect is 500)"
alive

# Half-open: raw TCP connections that never say anything (IP providers).
RAW=()
HOST=${ADDRESS%:*} PORT=${ADDRESS##*:}
PROVIDER=$(echo "$manager_line" | awk '{print $4}')
if [ "$PROVIDER" != shm ] && [[ "$HOST" =~ ^[0-9.]+$ ]]; then
  for _ in $(seq 50); do
    exec {fd}<>"/dev/tcp/$HOST/$PORT" && RAW+=("$fd")
  done
  echo "hostile: ${#RAW[@]} half-open raw TCP connections"
fi

# The flood: idle connections held open while a legitimate client leases.
mkfifo "$WORK/hold" "$WORK/hold2"
"$PROBE" --devices "$DEVICES" --device "$FLOOD_DEVICE" --manager "$ADDRESS" --library "$LIBRARY" \
  --scenario flood --flood "$FLOOD" <"$WORK/hold" >"$WORK/flood.out" 2>&1 &
FPID=$!
exec {HOLD}>"$WORK/hold"
for _ in $(seq 600); do
  grep -q '^flood: .* open' "$WORK/flood.out" && break
  kill -0 "$FPID" 2>/dev/null || fail "the flood client died: $(cat "$WORK/flood.out")"
  sleep 0.1
done
grep -q '^flood: .* open' "$WORK/flood.out" || fail "the flood did not finish within 60 s"
echo "hostile: $(grep '^flood: .* open' "$WORK/flood.out")"
alive
FLOOD_RSS=$(rss_kb) FLOOD_FDS=$(fds)
echo "hostile: during the flood RSS $FLOOD_RSS KiB, $FLOOD_FDS descriptors"
legit during.out || fail "a legitimate client failed during the flood: $(cat "$WORK/during.out")"
echo "hostile: a legitimate client was served during the flood"

# A second flooding process vanishes (SIGKILL) while it holds its connections.
"$PROBE" --devices "$DEVICES" --device "$FLOOD_DEVICE" --manager "$ADDRESS" --library "$LIBRARY" \
  --scenario flood --flood $((FLOOD / 2 < 16 ? FLOOD / 2 : 16)) <"$WORK/hold2" >"$WORK/flood2.out" 2>&1 &
KPID=$!
exec {HOLD2}>"$WORK/hold2"
for _ in $(seq 300); do
  grep -q '^flood: .* open' "$WORK/flood2.out" && break
  sleep 0.1
done
kill -KILL "$KPID"
wait "$KPID" 2>/dev/null
KPID=
exec {HOLD2}>&-

# End the flood; the half-open sockets go too.
exec {HOLD}>&-
wait "$FPID" || fail "the flood client failed: $(cat "$WORK/flood.out")"
FPID=
for fd in "${RAW[@]}"; do
  exec {fd}>&-
done
alive
# Every pending connection must be gone (deadline, eviction or close). The
# manager logs the count within admission.stats_interval_s (1 s here) of a
# change; it may have reached 0 before the flood ended (evictions, deadlines),
# and then it logs nothing more. So: the latest count is 0, and it was logged
# after this point or nothing has been logged for longer than an interval.
STATS='admission: [0-9]* pending now'
MARK=$(grep -c "$STATS" "$WORK/manager.err")
GONE=
for i in $(seq 200); do
  if grep "$STATS" "$WORK/manager.err" | tail -n 1 | grep -q 'admission: 0 pending now' &&
    { [ "$(grep -c "$STATS" "$WORK/manager.err")" -gt "$MARK" ] || [ "$i" -gt 15 ]; }; then
    GONE=1
    break
  fi
  sleep 0.1
done
[ -n "$GONE" ] || fail "pending connections remained after the flood ended: $(grep "$STATS" \
  "$WORK/manager.err" | tail -n 1)"

legit after.out || fail "a legitimate client failed after the flood: $(cat "$WORK/after.out")"
allocations_ended
AFTER_RSS=$(rss_kb) AFTER_FDS=$(fds)
echo "hostile: after the flood RSS $AFTER_RSS KiB, $AFTER_FDS descriptors"
# Generous bounds: the allocator keeps some freed memory, providers keep pools.
[ "$AFTER_FDS" -le $((BASE_FDS + 8)) ] ||
  fail "$AFTER_FDS descriptors after the flood, $BASE_FDS before"
# AddressSanitizer keeps freed memory in its quarantine (256 MiB by default)
# and its allocator's caches, so there RSS does not come back by design
# (tcp;ofi_rxm's flood: ~100 MiB before, ~500 MiB after); its leak check at
# the manager's exit still catches memory that is lost.
if ldd "$MANAGER" 2>/dev/null | grep -q libasan; then
  echo "hostile: RSS bound not checked: the manager is built with AddressSanitizer"
else
  [ "$AFTER_RSS" -le $((BASE_RSS * 2 + 16384)) ] ||
    fail "RSS $AFTER_RSS KiB after the flood, $BASE_RSS KiB before"
fi
grep -q 'admission: refusing a connection from\|admission: .*closing the oldest' \
  "$WORK/manager.err" || fail "no admission limit was logged during the flood"

# SIGTERM under a new flood: the manager stops, and nothing stays behind.
mkfifo "$WORK/hold3"
"$PROBE" --devices "$DEVICES" --device "$FLOOD_DEVICE" --manager "$ADDRESS" --library "$LIBRARY" \
  --scenario flood --flood $((FLOOD / 2 < 32 ? FLOOD / 2 : 32)) <"$WORK/hold3" >"$WORK/flood3.out" 2>&1 &
FPID=$!
exec {HOLD3}>"$WORK/hold3"
for _ in $(seq 600); do
  grep -q '^flood: .* open' "$WORK/flood3.out" && break
  sleep 0.1
done
CHILDREN=$(pgrep -P "$MPID" | tr '\n' ' ')
T0=$(date +%s%N)
kill -TERM "$MPID"
wait_gone "$MPID" 5 || fail "executor_manager did not stop within 5 s of SIGTERM"
echo "hostile: executor_manager stopped $((($(date +%s%N) - T0) / 1000000)) ms after SIGTERM" \
  "under a flood"
wait "$MPID"
RC=$?
MPID=
[ "$RC" -eq 0 ] || fail "executor_manager exited with $RC"
exec {HOLD3}>&-
wait "$FPID"
FPID=
for pid in $CHILDREN; do
  [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" &&
    fail "process $pid outlived the manager"
done
grep 'admission: .* pending now' "$WORK/manager.err" | tail -n 1 | sed 's/^/hostile: /'
echo "hostile: PASS"
