#!/bin/bash
# What one idle client connection (a valid hello, then nothing) costs the
# executor manager: descriptors and resident memory, per provider. Starts the
# manager with admission limits above the flood, warms it up with one lease,
# opens N idle connections with the probe client, and prints the difference
# per connection, then whether the manager returned to its baseline after the
# flood closed.
#
#   scripts/measure-connection-cost.sh [BUILD_DIR] [N] [DEVICE...]
#
# Defaults: build, 100 connections, devices lo-tcp lo-rxm lo-shm (from
# tests/server/flood-devices.json). MANAGER=/path/to/executor_manager measures
# another build of the manager with this build's probe client (a manager
# that predates the "admission" configuration is run without it).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build}
N=${2:-100}
shift 2 2>/dev/null
DEVICES=("$@")
[ ${#DEVICES[@]} -gt 0 ] || DEVICES=(lo-tcp lo-rxm lo-shm)
MANAGER=${MANAGER:-$BUILD/server/executor_manager/executor_manager}
PROBE=$BUILD/tests/server/rfaas_server_probe
LIBRARY=$(find "$BUILD/examples" -name 'libfunctions.so' | head -n 1)
DB=$SRC/tests/server/flood-devices.json
for f in "$MANAGER" "$PROBE" "$LIBRARY"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "missing $f (build the executor_manager, rfaas_server_probe and rfaas_example_functions targets)" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/rfaas-conncost.XXXXXX)
MPID= FPID=
cleanup() {
  for pid in $FPID $MPID; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$MPID/status"; }
fds() { ls "/proc/$MPID/fd" | wc -l; }
CORES=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)

start_manager() { # $1 device, $2 "admission" object or empty
  cat >"$WORK/m.json" <<JSON
{
  "device_database": "$DB", "device": "$1", "listen": { "port": 0 },
  "resources": { "cores": "$CORES" },
  "deadlines_ms": { "executor_start": 60000, "shutdown_grace": 1000 } $2
}
JSON
  : >"$WORK/m.out"
  "$MANAGER" --config "$WORK/m.json" --skip-resource-manager >"$WORK/m.out" 2>"$WORK/m.err" &
  MPID=$!
  for _ in $(seq 300); do
    grep -q '^executor_manager: listening on ' "$WORK/m.out" && return 0
    kill -0 "$MPID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

printf '%-8s %6s %10s %10s %12s %12s %10s %10s\n' device conns fds/conn KiB/conn \
  'base fds' 'base KiB' 'after fds' 'after KiB'
for dev in "${DEVICES[@]}"; do
  if ! start_manager "$dev" ", \"admission\": { \"max_pending\": $((N + 16)),
      \"max_pending_per_peer\": $((N + 16)), \"request_ms\": 600000 }"; then
    kill -KILL "$MPID" 2>/dev/null
    start_manager "$dev" "" || { echo "$dev: the manager did not start: $(tail -n 3 "$WORK/m.err")"; continue; }
  fi
  ADDRESS=$(sed -n 's/^executor_manager: listening on .* //p' "$WORK/m.out")
  "$PROBE" --devices "$DB" --device "$dev" --manager "$ADDRESS" --library "$LIBRARY" \
    --scenario latency --iterations 50 >/dev/null 2>&1 || echo "$dev: warm-up lease failed"
  sleep 1 # let the warm-up allocation end
  BASE_FDS=$(fds) BASE_RSS=$(rss_kb)
  rm -f "$WORK/hold"
  mkfifo "$WORK/hold"
  "$PROBE" --devices "$DB" --device "$dev" --manager "$ADDRESS" --library "$LIBRARY" \
    --scenario flood --flood "$N" <"$WORK/hold" >"$WORK/flood.out" 2>&1 &
  FPID=$!
  exec {HOLD}>"$WORK/hold"
  for _ in $(seq 1200); do
    grep -q '^flood: .* open' "$WORK/flood.out" && break
    sleep 0.1
  done
  sleep 0.5 # the manager takes the last requests
  OPEN=$(sed -n 's/^flood: \([0-9]*\) open.*/\1/p' "$WORK/flood.out")
  FLOOD_FDS=$(fds) FLOOD_RSS=$(rss_kb)
  exec {HOLD}>&-
  wait "$FPID"
  FPID=
  sleep 2 # the manager notices the closes
  AFTER_FDS=$(fds) AFTER_RSS=$(rss_kb)
  OPEN=${OPEN:-0}
  DIV=$((OPEN > 0 ? OPEN : 1))
  printf '%-8s %6s %10s %10s %12s %12s %10s %10s\n' "$dev" "$OPEN" \
    "$(awk -v a="$FLOOD_FDS" -v b="$BASE_FDS" -v n="$DIV" 'BEGIN{printf "%.1f", (a-b)/n}')" \
    "$(awk -v a="$FLOOD_RSS" -v b="$BASE_RSS" -v n="$DIV" 'BEGIN{printf "%.1f", (a-b)/n}')" \
    "$BASE_FDS" "$BASE_RSS" "$AFTER_FDS" "$AFTER_RSS"
  kill -TERM "$MPID"
  wait "$MPID"
  MPID=
done
