#!/usr/bin/env bash
# The sandbox's escape suite: a real executor manager, a tenant ("victim")
# calling echo the whole time, and a hostile tenant whose functions
# (hostile_functions.cpp) try, one by one, to read the node's secrets, reach
# the manager, the zygote and the victim's executor, take a core or memory it
# did not lease, fork without bound, write outside its /tmp, run a shell,
# open sockets, and leave a daemon behind.
#
#   escape_test.sh --manager BIN --client BIN --hostile LIB --functions LIB
#                  --devices JSON --device NAME --sandbox namespaces|oci|command|process
#                  [--may-succeed LABEL[,LABEL]]
#
# Prints a table: attempt, what the function got. With the namespaces sandbox
# every attempt must be refused (but those named by --may-succeed, which the
# provider needs: TCP sockets on tcp;ofi_rxm); with process the table is
# printed and nothing about it is asserted. Either way the manager, its
# zygote and the victim's executor must be untouched (same processes, every
# victim result right), the victim's accounting must arrive, and nothing the
# hostile tenant started may outlive its allocation. Needs root (to start
# executors as another user and make cgroups); exits 77 (skipped) otherwise.
# With oci and command it also needs podman and runc (crun refuses hybrid
# cgroups): it builds a small image offline (podman import of a skeleton
# root whose /usr, like the executor's directories, is bound read-only from
# the host), and removes it at the end. The executor settings are the shipped
# examples, config/sandbox/oci.json and config/sandbox/podman-command.json
# (next to --devices), with the image's name replaced.
set -uo pipefail

manager='' client='' hostile='' functions='' devices='' device='' sandbox='' may_succeed=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --manager) manager=$2 ;;
    --client) client=$2 ;;
    --hostile) hostile=$2 ;;
    --functions) functions=$2 ;;
    --devices) devices=$2 ;;
    --device) device=$2 ;;
    --sandbox) sandbox=$2 ;;
    --may-succeed) may_succeed=$2 ;;
    *)
      echo "escape_test.sh: unknown argument $1" >&2
      exit 2
      ;;
  esac
  shift 2
done
for v in manager client hostile functions devices device sandbox; do
  [[ -n ${!v} ]] || {
    echo "escape_test.sh: --$v is required" >&2
    exit 2
  }
done
if [[ $(id -u) -ne 0 ]]; then
  echo "escape_test.sh: SKIPPED: needs root (executors run as another user, cgroups are made)"
  exit 77
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib/oci-image.sh
source "$here/../../scripts/lib/oci-image.sh"
container=0
[[ $sandbox == oci || $sandbox == command ]] && container=1
if ((container)) && ! why=$(oci_usable); then
  echo "escape_test.sh: SKIPPED: the $sandbox sandbox $why"
  exit 77
fi

