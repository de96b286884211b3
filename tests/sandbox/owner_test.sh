#!/usr/bin/env bash
# The lease owner reaches the node: a real munged (its own key and socket),
# a resource manager with auth "munge", an executor manager running as root
# registered with it (the sandbox kind of --sandbox, executor.user
# "daemon"), and the owner client (owner_client.cpp) leasing with a MUNGE
# credential:
#   * run as nobody (setpriv), its lease's owner is uid 65534 and its
#     function runs as uid 65534, with nobody's primary gid;
#   * with oci (one container started ahead): a second allocation of
#     nobody's takes the container the pool started as nobody once the
#     first one had changed the pool's uid;
#   * run as sys (a second owner), its function runs as uid 3 gid 3;
#   * run as root, its executor runs as executor.user (uid 1): root of a
#     client host is not root on the node;
#   * each owner's allocation is accounted under its uid in the resource
#     manager's GET /accounting;
#   * without munged (RFAAS_MUNGE_SOCKET naming nothing), the lease is
#     refused with "missing MUNGE credential";
#   * with command: a template naming {cgroup_parent} where no cgroup can be
#     made is refused at start-up.
# With oci and command the executor manager runs the shipped examples
# config/sandbox/oci.json and config/sandbox/podman-command.json (next to
# --devices, the image's name replaced by one built offline here).
#
#   owner_test.sh --rm BIN --manager BIN --client BIN --hostile LIB
#                 --devices JSON --device NAME [--sandbox namespaces|oci|command]
#
# Needs root, munged, mungekey and setpriv (and podman with runc for oci and
# command); exits 77 (skipped, the reason printed) otherwise. On shm every
# process of a node shares one uid (the provider's regions are 0600:
# docs/security.md), so a client of another uid cannot connect there: that
# device is skipped with the reason.
set -uo pipefail

rm_bin='' manager='' client='' hostile='' devices='' device='' sandbox=namespaces
while [[ $# -gt 0 ]]; do
  case $1 in
    --rm) rm_bin=$2 ;;
    --manager) manager=$2 ;;
    --client) client=$2 ;;
    --hostile) hostile=$2 ;;
    --devices) devices=$2 ;;
    --device) device=$2 ;;
    --sandbox) sandbox=$2 ;;
    *)
      echo "owner_test.sh: unknown argument $1" >&2
      exit 2
      ;;
  esac
  shift 2
done
for v in rm_bin manager client hostile devices device; do
  [[ -n ${!v} ]] || {
    echo "owner_test.sh: --${v/_bin/} is required" >&2
    exit 2
  }
