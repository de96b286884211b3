#!/usr/bin/env bash
# Smoke of one benchmark: it runs a few iterations and writes a valid JSON
# document (schema, metadata, at least one result). No figure is judged.
#
#   smoke.sh raw   NAME BINARY ARGS...                  the raw baselines (no manager)
#   smoke.sh rfaas NAME BINARY MANAGER LIBRARY ARGS...  starts an executor manager on
#                                                       lo-tcp, passes --manager and --library
# SRC (the source tree) must be set.
set -uo pipefail
[[ -n ${SMOKE_TRACE:-} ]] && { PS4="+\$(date +%S.%N) "; set -x; }

kind=$1 name=$2 binary=$3
shift 3
tmp=$(mktemp -d)
manager_pid=
cleanup() {
  if [[ -n $manager_pid ]]; then
    kill -TERM "$manager_pid" 2>/dev/null
    wait "$manager_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

args=()
if [[ $kind == rfaas ]]; then
  manager=$1 library=$2
  shift 2
  # shellcheck source=../../scripts/lib/manager.sh
  source "$SRC/scripts/lib/manager.sh"
  cores=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
  if ! start_manager "$tmp/manager.log" 30 "$manager" --config "$SRC/config/executor_manager.json" \
    --skip-resource-manager --devices "$SRC/config/devices.json" --device lo-tcp \
    --host 127.0.0.1 --port 0 --cores "$cores"; then
    echo "FAIL: $name: the executor manager did not start:"
    cat "$tmp/manager.log"
    exit 1
  fi
  args=(--devices "$SRC/config/devices.json" --device lo-tcp --manager "$manager_address"
    --library "$library")
fi

if ! timeout 60 "$binary" "${args[@]}" "$@" --json "$tmp/out.json" >"$tmp/out" 2>"$tmp/err"; then
  echo "FAIL: $name exited with an error"
  cat "$tmp/out" "$tmp/err"
  [[ -f $tmp/manager.log ]] && tail -20 "$tmp/manager.log"
  exit 1
fi
cat "$tmp/out"
python3 -S - "$tmp/out.json" "$name" <<'PY' || exit 1
import json, sys
path, name = sys.argv[1], sys.argv[2]
try:
    doc = json.load(open(path))
except Exception as e:
    sys.exit(f"FAIL: {name}: the JSON does not parse: {e}")
problems = []
if doc.get("schema") != "rfaas-benchmark/1":
    problems.append(f"schema is {doc.get('schema')!r}")
m = doc.get("metadata", {})
for key in ("git_commit", "host", "date_utc", "rfaas_version", "backend", "backend_version",
            "provider", "command_line"):
    if key not in m or m[key] in ("", None, []):
        problems.append(f"metadata.{key} is missing or empty")
if not isinstance(doc.get("parameters"), dict) or not doc["parameters"]:
    problems.append("no parameters")
if not doc.get("results"):
    problems.append("no results")
if problems:
    sys.exit(f"FAIL: {name}: " + "; ".join(problems))
print(f"ok: {name} wrote valid JSON ({len(doc['results'])} result(s), provider "
      f"{m['provider']}, commit {m['git_commit'][:12]})")
PY
