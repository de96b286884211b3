#!/usr/bin/env bash
# The Debian packages, installed on this machine as an operator would: build
# them with CPack from BUILD_DIR, `dpkg -i` them, check what the maintainer
# scripts created (the rfaas system user, /etc/rfaas/secrets/* 0600 owned by
# it), start both services the way their systemd units do (the ExecStart
# line read from each installed unit, as the unit's User=; these machines run
# no systemd), add this node through the REST API with the installed secrets,
# run the installed example client and rfaas-info against them, then purge
# the packages and check that nothing of them is left: no file, no
# directory below /etc/rfaas or /var/lib/rfaas, no user, no group.
#
# The only change to the installed configuration is what an operator of a
# shared machine would make: ports chosen by the OS (so that the test never
# collides with anything), the executor manager told the resource manager's
# resulting fabric address, and a leased CPU that this process may use.
#
# Needs root (dpkg); without it the test is skipped (exit 77) and says why.
# Refuses to run when an rfaas package is already installed: purging it would
# destroy someone's installation.
#
# Usage: deb-install-test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
packages=(rfaas rfaas-dev rfaas-examples)

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: installing .deb packages needs root (this test runs as $(id -un))"
  exit 77
fi
for tool in dpkg dpkg-deb cpack curl runuser; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed"; exit 77; }
done
for p in "${packages[@]}" python3-rfaas; do
  if dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^[ih]'; then
    echo "FAIL: the package $p is already installed here; the test would purge it (dpkg --purge $p first)" >&2
    exit 1
  fi
done
if getent passwd rfaas >/dev/null; then
  echo "FAIL: a user rfaas exists without the package; the test would delete it" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-deb-test.XXXXXX")