done
skip() {
  echo "owner_test.sh: SKIPPED: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root (the executor manager changes uid)"
for tool in munged mungekey setpriv curl; do
  command -v "$tool" >/dev/null || skip "$tool not found"
done
provider=$(/usr/bin/python3 -c 'import json,sys
for d in json.load(open(sys.argv[1]))["devices"]:
    if d["name"] == sys.argv[2]: print(d.get("provider", ""))' "$devices" "$device")
[[ $provider == shm ]] && skip "shm connects processes of one uid only: a client of another uid cannot reach the node (docs/security.md)"
here=$(cd "$(dirname "$0")" && pwd)
container=0
if [[ $sandbox == oci || $sandbox == command ]]; then
  container=1
  # shellcheck source=scripts/lib/oci-image.sh
  source "$here/../../scripts/lib/oci-image.sh"
  why=$(oci_usable) || skip "$why"
fi

failed=0
fail() {
  echo "owner_test.sh: FAIL: $*" >&2
  failed=1
}
tmp=$(mktemp -d /tmp/rfaas-owner.XXXXXX)
# The client runs as nobody: it must reach munged's socket.
chmod 755 "$tmp"
mkdir "$tmp/munge"
chmod 711 "$tmp/munge"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [[ $failed -ne 0 ]]; then
    for f in "$tmp"/*.log "$tmp"/*.out "$tmp"/*.err; do
      [[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
  fi
  [[ -n ${image:-} ]] && "${oci_podman[@]}" rmi -f "$image" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# Waits (bounded) for a line matching $2 in file $1; prints it.
wait_line() {
  local i
  for i in $(seq 600); do
    grep -m1 -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

mungekey -c -k "$tmp/munge/munge.key" || { failed=1; exit 1; }
munged --foreground --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.sock" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" 2>"$tmp/munged.err" &
pids+=("$!")
for _ in $(seq 200); do [[ -S $tmp/munge/munge.sock ]] && break; sleep 0.05; done
[[ -S $tmp/munge/munge.sock ]] || { fail "munged did not create its socket"; exit 1; }
export RFAAS_MUNGE_SOCKET=$tmp/munge/munge.sock

token=owner-test-admin-token-0123456789
cat >"$tmp/rm.json" <<JSON
{
  "database": "$tmp/rm.sqlite",
  "http": { "host": "127.0.0.1", "port": 0, "token": "$token" },
  "fabric": { "device_database": "$devices", "device": "$device", "port": 0,
              "heartbeat_ms": 500, "accept_timeout_ms": 5000 },
  "auth": "munge",
  "munge_socket": "$tmp/munge/munge.sock",
  "tick_ms": 100,
  "log": { "level": "info" }
}
JSON
"$rm_bin" --config "$tmp/rm.json" >"$tmp/rm.log" 2>&1 &
pids+=("$!")
line=$(wait_line "$tmp/rm.log" "resource_manager: fabric on ") || { fail "no resource manager"; exit 1; }
echo "$line"
fabric=${line#*fabric on }
fabric=${fabric%% *}
[[ $line == *"auth munge"* ]] || fail "the start-up line does not say auth munge: $line"
line=$(wait_line "$tmp/rm.log" "resource_manager: ready, REST on ") || { fail "no REST"; exit 1; }
rest=http://127.0.0.1:${line##*:}

secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
(umask 077 && echo "$secret" >"$tmp/n1.secret")
code=$(curl -s -o "$tmp/add.out" -w '%{http_code}' -X POST -H "Authorization: Bearer $token" \
  "$rest/nodes" -d "{\"name\":\"n1\",\"address\":\"127.0.0.1:1\",\"cores\":2,\"memory_mib\":1024,\"secret\":\"$secret\"}")
[[ $code == 201 ]] || { fail "adding n1: HTTP $code $(cat "$tmp/add.out")"; exit 1; }
cat >"$tmp/n1.json" <<JSON
{
  "device_database": "$devices",
  "device": "$device",
  "listen": { "port": 0 },
  "resource_manager": { "enabled": true, "address": "$fabric",
                        "secret_file": "$tmp/n1.secret", "node": "n1" },
  "resources": { "cores": [0, 1], "memory_mib": 1024 },
  "limits": { "default_memory_mib": 128 },
  "executor": { "sandbox": "namespaces", "user": "daemon" },
  "log": { "level": "info" }
}
JSON
image=''
if ((container)); then
  image=localhost/rfaas-owner:$$
  oci_make_image "$tmp/image" "$image" || {
    image=''
    skip "podman cannot import an image here"
  }
fi
/usr/bin/python3 - "$tmp/n1.json" "$sandbox" "$image" "$devices" <<'PY2'
import json, os, sys
path, sandbox, image, devices = sys.argv[1:]
cfg = json.load(open(path))
example = {"oci": "oci.json", "command": "podman-command.json"}.get(sandbox)
executor = {"sandbox": sandbox, "user": "daemon"}
if example:
    text = open(os.path.join(os.path.dirname(os.path.abspath(devices)), "sandbox", example)).read()
    executor.update(json.loads(text.replace("localhost/rfaas-executor:latest", image))["executor"])
cfg["executor"] = executor
json.dump(cfg, open(path, "w"))
PY2
chmod 600 "$tmp/n1.json"
if [[ $sandbox == command ]]; then
  # A template naming {cgroup_parent} where no cgroup can be made (its
  # parent cannot be created) is refused at start-up, never run with an
  # empty value.
  /usr/bin/python3 -c 'import json,sys
c = json.load(open(sys.argv[1])); c["executor"]["cgroup_parent"] = sys.argv[2]
json.dump(c, open(sys.argv[3], "w"))' "$tmp/n1.json" "rfaas-missing-$$/none" "$tmp/nocg.json"
  chmod 600 "$tmp/nocg.json"
  timeout 30 "$manager" --config "$tmp/nocg.json" >"$tmp/nocg.log" 2>&1
  rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "a manager whose template names {cgroup_parent} without cgroups did not refuse to start (exit $rc)"
  grep -q "names {cgroup_parent}, but this manager cannot make a cgroup" "$tmp/nocg.log" ||
    fail "the refusal does not say {cgroup_parent} cannot be made: $(tail -3 "$tmp/nocg.log")"
  grep -m1 -o "executor sandbox cannot start: .*" "$tmp/nocg.log" | cut -c1-160
fi
"$manager" --config "$tmp/n1.json" >"$tmp/manager.log" 2>&1 &
pids+=("$!")
wait_line "$tmp/manager.log" "registered with the resource manager" >/dev/null ||
  { fail "the executor manager did not register"; exit 1; }
grep -o 'executor sandbox: .*' "$tmp/manager.log" | head -1
grep -q "the lease owner's uid" "$tmp/manager.log" ||
  fail "the manager's start-up line does not say executors run as the lease owner's uid"
# Executors in containers log this line once their container waits (the
# executor's stderr is the manager's).
containers_ready() { grep -c "container ready, waiting for an allocation" "$tmp/manager.log"; }
if [[ $sandbox == oci ]]; then
  for _ in $(seq 400); do (($(containers_ready) >= 1)) && break; sleep 0.05; done
  (($(containers_ready) >= 1)) || fail "the pool's container did not start"
fi

run_client() { # user (or "root")
  local who=$1
  shift
  local cmd=("$client" --devices "$devices" --device "$device" --resource-manager "$fabric"
    --library "$hostile")
  if [[ $who == root ]]; then
    "${cmd[@]}"
  else
    setpriv --reuid="$who" --regid="$(id -g "$who")" --clear-groups \
      env RFAAS_MUNGE_SOCKET="$RFAAS_MUNGE_SOCKET" "${cmd[@]}"
  fi
}

nobody_gid=$(id -g nobody)
run_client nobody >"$tmp/nobody.out" 2>"$tmp/nobody.err"
cat "$tmp/nobody.out"
grep -qx "credential: sent" "$tmp/nobody.out" || fail "nobody's lease request carried no credential"
grep -qx "lease owner_uid 65534" "$tmp/nobody.out" || fail "nobody's lease is not owned by 65534"
grep -qx "executor uid 65534 gid $nobody_gid" "$tmp/nobody.out" ||
  fail "nobody's function did not run as uid 65534 gid $nobody_gid"
if [[ $sandbox == oci ]]; then
  grep -q "starts its own container: the pool's run as uid 1; the pool follows uid 65534" \
    "$tmp/manager.log" || fail "nobody's allocation did not start a container of its own"
  # The pool now starts its container as nobody: the next allocation of
  # nobody's takes it.
  for _ in $(seq 400); do (($(containers_ready) >= 2)) && break; sleep 0.05; done
  (($(containers_ready) >= 2)) || fail "the pool did not start a container as nobody"
  run_client nobody >"$tmp/nobody2.out" 2>"$tmp/nobody2.err"
  grep -qx "executor uid 65534 gid $nobody_gid" "$tmp/nobody2.out" ||
    fail "nobody's second function did not run as uid 65534 gid $nobody_gid"
  grep "executor pid [0-9]*" "$tmp/manager.log" | tail -1 | grep -q "(pooled)" ||
    fail "nobody's second allocation did not take the container the pool started as nobody"
fi

sys_uid=$(id -u sys) sys_gid=$(id -g sys)
run_client sys >"$tmp/sys.out" 2>"$tmp/sys.err"
cat "$tmp/sys.out"
grep -qx "lease owner_uid $sys_uid" "$tmp/sys.out" || fail "sys's lease is not owned by $sys_uid"
grep -qx "executor uid $sys_uid gid $sys_gid" "$tmp/sys.out" ||
  fail "sys's function (a second owner) did not run as uid $sys_uid gid $sys_gid"

run_client root >"$tmp/root.out" 2>"$tmp/root.err"
cat "$tmp/root.out"
grep -qx "lease owner_uid 0" "$tmp/root.out" || fail "root's lease is not owned by uid 0"
grep -qx "executor uid 1 gid 1" "$tmp/root.out" ||
  fail "root's function did not run as executor.user (daemon, uid 1)"

RFAAS_MUNGE_SOCKET=$tmp/munge/nothing.sock run_client root >"$tmp/none.out" 2>"$tmp/none.err"
rc=$?
cat "$tmp/none.out"
[[ $rc -eq 3 ]] || fail "a lease without a credential was not refused (exit $rc)"
grep -q "missing MUNGE credential" "$tmp/none.out" ||
  fail "the refusal does not say the credential is missing"

# Each owner's allocation reached the resource manager's accounting under
# its uid, with the time its function ran (the node reports when the
# allocation ends; bounded wait).
accounted=''
for _ in $(seq 100); do
  curl -s -H "Authorization: Bearer $token" "$rest/accounting" >"$tmp/accounting.out"
  accounted=$(/usr/bin/python3 -c 'import json,sys
recs = json.load(open(sys.argv[1]))["records"]
print(" ".join(sorted({str(r["owner_uid"]) for r in recs if r["final"] and r["execution_us"] > 0})))' \
    "$tmp/accounting.out" 2>/dev/null)
  [[ " $accounted " == *" 65534 "* && " $accounted " == *" $sys_uid "* && " $accounted " == *" 0 "* ]] && break
  sleep 0.1
done
echo "accounted owners: $accounted"
for u in 65534 "$sys_uid" 0; do
  [[ " $accounted " == *" $u "* ]] || fail "no final accounting with execution time for owner $u"
done
grep -q "ended: executor exited normally" "$tmp/manager.log" ||
  fail "no allocation ended normally on the node"

[[ $failed -eq 0 ]] && echo "owner_test.sh: passed"
exit $failed
