# shellcheck shell=bash
# Sourced by the SLURM tests (slurm_test.sh, provider_test.sh) and by
# benchmarks/run-slurm-provisioning.sh. The caller sets `build` (its build
# tree) and defines `fail MESSAGE`, which reports and exits.

# ours: the processes running a binary of this build tree (never another
# checkout's), one "PID EXE" line each.
# shellcheck disable=SC2154 # build: set by the caller (see above)
ours() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ $exe == "$build"/* ]] && echo "${p#/proc/} $exe"
  done
}

# kill_leftovers LABEL: when processes of this build are still running,
# says so ("FAIL: LABEL: ..."), kills them and returns 1. For the end of a
# run, once the cluster is stopped.
kill_leftovers() {
  local left pids
  left=$(ours)
  [[ -z $left ]] && return 0
  echo "FAIL: $1: processes of this build left after the cluster stopped:"
  echo "$left"
  mapfile -t pids < <(awk '{ print $1 }' <<<"$left")
  kill -KILL "${pids[@]}" 2>/dev/null
  return 1
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 50 ms until it
# succeeds; fail "WHAT: not within SECONDS s" when it does not in time.
wait_for() {
  local limit=$1 what=$2
  local deadline=$((SECONDS + limit))
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within $limit s"
    sleep 0.05
  done
}
