#!/bin/bash
# The executor pool when a pooled executor dies while it waits: a real
# executor_manager (standalone, pool of 1) on DEVICE, its pooled executor
# killed with SIGKILL, or (tcp) its accounting link reset under it with
# `ss -K`, right before an allocation. Every allocation must succeed, run its
# invocations and be accounted (the manager's "ended" line counts them), and
# the pool must serve again: the slot is refilled and the next allocation
# takes the new pooled executor.
#
# With "edges", then the pool's edge cases, each made to happen with the zygote's test-only
# hooks (server/executor/test_hooks.hpp), every wait on a log line:
# * a pooled executor that never comes up (stopped before its fabric and
#   link, or after its link, before it reported in to the zygote):
#   allocations meanwhile get a fresh fork, and within
#   deadlines_ms.executor_start it is let go (killed) and replaced, logged
#   with its pid and why;
# * a pooled executor killed between the zygote's last look at it and the
#   hand-over of an allocation: the allocation goes to another executor and
#   runs, accounted;
# * pooled executors that fail at once, every time: refilled with back-off,
#   one warning for the burst, and the pool comes back once they stop failing;
# * a zygote that exits at once every time it is restarted: restarted with
#   back-off, one error for the burst, and allocations work once it stays up.
#
#
# With "midconnect", only this (a reliable-datagram device such as lo-rxm;
# needs strace): a pooled executor stuck in the middle of connecting its
# accounting link (the manager has its hello; the executor, held by strace
# in the accept of the manager's connection back to it, never takes the
# answer). Allocations meanwhile must be served: the manager's answer to it
# used to be waited for in its loop, and every client timed out for
# workers_connected (10 s).
#
#   pool_test.sh MANAGER PROBE DEVICES LIBRARY DEVICE [edges|midconnect]
set -u
MANAGER=$1 PROBE=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5 EDGES=${6:-}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=scripts/lib/manager.sh
. "$ROOT/scripts/lib/manager.sh"
# shellcheck source=tests/servers/executor/standalone_manager.sh
. "$(dirname "$0")/standalone_manager.sh"
WORK=$(mktemp -d /tmp/rfaas-pool.XXXXXX)
MPID=
STRACE=
ITERATIONS=50
cleanup() {
  [ -n "$STRACE" ] && kill "$STRACE" 2>/dev/null
  if [ -n "$MPID" ] && kill -0 "$MPID" 2>/dev/null; then
    kill -KILL "$MPID" 2>/dev/null
  fi
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "pool: FAIL: $*"
  echo "---- executor_manager log"
  cat "$WORK/manager.err"
  exit 1
}

# The test hooks (server/executor/test_hooks.hpp) act only once their file exists.
start_standalone_manager pool ',
  "listen": { "host": "127.0.0.1", "port": 0 },
  "executor": { "zygote": true, "pool": 1 },
  "deadlines_ms": { "shutdown_grace": 1000, "executor_start": 3000 },
  "log": { "level": "debug" }' \
  env RFAAS_TEST_POOL_STALL_FILE="$WORK/hook-stall" RFAAS_TEST_POOL_FAIL_FILE="$WORK/hook-fail" \
  RFAAS_TEST_HANDOVER_HOLD_FILE="$WORK/hook-hold" RFAAS_TEST_ZYGOTE_EXIT_FILE="$WORK/hook-zygote-exit"
