#!/usr/bin/env bash
# run-slurm-provisioning.sh: what the resource manager's slurm node provider
# costs a client. Two figures, each the time from a lease request to its
# grant as librfaas sees it (rm_lease_benchmark --mode latency):
#   pilot:    no node is up, so the request starts a pilot job: SLURM's
#             scheduling of the job, rfaas-slurm and the executor manager
#             starting (loading libfabric), its registration, and the
#             client's next retry (nodes.slurm.retry_after_ms);
#   up:       a pilot's node is already up (what min_nodes >= 1 buys): one
#             round trip to the resource manager.
# Each pilot round waits until the previous pilot was cancelled as idle and
# SLURM has let go of it, so every round starts from zero nodes.
#
# It runs on this machine's single-host test cluster (tests/slurm/slurm-up.sh:
# munged, slurmctld and two slurmd, started and stopped here; needs root),
# over tcp on loopback. On a real cluster the same figures come from
# rm_lease_benchmark against a resource manager configured with
# nodes.provider "slurm" (docs/slurm.md).
#
#   benchmarks/run-slurm-provisioning.sh --build-dir build
#   benchmarks/run-slurm-provisioning.sh --rounds 10 --retry-after-ms 50 --csv prov.csv
#   benchmarks/run-slurm-provisioning.sh --sched-params batch_sched_delay=0,bf_interval=1
#
# Options:
#   --build-dir DIR       build tree (default: build)
#   --rounds N            pilot rounds (default 5)
#   --iterations N        leases measured with a node up (default 500)
#   --retry-after-ms MS   nodes.slurm.retry_after_ms (default 100)
#   --poll-ms MS          nodes.slurm.poll_ms (default 100)
#   --sched-params TEXT   the test cluster's SchedulerParameters (default:
#                         slurm-up.sh's, batch_sched_delay=0,bf_interval=1)
#   --csv FILE            append "benchmark,case,n,median_ms,p99_ms,min_ms,max_ms" rows
# Exit 77 with the reason when not root or SLURM is not installed. The test
# suite runs it once, small (slurm.provisioning_smoke), to see that it runs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -f $repo/tests/slurm/slurm-up.sh && -f $repo/../CMakeCache.txt ]]; then
  repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$repo/../CMakeCache.txt")
fi
build=build rounds=5 iterations=500 retry_after=100 poll=100 sched="" csv=""
while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2 ;;
  --rounds) rounds=$2 ;;
  --iterations) iterations=$2 ;;
  --retry-after-ms) retry_after=$2 ;;
  --poll-ms) poll=$2 ;;
  --sched-params) sched=$2 ;;
  --csv) csv=$2 ;;
  -h | --help)
    sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "run-slurm-provisioning.sh: unknown option $1 (try --help)" >&2
    exit 2
    ;;
  esac
  shift 2
done
build=$(realpath "$build")
PATH=$PATH:/usr/sbin
# Exit 77 (as the test suite's skips) when this machine cannot run the
# test cluster.
[[ $(id -u) == 0 ]] || { echo "SKIP: run-slurm-provisioning.sh: needs root (the test cluster's slurmd and munged)"; exit 77; }
for tool in munged slurmctld slurmd sbatch squeue scontrol curl; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "SKIP: run-slurm-provisioning.sh: $tool not found (scripts/install-deps.sh)"; exit 77; }
done
bench=$build/benchmarks/rm_lease_benchmark
for f in "$bench" "$build/server/resource_manager/resource_manager" \
  "$build/server/executor_manager/executor_manager" "$build/tools/rfaas-slurm"; do
  [[ -x $f ]] || { echo "run-slurm-provisioning.sh: $f is missing: build it first" >&2; exit 1; }
