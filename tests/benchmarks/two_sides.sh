#!/usr/bin/env bash
# The ping-pong benchmarks' two-host mode, on one host: the server and the
# client are started as separate processes (--role server / --role client)
# that meet over the out-of-band TCP connection, as benchmarks/cluster/ starts
# them on two nodes. Checks that a run completes and prints its table, that two
# sides started with different options refuse to run, and that the server stops
# promptly when the client dies mid-measurement.
#
#   two_sides.sh BINARY [PROVIDER]
set -uo pipefail
binary=$1 provider=${2:-tcp}
name=$(basename "$binary")
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $name: $*"
  for f in "$tmp"/*.out "$tmp"/*.err; do [[ -s $f ]] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}
# Start the server with an out-of-band port chosen by the system; sets $s to
# its pid and $oob to HOST:PORT once it listens.
start_server() {
  "$binary" --role server "$@" --oob 127.0.0.1:0 >"$tmp/server.out" 2>"$tmp/server.err" &
  s=$!
  pids+=("$s")
  oob=
  for _ in $(seq 300); do
    oob=$(sed -n 's/^\[server\] waiting for the client on \(.*\) port \([0-9]*\)$/\1:\2/p' \
      "$tmp/server.err")
    [[ -n $oob ]] && return 0
    kill -0 "$s" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
  done
  fail "the server did not listen within 30 s"
}

# 1. A run.
common=(-p "$provider" -m send,writeimm -s 8,1K -n 50 --no-pin --timeout 30)
start_server "${common[@]}"
"$binary" --role client "${common[@]}" --oob "$oob" >"$tmp/client.out" 2>"$tmp/client.err"
c_rc=$?
wait "$s"
s_rc=$?
[[ $s_rc -eq 0 && $c_rc -eq 0 ]] || fail "run: server exit $s_rc, client exit $c_rc"
rows=$(grep -cE '^(send|writeimm) +(8|1024) ' "$tmp/client.out")
[[ $rows -eq 4 ]] || fail "run: the client printed $rows result rows, expected 4"
echo "ok: $name two-sided run on $provider: 4 rows"

# 2. Different options on the two sides: both refuse, naming the difference.
start_server -p "$provider" -s 8 -n 50 --no-pin --timeout 30
"$binary" --role client -p "$provider" -s 1K -n 50 --no-pin --timeout 30 --oob "$oob" \
  >"$tmp/client.out" 2>"$tmp/client.err"
c_rc=$?
wait "$s"
s_rc=$?
[[ $s_rc -eq 2 && $c_rc -eq 2 ]] || fail "mismatch: server exit $s_rc, client exit $c_rc (expected 2, 2)"
grep -q 'started with different options' "$tmp/server.err" || fail "mismatch: no explanation from the server"
echo "ok: $name refuses sides started with different options"

# 3. The client dies mid-measurement: the server ends with an error, well
# before its deadline (a measurement of 10^8 round trips would take hours).
long=(-p "$provider" -m send -s 8 -n 100000000 --budget 0 --no-pin --timeout 60)
start_server "${long[@]}"
"$binary" --role client "${long[@]}" --oob "$oob" >"$tmp/client.out" 2>"$tmp/client.err" &
c=$!
pids+=("$c")
# Wait until the server is inside the measurement (it has accepted the client
# and the fabric connection, and has spun for 0.2 s of CPU), then kill the client.
for _ in $(seq 300); do
  [[ $(awk '{print $14}' "/proc/$s/stat" 2>/dev/null || echo 0) -gt 20 ]] && break
  sleep 0.1
done
kill -KILL "$c"
wait "$c" 2>/dev/null
start=$SECONDS
wait "$s"
s_rc=$?
took=$((SECONDS - start))
[[ $s_rc -ne 0 ]] || fail "dead client: the server exited 0"
[[ $took -lt 30 ]] || fail "dead client: the server took ${took} s to stop"
echo "ok: $name server stops ${took} s after its client died (exit $s_rc)"
