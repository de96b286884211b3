# shellcheck shell=bash
# Sourced by hostile_test.sh and self_address_test.sh (after
# scripts/lib/manager.sh, whose start_manager it uses).
#
# bounded SECONDS OUT COMMAND...: run COMMAND with its output in OUT; past the
# deadline, append every thread's stack (gdb, where installed) to OUT, so that
# a hang says where it was, then kill it. Returns COMMAND's status, 124 on timeout.
bounded() {
  local limit=$1 out=$2 pid
  shift 2
  "$@" >"$out" 2>&1 &
  pid=$!
  for _ in $(seq $((limit * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "---- still running after ${limit} s: the stacks of ${1##*/} (pid $pid)" >>"$out"
    if command -v gdb >/dev/null; then
      timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(#|Thread)' >>"$out"
    else
      echo "(gdb is not installed)" >>"$out"
    fi
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 124
  fi
  wait "$pid"
}

# start_probe_manager NAME [ADMISSION]: write $WORK/manager.json for a
# standalone manager on $DEVICE with the cores this process may use, its
# admission limits plus ADMISSION (more JSON members, with a leading comma),
# start it with its log in $WORK/manager.err, and set MPID and ADDRESS.
# shellcheck disable=SC2034,SC2154 # sets the caller's globals from start_manager's
start_probe_manager() {
  local name=$1 admission=${2:-}
  local cores
  cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  cat >"$WORK/manager.json" <<JSON
{
  "device_database": "$DEVICES",
  "device": "$DEVICE",
  "listen": { "port": 0 },
  "resources": { "cores": "$cores", "memory_mib": 1024, "max_allocations": 4 },
  "deadlines_ms": { "shutdown_grace": 1000, "connect": 500 },
  "admission": { "max_pending": 8, "max_pending_per_peer": 6, "request_ms": 1500$admission }
}
JSON
  start_manager "$WORK/manager.err" 20 "$MANAGER" --config "$WORK/manager.json" \
    --skip-resource-manager
  MPID=$manager_pid
  [ -n "$manager_address" ] || fail "no readiness line within 20 s"
  ADDRESS=$manager_address
  echo "$name: $manager_line"
}