PORT=${ADDRESS##*:}
ZYGOTE=$(pgrep -P "$MPID" | head -1)
[ -n "$ZYGOTE" ] || fail "no zygote under the manager"

# wait_pool N: the pool is full (the zygote has said so N times: once at the
# start, again after each executor lost) with an executor not seen before
# whose accounting link is up. Prints the pid the manager knows it by (the
# zygote's child: with the namespaces sandbox the process in between), then
# the executor's own pid.
SEEN=" "
wait_pool() {
  local n=$1 child spare
  for _ in $(seq 300); do
    if [ "$(grep -c 'pooled executor(s) wait' "$WORK/manager.err")" -ge "$n" ]; then
      for child in $(pgrep -P "$ZYGOTE"); do
        [[ $SEEN == *" $child "* ]] && continue
        grep -q "pooled executor $child: accounting link connected ahead" "$WORK/manager.err" ||
          continue
        spare=$child
        [ "$(cat /proc/"$child"/comm 2>/dev/null)" = executor-spare ] ||
          spare=$(pgrep -P "$child" -x executor-spare)
        [ -n "$spare" ] || continue
        echo "$child $spare"
        return 0
      done
    fi
    sleep 0.05
  done
  return 1
}

# allocate NAME: one allocation with the probe (ITERATIONS echo calls); it
# must succeed and end accounted. Sets LINE to its allocation line.
allocate() {
  local name=$1 before id ended
  before=$(grep -c '\] allocation [0-9a-f]*: [0-9]* core(s)' "$WORK/manager.err")
  timeout 60 "$PROBE" --devices "$DEVICES" --device "$DEVICE" --manager "$ADDRESS" \
    --library "$LIBRARY" --scenario latency --iterations $ITERATIONS >"$WORK/$name.out" 2>&1 ||
    { cat "$WORK/$name.out"; fail "$name: the allocation failed"; }
  LINE=$(grep '\] allocation [0-9a-f]*: [0-9]* core(s)' "$WORK/manager.err" | sed -n "$((before + 1))p")
  id=${LINE#*] allocation }
  id=${id%%:*}
  [ -n "$id" ] || fail "$name: no allocation line"
  for _ in $(seq 100); do
    ended=$(grep "\] allocation $id ended: " "$WORK/manager.err")
    [ -n "$ended" ] && break
    sleep 0.05
  done
  [ -n "$ended" ] || fail "$name: allocation $id never ended"
  # The probe's warm-up calls count too: at least ITERATIONS.
  local calls=${ended##*invocations }
  [ "${calls:-0}" -ge $ITERATIONS ] 2>/dev/null ||
    fail "$name: allocation $id was not accounted ($ended)"
  echo "pool: $name: ${LINE#*\] } -> $calls invocation(s) accounted"
}

if [ "$EDGES" = midconnect ]; then
  read -r CHILD _ < <(wait_pool 1)
  [ -n "$CHILD" ] || fail "midconnect: the pool never filled"
  SEEN+="$CHILD "
  # The refill after this allocation stops itself before its fabric opens.
  echo before >"$WORK/hook-stall"
  allocate midconnect-trigger
  for _ in $(seq 200); do
    STALLED=$(grep -oE 'test hook: pooled executor [0-9]+ stops' "$WORK/manager.err" | grep -oE '[0-9]+')
    [ -n "$STALLED" ] && [ "$(awk '{print $3}' /proc/"$STALLED"/stat 2>/dev/null)" = T ] && break
    sleep 0.05
  done
  [ -n "$STALLED" ] || fail "midconnect: no pooled executor took the stall hook"
  # Once continued, it connects; its accept of the manager's connection back
  # to it (tcp;ofi_rxm) takes 20 s: the manager has its hello and cannot
  # deliver the answer.
  strace -f -qq -o "$WORK/strace.out" -e trace=accept,accept4 \
    -e inject=accept,accept4:delay_enter=20000000 -p "$STALLED" 2>"$WORK/strace.err" &
  STRACE=$!
  for _ in $(seq 100); do
    [ "$(awk '/^TracerPid:/ {print $2}' /proc/"$STALLED"/status 2>/dev/null)" = "$STRACE" ] && break
    sleep 0.05
  done
  if [ "$(awk '/^TracerPid:/ {print $2}' /proc/"$STALLED"/status 2>/dev/null)" != "$STRACE" ]; then
    echo "pool: midconnect: SKIPPED: strace cannot trace the pooled executor here:" \
      "$(cat "$WORK/strace.err")"
    exit 77
  fi
  kill -CONT "$STALLED"
  for _ in $(seq 200); do
    grep -q 'accept' "$WORK/strace.out" && break
    sleep 0.05
  done
  grep -q 'accept' "$WORK/strace.out" ||
    fail "midconnect: the pooled executor $STALLED never accepted the manager's connection"
  START=$(date +%s%N)
  allocate midconnect-meanwhile
  MS=$((($(date +%s%N) - START) / 1000000))
  [[ $LINE =~ executor\ pid\ $STALLED( |$) ]] &&
    fail "midconnect: an allocation took the pooled executor $STALLED stuck in its connect"
  echo "pool: midconnect: an allocation served in $MS ms while the pooled executor $STALLED is stuck in its connect"
  # Let go, it takes the answer (still posted until workers_connected) and
  # joins the pool, or the zygote lets it go after executor_start; either
  # way the manager serves on.
  kill "$STRACE" 2>/dev/null
  wait "$STRACE" 2>/dev/null
  STRACE=
  allocate midconnect-after
  kill -TERM "$MPID"
  wait "$MPID"
  MPID=
  echo "pool: PASS"
  exit 0
fi

# The pooled executor is killed; the allocation right after races the
# zygote's reaping of it.
read -r CHILD SPARE < <(wait_pool 1)
[ -n "$SPARE" ] || fail "the pool never filled"
SEEN+="$CHILD "
DISCARDED=$CHILD
kill -KILL "$SPARE"
allocate killed
read -r CHILD _ < <(wait_pool 2)
[ -n "$CHILD" ] || fail "the pool was not refilled after its executor was killed"
SEEN+="$CHILD "
allocate refilled
[[ $LINE == *"(pooled)" ]] || fail "the allocation after the refill did not take the pooled executor"
RESET=no
if [[ $DEVICE == *tcp* ]] && command -v ss >/dev/null; then
  RESET=yes
  # The pooled executor lives, its accounting link is reset under it: the
  # manager must discard it rather than bind it.
  read -r CHILD _ < <(wait_pool 2)
  [ -n "$CHILD" ] || fail "the pool was not refilled after an allocation"
  SEEN+="$CHILD "
  ss -K dst 127.0.0.1 dport = "$PORT" >/dev/null 2>&1 ||
    fail "ss -K cannot reset the pooled executor's link"
  for _ in $(seq 100); do
    grep -q "the accounting link of the pooled executor $CHILD ended" "$WORK/manager.err" && break
    sleep 0.05
  done
  if grep -q "the accounting link of the pooled executor $CHILD ended" "$WORK/manager.err"; then
    DISCARDED+=" $CHILD"
  else
    # A kernel without CONFIG_INET_DIAG_DESTROY leaves the socket as it was.
    if ss -tnH state established dst 127.0.0.1 dport = "$PORT" | grep -q .; then
      echo "pool: skipping the link reset: ss -K did not reset the link (this kernel cannot" \
        "destroy sockets: CONFIG_INET_DIAG_DESTROY)"
      RESET=no
    else
      fail "the manager did not see the pooled executor's link end"
    fi
  fi
fi
if [ "$RESET" = yes ]; then
  allocate link-reset
  read -r CHILD _ < <(wait_pool 3)
  [ -n "$CHILD" ] || fail "the pool was not refilled after its link was reset"
  allocate link-refilled
  [[ $LINE == *"(pooled)" ]] || fail "the allocation after the link's refill was not pooled"
elif [[ $DEVICE != *tcp* ]] || ! command -v ss >/dev/null; then
  echo "pool: skipping the link reset: it needs ss -K and a tcp device"
fi

if [ "$EDGES" != edges ]; then
  grep -q 'no executor pool' "$WORK/manager.err" && fail "the zygote gave up its pool"
  for c in $DISCARDED; do
    n=$(grep -c "\[warning\] .*pooled executor ${c}[^0-9]" "$WORK/manager.err")
    [ "$n" -eq 1 ] || fail "the discarded pooled executor $c was logged $n time(s) at warn"
  done
  kill -TERM "$MPID"
  wait "$MPID"
  MPID=
  echo "pool: PASS"
  exit 0
fi

# wait_line PATTERN [STEPS]: wait (STEPS of 50 ms, default 10 s) until the manager's log has
# a line matching PATTERN (grep -E) after line $MARK; prints the first.
MARK=0
mark() { MARK=$(wc -l <"$WORK/manager.err"); }
since() { tail -n +"$((MARK + 1))" "$WORK/manager.err"; }
wait_line() {
  local pattern=$1 line
  for _ in $(seq "${2:-200}"); do
    line=$(since | grep -E -m1 -- "$pattern") && { echo "$line"; return 0; }
    sleep 0.05
  done
  return 1
}
# ms_of LINE: the time of day in a log line ([YYYY-MM-DD HH:MM:SS.mmm] or
# [HH:MM:SS.mmm]) in milliseconds.
ms_of() {
  local t
  t=$(grep -oE '[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}' <<<"$1" | head -1)
  echo $(((10#${t:0:2} * 3600 + 10#${t:3:2} * 60 + 10#${t:6:2}) * 1000 + 10#${t:9:3}))
}
WAITS=$(grep -c 'pooled executor(s) wait' "$WORK/manager.err")
# Pooled executors let go while stuck: each must be gone by the end (a
# stopped one is killed 2 s after it was let go).
STUCK=

# 1. A pooled executor that never comes up: the next member forked after an
# allocation took one stops (or hangs) (stall NAME WHERE LOST: WHERE is what the
# stall hook's file says, LOST the pattern of the line that lets it go).
# Allocations meanwhile fork their own; within executor_start (3 s) it is
# let go, logged with its pid and why, and the pool is refilled.
stall() {
  local name=$1 where=$2 lost=$3 stalled given_up
  mark
  echo "$where" >"$WORK/hook-stall"
  allocate "$name-trigger"
  stalled=$(wait_line 'test hook: pooled executor [0-9]+ stops' | grep -oE 'executor [0-9]+ stops')
  stalled=${stalled//[!0-9]/}
  [ -n "$stalled" ] || fail "$name: no pooled executor took the stall hook"
  SEEN+="$stalled "
  if [ "$where" = after-link ]; then
    wait_line "pooled executor $stalled: accounting link connected ahead" >/dev/null ||
      fail "$name: the link of the pooled executor $stalled never came up"
  else
    for _ in $(seq 100); do
      [ "$(awk '{print $3}' /proc/"$stalled"/stat 2>/dev/null)" = T ] && break
      sleep 0.05
    done
  fi
  # Meanwhile a fresh fork, or (where the allocation that triggered it took
  # longer than executor_start) the stuck one's replacement: never the stuck one.
  allocate "$name-meanwhile"
  [[ $LINE =~ executor\ pid\ $stalled( |$) ]] &&
    fail "$name: an allocation took the pooled executor $stalled that never came up"
  given_up=$(wait_line "pooled executor $stalled $lost within 3000 ms" 120) ||
    fail "$name: the pooled executor $stalled was not let go within executor_start (3 s)"
  echo "pool: $name: ${given_up#*] }"
  STUCK+=" $stalled"
  DISCARDED+=" $stalled"
  WAITS=$((WAITS + 1))
  read -r CHILD _ < <(wait_pool "$WAITS")
  [ -n "$CHILD" ] || fail "$name: the pool was not refilled"
}
read -r CHILD _ < <(wait_pool "$WAITS")
[ -n "$CHILD" ] || fail "stall: the pool is not full"
SEEN+="$CHILD "
# Stopped before its fabric and link: the zygote's bound and the manager's
# (on the link) are the same, whichever is first names it.
stall stall before "(was given up by the manager: its accounting link did not come up|did not report ready)"
# 1b. Hung once its link came up, before it reported in: the manager sees
# a live link, so the zygote's own bound lets it go.
stall stall-after-link after-link "did not report ready"

# 2. A pooled executor killed between the zygote's look and the hand-over.
read -r CHILD SPARE < <(wait_pool "$WAITS")
[ -n "$SPARE" ] || fail "hand-over: the pool is not full"
mark
touch "$WORK/hook-hold"
allocate handover &
ALLOC=$!
wait_line "test hook: holding the hand-over of allocation [0-9a-f]+ to the pooled executor $CHILD " >/dev/null ||
  { kill "$ALLOC" 2>/dev/null; fail "hand-over: the zygote did not hold the hand-over to $CHILD"; }
kill -KILL "$SPARE"
wait "$ALLOC" || fail "hand-over: the allocation whose executor died as it took it failed"
SEEN+="$CHILD "
REPLACED=$(wait_line "executor pid [0-9]+.* replaces $CHILD, which died as it took the allocation") ||
  fail "hand-over: the manager did not say which executor replaced $CHILD"
echo "pool: hand-over: ${REPLACED#*] }"
wait_line "pooled executor $CHILD died as it took allocation" >/dev/null ||
  fail "hand-over: the zygote did not log the executor that died as it took the allocation"
DISCARDED+=" $CHILD"
WAITS=$((WAITS + 1))
read -r CHILD _ < <(wait_pool "$WAITS")
[ -n "$CHILD" ] || fail "hand-over: the pool was not refilled"
SEEN+="$CHILD "
# A pooled executor taken ends the burst of losses (one warning per burst).
allocate handover-refilled
[[ $LINE == *"(pooled)" ]] || fail "hand-over: the allocation after the refill was not pooled"

# 3. Pooled executors that fail at once, every time: the first loss is
# refilled at once, then 100, 200, 400 ms... apart; one warning for them all.
read -r CHILD SPARE < <(wait_pool "$WAITS")
[ -n "$SPARE" ] || fail "back-off: the pool is not full"
SEEN+="$CHILD "
mark
touch "$WORK/hook-fail"
kill -KILL "$SPARE"
FIRST=$(wait_line 'test hook: pooled executor [0-9]+ fails at once') ||
  fail "back-off: no pooled executor took the failure hook"
for _ in $(seq 100); do
  [ "$(since | grep -c 'test hook: pooled executor [0-9]* fails at once')" -ge 4 ] && break
  sleep 0.05
done
FOURTH=$(since | grep 'test hook: pooled executor [0-9]* fails at once' | sed -n 4p)
[ -n "$FOURTH" ] || fail "back-off: fewer than 4 failing pooled executors in 5 s"
# 100 + 200 + 400 ms of back-off between the first and the fourth.
GAP=$(($(ms_of "$FOURTH") - $(ms_of "$FIRST")))
[ "$GAP" -ge 650 ] || fail "back-off: 4 failing pooled executors within $GAP ms (no back-off)"
allocate backoff-meanwhile
WARNS=$(since | grep -c '\[warning\] .*zygote: .*pooled executor')
[ "$WARNS" -eq 1 ] || fail "back-off: $WARNS warnings for one burst of failing pooled executors"
rm -f "$WORK/hook-fail"
WAITS=$((WAITS + 1))
read -r CHILD _ < <(wait_pool "$WAITS")
[ -n "$CHILD" ] || fail "back-off: the pool did not come back once its executors stopped failing"
echo "pool: back-off: 4 failing pooled executors over $GAP ms; $(since | grep -m1 -o 'pooled executor(s) wait.*')"
allocate backoff-recovered
[[ $LINE == *"(pooled)" ]] || fail "back-off: the allocation after the recovery was not pooled"

# 4. A zygote that exits at once each time it is restarted: restarted at
# once, then 200, 400, 800 ms... apart; one error for the burst.
mark
touch "$WORK/hook-zygote-exit"
kill -KILL "$ZYGOTE"
for _ in $(seq 200); do
  [ "$(since | grep -c 'test hook: exiting right after it became ready')" -ge 3 ] && break
  sleep 0.05
done
[ "$(since | grep -c 'test hook: exiting right after it became ready')" -ge 3 ] ||
  fail "zygote back-off: fewer than 3 restarts within 10 s"
ERRORS=$(since | grep -c '\[error\] .*zygote')
[ "$ERRORS" -eq 1 ] || fail "zygote back-off: $ERRORS errors for one burst of zygote deaths"
for d in 200 400; do
  # From the manager's line that says so to the restart.
  SAID=$(since | grep -m1 "restarting it in $d ms") || fail "zygote back-off: no restart after $d ms"
  NEXT=$(since | grep -A100000 -F -- "$SAID" | grep -m1 'restarting the executor zygote') ||
    fail "zygote back-off: no zygote started after \"${SAID#*] }\""
  GAP=$(($(ms_of "$NEXT") - $(ms_of "$SAID")))
  [ "$GAP" -ge $((d - 20)) ] || fail "zygote back-off: restarted $GAP ms after \"${SAID#*] }\""
done
rm -f "$WORK/hook-zygote-exit"
mark
# A zygote that got past the hook: its pool filled.
UP=$(wait_line '\[zygote [0-9]+\] .*pooled executor\(s\) wait' 300) ||
  fail "zygote back-off: the zygote never came back"
ZYGOTE=$(grep -oE '\[zygote [0-9]+\]' <<<"$UP" | grep -oE '[0-9]+')
echo "pool: zygote back-off: 3 restarts, then: ${UP#*] }"
SEEN=" "
read -r CHILD _ < <(wait_pool 1)
[ -n "$CHILD" ] || fail "zygote back-off: the new zygote's pool never filled"
allocate zygote-recovered
[[ $LINE == *"(pooled)" ]] || fail "zygote back-off: the allocation after the recovery was not pooled"

for p in $STUCK; do
  for _ in $(seq 100); do
    [ -e /proc/"$p" ] || break
    sleep 0.05
  done
  [ -e /proc/"$p" ] && fail "the pooled executor $p, let go while stuck, was never ended"
done
grep -q 'no executor pool' "$WORK/manager.err" && fail "the zygote gave up its pool"
# Each discarded executor is logged by the zygote, at warn at most once (the
# first of a burst of losses; the rest at debug).
for c in $DISCARDED; do
  n=$(grep -c "\[warning\] .*pooled executor ${c}[^0-9]" "$WORK/manager.err")
  [ "$n" -le 1 ] || fail "the discarded pooled executor $c was logged $n time(s) at warn"
  grep -q "zygote: the pooled executor $c " "$WORK/manager.err" ||
    fail "the discarded pooled executor $c was not logged"
done

kill -TERM "$MPID"
wait "$MPID"
MPID=
echo "pool: PASS"
