#!/usr/bin/env bash
# soak.sh: N hot invocations (default 10^6) through one executor manager and
# one executor, every output verified byte for byte (benchmarks/rfaas_soak),
# reporting the resident memory (VmRSS) of the client, the executor manager and
# the executor at the start (after the allocation and a warm-up) and at the
# end (after the last call, before deallocating). Run by hand, not in CI:
# memory that grows with the number of calls shows up as end - start.
#
#   scripts/soak.sh --build-dir build                          # 10^6 calls on lo-tcp
#   scripts/soak.sh --device lo-shm -n 100000 --json soak.json
#
# Exits 0 when every output was right and every process survived; the table
# goes to stdout, the client's progress to stderr.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=""
devices_db="$repo/config/devices.json"
device="lo-tcp"
invocations=1000000
sizes="8,512,4K"
json=""

usage() {
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR    build tree (default: the first build*/ holding benchmarks/rfaas_soak)"
  echo "  --devices FILE     device database (default: config/devices.json)"
  echo "  --device NAME      device entry (default: $device)"
  echo "  -n, --invocations N  calls after the warm-up (default: $invocations)"
  echo "  --sizes LIST       payload sizes used in turn (default: $sizes)"
  echo "  --json FILE        the client's JSON, with the three processes' RSS added"
}

while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --device) device=$2; shift 2 ;;
  -n | --invocations) invocations=$2; shift 2 ;;
  --sizes) sizes=$2; shift 2 ;;
  --json) json=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "soak.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $invocations =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: --invocations needs a positive integer" >&2; exit 2; }

if [[ -z $build ]]; then
  for d in "$repo"/build*/; do
    if [[ -x $d/benchmarks/rfaas_soak ]]; then build=$d; break; fi
  done
fi
soak=$build/benchmarks/rfaas_soak
manager=$build/server/executor_manager/executor_manager
library=$build/examples/functions/libfunctions.so
for f in "$soak" "$manager" "$library"; do
  [[ -e $f ]] || { echo "soak.sh: $f is missing (build rfaas_soak, executor_manager, executor and rfaas_example_functions, or --build-dir)" >&2; exit 1; }
done

# The worker gets the last CPU, the client the first: two spinning processes
# on one CPU would take turns by time slice (milliseconds per call).
read -r -a cpus <<<"$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
first=${cpus[0]}
last=${cpus[${#cpus[@]} - 1]}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$first")

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-soak.XXXXXX")
# shellcheck source=scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"
manager_pid=
client_pid=
cleanup() {
  if [[ -n $client_pid ]]; then kill "$client_pid" 2>/dev/null || true; fi
  stop_manager
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

rss() { # PID -> VmRSS in KiB, or "-" when the process is gone
  awk '/^VmRSS:/ {print $2; found=1} END {if (!found) print "-"}' "/proc/$1/status" 2>/dev/null || echo -
}

# The executor: the deepest descendant of the manager running the executor
# binary (with a zygote, the zygote is its parent and also runs that binary).
executor_pid() {
  local queue=("$manager_pid") pid child found=
  while ((${#queue[@]})); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
      [[ $(cat /proc/"$child"/comm 2>/dev/null) == executor ]] && found=$child
      queue+=("$child")
    done
  done
  echo "$found"
}

if ! start_manager "$work/manager.log" 60 "$manager" --config "$repo/config/executor_manager.json" \
  --skip-resource-manager --devices "$devices_db" --device "$device" --host 127.0.0.1 --port 0 \
  --cores "$last"; then
  echo "soak.sh: the manager did not start on $device:" >&2
  cat "$work/manager.log" >&2
  exit 1
fi

json_arg=()
[[ -n $json ]] && json_arg=(--json "$json")
mkfifo "$work/to-client" "$work/from-client"
"${pin[@]}" "$soak" --devices "$devices_db" --device "$device" --manager "$manager_address" \
  --library "$library" -n "$invocations" --sizes "$sizes" --handshake "${json_arg[@]}" \
  <"$work/to-client" >"$work/from-client" &
client_pid=$!
exec {to}>"$work/to-client" {from}<"$work/from-client"

declare -A start_rss end_rss
# shellcheck disable=SC2034 # "into" is a nameref: the caller reads what is set
read_point() { # PHASE ARRAY: wait for "soak: PHASE pid", measure, let it go on
  local phase=$1 line pid ex
  local -n into=$2
  if ! read -r -t 600 -u "$from" line || [[ $line != "soak: $phase "* ]]; then
    echo "soak.sh: the client did not reach the $phase point (got: ${line:-nothing})" >&2
    cat "$work/manager.log" >&2
    exit 1
  fi
  pid=${line##* }
  ex=$(executor_pid)
  into["client"]=$(rss "$pid")
  into["manager"]=$(rss "$manager_pid")
  into["executor"]=$([[ -n $ex ]] && rss "$ex" || echo -)
  into["executor_pid"]=${ex:--}
  echo >&"$to"
}

echo "==> soak on $device: $invocations calls (sizes $sizes), every output verified"
read_point start start_rss
read_point end end_rss
summary=$(cat <&"$from")
status=0
wait "$client_pid" || status=$?
client_pid=
echo "$summary"
manager_alive=yes
kill -0 "$manager_pid" 2>/dev/null || manager_alive=no

printf '\n%-10s %12s %12s %12s\n' process "start KiB" "end KiB" "end-start"
for p in client manager executor; do
  s=${start_rss[$p]} e=${end_rss[$p]} d=-
  [[ $s != - && $e != - ]] && d=$((e - s))
  printf '%-10s %12s %12s %12s\n' "$p" "$s" "$e" "$d"
done
[[ ${start_rss[executor_pid]} == "${end_rss[executor_pid]}" ]] ||
  echo "note: the executor's pid changed (${start_rss[executor_pid]} -> ${end_rss[executor_pid]})"
echo "manager alive at the end: $manager_alive"

if [[ -n $json && -f $json ]]; then
  python3 - "$json" "${start_rss[client]}" "${end_rss[client]}" "${start_rss[manager]}" \
    "${end_rss[manager]}" "${start_rss[executor]}" "${end_rss[executor]}" <<'PY'
import json, sys
path, *v = sys.argv[1:]
num = lambda s: None if s == "-" else int(s)
doc = json.load(open(path))
doc["results"].append({"kind": "rss", "unit": "KiB",
    "client": {"start": num(v[0]), "end": num(v[1])},
    "manager": {"start": num(v[2]), "end": num(v[3])},
    "executor": {"start": num(v[4]), "end": num(v[5])}})
json.dump(doc, open(path, "w"), indent=1)
PY
fi
[[ $manager_alive == yes ]] || status=1
exit "$status"
