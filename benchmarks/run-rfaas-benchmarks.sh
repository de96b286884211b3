#!/usr/bin/env bash
# run-rfaas-benchmarks.sh: rFaaS invocation latency and cold start, next to the
# raw libfabric write-with-immediate ping-pong for the same provider and sizes,
# in the same run, so that the ratio holds whatever the machine.
#
# For each device it starts an executor manager (port 0, waiting for its
# readiness line), runs rfaas_invocation_benchmark (echo, one worker pinned to
# the last CPU, client pinned to the first), rfaas_cold_benchmark, and
# raw_libfabric_pingpong -m writeimm (pinned the same way), then prints per
# size: raw median, rfaas median and p99, rfaas - raw and rfaas / raw; and the
# cold start by phase, with the first result in raw 8 B round trips.
# With --repeat N the invocation benchmark and the raw ping-pong run N times,
# alternating; diff and ratio are the medians of the N pairs run back to back
# (the round trip of a shared host can change level between runs).
# The raw ping-pong runs twice per pair: its server answering from its own
# buffer ("raw", the fastest raw program), and answering with the bytes it
# received ("echo", raw_libfabric_pingpong --reply echo), which moves the data
# the way an echo function must: the client reads what the server's core has
# just written. rFaaS is given as a ratio to both.
# The raw ping-pong also runs at the size rFaaS puts on the wire for each
# payload, both ways for echo (docs/protocol.md: 16 bytes of header when
# header + data fit 32 bytes, else the slot's whole 64-byte prefix): "wire" is
# the raw round trip at that size, and "rfaas-wire" what rFaaS adds beyond
# moving those bytes. On shm the round trip depends on the message size in
# steps (docs/BACKEND-BUGS.md), which the wire sizes are chosen for.
#
#   benchmarks/run-rfaas-benchmarks.sh --build-dir build
#   benchmarks/run-rfaas-benchmarks.sh --devices-list "lo-tcp lo-shm" --hot-timeout 0 --csv out.csv
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# When run from the build tree (CMake copies it there), the sources are where
# CMakeCache.txt says.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ ! -f $repo/config/devices.json && -f $here/../CMakeCache.txt ]]; then
  repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$here/../CMakeCache.txt")
fi
build=""
devices_db="$repo/config/devices.json"
devices_list="lo-tcp"
sizes="8,1K,64K,1M"
hot=-1
output=registered
function=echo
cold_reps=20
repeat=3
iters=0
csv=""
json_dir=""

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR       build tree (default: the first build*/ holding the binaries)"
  echo "  --devices FILE        device database (default: config/devices.json)"
  echo "  --devices-list LIST   space-separated device entries (default: \"$devices_list\")"
  echo "  --sizes LIST          payload sizes (default: $sizes)"
  echo "  --hot-timeout MS      worker hot polling: -1 always, 0 never (default: $hot)"
  echo "  --output MEM          registered (result written in place) or plain (copied; default: $output)"
  echo "  --function F          echo (copies input to output) or echo_in_place (no copy; default: $function)"
  echo "  --cold-reps N         allocations in the cold benchmark (default: $cold_reps)"
  echo "  --repeat N            invocation + raw runs, paired (default: $repeat)"
  echo "  --iters N             measured calls per size and run (default: the programs' own);"
  echo "                        many short pairs (--repeat 40 --iters 3000) see fewer of the"
  echo "                        host's level changes inside a pair than a few long ones"
  echo "  --csv FILE            append every row (rfaas, raw, cold) as CSV"
  echo "  --json-dir DIR        keep every program run's JSON there (<device>-<program>-<n>.json)"
}

while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --devices-list) devices_list=$2; shift 2 ;;
  --sizes) sizes=$2; shift 2 ;;
  --hot-timeout) hot=$2; shift 2 ;;
  --output) output=$2; shift 2 ;;
  --function) function=$2; shift 2 ;;
  --cold-reps) cold_reps=$2; shift 2 ;;
  --repeat) repeat=$2; shift 2 ;;
  --iters) iters=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  --json-dir) json_dir=$2; mkdir -p "$json_dir"; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-rfaas-benchmarks.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "run-rfaas-benchmarks.sh: --repeat needs a positive integer" >&2; exit 2; }
[[ $iters =~ ^[0-9]+$ ]] || { echo "run-rfaas-benchmarks.sh: --iters needs a number" >&2; exit 2; }

if [[ -z $build && -x $here/rfaas_invocation_benchmark ]]; then
  build=$here/..
