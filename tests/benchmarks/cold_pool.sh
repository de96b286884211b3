#!/usr/bin/env bash
# Smoke of the cold benchmark against a manager with an executor pool
# (executor.pool = 1, the shipped sandbox or SANDBOX): the allocations must
# take pooled executors, each one's accounting must reach the manager (an
# executor without the seccomp filter connects its accounting link only after
# its first invocation, or as it ends: docs/runtime.md, step 3), each pooled
# executor must have connected its accounting link while it waited, before
# its allocation, a pooled executor with the filter must install the one it
# compiled while it waited (docs/runtime.md, "Sealing the sandbox"), and the
# benchmark must print and write every phase of the cold start, and the
# slowest allocations' phases.
# No figure is judged.
#
#   cold_pool.sh MANAGER BENCHMARK LIBRARY DEVICE [SANDBOX]
# SRC (the source tree) must be set.
set -uo pipefail

manager=$1 bench=$2 library=$3 device=$4 sandbox=${5:-}
reps=4
name="cold_pool ($device${sandbox:+, $sandbox})"
tmp=$(mktemp -d)
# shellcheck source=../../scripts/lib/manager.sh
source "$SRC/scripts/lib/manager.sh"
# Set by start_manager, read by stop_manager.
# shellcheck disable=SC2034
manager_pid='' manager_address=''
trap 'stop_manager; rm -rf "$tmp"' EXIT INT TERM
fail() {
  echo "FAIL: $name: $*"
  [[ -f $tmp/out ]] && cat "$tmp/out" "$tmp/err"
  [[ -f $tmp/manager.log ]] && tail -30 "$tmp/manager.log"
  exit 1
}

/usr/bin/python3 - "$SRC/config/executor_manager.json" "$sandbox" >"$tmp/manager.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["executor"]["pool"] = 1
if sys.argv[2]:
    c["executor"]["sandbox"] = sys.argv[2]
print(json.dumps(c))
PY
cores=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
# Debug: the executors say how their seccomp filter was compiled.
start_manager "$tmp/manager.log" 30 "$manager" --config "$tmp/manager.json" --log-level debug \
  --skip-resource-manager --devices "$SRC/config/devices.json" --device "$device" \
  --host 127.0.0.1 --port 0 --cores "$cores" || fail "the executor manager did not start"
grep -q "pool of 1 executor" "$tmp/manager.log" || fail "the zygote did not announce its pool"
# The first allocation meets a full pool: wait until the zygote says so.
for ((i = 0; i < 300; i++)); do
  grep -q "pooled executor(s) wait" "$tmp/manager.log" && break
  kill -0 "$manager_pid" 2>/dev/null || fail "the executor manager died"
  sleep 0.05
done
grep -q "pooled executor(s) wait" "$tmp/manager.log" || fail "no pooled executor within 15 s"

# The idle time lets the pool refill (its replacement is forked 100 ms after
# each allocation took one); a loaded host may still miss it now and then.
timeout 60 "$bench" --devices "$SRC/config/devices.json" --device "$device" \
  --manager "$manager_address" --library "$library" -r "$reps" --idle-ms 250 --slowest 2 \
  --json "$tmp/out.json" >"$tmp/out" 2>"$tmp/err" || fail "the benchmark exited with an error"
cat "$tmp/out"
# The last executor may still be reporting its accounting as it ends.
for ((i = 0; i < 200; i++)); do
  (($(grep -c ' ended: ' "$tmp/manager.log") >= reps)) && break
  sleep 0.05
done
stop_manager
accounted=$(grep -cE ' ended: executor exited normally;.*invocations 1$' "$tmp/manager.log")
((accounted == reps)) || fail "the accounting of $accounted of $reps allocations reached the manager"