fail() {
  echo "escape_test.sh: FAIL: $*" >&2
  failed=1
}
failed=0
tmp=$(mktemp -d /tmp/rfaas-escape.XXXXXX)
pids=()
cleanup() {
  touch "$tmp/stop"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -f /rfaas-escape-file
  [[ -n ${image:-} ]] && "${oci_podman[@]}" rmi -f "$image" "$image-allowed" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# A secret and a configuration where an operator keeps them: 0600, root's.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/node.secret"
chmod 600 "$tmp/node.secret"
cfg=$tmp/executor_manager.json
image=''
if ((container)); then
  image=localhost/rfaas-escape:$$
  oci_make_image "$tmp" "$image" || {
    echo "escape_test.sh: SKIPPED: podman cannot import an image here"
    image=''
    exit 77
  }
  # With oci the victim names the first image of the allow-list (the same
  # image under another name).
  [[ $sandbox == oci ]] && "${oci_podman[@]}" tag "$image" "$image-allowed"
fi
/usr/bin/python3 - "$devices" "$device" "$sandbox" "$tmp/node.secret" "$image" >"$cfg" <<'PY'
import json, os, sys
devices, device, sandbox, secret, image = sys.argv[1:]
executor = {"sandbox": sandbox, "max_processes": 128}
example = {"oci": "oci.json", "command": "podman-command.json"}.get(sandbox)
if example:
    path = os.path.join(os.path.dirname(os.path.abspath(devices)), "sandbox", example)
    text = open(path).read().replace("localhost/rfaas-executor:latest", image)
    executor.update(json.loads(text)["executor"])
    if sandbox == "oci":
        executor["oci"]["images"] = [image + "-allowed"]
print(json.dumps({
    "device_database": os.path.abspath(devices), "device": device,
    "listen": {"port": 0},
    "resource_manager": {"enabled": False, "address": "127.0.0.1:1", "secret_file": secret},
    "resources": {"cores": [0, 1], "memory_mib": 1024, "max_allocations": 4},
    "limits": {"default_memory_mib": 256},
    "executor": executor,
    "deadlines_ms": {"shutdown_grace": 1000},
}))
PY
chmod 600 "$cfg"

"$manager" --config "$cfg" --skip-resource-manager >"$tmp/manager.log" 2>&1 &
manager_pid=$!
pids+=("$manager_pid")
for _ in $(seq 300); do
  grep -q 'listening on' "$tmp/manager.log" && break
  kill -0 "$manager_pid" 2>/dev/null || break
  sleep 0.05
done
address=$(grep -o 'listening on [^ ]* [^ ]*' "$tmp/manager.log" | awk '{print $4}')
[[ -n $address ]] || {
  cat "$tmp/manager.log"
  echo "escape_test.sh: FAIL: the manager did not start" >&2
  exit 1
}
zygote_pid=$(grep -o 'zygote [0-9]* ready' "$tmp/manager.log" | awk '{print $2}')
grep -o 'executor sandbox: .*' "$tmp/manager.log"

# Any TCP service of the node (the resource manager's REST port stands for it).
/usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); c.close()
' >"$tmp/listener.port" &
pids+=("$!")
for _ in $(seq 100); do [[ -s $tmp/listener.port ]] && break; sleep 0.05; done
rest_port=$(cat "$tmp/listener.port")

common=(--devices "$devices" --device "$device" --manager "$address")
victim_image=()
if [[ $sandbox == oci ]]; then
  victim_image=(--image 1)
  # An image that is not in the allow-list is refused.
  "$client" victim "${common[@]}" --library "$functions" --until "$tmp/stop" --image 2 \
    >"$tmp/refused.out" 2>"$tmp/refused.err" &&
    fail "an allocation naming image 2 (not in the allow-list) was granted"
  grep -q "not in this manager's allow-list" "$tmp/refused.err" ||
    fail "image 2 was not refused for the allow-list: $(cat "$tmp/refused.err")"
fi
"$client" victim "${common[@]}" --library "$functions" --until "$tmp/stop" "${victim_image[@]}" \
  >"$tmp/victim.out" 2>"$tmp/victim.err" &
victim_client=$!
pids+=("$victim_client")
for _ in $(seq 300); do grep -q 'victim allocated' "$tmp/victim.out" && break; sleep 0.05; done
victim_id=$(awk '/victim allocated/ {print $3}' "$tmp/victim.out")
[[ -n $victim_id ]] || {
  cat "$tmp/victim.err" "$tmp/manager.log"
  echo "escape_test.sh: FAIL: the victim got no allocation" >&2
  exit 1
}
if [[ $sandbox == oci ]]; then
  grep -q "runs in image $image-allowed" "$tmp/manager.log" ||
    fail "the victim's executor did not run in the image it named"
fi
# The victim's executor: the zygote's child, or (in a sandbox) its child.
victim_outer=$(grep -o "allocation ${victim_id#0}.*executor pid [0-9]*" "$tmp/manager.log" | awk '{print $NF}')
[[ -n $victim_outer ]] || victim_outer=$(grep -o "allocation [0-9a-f]*: .*executor pid [0-9]*" "$tmp/manager.log" | head -1 | awk '{print $NF}')
if ((container)); then
  # The executor is in a container: the one process named executor in a
  # podman group (containers started ahead are named executor-spare).
  victim_pid=''
  for p in $(pgrep -x executor); do
    grep -q libpod "/proc/$p/cgroup" 2>/dev/null && victim_pid=$p && break
  done
else
  victim_pid=$(pgrep -P "$victim_outer" | head -1)
fi
[[ -n $victim_pid ]] || victim_pid=$victim_outer

