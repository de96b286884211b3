#!/bin/sh
# tests/softroce/guest-suite.sh VERBS_BUILD [LIBFABRIC_BUILD]
#
# Runs INSIDE the soft-RoCE VM (tests/softroce/run-in-vm.sh --two; started by
# scripts/run-verbs-tests.sh): the verbs tests (verbs_smoke, the conformance
# suite, the end-to-end suite, the resource manager's lease and fabric suites,
# the latter with real munged) on rxe0
# alone (loopback, server and client both on $SOFTROCE_IP) and from rxe0 to
# rxe1 ($SOFTROCE_IP -> $SOFTROCE_PEER_IP), then the libfabric backend's verbs
# providers.
#
# Each step has its own timeout; a missing binary or hook is reported as
# SKIPPED with the reason, never silently. Logs go to VERBS_BUILD/vm-logs/.
# Last line: "verbs-vm: N passed, M failed, K skipped". Exit status 0 only if
# no required step failed.
#
# Environment: RFAAS_VERBS_STEP_TIMEOUT (seconds per step, default 300),
# RFAAS_VERBS_STEPS (run only the steps whose names match one of these
# space-separated shell patterns, e.g. 'libfabric-verbs-smoke-*'; the others
# are reported as skipped, not selected; default every step).
set -u

verbs=${1:?usage: guest-suite.sh VERBS_BUILD [LIBFABRIC_BUILD]}
lf=${2:-}
ip0=${SOFTROCE_IP:-10.99.0.1}
ip1=${SOFTROCE_PEER_IP:-10.99.0.2}
step_timeout=${RFAAS_VERBS_STEP_TIMEOUT:-300}
only=${RFAAS_VERBS_STEPS:-}
logs=$verbs/vm-logs
mkdir -p "$logs"

passed=0 failed=0 skipped=0
summary=""
now() { cut -d' ' -f1 /proc/uptime; }
add() { summary="$summary$(printf '  %-34s %s' "$1" "$2")
"; }

# step NAME REQUIRED(1|0) COMMAND... : run with a timeout, log, record.
step() {
  name=$1 required=$2
  shift 2
  if [ -n "$only" ] && ! selected "$name"; then
    skip "$name" "not selected by RFAAS_VERBS_STEPS"
    return
  fi
  echo
  echo "=== $name: $*"
  s=$(now)
  timeout -k 10 "$step_timeout" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$s" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  # Failures and the summary only (the full log is on the host).
  grep -v '\[info\]' "$logs/$name.log" |
    grep -E 'FAIL|Failure|Expected|Actual|Which is|rdmalib|exception|Skipped|lacks|PASSED|SKIPPED|FAILED|tests? ran|passed|terminated|error|^note ' |
    tail -n 60
  counts=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$logs/$name.log" | sed 's/^\[ *\([A-Z]*\) *\] \([0-9]*\).*/\2 \1/' | tr '\n' ' ')
  [ -n "$counts" ] || counts=$(grep -E '^verbs_smoke: [0-9]+ passed' "$logs/$name.log" | sed 's/^verbs_smoke: //')
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    echo "=== $name: PASSED in ${secs}s ($counts)"
    add "$name" "PASSED   ${secs}s  $counts"
  elif [ "$required" = 1 ]; then
    failed=$((failed + 1))
    [ "$rc" = 124 ] && counts="$counts TIMEOUT after ${step_timeout}s"
    echo "=== $name: FAILED (exit $rc) in ${secs}s ($counts); log: $logs/$name.log"
    add "$name" "FAILED   ${secs}s  exit $rc $counts"
  else
    skipped=$((skipped + 1))
    echo "=== $name: KNOWN-FAIL (exit $rc) in ${secs}s ($counts); not counted (tests/softroce/README.md); log: $logs/$name.log"
    add "$name" "KNOWN-FAIL ${secs}s exit $rc $counts"
  fi
}

selected() { # NAME: does one of RFAAS_VERBS_STEPS's patterns match it?
  for pattern in $only; do
    # shellcheck disable=SC2254 # the patterns are meant to match
    case $1 in $pattern) return 0 ;; esac
  done
  return 1
}