elif [[ -z $build ]]; then
  for d in "$repo"/build*/; do
    if [[ -x $d/benchmarks/rfaas_invocation_benchmark ]]; then build=$d; break; fi
  done
fi
bench=$build/benchmarks
manager=$build/server/executor_manager/executor_manager
library=$build/examples/functions/libfunctions.so
for f in "$bench/rfaas_invocation_benchmark" "$bench/rfaas_cold_benchmark" \
  "$bench/raw_libfabric_pingpong" "$manager" "$library"; do
  [[ -e $f ]] || { echo "run-rfaas-benchmarks.sh: $f is missing (build it, or --build-dir)" >&2; exit 1; }
done

read -r -a cpus <<<"$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
first=${cpus[0]}
last=${cpus[${#cpus[@]} - 1]}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$first")

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-bench.XXXXXX")
# shellcheck source=../scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"
manager_pid=
trap 'stop_manager; rm -rf "$work"' EXIT INT TERM

provider_of() {
  python3 -c 'import json, sys
db = json.load(open(sys.argv[1]))
print(next(d.get("provider", "") for d in db["devices"] if d["name"] == sys.argv[2]))' \
    "$devices_db" "$1"
}

# The payload sizes in bytes, and beside each the size on rFaaS's wire
# (wire_size below and in the summary: protocol::slot_write_lead).
raw_sizes=$(python3 - "$sizes" <<'PY'
import re, sys
mult = {"": 1, "k": 1 << 10, "m": 1 << 20}
out = []
for t in sys.argv[1].split(","):
    m = re.fullmatch(r"(\d+)([kKmM]?)(i?[bB])?", t.strip())
    n = int(m.group(1)) * mult[m.group(2).lower()]
    out += [n, n + (16 if n + 16 <= 32 else 64)]
print(",".join(str(n) for n in dict.fromkeys(out)))
PY
) || { echo "run-rfaas-benchmarks.sh: cannot read --sizes $sizes" >&2; exit 2; }

for dev in $devices_list; do
  provider=$(provider_of "$dev")
  echo "==> $dev (provider ${provider:-auto}): executor manager, worker on CPU $last"
  if ! start_manager "$work/manager-$dev.log" 60 "$manager" --config "$repo/config/executor_manager.json" \
    --skip-resource-manager --devices "$devices_db" --device "$dev" --host 127.0.0.1 --port 0 \
    --cores "$last"; then
    echo "the manager did not start on $dev:" >&2
    cat "$work/manager-$dev.log" >&2
    exit 1
  fi
  address=$manager_address

  rows=$work/rows-$dev.csv
  : >"$rows"
  raw_env=(env)
  [[ $provider == *ofi_rxm* ]] && raw_env=(env FI_OFI_RXM_CM_PROGRESS_INTERVAL=100)
  json() { # NAME: sets jarg, the --json arguments of one run (none without --json-dir)
    jarg=()
    [[ -z $json_dir ]] || jarg=(--json "$json_dir/$dev-$1.json")
  }
  for ((r = 0; r < repeat; r++)); do
    # Alternate the order, so that a drift in load favours none of them.
    for which in $( ((r % 2 == 0)) && echo "rfaas raw echo" || echo "echo raw rfaas"); do
      rm -f "$work/one.csv"
      json "$which-$r"
      if [[ $which == rfaas ]]; then
        "${pin[@]}" "$bench/rfaas_invocation_benchmark" --devices "$devices_db" --device "$dev" \
          --manager "$address" --library "$library" --sizes "$sizes" --hot-timeout "$hot" \
          --output "$output" --function "$function" --iters "$iters" --csv "$work/one.csv" "${jarg[@]}" \
          >"$work/inv.out"
        # The first run's own table is shown; the others only feed the summary.
        ((r > 0)) || cat "$work/inv.out"
        tail -n +2 "$work/one.csv" | sed "s/^/rfaas-csv,$r,/" >>"$rows"
      else
        raw_iters=()
        ((iters == 0)) || raw_iters=(-n "$iters")
        raw_args=(-s "$raw_sizes" --reply own)
        [[ $which == raw ]] || raw_args=(-s "$sizes" --reply echo)
        "${raw_env[@]}" "$bench/raw_libfabric_pingpong" -p "${provider:-tcp}" -m writeimm \
          "${raw_args[@]}" "${raw_iters[@]}" --server-core "$last" --client-core "$first" --csv "$work/one.csv" \
          --no-csv-header "${jarg[@]}" >/dev/null
        sed "s/^/$which-csv,$r,/" "$work/one.csv" >>"$rows"
      fi
    done
  done
  rm -f "$work/one.csv"
  json cold
  "$bench/rfaas_cold_benchmark" --devices "$devices_db" --device "$dev" --manager "$address" \
    --library "$library" --repetitions "$cold_reps" --csv "$work/one.csv" "${jarg[@]}"
  tail -n +2 "$work/one.csv" | sed "s/^/cold-csv,0,/" >>"$rows"
  stop_manager

  /usr/bin/python3 - "$rows" "$dev" "$csv" "$function" "$here" <<'PY'
import csv, os, sys
rows, dev, out, function = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
sys.path.insert(0, sys.argv[5])
import rfaas_stats
# rf / raw / echo [size][rep] = (median, p99, row); cold = rows
rf, raw, echo, cold = {}, {}, {}, []
with open(rows) as f:
    for line in f:
        tag, rep, rest = line.rstrip("\n").split(",", 2)
        r = next(csv.reader([rest]))
        if tag == "cold-csv":
            cold.append(r)
            continue
        table = {"rfaas-csv": rf, "raw-csv": raw, "echo-csv": echo}[tag]
        table.setdefault(int(r[5]), {})[int(rep)] = (float(r[7]), float(r[8]), r)
med = rfaas_stats.median
reps = max((len(v) for v in rf.values()), default=0)
print(f"\n{dev}: {function} through rFaaS vs raw write-with-immediate round trip (us; medians over "
      f"{reps} run(s) of each; diff and ratio: medians of the runs paired back to back)")
print(f"{'size':>8} {'raw':>10} {'rfaas':>10} {'rfaas p99':>10} {'diff':>8} {'ratio':>7} "
      f"{'wire':>8} {'rfaas-wire':>10} {'echo':>8} {'/echo':>7}")
for size in sorted(rf):
    ms = [v[0] for v in rf[size].values()]
    p99 = med([v[1] for v in rf[size].values()])
    pairs = [(rf[size][k][0], raw[size][k][0]) for k in rf[size] if k in raw.get(size, {})]
    # Raw at rFaaS's wire size, from the same runs: the invocation and its
    # result (echo: as large as the payload) each carry 16 bytes of header
    # when header + data fit 32 bytes, else the slot's 64-byte prefix.
    wire_t = raw.get(size + (16 if size + 16 <= 32 else 64), {})
    wire = [(rf[size][k][0], wire_t[k][0]) for k in rf[size] if k in wire_t]
    wcols = (f" {med([w for _, w in wire]):>8.2f} {med([a - w for a, w in wire]):>10.2f}"
             if wire else f" {'-':>8} {'-':>10}")
    # The raw echo of the same pair: the same data movement as an echo function.
    ech = [(rf[size][k][0], echo[size][k][0]) for k in rf[size] if k in echo.get(size, {})]
    if ech:
        wcols += f" {med([e for _, e in ech]):>8.2f} {med([a / e for a, e in ech]):>7.3f}"
    if pairs:
        rm = med([b for _, b in pairs])
        diff = med([a - b for a, b in pairs])
        ratio = med([a / b for a, b in pairs])
        print(f"{size:>8} {rm:>10.2f} {med(ms):>10.2f} {p99:>10.2f} {diff:>8.2f} {ratio:>7.3f}"
              + wcols)
    else:
        print(f"{size:>8} {'-':>10} {med(ms):>10.2f} {p99:>10.2f}")
rtt = med([v[0] for v in raw[8].values()]) if 8 in raw else None
print(f"\n{dev}: cold start (allocate -> first result), per phase (us)")
for r in cold:
    extra = ""
    if rtt and r[4] == "first_result":
        extra = f"  = {float(r[7]) / rtt:,.0f} raw 8 B round trips"
    print(f"  {r[4]:<14} median {float(r[7]):>10.1f}  p99 {float(r[8]):>10.1f}{extra}")
if out:
    fresh = not os.path.exists(out) or os.path.getsize(out) == 0
    with open(out, "a") as f:
        if fresh:
            f.write("device,repetition,impl,provider,endpoint,wait,mode,size,iters,"
                    "median_us,p99_us,min_us,mean_us\n")
        for table, impl in ((rf, None), (raw, None), (echo, "raw-echo")):
            for size in sorted(table):
                for rep, v in sorted(table[size].items()):
                    row = [impl or v[2][0]] + v[2][1:]
                    f.write(f"{dev},{rep}," + ",".join(row) + "\n")
        for r in cold:
            f.write(f"{dev},0," + ",".join(r) + "\n")
PY
done
