#!/bin/bash
# The executor pool when a pooled executor dies while it waits: a real
# executor_manager (standalone, pool of 1) on DEVICE, its pooled executor
# killed with SIGKILL, or (tcp) its accounting link reset under it with
# `ss -K`, right before an allocation. Every allocation must succeed, run its
# invocations and be accounted (the manager's "ended" line counts them), and
# the pool must serve again: the slot is refilled and the next allocation
# takes the new pooled executor.
#
#   pool_test.sh MANAGER PROBE DEVICES LIBRARY DEVICE
set -u
MANAGER=$1 PROBE=$2 DEVICES=$3 LIBRARY=$4 DEVICE=$5
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=scripts/lib/manager.sh disable=SC2154 # start_manager sets manager_*
. "$ROOT/scripts/lib/manager.sh"
WORK=$(mktemp -d /tmp/rfaas-pool.XXXXXX)
MPID=
ITERATIONS=50
cleanup() {
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

CORES=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
cat >"$WORK/manager.json" <<JSON
{
  "device_database": "$DEVICES",
  "device": "$DEVICE",
  "listen": { "host": "127.0.0.1", "port": 0 },
  "resources": { "cores": "$CORES", "memory_mib": 1024, "max_allocations": 4 },
  "executor": { "zygote": true, "pool": 1 },
  "deadlines_ms": { "shutdown_grace": 1000 },
  "log": { "level": "debug" }
}
JSON
start_manager "$WORK/manager.err" 20 "$MANAGER" --config "$WORK/manager.json" \
  --skip-resource-manager
MPID=$manager_pid
[ -n "$manager_address" ] || fail "no readiness line within 20 s"
ADDRESS=$manager_address
PORT=${ADDRESS##*:}
echo "pool: $manager_line"
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
grep -q 'no executor pool' "$WORK/manager.err" && fail "the zygote gave up its pool"
# Each discarded executor is logged once at warn.
for c in $DISCARDED; do
  n=$(grep -c "\[warning\] .*pooled executor ${c}[^0-9]" "$WORK/manager.err")
  [ "$n" -eq 1 ] || fail "the discarded pooled executor $c was logged $n time(s) at warn"
done

kill -TERM "$MPID"
wait "$MPID"
MPID=
echo "pool: PASS"
