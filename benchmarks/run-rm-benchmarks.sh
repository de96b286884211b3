#!/usr/bin/env bash
# run-rm-benchmarks.sh: the resource manager's lease latency, leases per
# second from concurrent clients and REST requests per second, next to the raw
# send ping-pong of the same provider measured in the same run.
#
# Per device it starts a resource manager (REST and fabric on port 0, waiting
# for its readiness lines), adds and starts registered executor managers
# (port 0, waiting until the REST API shows them up; by default enough of
# them that every throughput and mixed client finds a free core: each offers
# this machine's CPUs), then runs:
#   raw_libfabric_pingpong -m send (the size of a lease grant), the baseline;
#   rm_lease_benchmark --mode latency (lease: request -> grant; release);
#   rm_lease_benchmark --mode throughput for each client count;
#   rm_rest_benchmark on GET /health, /nodes and /metrics for each thread
#     count, on kept-alive connections and with a new connection per request;
#   rm_rest_benchmark --mode mixed: --mixed-clients leasing processes while one
#     thread polls /metrics and /nodes (leases/s with and without it, p50/p99);
# and stops everything it started (also on failure or Ctrl-C). The baseline
# runs pinned (server on the first CPU, client on the last); the resource
# manager and its clients only with --pin. A summary table closes the run.
#
#   benchmarks/run-rm-benchmarks.sh --build-dir build
#   benchmarks/run-rm-benchmarks.sh --devices-list "lo-tcp lo-shm" --csv rm.csv --json rm.json
#   benchmarks/run-rm-benchmarks.sh --smoke      # a few seconds: does everything still run?
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Run from the build tree (CMake copies it there): the sources are where
# CMakeCache.txt says.
if [[ ! -f $repo/config/devices.json && -f $here/../CMakeCache.txt ]]; then
  repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$here/../CMakeCache.txt")
fi
build=""
devices_db="$repo/config/devices.json"
devices_list="lo-tcp lo-shm"
clients="1,4,16"
seconds=2
rest_threads="1,4"
mixed_clients=16
iterations=2000
budget=2
managers=auto
csv=""
json=""
smoke=0
pin=0

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR       build tree (default: the one holding this script, or build*/)"
  echo "  --devices FILE        device database (default: config/devices.json)"
  echo "  --devices-list LIST   space-separated device entries (default: \"$devices_list\")"
  echo "  --clients LIST        throughput client processes (default: $clients)"
  echo "  --seconds S           seconds per throughput and REST measurement (default: $seconds)"
  echo "  --rest-threads LIST   REST client threads (default: $rest_threads)"
  echo "  --mixed-clients N     leasing clients beside the REST poller (default: $mixed_clients)"
  echo "  --iterations N        leases timed for the latency (default: $iterations, within --budget s)"
  echo "  --managers N|auto     registered executor managers, each offering every CPU of this"
  echo "                        machine (default: auto, enough that no throughput or mixed"
  echo "                        client is refused for lack of a free core; at least 2)"
  echo "  --csv FILE            append every row (baseline, latency, throughput, rest) as CSV"
  echo "  --json FILE           write the summary and the run's metadata as JSON"
  echo "  --pin                 pin the resource manager to the first CPU, the latency and"
  echo "                        REST clients to the last (default: only the baseline is pinned)"
  echo "  --smoke               tiny run (one device unless given, short measurements)"
}

devices_given=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --devices-list) devices_list=$2; devices_given=1; shift 2 ;;
  --clients) clients=$2; shift 2 ;;
  --seconds) seconds=$2; shift 2 ;;
  --rest-threads) rest_threads=$2; shift 2 ;;
  --mixed-clients) mixed_clients=$2; shift 2 ;;
  --iterations) iterations=$2; shift 2 ;;
  --managers) managers=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  --json) json=$2; shift 2 ;;
  --smoke) smoke=1; shift ;;
  --pin) pin=1; shift ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-rm-benchmarks.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $managers == auto || $managers =~ ^[1-9][0-9]?$ ]] ||
  { echo "run-rm-benchmarks.sh: --managers is auto or 1..99" >&2; exit 2; }