done
stats=$repo/benchmarks/rfaas_stats.py

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-provisioning.XXXXXX")
chmod 755 "$tmp"
rm_pid=""
cleanup() {
  if [[ -n $rm_pid ]] && kill -0 "$rm_pid" 2>/dev/null; then
    kill -TERM "$rm_pid"
    wait "$rm_pid" 2>/dev/null || true
  fi
  "$repo/tests/slurm/slurm-down.sh" "$tmp/cluster" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() {
  echo "run-slurm-provisioning.sh: $*" >&2
  [[ -f $tmp/rm.log ]] && tail -n 20 "$tmp/rm.log" >&2
  exit 1
}
# shellcheck source=../tests/slurm/lib.sh
source "$repo/tests/slurm/lib.sh"

eval "$("$repo/tests/slurm/slurm-up.sh" "$tmp/cluster")"
if [[ -n $sched ]]; then
  sed -i "s/^SchedulerParameters=.*/SchedulerParameters=$sched/" "$SLURM_CONF"
  scontrol reconfigure
fi
echo "slurm: $(scontrol show config | grep -E '^SchedulerParameters ' | tr -s ' ')"

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
cat >"$tmp/devices.json" <<'JSON'
{ "devices": [ { "name": "lo-tcp", "provider": "tcp", "ip_address": "127.0.0.1", "port": 0,
                 "default_receive_buffer_size": 32, "endpoint": "connected" } ] }
JSON
cat >"$tmp/rm.json" <<JSON
{
  "database": "$tmp/rm.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "token_file": "$tmp/token" },
  "fabric": { "device_database": "$tmp/devices.json", "device": "lo-tcp", "host": "127.0.0.1",
              "port": 0, "heartbeat_ms": 200 },
  "nodes": { "heartbeat_timeout_ms": 3000, "provider": "slurm",
    "slurm": { "min_nodes": 0, "max_nodes": 1, "idle_timeout_ms": 300, "time_limit": "00:30:00",
               "work_dir": "$tmp/pilots", "rfaas_slurm": "$build/tools/rfaas-slurm",
               "pilot_options": ["--provider", "tcp", "--interface", "lo", "--same-host",
                                 "--cores", "1"],
               "retry_after_ms": $retry_after, "poll_ms": $poll } },
  "tick_ms": 20
}
JSON
"$build/server/resource_manager/resource_manager" --config "$tmp/rm.json" 2>"$tmp/rm.log" &
rm_pid=$!
wait_for 10 "the resource manager's readiness" grep -qs 'ready, REST on' "$tmp/rm.log"
addr=$(sed -n 's/^resource_manager: fabric on \([^ ]*\) .*/\1/p' "$tmp/rm.log")
rest=$(sed -n 's/^resource_manager: ready, REST on \(.*\)$/\1/p' "$tmp/rm.log")
no_pilot() {
  [[ -z $(squeue -h -o '%j' | grep '^rfaas-pilot-') ]] &&
    [[ $(curl -sS -H "Authorization: Bearer $(cat "$tmp/token")" "$rest/nodes") == "[]" ]]
}
lease_ms() { # benchmark output -> the lease line's median, in ms
  awk '$1 == "lease" { printf "%.3f\n", $3 / 1000 }'
}

samples=()
for ((r = 1; r <= rounds; ++r)); do
  wait_for 30 "round $r: the previous pilot's end" no_pilot
  out=$("$bench" --devices "$tmp/devices.json" --device lo-tcp --resource-manager "$addr" \
    --mode latency --iterations 1 --warmup 0 --memory 64) || fail "round $r: rm_lease_benchmark failed"
  ms=$(lease_ms <<<"$out")
  echo "pilot round $r: ${ms} ms from the lease request to its grant"
  samples+=("$ms")
done
read -r n median p99 min _ < <(printf '%s\n' "${samples[@]}" | /usr/bin/python3 "$stats" summary)
max=$(printf '%s\n' "${samples[@]}" | sort -g | tail -n 1)

# A node up: the warm-up's first lease starts the pilot, the rest find it.
wait_for 30 "the last pilot's end" no_pilot
out=$("$bench" --devices "$tmp/devices.json" --device lo-tcp --resource-manager "$addr" \
  --mode latency --iterations "$iterations" --warmup 5 --memory 64) || fail "rm_lease_benchmark failed"
read -r _ wn wmedian wp99 wmin _ < <(awk '$1 == "lease"' <<<"$out")
ms() { awk -v us="$1" 'BEGIN { printf "%.3f", us / 1000 }'; }

printf '\n%-10s %6s %12s %12s %12s %12s\n' case n median_ms p99_ms min_ms max_ms
printf '%-10s %6s %12.1f %12.1f %12.1f %12.1f\n' pilot "$n" "$median" "$p99" "$min" "$max"
printf '%-10s %6s %12s %12s %12s %12s\n' up "$wn" "$(ms "$wmedian")" "$(ms "$wp99")" "$(ms "$wmin")" -
echo "(retry_after_ms $retry_after, poll_ms $poll; pilot = SLURM scheduling + rfaas-slurm +" \
  "executor manager start-up + registration + the client's next retry)"
if [[ -n $csv ]]; then
  [[ -s $csv ]] || echo "benchmark,case,n,median_ms,p99_ms,min_ms,max_ms" >"$csv"
  echo "slurm_provisioning,pilot,$n,$median,$p99,$min,$max" >>"$csv"
  echo "slurm_provisioning,up,$wn,$(ms "$wmedian"),$(ms "$wp99"),$(ms "$wmin")," >>"$csv"
fi