skip() { # NAME REASON
  skipped=$((skipped + 1))
  echo
  echo "=== $1: SKIPPED ($2)"
  add "$1" "SKIPPED  ($2)"
}

uname -r
rdma link show

# ---- the verbs backend -------------------------------------------------------------
# Discovery and capability negotiation through the user tool, and a device
# database written for this machine that opens again.
if [ -x "$verbs/tools/rfaas-info" ]; then
  step verbs-rfaas-info 1 sh -c "'$verbs/tools/rfaas-info' --write-devices /tmp/devices.json &&
    '$verbs/tools/rfaas-info' --devices /tmp/devices.json && cat /tmp/devices.json"
fi
if [ -x "$verbs/tests/rdmalib/rdmalib_unit_tests" ]; then
  step verbs-unit-tests 1 "$verbs/tests/rdmalib/rdmalib_unit_tests" --gtest_brief=1
fi
smoke=$verbs/tests/softroce/verbs_smoke
if [ -x "$smoke" ]; then
  step verbs-smoke-rxe0 1 "$smoke" --server-ip "$ip0" --client-ip "$ip0"
  step verbs-smoke-rxe0-rxe1 1 "$smoke" --server-ip "$ip1" --client-ip "$ip0"
else
  skip verbs-smoke "no verbs_smoke binary in $verbs"
fi

# The conformance suite takes its addresses from RFAAS_TEST_SERVER_IP /
# RFAAS_TEST_CLIENT_IP (rdma_cm cannot use 127.0.0.1).
conf=$verbs/tests/rdmalib/rdmalib_conformance
if [ ! -x "$conf" ]; then
  skip verbs-conformance "no $conf (tests not built)"
elif ! grep -q RFAAS_TEST_SERVER_IP "$conf"; then
  skip verbs-conformance "the suite has no RFAAS_TEST_SERVER_IP hook (built from an older tree)"
else
  step verbs-conformance-rxe0 1 env RFAAS_TEST_SERVER_IP="$ip0" RFAAS_TEST_CLIENT_IP="$ip0" \
    "$conf" --gtest_brief=1
  step verbs-conformance-rxe0-rxe1 1 env RFAAS_TEST_SERVER_IP="$ip1" RFAAS_TEST_CLIENT_IP="$ip0" \
    "$conf" --gtest_brief=1
fi

# The end-to-end suite: librfaas against a real executor manager, its zygote
# and executors (the test binary starts the manager). The manager listens on
# the device's IP (rdma_cm cannot use 127.0.0.1); the database (used by the
# lease suite below too) names both devices explicitly rather than relying on
# rfaas-info's naming.
e2e_db=/tmp/e2e-devices.json
cat >"$e2e_db" <<EOF
{
  "devices": [
    { "name": "rxe0", "provider": "verbs", "domain": "rxe0", "ip_address": "$ip0",
      "port": 0, "default_receive_buffer_size": 32, "endpoint": "connected" },
    { "name": "rxe1", "provider": "verbs", "domain": "rxe1", "ip_address": "$ip1",
      "port": 0, "default_receive_buffer_size": 32, "endpoint": "connected" }
  ]
}
EOF
e2e=$verbs/tests/e2e/rfaas_e2e_tests
if [ ! -x "$e2e" ]; then
  skip verbs-e2e "no $e2e (server, examples or tests not built)"
else
  step verbs-e2e-rxe0 1 "$e2e" --devices "$e2e_db" --device rxe0 --host "$ip0"
  # Manager (and so its executors) on rxe1, client on rxe0: every connection
  # of the lease crosses the veth pair.
  step verbs-e2e-rxe0-rxe1 1 "$e2e" --devices "$e2e_db" --device rxe0 \
    --manager-device rxe1 --host "$ip1"
fi