if ((smoke)); then
  ((devices_given)) || devices_list=lo-tcp
  clients=2 seconds=0.3 rest_threads=2 iterations=100 budget=0.3 managers=1 mixed_clients=2
fi

if [[ -z $build && -x $here/rm_lease_benchmark ]]; then
  build=$here/..
elif [[ -z $build ]]; then
  for d in "$repo"/build*/; do
    if [[ -x $d/benchmarks/rm_lease_benchmark ]]; then build=$d; break; fi
  done
fi
bench=$build/benchmarks
rm_bin=$build/server/resource_manager/resource_manager
manager_bin=$build/server/executor_manager/executor_manager
for f in "$bench/rm_lease_benchmark" "$bench/rm_rest_benchmark" "$bench/raw_libfabric_pingpong" \
  "$rm_bin" "$manager_bin"; do
  [[ -x $f ]] || { echo "run-rm-benchmarks.sh: $f is missing (build it, or --build-dir)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "run-rm-benchmarks.sh: needs curl" >&2; exit 1; }

read -r -a cpus <<<"$(python3 -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')"
if [[ $managers == auto ]]; then
  # Leases are taken and released at once and never start an executor, so
  # a client holds at most one core at a time: with a core for each, no
  # request is refused and leases/s counts the resource manager's work, not
  # contention for the cores.
  most=$mixed_clients
  for n in ${clients//,/ }; do if ((n > most)); then most=$n; fi; done
  managers=$(((most + ${#cpus[@]} - 1) / ${#cpus[@]}))
  ((managers >= 2)) || managers=2
fi
first=${cpus[0]}
last=${cpus[${#cpus[@]} - 1]}
all_cpus=$(IFS=,; echo "${cpus[*]}")
pin_rm=() pin_client=()
if ((pin)) && command -v taskset >/dev/null; then
  pin_rm=(taskset -c "$first")
  pin_client=(taskset -c "$last")
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-rm-bench.XXXXXX")
token=rm-bench-token-$RANDOM$RANDOM-0123456789
auth=(-H "Authorization: Bearer $token")
# rm_rest_benchmark reads it from a file: never on a command line.
(umask 077 && printf '%s\n' "$token" >"$work/token")
rm_pid=
manager_pids=()
# shellcheck source=../scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"

stop_all() {
  local pid
  for pid in "${manager_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${manager_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  manager_pids=()
  if [[ -n $rm_pid ]]; then
    kill -TERM "$rm_pid" 2>/dev/null || true
    wait "$rm_pid" 2>/dev/null || true
    rm_pid=
  fi
}
keep_logs=0
finish() {
  stop_all
  if ((keep_logs)); then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

fail() {
  echo "run-rm-benchmarks.sh: $*" >&2
  keep_logs=1
  exit 1
}

# start_rm DEVICE LOG: the resource manager, once both its readiness lines
# came (start_resource_manager, scripts/lib/manager.sh), its stderr in LOG.
# Sets rm_pid, rm_fabric (host:port) and rm_rest (port).
start_rm() {
  local dev=$1 log=$2
  cat >"$work/rm-$dev.json" <<JSON
{
  "database": "rm-$dev.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "threads": 2, "token": "$token" },
  "fabric": { "device_database": "$devices_db", "device": "$dev", "port": 0,
              "heartbeat_ms": 1000, "accept_timeout_ms": 5000 },
  "leases": { "default_duration_ms": 60000 },
  "log": { "level": "warn" }
}
JSON
  start_resource_manager "$log" 30 "${pin_rm[@]}" "$rm_bin" --config "$work/rm-$dev.json" ||
    fail "the resource manager on $dev printed no readiness line within 30 s: $(cat "$log")"
}

# start_node NAME DEVICE: adds the node with a fresh secret, starts its
# executor manager registered with the resource manager.
start_node() {
  local name=$1 dev=$2 secret code
  secret=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  (umask 077 && echo "$secret" >"$work/$name.secret")
  code=$(curl -s -o "$work/add-$name.out" -w '%{http_code}' -X POST \
    -H "Authorization: Bearer $token" "http://127.0.0.1:$rm_rest/nodes" \
    -d "{\"name\":\"$name\",\"address\":\"127.0.0.1:1\",\"cores\":${#cpus[@]},\"memory_mib\":65536,\"secret\":\"$secret\"}")
  [[ $code == 201 ]] || fail "adding node $name: HTTP $code $(cat "$work/add-$name.out")"
  cat >"$work/$name.json" <<JSON
{
  "device_database": "$devices_db",
  "device": "$dev",
  "listen": { "host": "127.0.0.1", "port": 0 },
  "resource_manager": { "enabled": true, "address": "$rm_fabric",
                        "secret_file": "$work/$name.secret", "node": "$name" },
  "resources": { "cores": [$all_cpus], "memory_mib": 65536 },
  "log": { "level": "info" }
}
JSON
  manager_pid=
  if ! start_manager "$work/$name.log" 60 "$manager_bin" --config "$work/$name.json"; then
    [[ -n $manager_pid ]] && manager_pids+=("$manager_pid")
    fail "the executor manager of $name did not start: $(tail -n 20 "$work/$name.log")"
  fi
  manager_pids+=("$manager_pid")
}

# wait_nodes_up N: until the REST API lists N nodes up (30 s at most).
wait_nodes_up() {
  local want=$1 up
  for _ in $(seq 1 600); do
    up=$(curl -s "${auth[@]}" "http://127.0.0.1:$rm_rest/nodes" | grep -o '"state":"up"' | wc -l || true)
    ((up >= want)) && return 0
    sleep 0.05
  done
  fail "only $up of $want nodes registered within 30 s (logs in $work)"
}

# The resource manager's CPU time so far, in clock ticks (utime + stime of
# /proc/PID/stat: every thread of the process).
clk_tck=$(getconf CLK_TCK)
rm_cpu_ticks() {
  local stat
  stat=$(cat "/proc/$rm_pid/stat") || fail "the resource manager is gone"
  stat=${stat##*) }
  awk '{ print $12 + $13 }' <<<"$stat"
}

provider_of() {
  python3 -c 'import json, sys
db = json.load(open(sys.argv[1]))
print(next(d.get("provider", "") for d in db["devices"] if d["name"] == sys.argv[2]))' \
    "$devices_db" "$1"
}

rows=$work/rows.csv
: >"$rows"
for dev in $devices_list; do
  provider=$(provider_of "$dev")
  if ((pin)); then where="resource manager on CPU $first, clients on CPU $last"; else where="not pinned"; fi
  echo "==> $dev (provider ${provider:-auto}): $managers node(s), $where"
  start_rm "$dev" "$work/rm-$dev.log"
  echo "resource manager: fabric $rm_fabric, REST port $rm_rest"
  for ((i = 1; i <= managers; i++)); do start_node "n$i" "$dev"; done
  wait_nodes_up "$managers"

  # The baseline: the raw send ping-pong of this provider, at the size of a
  # one-part lease grant (the request is smaller), pinned like the benchmark.
  raw_env=(env)
  [[ $provider == *ofi_rxm* ]] && raw_env=(env FI_OFI_RXM_CM_PROGRESS_INTERVAL=100)
  raw_args=(-p "${provider:-tcp}" -m send -s 256 --server-core "$first" --client-core "$last"
    --budget "$budget" --csv "$work/raw.csv" -q)
  ((smoke)) && raw_args+=(-n 500)
  rm -f "$work/raw.csv"
  "${raw_env[@]}" "$bench/raw_libfabric_pingpong" "${raw_args[@]}" >/dev/null ||
    fail "raw_libfabric_pingpong on $dev failed"
  tail -n +2 "$work/raw.csv" | sed "s/^/raw,$dev,/" >>"$rows"

  rm -f "$work/one.csv"
  cpu0=$(rm_cpu_ticks)
  "${pin_client[@]}" "$bench/rm_lease_benchmark" --devices "$devices_db" --device "$dev" \
    --resource-manager "$rm_fabric" --mode latency --iterations "$iterations" --budget "$budget" \
    --csv "$work/one.csv" || fail "rm_lease_benchmark --mode latency on $dev failed"
  echo "cpu,$dev,latency,1,$(($(rm_cpu_ticks) - cpu0)),$clk_tck" >>"$rows"
  tail -n +2 "$work/one.csv" | sed "s/^/lease,$dev,/" >>"$rows"

  # One run per client count, so that the resource manager's CPU time
  # (utime + stime of the process, all its threads: what getrusage would
  # give it) is known per run.
  for n in ${clients//,/ }; do
    rm -f "$work/one.csv"
    cpu0=$(rm_cpu_ticks)
    "$bench/rm_lease_benchmark" --devices "$devices_db" --device "$dev" \
      --resource-manager "$rm_fabric" --mode throughput --clients "$n" --seconds "$seconds" \
      --csv "$work/one.csv" || fail "rm_lease_benchmark --mode throughput on $dev failed"
    echo "cpu,$dev,throughput,$n,$(($(rm_cpu_ticks) - cpu0)),$clk_tck" >>"$rows"
    tail -n +2 "$work/one.csv" | sed "s/^/leases,$dev,/" >>"$rows"
  done

  # REST: kept-alive connections and a new one per request, same run.
  rm -f "$work/one.csv"
  "${pin_client[@]}" "$bench/rm_rest_benchmark" --port "$rm_rest" --token-file "$work/token" \
    --paths /health,/nodes,/metrics --connections keep-alive,new \
    --threads "$rest_threads" --seconds "$seconds" --csv "$work/one.csv" ||
    fail "rm_rest_benchmark on $dev failed"
  tail -n +2 "$work/one.csv" | sed "s/^/rest,$dev,/" >>"$rows"

  # REST beside leasing clients: leasing alone, polling alone, both.
  rm -f "$work/one.csv"
  "$bench/rm_rest_benchmark" --port "$rm_rest" --token-file "$work/token" --mode mixed \
    --devices "$devices_db" --device "$dev" --resource-manager "$rm_fabric" \
    --clients "$mixed_clients" --seconds "$seconds" --csv "$work/one.csv" ||
    fail "rm_rest_benchmark --mode mixed on $dev failed"
  tail -n +2 "$work/one.csv" | sed "s/^/mixed,$dev,/" >>"$rows"

  # Every lease was released: none may be left active.
  active=$(curl -s "${auth[@]}" "http://127.0.0.1:$rm_rest/leases")
  [[ $active == "[]" ]] || fail "leases left active after the benchmarks on $dev: $active"
  stop_all
done

python3 - "$rows" "$csv" "$json" "$smoke" "$repo" <<'PY'
import csv, json, os, platform, subprocess, sys, time
rows_file, out_csv, out_json, smoke = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
repo = sys.argv[5]
raw, lease, thr, rest, cpu, mixed, devices = {}, {}, {}, {}, {}, {}, []
with open(rows_file) as f:
    for line in f:
        tag, dev, rest_of = line.rstrip("\n").split(",", 2)
        r = next(csv.reader([rest_of]))
        if dev not in devices:
            devices.append(dev)
        if tag == "raw":   # impl,provider,endpoint,wait,mode,size,iters,median,p99,min,mean
            raw[dev] = {"provider": r[1], "endpoint": r[2], "size": int(r[5]), "n": int(r[6]),
                        "median_us": float(r[7]), "p99_us": float(r[8])}
        elif tag == "lease":  # benchmark,device,op,n,median,p99,min,mean
            lease.setdefault(dev, {})[r[2]] = {"n": int(r[3]), "median_us": float(r[4]),
                                               "p99_us": float(r[5])}
        elif tag == "leases":  # benchmark,device,clients,seconds,leases,refused,errors,per_s,req_s,median
            thr.setdefault(dev, []).append({"clients": int(r[2]), "seconds": float(r[3]),
                                            "leases": int(r[4]), "refused": int(r[5]),
                                            "errors": int(r[6]), "leases_per_s": float(r[7]),
                                            "requests_per_s": float(r[8]),
                                            "lease_median_us": float(r[9])})
        elif tag == "cpu":  # phase,clients,ticks,ticks_per_s
            cpu.setdefault(dev, {})[(r[0], int(r[1]))] = int(r[2]) / float(r[3])
        elif tag == "rest":  # benchmark,path,connection,threads,seconds,requests,errors,conns,per_s,p50,p99
            rest.setdefault(dev, []).append({"path": r[1], "connection": r[2], "threads": int(r[3]),
                                             "requests": int(r[5]), "connections": int(r[7]),
                                             "requests_per_s": float(r[8]),
                                             "p50_us": float(r[9]), "p99_us": float(r[10])})
        elif tag == "mixed":  # benchmark,phase,clients,seconds,leases,refused,errors,leases_per_s,
            # lease_median_us,metrics_n,metrics_p50,metrics_p99,nodes_n,nodes_p50,nodes_p99,
            # server_over_1ms_pct,server_over_10ms_pct
            mixed.setdefault(dev, []).append({
                "phase": r[1], "clients": int(r[2]), "leases": int(r[4]),
                "leases_per_s": float(r[7]), "lease_median_us": float(r[8]),
                "metrics_requests": int(r[9]), "metrics_p50_us": float(r[10]),
                "metrics_p99_us": float(r[11]), "nodes_requests": int(r[12]),
                "nodes_p50_us": float(r[13]), "nodes_p99_us": float(r[14]),
                "server_over_1ms_pct": float(r[15]), "server_over_10ms_pct": float(r[16])})

missing = [d for d in devices if d not in raw or "lease" not in lease.get(d, {})
           or not thr.get(d) or not rest.get(d) or len(mixed.get(d, [])) != 3]
if missing:
    sys.exit("run-rm-benchmarks.sh: no figures for " + ", ".join(missing))
# Kept-alive clients open one connection per thread: more means the server
# closed connections it should have kept.
reopened = ["%s %s %d threads: %d connections" % (d, t["path"], t["threads"], t["connections"])
            for d in devices for t in rest[d]
            if t["connection"] == "keep-alive" and t["connections"] > t["threads"]]
if reopened:
    sys.exit("run-rm-benchmarks.sh: kept-alive connections were closed: " + "; ".join(reopened))

print()
print("load average %.1f %.1f %.1f on %d CPUs (a shared host: p99 mostly measures other processes)" %
      (os.getloadavg() + (len(os.sched_getaffinity(0)),)))
print("Lease latency against the raw send round trip (%d B) of the same provider, µs" %
      next(iter(raw.values()))["size"])
print("%-8s %8s %8s %9s %9s %11s %11s %9s %11s %9s" % ("device", "raw_med", "raw_p99",
      "lease_med", "lease_p99", "release_med", "release_p99", "lease/raw", "release/raw",
      "p99/med"))
summary = {}
nan = float("nan")
for d in devices:
    lr, rl = lease[d]["lease"], lease[d].get("release", {"median_us": 0, "p99_us": 0})
    base = raw[d]["median_us"]
    ratio = lr["median_us"] / base if base > 0 else nan
    rel_ratio = rl["median_us"] / base if base > 0 else nan
    tail = lr["p99_us"] / lr["median_us"] if lr["median_us"] > 0 else nan
    print("%-8s %8.1f %8.1f %9.1f %9.1f %11.1f %11.1f %9.1f %11.1f %9.1f" % (d, base,
          raw[d]["p99_us"], lr["median_us"], lr["p99_us"], rl["median_us"], rl["p99_us"], ratio,
          rel_ratio, tail))
    summary[d] = {"raw": raw[d], "lease": lr, "release": rl, "lease_over_raw": ratio,
                  "release_over_raw": rel_ratio, "lease_p99_over_median": tail,
                  "throughput": thr[d], "rest": rest[d], "mixed": mixed[d]}
    n = lr["n"]
    if ("latency", 1) in cpu.get(d, {}) and n:
        summary[d]["latency_cpu_us_per_lease"] = cpu[d][("latency", 1)] * 1e6 / n
print()
print("Leases per second (lease + release loops; refused = no free core at that moment);")
print("rm_cpu_us: the resource manager's CPU time over the run (utime + stime, all threads)")
print("per lease granted (its release and any refused requests included), and per answered")
print("request (grants and refusals; a release is not counted as a request)")
print("%-8s %8s %12s %14s %10s %16s %10s %10s" % ("device", "clients", "leases_per_s",
      "requests_per_s", "refused", "lease_median_us", "cpu/lease", "cpu/req"))
for d in devices:
    for t in thr[d]:
        sec = cpu.get(d, {}).get(("throughput", t["clients"]))
        t["rm_cpu_us_per_lease"] = sec * 1e6 / t["leases"] if sec is not None and t["leases"] else nan
        req = t["leases"] + t["refused"]
        t["rm_cpu_us_per_request"] = sec * 1e6 / req if sec is not None and req else nan
        print("%-8s %8d %12.0f %14.0f %10d %16.1f %10.1f %10.1f" % (d, t["clients"],
              t["leases_per_s"], t["requests_per_s"], t["refused"], t["lease_median_us"],
              t["rm_cpu_us_per_lease"], t["rm_cpu_us_per_request"]))
print()
print("REST GETs per second (one request at a time per thread; keep-alive: one connection per")
print("thread; new: a new connection per request)")
print("%-8s %-8s %-10s %8s %14s %10s %10s" % ("device", "path", "connection", "threads",
      "requests_per_s", "p50_us", "p99_us"))
for d in devices:
    for t in rest[d]:
        print("%-8s %-8s %-10s %8d %14.0f %10.1f %10.1f" % (d, t["path"], t["connection"],
              t["threads"], t["requests_per_s"], t["p50_us"], t["p99_us"]))
print()
print("REST beside leasing clients (one thread polling /metrics and /nodes, kept alive; µs;")
print("srv>1ms, srv>10ms: share of those reads whose handler took that long, loop included)")
print("%-8s %-7s %8s %12s %12s %12s %12s %12s %8s %9s" % ("device", "phase", "clients",
      "leases_per_s", "metrics_p50", "metrics_p99", "nodes_p50", "nodes_p99", "srv>1ms",
      "srv>10ms"))
for d in devices:
    for m in mixed[d]:
        print("%-8s %-7s %8d %12.0f %12.1f %12.1f %12.1f %12.1f %7.2f%% %8.2f%%" % (d, m["phase"],
              m["clients"], m["leases_per_s"], m["metrics_p50_us"], m["metrics_p99_us"],
              m["nodes_p50_us"], m["nodes_p99_us"], m["server_over_1ms_pct"],
              m["server_over_10ms_pct"]))

if out_csv:
    fresh = not os.path.exists(out_csv) or os.path.getsize(out_csv) == 0
    with open(out_csv, "a") as f:
        if fresh:
            f.write("tag,device,row...\n")
        with open(rows_file) as rf:
            f.write(rf.read())
if out_json:
    meta = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(), "cpus": len(os.sched_getaffinity(0)),
            "loadavg": os.getloadavg(), "smoke": smoke}
    try:
        meta["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                        text=True, cwd=repo).stdout.strip()
    except OSError:
        pass
    with open(out_json, "w") as f:
        json.dump({"benchmark": "resource_manager", "meta": meta, "devices": summary}, f, indent=2)
PY
