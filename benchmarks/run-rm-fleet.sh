#!/usr/bin/env bash
# run-rm-fleet.sh: one real resource manager against a simulated fleet of N
# executor managers and M leasing clients (rm_fleet), for each N and device.
#
# Per (device, N) it starts a fresh resource manager (REST and fabric on port
# 0, waiting for its readiness lines; max_connections raised to fit the
# fleet), runs rm_fleet against it and appends rm_fleet's JSON line to the
# output, then stops it. The figures: the resource manager's CPU (heartbeats
# only, and while leasing), RSS, descriptors, lease p50/p99 and leases/s,
# REST latency of GET /nodes and /metrics, database growth per lease.
#
#   benchmarks/run-rm-fleet.sh                          # lo-rxm and lo-tcp, N = 100 1000 10000
#   benchmarks/run-rm-fleet.sh --devices-list lo-rxm --nodes "100 1000" --json fleet.jsonl
#   benchmarks/run-rm-fleet.sh --smoke                  # N = 100, a few seconds (the ctest smoke)
#
# A run that fails (nodes that never registered, no lease granted) is
# recorded with "failed": true and the resource manager's last log lines, and
# the script goes on with the next one; it exits 1 if any failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# Run from the build tree (a copy of this script): the source is where CMake says.
if [[ ! -f $repo/config/devices.json && -f $here/../CMakeCache.txt ]]; then
  repo=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$here/../CMakeCache.txt")
fi
build=""
devices_db="$repo/config/devices.json"
devices_list="lo-rxm lo-tcp"
nodes_list="100 1000 10000"
clients=2
rate=0
seconds=10
idle_seconds=5
heartbeat_ms=1000
rest_every_ms=100
retention_days=30
links_per_host=2500
register_timeout=600
rxm_default=0
rm_bin=""
json=""
smoke=0

usage() {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR       build tree (default: the one holding this script, or build*/)"
  echo "  --devices FILE        device database (default: config/devices.json)"
  echo "  --devices-list LIST   space-separated device entries (default: \"$devices_list\")"
  echo "  --nodes LIST          space-separated fleet sizes (default: \"$nodes_list\")"
  echo "  --clients M           leasing client processes (default: $clients)"
  echo "  --rate R              leases per second per client, 0 = flat out (default: $rate)"
  echo "  --seconds S           seconds of leasing (default: $seconds)"
  echo "  --idle-seconds S      seconds of heartbeats only (default: $idle_seconds)"
  echo "  --heartbeat-ms MS     heartbeat period the resource manager asks (default: $heartbeat_ms)"
  echo "  --rest-every-ms MS    pause between REST probes while leasing, 0 = none (default: $rest_every_ms)"
  echo "  --retention-days D    the resource manager's retention (default: $retention_days)"
  echo "  --links-per-host K    simulated managers per process (default: $links_per_host;"
  echo "                        connected providers: at most 2000, each link holds descriptors)"
  echo "  --register-timeout S  seconds the fleet may take to register (default: $register_timeout)"
  echo "  --rxm-default         keep tcp;ofi_rxm's default send queue (2048) on the hosts: shows its limit"
  echo "  --rm-bin FILE         the resource manager to measure (default: the build tree's);"
  echo "                        alternate two builds against the same simulator and clients"
  echo "  --json FILE           append every run's JSON line here (default: print only)"
  echo "  --smoke               N = 100 on lo-rxm, 2 s of leasing (unless given otherwise)"
}