# The resource manager's lease suite (tests/servers/resource_manager/lease_test.cpp):
# a real resource_manager, an executor_manager registered with it and
# librfaas leasing through it. Its REST API stays on 127.0.0.1 (HTTP); the
# fabric side listens on the device's address. On rxe0 every case runs (15,
# ~55 s under TCG). From rxe0 to rxe1 (resource manager, executor managers and
# executors on rxe1, the client on rxe0) five cases that between them open
# every kind of connection the suite opens across the veth pair: lease,
# allocate, invoke, release; the refused tokens; two revocations; 16 racing
# clients (~25 s). The rest (expiry, renewal, restart, accounting, two
# nodes, a killed executor manager: ~30 s, mostly lease timers and the
# resource manager's bookkeeping) is left to the rxe0 run.
lease=$verbs/tests/servers/resource_manager/rfaas_rm_lease_tests
if [ ! -x "$lease" ]; then
  skip verbs-rm-lease "no $lease (resource manager, server or tests not built)"
else
  step verbs-rm-lease-rxe0 1 "$lease" --devices "$e2e_db" --device rxe0 --host "$ip0"
  step verbs-rm-lease-rxe0-rxe1 1 "$lease" --devices "$e2e_db" --device rxe0 \
    --manager-device rxe1 --host "$ip1" \
    "--gtest_filter=*LeaseAllocateInvokeRelease:*TokensAreRefused:*RevokedLeaseEndsItsExecutor:*LeaseRevokedRightAfterAllocationIsReported:*SixteenClientsRace*"
fi

# The resource manager's fabric suite (tests/servers/resource_manager/fabric_test.cpp),
# every case on rxe0, the same code as rm.fabric.<dev> on loopback: the test
# plays nodes and clients over rdmalib against a real resource_manager. Its
# MUNGE case starts two real munged (the host's /usr/sbin/munged over 9p,
# each with its own key, socket, pid, log and seed file in a directory under
# the guest's /tmp, in the foreground: nothing of the host's /etc/munge or
# /var is needed) and checks a valid credential, a replayed, a missing, an
# expired one, one of another realm and one made for another request; the
# other tenant cases (a second registration on a registered connection, 400
# leases ending in one tick while the node does not read, idle clients and
# slots kept for nodes, ended leases told again to a registering node) run
# on verbs too. Without munged the MUNGE case would skip: the step fails
# instead, naming the package.
fabric=$verbs/tests/servers/resource_manager/rfaas_rm_fabric_tests
if [ ! -x "$fabric" ]; then
  skip verbs-rm-fabric "no $fabric (resource manager or tests not built)"
elif ! command -v munged >/dev/null 2>&1 || ! command -v mungekey >/dev/null 2>&1; then
  step verbs-rm-fabric-rxe0 1 sh -c "echo 'munged or mungekey not found on the host (Debian package munge, scripts/install-deps.sh): the MUNGE cases cannot run on verbs'; exit 1"
else
  step verbs-rm-fabric-rxe0 1 "$fabric" --devices "$e2e_db" --device rxe0
fi

# The lease owner reaches the node (tests/sandbox/owner_test.sh) on rxe0: a
# real munged, a resource manager with auth "munge", a root executor
# manager (namespaces sandbox, executor.user daemon) and the owner client
# leasing through librfaas with its MUNGE credential, run as nobody (its
# function runs as uid 65534), as root (runs as daemon) and without munged
# (refused: missing MUNGE credential).
owner=$verbs/tests/sandbox/rfaas_owner_client
if [ ! -x "$owner" ] || [ ! -x "$verbs/server/resource_manager/resource_manager" ] ||
  [ ! -f "$verbs/tests/sandbox/librfaas_test_hostile_functions.so" ]; then
  skip verbs-owner "no $owner, resource manager or hostile functions (not built)"
else
  here=$(cd "$(dirname "$0")" && pwd)
  step verbs-owner-rxe0 1 bash "$here/../sandbox/owner_test.sh" \
    --rm "$verbs/server/resource_manager/resource_manager" \
    --manager "$verbs/server/executor_manager/executor_manager" --client "$owner" \
    --hostile "$verbs/tests/sandbox/librfaas_test_hostile_functions.so" \
    --devices "$e2e_db" --device rxe0
