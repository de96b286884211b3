# shellcheck shell=bash
# Sourced by the scripts that start an executor_manager or a resource_manager
# and talk to it (scripts/main-job.sh, benchmarks/run-rfaas-benchmarks.sh,
# benchmarks/run-rm-benchmarks.sh, benchmarks/run-rm-fleet.sh,
# tests/e2e/netns-test.sh, and the executor manager's and e2e test scripts).
#
# start_manager LOG TIMEOUT COMMAND...
#   Runs COMMAND (an executor_manager command line, possibly behind a prefix
#   such as "ip netns exec NS") in the background, its stderr to LOG, and waits
#   up to TIMEOUT seconds for the line it prints on stdout once it accepts
#   clients: "executor_manager: listening on <provider> <host>:<port>". The
#   line is read from a pipe: no polling, no sleep, and port 0 (the OS
#   chooses) works, so parallel runs never collide.
#   Sets manager_pid, manager_line and manager_address (host:port). Returns 1
#   when the line does not come in time (the manager may have died: LOG says
#   why); manager_pid is set either way, for the caller's cleanup.
#   The pipe keeps being drained, so the manager never blocks on a full pipe.
start_manager() {
  local log=$1 timeout=$2 fifo fd
  shift 2
  manager_line='' manager_address=''
  fifo=$(mktemp -u "${TMPDIR:-/tmp}/rfaas-manager-ready.XXXXXX")
  mkfifo "$fifo" || return 1
  "$@" >"$fifo" 2>"$log" &
  manager_pid=$!
  exec {fd}<"$fifo"
  rm -f "$fifo"
  if ! read -r -t "$timeout" -u "$fd" manager_line || [[ $manager_line != *"listening on"* ]]; then
    exec {fd}<&-
    return 1
  fi
  cat <&"$fd" >/dev/null &
  exec {fd}<&-
  manager_address=${manager_line##* }
}

# stop_manager: SIGTERM to the manager started by start_manager, and wait for
# it (it ends its executors first). A no-op when none runs.
stop_manager() {
  if [[ -n ${manager_pid:-} ]]; then
    kill -TERM "$manager_pid" 2>/dev/null || true
    wait "$manager_pid" 2>/dev/null || true
    manager_pid=
  fi
}

# wait_gone PID SECONDS
#   Waits up to SECONDS (a whole number) for process PID to end, looking every
#   10 ms. Returns 0 once it is gone, 1 if it still runs. It neither signals
#   nor reaps PID: the caller's `wait` collects its status.
wait_gone() {
  local pid=$1 i
  for ((i = 0; i < $2 * 100; ++i)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.01
  done
  ! kill -0 "$pid" 2>/dev/null
}

# start_resource_manager LOG TIMEOUT COMMAND...
#   Runs COMMAND (a resource_manager command line, possibly behind a prefix
#   such as "env VAR=..." or "taskset -c 0") in the background and reads its
#   stderr from a pipe until both readiness lines came: "resource_manager:
#   fabric on <host>:<port> ..." and "resource_manager: ready, REST on
#   http://<host>:<port>"; each must come within TIMEOUT seconds of the
#   previous line. Every line goes to LOG, and the rest of stderr is drained
#   into LOG in the background.
#   Sets rm_pid, rm_fabric (host:port), rm_rest (the REST port) and
#   rm_log_pid (the drain, which ends with the resource manager). Returns 1
#   when a line does not come in time; rm_pid is set either way, for the
#   caller's cleanup.
start_resource_manager() {
  local log=$1 timeout=$2 fifo fd line
  shift 2
  rm_fabric='' rm_rest='' rm_log_pid=''
  fifo=$(mktemp -u "${TMPDIR:-/tmp}/rfaas-rm-ready.XXXXXX")
  mkfifo "$fifo" || return 1
  "$@" 2>"$fifo" &
  rm_pid=$!
  exec {fd}<"$fifo"
  rm -f "$fifo"
  : >"$log"
  while [[ -z $rm_fabric || -z $rm_rest ]]; do
    if ! read -r -t "$timeout" -u "$fd" line; then
      exec {fd}<&-
      return 1
    fi
    echo "$line" >>"$log"
    case $line in
    *"resource_manager: fabric on "*) rm_fabric=${line#*fabric on }; rm_fabric=${rm_fabric%% *} ;;
    *"resource_manager: ready, REST on "*) rm_rest=${line##*:} ;;
    esac
  done
  cat <&"$fd" >>"$log" &
  rm_log_pid=$!
  exec {fd}<&-
}