devices_given=0 nodes_given=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices) devices_db=$2; shift 2 ;;
  --devices-list) devices_list=$2; devices_given=1; shift 2 ;;
  --nodes) nodes_list=$2; nodes_given=1; shift 2 ;;
  --clients) clients=$2; shift 2 ;;
  --rate) rate=$2; shift 2 ;;
  --seconds) seconds=$2; shift 2 ;;
  --idle-seconds) idle_seconds=$2; shift 2 ;;
  --heartbeat-ms) heartbeat_ms=$2; shift 2 ;;
  --rest-every-ms) rest_every_ms=$2; shift 2 ;;
  --retention-days) retention_days=$2; shift 2 ;;
  --links-per-host) links_per_host=$2; shift 2 ;;
  --register-timeout) register_timeout=$2; shift 2 ;;
  --rxm-default) rxm_default=1; shift ;;
  --rm-bin) rm_bin=$2; shift 2 ;;
  --json) json=$2; shift 2 ;;
  --smoke) smoke=1; shift ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-rm-fleet.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
if ((smoke)); then
  ((devices_given)) || devices_list=lo-rxm
  ((nodes_given)) || nodes_list=100
  seconds=2 idle_seconds=1.5
fi

if [[ -z $build && -x $here/rm_fleet ]]; then
  build=$here/..
elif [[ -z $build ]]; then
  for d in "$repo"/build*/; do
    if [[ -x $d/benchmarks/rm_fleet ]]; then build=$d; break; fi
  done
fi
fleet_bin=$build/benchmarks/rm_fleet
[[ -n $rm_bin ]] || rm_bin=$build/server/resource_manager/resource_manager
for f in "$fleet_bin" "$rm_bin"; do
  [[ -x $f ]] || { echo "run-rm-fleet.sh: $f is missing (build it, or --build-dir)" >&2; exit 1; }
done

# Connected providers hold descriptors per link on both sides: take all the
# hard limit allows, and say what it is.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "descriptor limit: $(ulimit -n)" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-rm-fleet.XXXXXX")
token=rm-fleet-token-$RANDOM$RANDOM-0123456789
(umask 077 && printf '%s\n' "$token" >"$work/token")
rm_pid=
rm_log_pid=
# shellcheck source=../scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"

