#!/usr/bin/env bash
# make-plots.sh: the figures of benchmarks/README.md, from short runs on this
# machine (loopback only), into benchmarks/plots/:
#   latency-payload.png    median round trip against payload, raw libfabric,
#                          rdmalib and rFaaS (echo) on one chart per provider
#   latency-loopback.png   8 B latency CDF and payload sweep, raw against rFaaS
#   cold-start-sandbox.png cold start and hot latency per sandbox kind
#   rm-fleet.png           lease latency and resource-manager CPU against the
#                          number of nodes (only with --fleet-nodes: minutes)
# It runs run-rfaas-benchmarks.sh (raw and rFaaS, --json-dir), rdmalib_pingpong
# (write with immediate, as the raw ping-pong) and run-sandbox-benchmarks.sh
# --csv, then plot.py. The runs are short (--quick, the default: a few minutes
# on 2 CPUs): the figures show the shape, not publication numbers; --full uses
# the scripts' own defaults.
#
#   benchmarks/make-plots.sh --build-dir build
#   benchmarks/make-plots.sh --build-dir build --providers "tcp shm" --out /tmp/plots --full
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=""
providers="tcp shm"
out="$here/plots"
sizes="8,1K,64K,1M"
quick=1
kinds="process namespaces"
fleet_nodes=""
fleet_devices="lo-rxm lo-tcp"

usage() {
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR   build tree with the benchmarks, the executor manager and the example functions"
  echo "  --providers LIST  loopback providers; device lo-<provider> each (default: \"$providers\")"
  echo "  --sizes LIST      payload sizes (default: $sizes)"
  echo "  --kinds LIST      sandbox kinds (default: \"$kinds\")"
  echo "  --out DIR         where the PNGs go (default: benchmarks/plots)"
  echo "  --quick | --full  short runs (default) or the scripts' own lengths"
  echo "  --fleet-nodes LIST  also run run-rm-fleet.sh for these fleet sizes, e.g. \"100 1000 10000\""
  echo "  --fleet-devices LIST  its devices (default: \"$fleet_devices\")"
}

while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --providers) providers=$2; shift 2 ;;
  --sizes) sizes=$2; shift 2 ;;
  --kinds) kinds=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --quick) quick=1; shift ;;
  --full) quick=0; shift ;;
  --fleet-nodes) fleet_nodes=$2; shift 2 ;;
  --fleet-devices) fleet_devices=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "make-plots.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n $build ]] || { echo "make-plots.sh: --build-dir is required" >&2; exit 2; }
build=$(cd "$build" && pwd)
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-plots.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

devices=""
for p in $providers; do devices+="lo-$p "; done
rfaas_len=() sandbox_len=() lib_len=()
if ((quick)); then
  rfaas_len=(--repeat 1 --iters 2000 --cold-reps 5)
  sandbox_len=(--repeat 2 --cold-reps 5 --iters 1000)
  lib_len=(-n 2000)
fi

echo "==> raw and rFaaS: run-rfaas-benchmarks.sh on ${devices% }"
"$here/run-rfaas-benchmarks.sh" --build-dir "$build" --devices-list "${devices% }" --sizes "$sizes" \
  "${rfaas_len[@]}" --json-dir "$work/lat" >"$work/rfaas.out"
# The raw ping-pong's first CPU and the manager's last, as run-rfaas-benchmarks.sh pins them.
read -r -a cpus <<<"$(/usr/bin/python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
for p in $providers; do
  echo "==> rdmalib: rdmalib_pingpong -p $p -m writeimm"
  "$build/benchmarks/rdmalib_pingpong" -p "$p" -m writeimm -s "$sizes" "${lib_len[@]}" \
    --server-core "${cpus[${#cpus[@]} - 1]}" --client-core "${cpus[0]}" \
    --json "$work/lat/lo-$p-rdmalib.json" >/dev/null
done

echo "==> sandbox kinds: run-sandbox-benchmarks.sh on lo-${providers%% *}"
"$here/run-sandbox-benchmarks.sh" --build-dir "$build" --devices-list "lo-${providers%% *}" \
  --kinds "$kinds" "${sandbox_len[@]}" --csv "$work/sandbox.csv" >"$work/sandbox.out"

plot=("/usr/bin/python3" "$here/plot.py" --dpi 72)
payload=() loopback=()
for p in $providers; do
  payload+=("$work/lat/lo-$p-raw-0.json" "$work/lat/lo-$p-rdmalib.json" "$work/lat/lo-$p-rfaas-0.json")
  loopback+=("$work/lat/lo-$p-raw-0.json" "$work/lat/lo-$p-rfaas-0.json")
done
"${plot[@]}" --kind payload "${payload[@]}" -o "$out/latency-payload.png"
"${plot[@]}" --sizes 8 "${loopback[@]}" -o "$out/latency-loopback.png"
rounds=$(tail -n +2 "$work/sandbox.csv" | cut -d, -f3 | sort -u | wc -l)
"${plot[@]}" --kind sandbox "$work/sandbox.csv" -o "$out/cold-start-sandbox.png" \
  --title "sandbox kinds: $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, median over $rounds rounds, bars min..max"
if [[ -n $fleet_nodes ]]; then
  echo "==> fleet: run-rm-fleet.sh on $fleet_devices, $fleet_nodes nodes"
  # A fleet size that fails is drawn as such: the plot goes on.
  "$here/run-rm-fleet.sh" --build-dir "$build" --devices-list "$fleet_devices" --nodes "$fleet_nodes" \
    --json "$work/fleet.jsonl" >"$work/fleet.out" || true
  "${plot[@]}" --kind fleet "$work/fleet.jsonl" -o "$out/rm-fleet.png" \
    --title "fleet: $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo '?'), $(nproc) CPUs"
fi
ls -l "$out"/*.png