fi

# The sandbox's escape suite (tests/sandbox/escape_test.sh) in the namespaces
# sandbox on rxe0: hostile functions against a real manager while another
# tenant calls, every attempt refused (docs/security.md). The VM's root is
# its initial ramfs, so the sandbox builds the executor's root with its
# move-and-chroot path there.
escape=$verbs/tests/sandbox/rfaas_escape_client
hostile=$(ls "$verbs"/tests/sandbox/librfaas_test_hostile_functions.so 2>/dev/null)
if [ ! -x "$escape" ] || [ -z "$hostile" ]; then
  skip verbs-escape "no $escape or hostile functions (tests not built)"
else
  here=$(cd "$(dirname "$0")" && pwd)
  step verbs-escape-rxe0-namespaces 1 "$here/../sandbox/escape_test.sh" \
    --manager "$verbs/server/executor_manager/executor_manager" --client "$escape" \
    --hostile "$hostile" --functions "$verbs/examples/functions/libfunctions.so" \
    --devices "$e2e_db" --device rxe0 --sandbox namespaces
fi

# ---- the libfabric backend with libfabric's verbs provider ----------------------------
# verbs_smoke, and the whole conformance suite on "verbs" (MSG) and on
# "verbs;ofi_rxm" (RDM), all required. verbs_smoke's masked pass keeps virtual
# addressing on (the provider requires FI_MR_VIRT_ADDR) and prints that reason.
if [ -n "$lf" ]; then
  lfsmoke=$lf/tests/softroce/verbs_smoke
  if [ -x "$lfsmoke" ]; then
    step libfabric-verbs-smoke-rxe0 1 "$lfsmoke" --provider verbs --server-ip "$ip0" --client-ip "$ip0"
    step libfabric-verbs-smoke-rxe0-rxe1 1 "$lfsmoke" --provider verbs --server-ip "$ip1" \
      --client-ip "$ip0"
  else
    skip libfabric-verbs-smoke "no $lfsmoke (not built)"
  fi
  lfconf=$lf/tests/rdmalib/rdmalib_conformance
  # The build may be the host's own (other providers compiled in): name them.
  lfproviders='verbs/msg,verbs;ofi_rxm/rdm'
  if [ ! -x "$lfconf" ]; then
    skip libfabric-verbs-conformance "no $lfconf (not built)"
  else
    step libfabric-verbs-msg-rxe0 1 env RFAAS_TEST_PROVIDERS="$lfproviders" \
      RFAAS_TEST_SERVER_IP="$ip0" RFAAS_TEST_CLIENT_IP="$ip0" \
      "$lfconf" --gtest_brief=1 "--gtest_filter=*verbs_msg*:Errors.*"
    # rxm sizes its MSG completion queues as rx_size x FI_UNIVERSE_SIZE (256 by
    # default), beyond rxe's max_cqe of 32767: "Unable to create verbs CQ".
    # RxM's use-after-free when a connection closes with the peer's messages
    # unread (docs/BACKEND-BUGS.md) is avoided by rdmalib's
    # FI_OFI_RXM_USE_SRX=1 (rdmalib/libfabric/repro/rxm_close_repro.c shows it).
    step libfabric-verbs-rxm-rxe0 1 env FI_UNIVERSE_SIZE=32 RFAAS_TEST_PROVIDERS="$lfproviders" \
      RFAAS_TEST_SERVER_IP="$ip0" \
      RFAAS_TEST_CLIENT_IP="$ip0" "$lfconf" --gtest_brief=1 "--gtest_filter=*verbs_ofi_rxm*"
  fi
fi

for d in /sys/class/infiniband/*; do
  echo "$(basename "$d"): sent_pkts=$(cat "$d/ports/1/hw_counters/sent_pkts") rcvd_pkts=$(cat "$d/ports/1/hw_counters/rcvd_pkts")"
done
echo
echo "verbs-vm summary (logs in $logs):"
printf '%s' "$summary"
echo "verbs-vm: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
