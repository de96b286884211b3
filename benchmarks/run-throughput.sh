#!/usr/bin/env bash
# run-throughput.sh: pipelined rFaaS invocations per second next to the raw
# libfabric message rate of the same provider, measured in the same run, and
# execute_parallel over every leased core.
#
# Per device it starts two executor managers (port 0, waiting for their
# readiness lines): one leasing only the last CPU, where the single worker runs
# exactly like the raw server (client pinned to the first CPU), and one leasing
# every CPU, for the scaling rows. Then, --repeat times, alternating:
#   raw     raw_libfabric_msgrate --pattern echo --window W (request + reply)
#   rfaas   rfaas_throughput_benchmark, 1 client, 1 worker, window W
# and once per repetition the scaling rows: 1 client on all workers, and
# --clients client processes with one worker each; once, the raw one-way rate
# (the provider's ceiling) and rfaas_parallel_benchmark on every CPU. In the
# scaling rows workers and clients outnumber the CPUs, so their workers do not
# spin between calls unless --scaling-hot-timeout says so.
# Prints ops/s and rfaas/raw (median over the repetitions of the ratio of the
# runs done back to back). Every program writes JSON into --json-dir.
#
#   benchmarks/run-throughput.sh --build-dir build --devices-list "lo-tcp lo-shm"
#   benchmarks/run-throughput.sh --sizes 8,1K --window 16 --repeat 5 --json-dir out/
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -f $repo/config/devices.json && -f $here/../CMakeCache.txt ]]; then
  repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$here/../CMakeCache.txt")
fi
build=""
devices_db="$repo/config/devices.json"
devices_list="lo-tcp lo-shm"
sizes="8,1K"
window=8
repeat=3
budget=1
clients=2
scaling_hot=0
json_dir=""
csv=""

usage() {
  sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR       build tree (default: the first build*/ holding the binaries)"
  echo "  --devices FILE        device database (default: config/devices.json)"
  echo "  --devices-list LIST   space-separated device entries (default: \"$devices_list\")"
  echo "  --sizes LIST          payload sizes (default: $sizes)"
  echo "  --window W            invocations (raw: operations) outstanding per worker (default: $window)"
  echo "  --repeat N            raw + rfaas pairs (default: $repeat)"
  echo "  --budget S            seconds per measurement (default: $budget)"
  echo "  --clients N           client processes of the several-clients row (default: $clients)"
  echo "  --scaling-hot-timeout MS  worker hot polling of the scaling rows and the parallel"
  echo "                        benchmark: -1 always, 0 never (default: $scaling_hot; spinning"
  echo "                        workers and clients outnumber the CPUs there)"
  echo "  --json-dir DIR        keep every program's JSON there (default: a temporary directory)"
  echo "  --csv FILE            append every rate row as CSV"
}

while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --devices-list) devices_list=$2; shift 2 ;;
  --sizes) sizes=$2; shift 2 ;;
  --window) window=$2; shift 2 ;;
  --repeat) repeat=$2; shift 2 ;;
  --budget) budget=$2; shift 2 ;;
  --clients) clients=$2; shift 2 ;;
  --scaling-hot-timeout) scaling_hot=$2; shift 2 ;;
  --json-dir) json_dir=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-throughput.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

for v in repeat window clients; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run-throughput.sh: --$v needs a positive integer" >&2; exit 2; }
done

if [[ -z $build && -x $here/rfaas_throughput_benchmark ]]; then
  build=$here/..
elif [[ -z $build ]]; then
  for d in "$repo"/build*/; do
    if [[ -x $d/benchmarks/rfaas_throughput_benchmark ]]; then build=$d; break; fi
  done
fi
bench=$build/benchmarks
manager=$build/server/executor_manager/executor_manager
library=$build/examples/functions/libfunctions.so
for f in "$bench/rfaas_throughput_benchmark" "$bench/rfaas_parallel_benchmark" \
  "$bench/raw_libfabric_msgrate" "$manager" "$library"; do
  [[ -e $f ]] || { echo "run-throughput.sh: $f is missing (build it, or --build-dir)" >&2; exit 1; }
done

