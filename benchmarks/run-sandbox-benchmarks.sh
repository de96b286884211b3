#!/usr/bin/env bash
# run-sandbox-benchmarks.sh: what confining executors costs, and what the
# executor pool saves. For each device, each sandbox kind (executor.sandbox:
# process, namespaces, oci with a container started ahead, oci-nopool: oci
# starting a container per allocation) and each pool size (executor.pool) it
# starts an executor manager, measures the cold start (rfaas_cold_benchmark: allocate
# to the first result, by phase) and the hot invocation latency
# (rfaas_invocation_benchmark, echo), and stops it. The variants alternate
# within each of --repeat rounds, so that a drift of the host's load favours
# none; the summary gives per variant the median over the rounds of each
# round's median (and p99), the difference and ratio to the first, and the
# cold start's phases.
#
#   benchmarks/run-sandbox-benchmarks.sh --build-dir build
#   benchmarks/run-sandbox-benchmarks.sh --devices-list "lo-tcp lo-shm" --repeat 5 --cold-reps 20
#   benchmarks/run-sandbox-benchmarks.sh --pools "0 1" --no-hot     # cold start, pool off and on
#
# Targets: namespaces within process + 5 ms cold, and within the noise hot
# (the seccomp filter sits on the data path's system calls on tcp); cold
# start under 5 ms with the pool (issue 38); oci within process + 20 ms cold
# when its pool holds a container (each cold allocation of an oci kind waits
# --oci-idle-ms first, for the pool to be refilled). The oci kinds need root,
# podman and runc, and build their image offline (scripts/lib/oci-image.sh);
# they are left out, with the reason, where that fails.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$here/..
[[ -f $repo/CMakeLists.txt ]] || repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$here/../CMakeCache.txt")
build=
devices_db=$repo/config/devices.json
devices_list="lo-tcp lo-shm"
kinds="process namespaces oci oci-nopool"
pools=1
hot=1
repeat=3
cold_reps=15
sizes=8,1K
iters=3000
idle_ms=300
oci_idle_ms=2500
csv=

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  echo "options:"
  echo "  --build-dir DIR       build tree (default: the first build*/ with the benchmarks)"
  echo "  --devices FILE        device database (default: config/devices.json)"
  echo "  --devices-list LIST   devices (default: \"$devices_list\")"
  echo "  --kinds LIST          sandbox kinds (default: \"$kinds\")"
  echo "  --pools LIST          executor.pool sizes (default: \"$pools\"; \"0 1\": pool off and on)"
  echo "  --no-hot              cold start only"
  echo "  --repeat N            rounds, kinds alternating (default: $repeat)"
  echo "  --cold-reps N         allocations per cold run (default: $cold_reps)"
  echo "  --idle-ms N           pause between allocations of a cold run (default: $idle_ms)"
  echo "  --oci-idle-ms N       the same for the oci kinds (default: $oci_idle_ms: the pool refills)"
  echo "  --sizes LIST          hot payload sizes (default: $sizes)"
  echo "  --iters N             hot calls per size (default: $iters)"
  echo "  --csv FILE            also write every round's rows there (device,kind,round, then"
  echo "                        the benchmarks' impl,...,median_us,p99_us,min_us,mean_us),"
  echo "                        for benchmarks/plot.py --kind sandbox"
}

while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --devices-list) devices_list=$2; shift 2 ;;
  --kinds) kinds=$2; shift 2 ;;
  --pools) pools=$2; shift 2 ;;
  --no-hot) hot=0; shift ;;
  --repeat) repeat=$2; shift 2 ;;
  --cold-reps) cold_reps=$2; shift 2 ;;
  --idle-ms) idle_ms=$2; shift 2 ;;
  --oci-idle-ms) oci_idle_ms=$2; shift 2 ;;
  --sizes) sizes=$2; shift 2 ;;
  --iters) iters=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-sandbox-benchmarks.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
for p in $pools; do
  [[ $p =~ ^[0-9]+$ ]] || { echo "run-sandbox-benchmarks.sh: --pools needs sizes (0..64)" >&2; exit 2; }