stop_rm() {
  if [[ -n $rm_pid ]]; then
    kill -TERM "$rm_pid" 2>/dev/null || true
    # A resource manager with thousands of links may take a while to close them.
    for _ in $(seq 1 100); do kill -0 "$rm_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$rm_pid" 2>/dev/null || true
    wait "$rm_pid" 2>/dev/null || true
    rm_pid=
  fi
  if [[ -n $rm_log_pid ]]; then
    wait "$rm_log_pid" 2>/dev/null || true
    rm_log_pid=
  fi
}
keep_logs=0
finish() {
  stop_rm
  if ((keep_logs)); then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# start_rm DEVICE N LOG: a fresh resource manager, once both its readiness
# lines came (start_resource_manager, scripts/lib/manager.sh), its stderr in
# LOG. Sets rm_pid, rm_fabric (host:port), rm_rest (port), rm_log_pid, rm_db.
start_rm() {
  local dev=$1 n=$2 log=$3
  rm_db="$work/rm-$dev-$n.sqlite"
  rm -f "$rm_db" "$rm_db-wal" "$rm_db-shm"
  cat >"$work/rm-$dev-$n.json" <<JSON
{
  "database": "$rm_db",
  "retention_days": $retention_days,
  "http": { "host": "127.0.0.1", "port": 0, "threads": 2, "token": "$token" },
  "fabric": { "device_database": "$devices_db", "device": "$dev", "port": 0,
              "heartbeat_ms": $heartbeat_ms, "accept_timeout_ms": 5000,
              "max_connections": $((n + clients + 64)) },
  "leases": { "default_duration_ms": 60000 },
  "log": { "level": "warn" }
}
JSON
  if ! start_resource_manager "$log" 30 env "${rm_env[@]}" "$rm_bin" --config "$work/rm-$dev-$n.json"; then
    echo "run-rm-fleet.sh: the resource manager on $dev printed no readiness line within 30 s: $(cat "$log")" >&2
    return 1
  fi
}

failed=0
out=$work/fleet.jsonl
: >"$out"
for dev in $devices_list; do
  for n in $nodes_list; do
    hosts=$(((n + links_per_host - 1) / links_per_host))
    echo "==> $dev: $n nodes over $hosts process(es), $clients client(s)" >&2
    log=$work/rm-$dev-$n.log
    # tcp;ofi_rxm: the links of a process share one endpoint, which posts
    # one pool of receives whatever their number (rdmalib), so the receive
    # queue keeps its default. A host's links also share one send queue
    # (2048 by default): a burst of heartbeats from 2,500 links would find it
    # full. Sized for the host's links unless the caller set it
    # (--rxm-default keeps the provider's default, to show the limit).
    rm_env=() host_env=()
    if ((!rxm_default)) && [[ -z ${FI_OFI_RXM_TX_SIZE:-} ]]; then
      host_env=(FI_OFI_RXM_TX_SIZE=$(((n / hosts + 16) * 4)))
    fi
    if ! start_rm "$dev" "$n" "$log"; then
      failed=1 keep_logs=1
      continue
    fi
    status=0
    env "${host_env[@]}" "$fleet_bin" --devices "$devices_db" --device "$dev" --resource-manager "$rm_fabric" \
      --rest-port "$rm_rest" --token-file "$work/token" --rm-pid "$rm_pid" --database "$rm_db" \
      --nodes "$n" --hosts "$hosts" --clients "$clients" --rate "$rate" --seconds "$seconds" \
      --idle-seconds "$idle_seconds" --heartbeat-ms "$heartbeat_ms" --rest-every-ms "$rest_every_ms" \
      --retention-days "$retention_days" --register-timeout "$register_timeout" --json "$out" || status=$?
    if ((status != 0)); then
      failed=1 keep_logs=1
      echo "run-rm-fleet.sh: rm_fleet on $dev with $n nodes failed (status $status);" \
        "the resource manager's last lines:" >&2
      tail -n 5 "$log" >&2 || true
      # The failure is a figure too: rm_fleet wrote its line marked failed,
      # unless it could not measure at all.
      if ! tail -n 1 "$out" | grep -q "\"nodes\": $n,.*\"failed\": true"; then
        printf '{"benchmark": "rm_fleet", "device": "%s", "nodes": %d, "failed": true, "status": %d}\n' \
          "$dev" "$n" "$status" >>"$out"
      fi
    fi
    stop_rm
  done
done

if [[ -n $json ]]; then
  cat "$out" >>"$json"
fi
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cols = [("device", "%-7s"), ("nodes", "%6s"), ("nodes_up", "%6s"), ("register_seconds", "%6s"),
        ("rm_cpu_idle_cores", "%8s"), ("rm_cpu_per_heartbeat_us", "%7s"),
        ("rm_rss_mib", "%8s"), ("rm_fds", "%7s"), ("lease_p50_us", "%8s"), ("lease_p99_us", "%9s"),
        ("leases_per_s", "%7s"), ("rm_cpu_per_lease_us", "%8s"), ("rest_nodes_p99_ms", "%8s"),
        ("rest_page_p99_ms", "%7s"), ("rest_node_p99_ms", "%7s"), ("rest_metrics_p99_ms", "%8s"), ("db_bytes_per_lease", "%7s")]
heads = ["device", "nodes", "up", "reg_s", "cpu_idle", "hb_us", "rss_MiB", "fds", "l_p50", "l_p99",
         "lease/s", "cpu/l_us", "nodes_ms", "page_ms", "node_ms", "metr_ms", "db_B/l"]
print(" ".join((fmt % h) for (k, fmt), h in zip(cols, heads)))
for r in rows:
    if r.get("failed") and "nodes_up" not in r:
        print("%-7s %6s  FAILED (status %s)" % (r["device"], r["nodes"], r.get("status")))
        continue
    print(" ".join((fmt % r.get(k, "-")) for k, fmt in cols) + ("  FAILED" if r.get("failed") else ""))
PY
exit "$failed"
