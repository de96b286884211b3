# shellcheck shell=bash
# Sourced by hostile_test.sh and self_address_test.sh (after
# scripts/lib/manager.sh, whose start_manager it uses).
# shellcheck source=tests/servers/executor/standalone_manager.sh
. "$(dirname "${BASH_SOURCE[0]}")/standalone_manager.sh"
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

# start_probe_manager NAME [ADMISSION]: start a standalone manager
# (start_standalone_manager) with the hostile tests' deadlines and admission
# limits, plus ADMISSION (more JSON members of "admission", with a leading
# comma); sets MPID and ADDRESS.
start_probe_manager() {
  start_standalone_manager "$1" ',
  "listen": { "port": 0 },
  "deadlines_ms": { "shutdown_grace": 1000, "connect": 500 },
  "admission": { "max_pending": 8, "max_pending_per_peer": 6, "request_ms": 1500'"${2:-}"' }'
}