done
for n in repeat cold_reps iters idle_ms oci_idle_ms; do
  [[ ${!n} =~ ^[0-9]+$ && ${!n} -gt 0 ]] || { echo "run-sandbox-benchmarks.sh: --${n//_/-} needs a positive integer" >&2; exit 2; }
done

if [[ -z $build ]]; then
  if [[ -x $here/rfaas_cold_benchmark ]]; then build=$here/..; else
    for d in "$repo"/build*/; do [[ -x $d/benchmarks/rfaas_cold_benchmark ]] && { build=$d; break; }; done
  fi
fi
bench=$build/benchmarks
manager=$build/server/executor_manager/executor_manager
library=$build/examples/functions/libfunctions.so
needed=("$bench/rfaas_cold_benchmark" "$manager" "$library")
((hot)) && needed+=("$bench/rfaas_invocation_benchmark")
for f in "${needed[@]}"; do
  [[ -e $f ]] || { echo "run-sandbox-benchmarks.sh: $f is missing (build it, or --build-dir)" >&2; exit 1; }
done

read -r -a cpus <<<"$(/usr/bin/python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
first=${cpus[0]}
last=${cpus[${#cpus[@]} - 1]}
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$first")

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-sandbox-bench.XXXXXX")
# shellcheck source=../scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"
# Set by start_manager (scripts/lib/manager.sh), read by stop_manager.
# shellcheck disable=SC2034
manager_pid='' manager_address=''
# shellcheck source=scripts/lib/oci-image.sh
source "$repo/scripts/lib/oci-image.sh"
image=''
trap 'stop_manager; [[ -n $image ]] && "${oci_podman[@]}" rmi -f "$image" >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
if [[ " $kinds " == *" oci"* ]]; then
  if ! why=$(oci_usable); then
    echo "run-sandbox-benchmarks.sh: no oci kinds: the oci sandbox $why"
    kinds=$(echo "$kinds" | tr ' ' '\n' | grep -v '^oci' | tr '\n' ' ')
  elif ! oci_make_image "$work" "localhost/rfaas-sandbox-bench:$$"; then
    echo "run-sandbox-benchmarks.sh: no oci kinds: podman cannot import an image here"
    kinds=$(echo "$kinds" | tr ' ' '\n' | grep -v '^oci' | tr '\n' ' ')
  else
    image=localhost/rfaas-sandbox-bench:$$
  fi
fi

# A variant is a sandbox kind, with its pool size when more than one is compared.
variants=
for kind in $kinds; do
  for pool in $pools; do
    if [[ $pools == *" "* ]]; then variants+="$kind/pool=$pool "; else variants+="$kind "; fi
  done
done
pool_of() { if [[ $1 == */pool=* ]]; then echo "${1##*=}"; else echo "$pools"; fi; }

rows=$work/rows.csv
: >"$rows"
for dev in $devices_list; do
  for ((r = 0; r < repeat; r++)); do
    order=$variants
    ((r % 2 == 1)) && order=$(echo "$variants" | tr ' ' '\n' | tac | tr '\n' ' ')
    for variant in $order; do
      kind=${variant%%/*}
      cfg=$work/manager.json
      /usr/bin/python3 - "$repo/config" "$kind" "$image" "$(pool_of "$variant")" >"$cfg" <<'PY'
import json, sys
config, kind, image, pool = sys.argv[1:]
c = json.load(open(config + "/executor_manager.json"))
if kind.startswith("oci"):
    text = open(config + "/sandbox/oci.json").read()
    c["executor"].update(json.loads(text.replace("localhost/rfaas-executor:latest", image))["executor"])
    c["executor"]["oci"]["pool"] = 0 if kind == "oci-nopool" else 1
else:
    c["executor"]["sandbox"] = kind
    c["executor"]["pool"] = int(pool)
print(json.dumps(c))
PY
      idle=$idle_ms
      [[ $kind == oci* ]] && idle=$oci_idle_ms
      if ! start_manager "$work/manager.log" 60 "$manager" --config "$cfg" --skip-resource-manager \
        --devices "$devices_db" --device "$dev" --host 127.0.0.1 --port 0 --cores "$last"; then
        echo "run-sandbox-benchmarks.sh: the manager did not start on $dev with $variant:" >&2
        cat "$work/manager.log" >&2
        exit 1
      fi
      ((r > 0)) || grep -o 'executor sandbox: .*' "$work/manager.log" | sed "s/^/  $dev: /"
      if [[ $kind != oci* ]] && (($(pool_of "$variant") > 0)); then
        # The first allocation meets a full pool, as every later one does
        # after --idle-ms: the zygote forks its pooled executors after the
        # manager's readiness line.
        for _ in $(seq 1200); do
          grep -q 'pooled executor(s) wait' "$work/manager.log" && break
          sleep 0.05
        done
      fi
      if [[ $kind == oci ]]; then
        # The first allocation too meets a pool that holds a container.
        for _ in $(seq 1200); do
          grep -q 'container ready, waiting' "$work/manager.log" && break
          sleep 0.05
        done
      fi
      rm -f "$work/one.csv"
      "${pin[@]}" "$bench/rfaas_cold_benchmark" --devices "$devices_db" --device "$dev" \
        --manager "$manager_address" --library "$library" --repetitions "$cold_reps" \
        --idle-ms "$idle" --csv "$work/one.csv" >/dev/null || exit 1
      if ((hot)); then
        "${pin[@]}" "$bench/rfaas_invocation_benchmark" --devices "$devices_db" --device "$dev" \
          --manager "$manager_address" --library "$library" --sizes "$sizes" --iters "$iters" \
          --csv "$work/one.csv" >/dev/null || exit 1
      fi
      tail -n +2 "$work/one.csv" | sed "s|^|$dev,$variant,$r,|" >>"$rows"
      stop_manager
    done
  done
done

if [[ -n $csv ]]; then
  { echo "device,kind,round,impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,min_us,mean_us"
    cat "$rows"; } >"$csv"
fi

/usr/bin/python3 - "$rows" "$variants" "$here" <<'PY'
import collections, csv, sys
rows, kinds = sys.argv[1], sys.argv[2].split()
sys.path.insert(0, sys.argv[3])
import rfaas_stats
# (dev, variant, metric) -> per-round medians (or p99s)
v = collections.defaultdict(list)
# (dev, variant) -> phase -> per-round medians
phases = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(rows):
    dev, kind, rnd, rest = line.rstrip("\n").split(",", 3)
    r = next(csv.reader([rest]))
    impl, mode, size, median, p99 = r[0], r[4], r[5], float(r[7]), float(r[8])
    if impl == "rfaas-cold":
        phases[(dev, kind)][mode].append(median)
        if mode == "first_result":
            v[(dev, kind, "cold median (ms)")].append(median / 1000)
            v[(dev, kind, "cold p99 (ms)")].append(p99 / 1000)
    else:
        v[(dev, kind, f"hot {size} B (us)")].append(median)
devs = list(dict.fromkeys(k[0] for k in v))
for dev in devs:
    metrics = list(dict.fromkeys(k[2] for k in v if k[0] == dev))
    print(f"\n{dev}: median over rounds of each round's median")
    print(f"{'variant':<20}" + "".join(f"{m:>26}" for m in metrics))
    base = {m: rfaas_stats.median(v[(dev, kinds[0], m)]) for m in metrics}
    for kind in kinds:
        cells = []
        for m in metrics:
            x = rfaas_stats.median(v[(dev, kind, m)])
            cells.append(f"{x:.2f}" if kind == kinds[0] else
                         f"{x:.2f} ({x - base[m]:+.2f}, x{x / base[m]:.2f})")
        print(f"{kind:<20}" + "".join(f"{c:>26}" for c in cells))
for dev in devs:
    print(f"\n{dev}: cold start by phase (us), median over rounds of each round's median")
    names = list(dict.fromkeys(m for k in kinds for m in phases[(dev, k)]))
    print(f"{'phase':<14}" + "".join(f"{k:>22}" for k in kinds))
    for m in names:
        cells = [rfaas_stats.median(phases[(dev, k)][m]) if phases[(dev, k)][m] else float("nan")
                 for k in kinds]
        print(f"{m:<14}" + "".join(f"{c:>22.1f}" for c in cells))
PY