chmod 755 "$work" # the services run as rfaas and write their logs through our fds only
# shellcheck source=../../scripts/lib/manager.sh
source "$source_dir/scripts/lib/manager.sh"
rm_pid=
installed=0
stop_rm() {
  [[ -n $rm_pid ]] || return 0
  kill -TERM "$rm_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$rm_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$rm_pid" 2>/dev/null || true
  wait "$rm_pid" 2>/dev/null || true
  rm_pid=
}
# dpkg ARGS...: dpkg, waiting up to 120 s for another dpkg or apt-get on this
# machine to release the lock (dpkg itself fails at once when it is held).
dpkg_waiting() {
  local log=$1
  shift
  for _ in $(seq 1 120); do
    dpkg "$@" >"$log" 2>&1 && return 0
    grep -q 'lock' "$log" || return 1
    sleep 1
  done
  return 1
}
purge() {
  [[ $installed == 1 ]] || return 0
  installed=0
  dpkg_waiting "$work/purge.log" --purge "${packages[@]}" || { cat "$work/purge.log" >&2; return 1; }
}
cleanup() {
  stop_manager
  stop_rm
  purge || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$work"/*.log; do
    [[ -s $f ]] && { echo "--- ${f##*/} (last lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

# ---- build the packages ---------------------------------------------------------------
for t in server/executor_manager/executor_manager server/executor/executor \
  server/resource_manager/resource_manager tools/rfaas-info examples/client/rfaas-example-client; do
  [[ -x $build/$t ]] || fail "$build/$t was not built; build everything first (cmake --build $build)"
done
start=$SECONDS
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/packages") \
  >"$work/cpack.log" 2>&1 || fail "cpack -G DEB failed"
debs=()
for p in "${packages[@]}"; do
  deb=$(find "$work/packages" -maxdepth 1 -name "${p}_*.deb" | head -n1)
  [[ -n $deb ]] || fail "cpack wrote no package $p: $(ls "$work/packages")"
  debs+=("$deb")
done
# The Python module's package, when the build has it (RFAAS_BUILD_PYTHON).
python_deb=$(find "$work/packages" -maxdepth 1 -name 'python3-rfaas_*.deb' | head -n1)
echo "built $(printf '%s ' "${debs[@]##*/}")${python_deb:+${python_deb##*/} }in $((SECONDS - start)) s"

# What each package must hold (dpkg-deb's listing: ./usr/bin/...).
contents() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\.||; s| ->.*||'; }
expect() { # PACKAGE-FILE PATTERN...
  local deb=$1 list
  shift
  list=$(contents "$deb")
  for pattern in "$@"; do
    grep -qE "^$pattern\$" <<<"$list" || fail "${deb##*/} lacks $pattern; it holds:
$list"
  done
}
expect "${debs[0]}" /usr/bin/executor_manager /usr/bin/resource_manager /usr/bin/rfaas-info \
  /usr/libexec/rfaas/executor '/usr/lib/.*librfaas\.so\.[0-9]+.*' \
  /etc/rfaas/devices.json /etc/rfaas/executor_manager.json /etc/rfaas/resource_manager.json \
  /usr/share/rfaas/executor_manager.json /usr/lib/systemd/system/rfaas-resource-manager.service \
  /usr/lib/systemd/system/rfaas-executor-manager.service
expect "${debs[1]}" /usr/include/rfaas/rfaas.hpp /usr/include/rdmalib/rdmalib.hpp \
  /usr/include/rdmalib/config.hpp '/usr/lib/.*librfaas\.so' '/usr/lib/.*librfaas_rdmalib\.a' \
  '/usr/lib/(.*/)?cmake/rfaas/rfaasConfig\.cmake' '/usr/lib/(.*/)?pkgconfig/rfaas\.pc'
expect "${debs[2]}" /usr/bin/rfaas-example-client '/usr/lib/.*rfaas/examples/libfunctions\.so'
# No secret is shipped: postinst draws them.
if contents "${debs[0]}" | grep -q '^/etc/rfaas/secrets'; then
  fail "the runtime package ships secrets"
fi
dpkg-deb -f "${debs[0]}" Depends | grep -q adduser || fail "rfaas does not depend on adduser"
dpkg-deb -f "${debs[1]}" Depends | grep -q 'rfaas (= ' || fail "rfaas-dev does not depend on its rfaas"

if [[ -n $python_deb ]]; then
  packages+=(python3-rfaas)
  debs+=("$python_deb")
fi

# ---- install --------------------------------------------------------------------------
installed=1
dpkg_waiting "$work/dpkg.log" -i "${debs[@]}" || fail "dpkg -i failed"
echo "installed: $(dpkg-query -W -f='${Package} ${Version}, ' "${packages[@]}")"
# Every file of the packages, for the check after the purge.
dpkg -L "${packages[@]}" | sort -u >"$work/files.list"

getent passwd rfaas >/dev/null || fail "postinst created no user rfaas"
uid=$(id -u rfaas)
[[ $uid -lt 1000 ]] || fail "rfaas is not a system user (uid $uid)"
for secret in /etc/rfaas/secrets/http.token /etc/rfaas/secrets/node.secret; do
  [[ -s $secret ]] || fail "postinst created no $secret"
  perms=$(stat -c '%a %U' "$secret")
  [[ $perms == "600 rfaas" ]] || fail "$secret is $perms, expected 600 rfaas"
  grep -qE '^[0-9a-f]{64}$' "$secret" || fail "$secret does not hold 64 hex digits"
done
[[ $(stat -c '%U' /var/lib/rfaas) == rfaas ]] || fail "/var/lib/rfaas is not owned by rfaas"

# ---- the services, as their units start them ------------------------------------------
unit_dir=/usr/lib/systemd/system
exec_start() { # UNIT -> its ExecStart command line
  sed -n 's/^ExecStart=//p' "$unit_dir/$1"
}
unit_user() { sed -n 's/^User=//p' "$unit_dir/$1"; }
rm_cmd=$(exec_start rfaas-resource-manager.service)
em_cmd=$(exec_start rfaas-executor-manager.service)
[[ $rm_cmd == /usr/bin/resource_manager\ * && $em_cmd == /usr/bin/executor_manager\ * ]] ||
  fail "unexpected ExecStart lines: '$rm_cmd', '$em_cmd'"
[[ $(unit_user rfaas-resource-manager.service) == rfaas &&
  $(unit_user rfaas-executor-manager.service) == rfaas ]] || fail "the units do not run as rfaas"
if command -v systemd-analyze >/dev/null 2>&1; then
  # It only warns about an unknown key: any line it prints fails the test.
  if ! systemd-analyze verify "$unit_dir/rfaas-resource-manager.service" \
    "$unit_dir/rfaas-executor-manager.service" >"$work/verify.log" 2>&1 || [[ -s $work/verify.log ]]; then
    fail "systemd-analyze verify rejects the units: $(cat "$work/verify.log")"
  fi
fi

# The operator's edits: ports chosen by the OS, and a CPU this process has.
sed -i -e 's|"port": 8080|"port": 0|' -e 's|"port": 10100|"port": 0|' /etc/rfaas/resource_manager.json
cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | cut -d, -f1 | cut -d- -f1)

# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
(cd / && exec runuser -u "$(unit_user rfaas-resource-manager.service)" -- $rm_cmd) \
  2>"$work/resource_manager.log" &
rm_pid=$!
rest=
for _ in $(seq 1 300); do
  rest=$(sed -n 's|^resource_manager: ready, REST on \(http://[0-9.]*:[0-9]*\)$|\1|p' \
    "$work/resource_manager.log")
  [[ -n $rest ]] && break
  kill -0 "$rm_pid" 2>/dev/null || fail "the installed resource manager exited before it was ready"
  sleep 0.1
done
[[ -n $rest ]] || fail "the installed resource manager was not ready within 30 s"
fabric=$(sed -n 's|^resource_manager: fabric on \([^ ]*\) .*$|\1|p' "$work/resource_manager.log")
[[ -n $fabric ]] || fail "the resource manager did not say its fabric address"
[[ $(stat -c '%U' /var/lib/rfaas/resource_manager.sqlite) == rfaas ]] ||
  fail "the database was not created by the service's user"
echo "resource manager (as rfaas): REST $rest, fabric $fabric"

node=$(hostname)
token=$(head -n1 /etc/rfaas/secrets/http.token)
code=$(curl -sS -o "$work/node.json" -w '%{http_code}' -X POST \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$rest/nodes" \
  --data "{\"name\":\"$node\",\"address\":\"127.0.0.1:1\",\"cores\":1,\"memory_mib\":1024,\"secret\":\"$(head -n1 /etc/rfaas/secrets/node.secret)\"}") ||
  fail "curl could not reach $rest"
[[ $code == 201 ]] || fail "POST /nodes answered $code: $(cat "$work/node.json")"

sed -i -e "s|\"address\": \"[^\"]*\"|\"address\": \"$fabric\"|" -e 's|"port": 10000|"port": 0|' \
  -e "s|\"cores\": \[0\]|\"cores\": [$cpu]|" /etc/rfaas/executor_manager.json
# shellcheck disable=SC2086
if ! start_manager "$work/executor_manager.log" 60 \
  runuser -u "$(unit_user rfaas-executor-manager.service)" -- $em_cmd; then
  fail "the installed executor manager did not start"
fi
echo "executor manager (as rfaas): $manager_line"
up=0
for _ in $(seq 1 300); do
  curl -sS -H "Authorization: Bearer $token" "$rest/nodes" >"$work/nodes.json" 2>/dev/null &&
    grep -q "\"name\":\"$node\"[^}]*\"state\":\"up\"\|\"state\":\"up\"[^}]*\"name\":\"$node\"" \
      "$work/nodes.json" && { up=1; break; }
  kill -0 "$manager_pid" 2>/dev/null || fail "the executor manager exited"
  sleep 0.1
done
[[ $up == 1 ]] || fail "node $node did not come up: $(cat "$work/nodes.json")"

# ---- the installed tools against them --------------------------------------------------
if [[ -n $python_deb ]]; then
  (cd / && /usr/bin/python3 -c 'import rfaas') >"$work/python.log" 2>&1 ||
    fail "Debian's python3 cannot import the installed module rfaas"
  echo "python3-rfaas: /usr/bin/python3 imports rfaas"
fi
/usr/bin/rfaas-info --devices /etc/rfaas/devices.json --device lo-tcp >"$work/info.log" 2>&1 ||
  fail "the installed rfaas-info cannot open lo-tcp"
libfunctions=$(grep -E '/rfaas/examples/libfunctions\.so$' "$work/files.list" | head -n1)
/usr/bin/rfaas-example-client --devices /etc/rfaas/devices.json --device lo-tcp \
  --resource-manager "$fabric" --library "$libfunctions" --cores 1 --repetitions 200 \
  >"$work/client.out" 2>"$work/client.log" || fail "the installed example client failed"
cat "$work/client.out"
grep -qE '^verified [1-9][0-9]* results, 0 failures' "$work/client.out" ||
  fail "the example client verified no result"

stop_manager
stop_rm

# ---- purge: nothing may be left ---------------------------------------------------------
purge || fail "dpkg --purge failed"
left=()
while read -r f; do
  [[ -f $f || -L $f ]] && left+=("$f")
done <"$work/files.list"
for d in /etc/rfaas /var/lib/rfaas /usr/libexec/rfaas /usr/share/rfaas /usr/include/rfaas \
  /usr/include/rdmalib; do
  [[ -e $d ]] && left+=("$d")
done
[[ ${#left[@]} -eq 0 ]] || fail "left behind after the purge: ${left[*]}"
getent passwd rfaas >/dev/null && fail "the user rfaas is still there after the purge"
getent group rfaas >/dev/null && fail "the group rfaas is still there after the purge"
echo "deb install test: ok ($((SECONDS - start)) s)"