pooled=$(grep -c 'executor pid [0-9]* (pooled)' "$tmp/manager.log")
total=$(grep -c ', executor pid [0-9]*' "$tmp/manager.log")
echo "$name: $pooled of $total allocations took a pooled executor"
((total == reps)) || fail "$total allocations logged, $reps made"
# The first surely (the pool was full), and most of the others.
first=$(grep -m1 ', executor pid [0-9]*' "$tmp/manager.log")
[[ $first == *"(pooled)"* ]] || fail "the first allocation did not take the pooled executor: $first"
((pooled * 2 > reps)) || fail "only $pooled of $reps allocations took a pooled executor"
grep -q "$pooled of $total executor(s) came from the pool" "$tmp/manager.log" ||
  fail "the manager's count of pooled executors disagrees with its allocation lines"
# Every pooled executor brought the accounting link it connected while it
# waited, before its allocation existed (docs/runtime.md, "The executor pool").
ahead=$(grep -c 'bound the accounting link its pooled executor [0-9]* connected ahead' \
  "$tmp/manager.log")
((ahead == pooled)) ||
  fail "$ahead of $pooled pooled executors brought an accounting link connected ahead"
grep -q "came from the pool, $ahead with their accounting link connected ahead" \
  "$tmp/manager.log" || fail "the manager's count of links connected ahead disagrees"
first_pid=$(sed -n 's/.*, executor pid \([0-9]*\) (pooled).*/\1/p' "$tmp/manager.log" | head -1)
linked_at=$(grep -n -m1 "pooled executor $first_pid: accounting link connected ahead" \
  "$tmp/manager.log" | cut -d: -f1)
allocated_at=$(grep -n -m1 ", executor pid $first_pid (pooled)" "$tmp/manager.log" | cut -d: -f1)
[[ -n $linked_at && -n $allocated_at ]] && ((linked_at < allocated_at)) ||
  fail "the first pooled executor ($first_pid) did not connect its link before its allocation"
# Every kind but process installs the filter; the first executor was pooled.
if [[ ${sandbox:-namespaces} != process ]]; then
  sealed=$(grep -m1 'seccomp filter installed' "$tmp/manager.log")
  [[ $sealed == *"(compiled ahead)"* ]] ||
    fail "the pooled executor did not install the filter it compiled ahead: ${sealed:-no filter}"
fi

/usr/bin/python3 -S - "$tmp/out" "$tmp/out.json" "$name" <<'PY' || exit 1
import json, sys
out, path, name = open(sys.argv[1]).read().split("\n"), sys.argv[2], sys.argv[3]
phases = ["connect", "allocated", "workers", "code", "ready", "invoke", "first_result"]
printed = {line.split()[0]: line.split()[1:] for line in out if line and not line.startswith("#")}
missing = [p for p in phases if p not in printed or len(printed[p]) != 3]
if missing:
    sys.exit(f"FAIL: {name}: phases not printed: {missing}")
doc = json.load(open(path))
rows = {r["mode"]: r for r in doc["results"] if r.get("kind") == "phase"}
if [p for p in phases if p not in rows]:
    sys.exit(f"FAIL: {name}: phases missing from the JSON: {[p for p in phases if p not in rows]}")
parts = sum(float(printed[p][0]) for p in phases[:-1])
if parts <= 0 or float(printed["first_result"][0]) <= 0:
    sys.exit(f"FAIL: {name}: empty phases")
# --slowest 2: a header, then two allocations with their start and every phase.
at = [i for i, line in enumerate(out) if line.startswith("# the 2 slowest allocations")]
rows = [line.split() for line in out[at[0] + 2:at[0] + 4]] if at else []
if not at or out[at[0] + 1].split() != ["run", "start_us"] + phases or len(rows) != 2 or any(
        len(r) != 2 + len(phases) for r in rows):
    sys.exit(f"FAIL: {name}: no table of the 2 slowest allocations")
if float(rows[0][-1]) < float(rows[1][-1]) or float(rows[1][-1]) < float(printed["first_result"][0]):
    sys.exit(f"FAIL: {name}: the slowest allocations are not the slowest: {rows}")
print(f"ok: {name}: every phase printed and in the JSON")
PY