read -r -a cpus <<<"$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
first=${cpus[0]}
last=${cpus[${#cpus[@]} - 1]}
all_cpus=$(IFS=,; echo "${cpus[*]}")
ncpus=${#cpus[@]}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$first")

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-throughput.XXXXXX")
[[ -n $json_dir ]] || json_dir=$work/json
mkdir -p "$json_dir"
# shellcheck source=scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"
manager_pid=
one_pid='' all_pid=''
cleanup() {
  for manager_pid in $one_pid $all_pid; do stop_manager; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

provider_of() {
  python3 -c 'import json, sys
db = json.load(open(sys.argv[1]))
print(next(d.get("provider", "") for d in db["devices"] if d["name"] == sys.argv[2]))' \
    "$devices_db" "$1"
}

# start NAME CORES: an executor manager leasing CORES; sets manager_address
# and manager_pid.
start() {
  local name=$1 cores=$2
  if ! start_manager "$work/manager-$name-$dev.log" 60 "$manager" \
    --config "$repo/config/executor_manager.json" --skip-resource-manager \
    --devices "$devices_db" --device "$dev" --host 127.0.0.1 --port 0 --cores "$cores"; then
    echo "run-throughput.sh: the manager ($name) did not start on $dev:" >&2
    cat "$work/manager-$name-$dev.log" >&2
    exit 1
  fi
}

for dev in $devices_list; do
  provider=$(provider_of "$dev")
  echo "==> $dev (provider ${provider:-auto}): window $window, sizes $sizes, $repeat repetition(s)"
  start one "$last"
  one_address=$manager_address one_pid=$manager_pid
  start all "$all_cpus"
  all_address=$manager_address all_pid=$manager_pid
  raw_env=(env)
  [[ $provider == *ofi_rxm* ]] && raw_env=(env FI_OFI_RXM_CM_PROGRESS_INTERVAL=100)
  common=(--devices "$devices_db" --device "$dev" --library "$library" --sizes "$sizes"
    --window "$window" --budget "$budget")
  csv_arg=()
  [[ -n $csv ]] && csv_arg=(--csv "$csv")
  for ((r = 0; r < repeat; r++)); do
    for which in $( ((r % 2 == 0)) && echo "rfaas raw" || echo "raw rfaas"); do
      if [[ $which == rfaas ]]; then
        "${pin[@]}" "$bench/rfaas_throughput_benchmark" "${common[@]}" --manager "$one_address" \
          --workers 1 --clients 1 --json "$json_dir/$dev-rfaas-1w-$r.json" "${csv_arg[@]}" \
          >"$work/out" || { cat "$work/out"; exit 1; }
      else
        "${raw_env[@]}" "$bench/raw_libfabric_msgrate" -p "${provider:-tcp}" --pattern echo \
          --window "$window" -s "$sizes" --budget "$budget" --server-core "$last" \
          --client-core "$first" --json "$json_dir/$dev-raw-echo-$r.json" "${csv_arg[@]}" \
          >"$work/out" || { cat "$work/out"; exit 1; }
      fi
      ((r > 0)) || cat "$work/out"
    done
    "$bench/rfaas_throughput_benchmark" "${common[@]}" --manager "$all_address" \
      --workers "$ncpus" --clients 1 --hot-timeout "$scaling_hot" --json "$json_dir/$dev-rfaas-allw-$r.json" "${csv_arg[@]}" \
      >"$work/out" || { cat "$work/out"; exit 1; }
    ((r > 0)) || cat "$work/out"
    "$bench/rfaas_throughput_benchmark" "${common[@]}" --manager "$all_address" \
      --workers 1 --clients "$clients" --hot-timeout "$scaling_hot" --json "$json_dir/$dev-rfaas-clients-$r.json" \
      "${csv_arg[@]}" >"$work/out" || { cat "$work/out"; exit 1; }
    ((r > 0)) || cat "$work/out"
  done
  "${raw_env[@]}" "$bench/raw_libfabric_msgrate" -p "${provider:-tcp}" --pattern oneway \
    --window "$window" -s "$sizes" --budget "$budget" --server-core "$last" \
    --client-core "$first" --json "$json_dir/$dev-raw-oneway.json" "${csv_arg[@]}"
  "$bench/rfaas_parallel_benchmark" --devices "$devices_db" --device "$dev" --library "$library" \
    --manager "$all_address" --cores "$ncpus" --sizes "$sizes" --budget "$budget" \
    --hot-timeout "$scaling_hot" \
    --json "$json_dir/$dev-parallel.json"
  for manager_pid in $one_pid $all_pid; do stop_manager; done
  one_pid='' all_pid=''

  /usr/bin/python3 - "$json_dir" "$dev" "$repeat" "$here" <<'PY'
import json, os, sys
d, dev, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
import rfaas_stats
med = rfaas_stats.median
def rates(name):
    path = os.path.join(d, f"{dev}-{name}.json")
    if not os.path.exists(path):
        return {}
    doc = json.load(open(path))
    return {r["size"]: r["ops_per_s"] for r in doc["results"] if r.get("kind") == "rate"}
raw = [rates(f"raw-echo-{r}") for r in range(reps)]
one = [rates(f"rfaas-1w-{r}") for r in range(reps)]
allw = [rates(f"rfaas-allw-{r}") for r in range(reps)]
cli = [rates(f"rfaas-clients-{r}") for r in range(reps)]
oneway = rates("raw-oneway")
print(f"\n{dev}: operations per second (medians over {reps} run(s); ratio = median of the "
      f"rfaas/raw-echo ratios of runs done back to back)")
print(f"{'size':>8} {'raw oneway':>12} {'raw echo':>12} {'rfaas 1w':>12} {'ratio':>6} "
      f"{'rfaas all w':>12} {'ratio':>6} {'rfaas clients':>14} {'ratio':>6}")
print(f"{'':>8} {'':>12} {'':>12} {'(hot)':>12} {'':>6} {'(scaling)':>12} {'':>6} "
      f"{'(scaling)':>14}")
for size in sorted(raw[0]):
    rw = [x[size] for x in raw if size in x]
    def col(runs):
        vals = [x[size] for x in runs if size in x]
        ratios = [x[size] / y[size] for x, y in zip(runs, raw) if size in x and size in y]
        return (med(vals) if vals else float("nan"), med(ratios) if ratios else float("nan"))
    a, ar = col(one)
    b, br = col(allw)
    c, cr = col(cli)
    ow = oneway.get(size, float("nan"))
    print(f"{size:>8} {ow:>12,.0f} {med(rw):>12,.0f} {a:>12,.0f} {ar:>6.3f} {b:>12,.0f} "
          f"{br:>6.3f} {c:>14,.0f} {cr:>6.3f}")
PY
done
