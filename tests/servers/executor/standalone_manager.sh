# shellcheck shell=bash
# Sourced by the executor tests that run one standalone executor_manager on
# loopback (bounded.sh for hostile_test.sh and self_address_test.sh;
# pool_test.sh), after scripts/lib/manager.sh, whose start_manager it uses.
#
# start_standalone_manager NAME MEMBERS [PREFIX...]: write $WORK/manager.json
# for a standalone manager on $DEVICE (device database $DEVICES) with the
# cores this process may use, 1024 MiB and at most 4 allocations, plus
# MEMBERS (more JSON members, each with a leading comma: listen, executor,
# deadlines_ms, ...); start $MANAGER with it behind PREFIX (e.g. `env
# VAR=...`), its log in $WORK/manager.err, and set MPID and ADDRESS. Calls
# the caller's fail when the manager does not say it listens within 20 s.
# shellcheck disable=SC2034,SC2154 # sets the caller's globals from start_manager's
start_standalone_manager() {
  local name=$1 members=$2 cores
  shift 2
  cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  cat >"$WORK/manager.json" <<JSON
{
  "device_database": "$DEVICES",
  "device": "$DEVICE",
  "resources": { "cores": "$cores", "memory_mib": 1024, "max_allocations": 4 }$members
}
JSON
  start_manager "$WORK/manager.err" 20 "$@" "$MANAGER" --config "$WORK/manager.json" \
    --skip-resource-manager
  MPID=$manager_pid
  [ -n "$manager_address" ] || fail "no readiness line within 20 s"
  ADDRESS=$manager_address
  echo "$name: $manager_line"
}