cat >"$tmp/attempts" <<EOF_ATTEMPTS
read_node_secret escape_read_file $tmp/node.secret
read_manager_config escape_read_file $cfg
read_etc_shadow escape_read_file /etc/shadow
list_proc escape_list_proc $manager_pid
signal_manager escape_signal $manager_pid
signal_zygote escape_signal $zygote_pid
signal_other_executor escape_signal $victim_pid
ptrace_other_executor escape_ptrace $victim_pid
process_vm_readv_other escape_process_vm_readv $victim_pid
open_proc_mem_other escape_proc_mem $victim_pid
move_to_unleased_core escape_setaffinity 0
allocate_past_lease escape_allocate 512
fork_without_bound escape_fork_many 1000
write_outside_tmp escape_write_file /rfaas-escape-file
exec_bin_sh escape_exec_shell -
connect_tcp_service escape_connect $rest_port
open_raw_socket escape_raw_socket -
open_dev_mem escape_read_file /dev/mem
leave_a_daemon escape_daemon 60
EOF_ATTEMPTS
"$client" attack "${common[@]}" --library "$hostile" --attempts "$tmp/attempts" --memory 256 \
  >"$tmp/attack.out" 2>"$tmp/attack.err"
attack_status=$?
[[ $attack_status -eq 0 ]] || fail "the attacking client ended with $attack_status: $(cat "$tmp/attack.err")"

printf '%-26s %s\n' "attempt ($sandbox, $device)" "what the function got"
succeeded=()
while IFS=$'\t' read -r label got; do
  [[ -n $got ]] || continue
  printf '%-26s %s\n' "$label" "$got"
  [[ $got == ok* ]] && succeeded+=("$label")
done <"$tmp/attack.out"
expected=$(grep -c . "$tmp/attempts")
answered=$(grep -c $'\t' "$tmp/attack.out")
[[ $answered -eq $expected ]] || fail "$answered of $expected attempts answered"
if [[ $sandbox != process ]]; then
  for label in "${succeeded[@]}"; do
    [[ ,$may_succeed, == *,$label,* ]] && continue
    # A daemon may start; it must not outlive the allocation (checked below).
    [[ $label == leave_a_daemon ]] && continue
    fail "$label succeeded in the $sandbox sandbox"
  done
fi
echo "succeeded: ${succeeded[*]:-none}"

# Untouched: the manager, its zygote, the victim's executor and its results.
kill -0 "$manager_pid" 2>/dev/null || fail "the manager died"
grep -q 'zygote .* died' "$tmp/manager.log" && fail "the zygote died"
kill -0 "$victim_pid" 2>/dev/null || fail "the victim's executor $victim_pid died"
touch "$tmp/stop"
wait "$victim_client"
victim_status=$?
cat "$tmp/victim.out" | grep 'calls'
[[ $victim_status -eq 0 ]] || fail "the victim saw wrong results or errors: $(head -5 "$tmp/victim.err")"
# Its accounting reached the manager.
for _ in $(seq 100); do grep -q "allocation ${victim_id#0} ended" "$tmp/manager.log" && break; sleep 0.05; done
grep -qE "allocation 0*${victim_id#0}.* ended: executor exited normally;.*invocations [1-9]" "$tmp/manager.log" ||
  grep -qE "allocation [0-9a-f]* ended: executor exited normally;.*invocations [1-9]" "$tmp/manager.log" ||
  fail "no accounting of the victim's allocation"
# Nothing of the hostile tenant's outlives its allocation. Only daemons of
# this build's executor count: other builds on the machine run this suite too.
executor_bin=$(readlink -f "$(dirname "$manager")/../executor/executor")
daemons() {
  local p
  for p in $(pgrep -x escape-daemon); do
    [[ $(readlink -f "/proc/$p/exe" 2>/dev/null) == "$executor_bin" ]] && echo "$p"
  done
}
if [[ $sandbox != process ]]; then
  for _ in $(seq 100); do [[ -z $(daemons) ]] && break; sleep 0.05; done
  [[ -n $(daemons) ]] && fail "the hostile tenant's daemon outlived its allocation"
else
  # It outlives its allocation here (that is the point), with the executor's
  # signal mask, where SIGTERM is blocked: SIGKILL, or it stays 60 s and a
  # namespaces run after this one would count it.
  for p in $(daemons); do kill -KILL "$p" 2>/dev/null; done
fi
if [[ $failed -ne 0 ]]; then
  echo "---- manager log"
  tail -40 "$tmp/manager.log"
  exit 1
fi
echo "escape_test.sh: PASS ($sandbox, $device)"
