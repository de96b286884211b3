#!/usr/bin/env bash
# tests/softroce/runner-test.sh - test of run-in-vm.sh's KVM -> TCG fallback.
#
# On a host whose /dev/kvm exists but cannot run a guest (nested virtualisation),
# qemu either aborts at once or the guest never prints a line. The runner must
# then boot the same guest under TCG and say so in one line, instead of failing
# the verbs phase. Both ways are forced here, on any host, KVM or not:
#   abort: the KVM attempt gets a CPU model qemu does not know (it exits at once);
#   hang:  the KVM attempt is started paused (-S; under TCG so that it behaves the
#          same whether or not the host has KVM) with a 3 s sign-of-life deadline.
# A third case starts a TCG guest with a sign-of-life deadline of 0 s, so that
# it is silent for certain: it must be started once more.
# Each case must end with exit status 0 under TCG, exactly one line saying what
# the runner did, and the guest's output. scripts/run-verbs-tests.sh runs this
# before the verbs suites.
#
# Usage: tests/softroce/runner-test.sh      (exit 0 when every case passes)
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
runner=tests/softroce/run-in-vm.sh
failed=0

check() { # name, the runner's line for what it did, then its environment
  local name=$1 line=$2
  shift 2
  local out rc t0
  t0=$(date +%s)
  out=$(env "$@" "$runner" --no-rxe --timeout 120 -- sh -c 'echo "guest says hello"' 2>&1)
  rc=$?
  local said
  said=$(grep -c -- "$line" <<<"$out")
  if [[ $rc -eq 0 && $said -eq 1 ]] && grep -q '^guest says hello$' <<<"$out" &&
    grep -q 'accel=tcg' <<<"$out"; then
    echo "runner-test: $name: PASSED in $(($(date +%s) - t0)) s: $(grep -- "$line" <<<"$out")"
  else
    echo "runner-test: $name: FAILED (exit $rc, $said line(s) \"$line\"); runner output:"
    sed 's/^/    /' <<<"$out"
    failed=$((failed + 1))
  fi
}

fallback='KVM did not bring the guest up'
check "kvm aborts at once" "$fallback" SOFTROCE_VM_ACCEL=kvm \
  SOFTROCE_VM_KVM_ARGS="-cpu rfaas-no-such-cpu-model"
check "kvm shows no sign of life" "$fallback" SOFTROCE_VM_ACCEL=kvm SOFTROCE_VM_KVM_ACCEL=tcg \
  SOFTROCE_VM_KVM_ARGS=-S SOFTROCE_VM_KVM_DEADLINE=3
check "tcg silent at first" 'showed no sign of life within 0 s; starting it once more' \
  SOFTROCE_VM_ACCEL=tcg SOFTROCE_VM_TCG_DEADLINE=0
[[ $failed -eq 0 ]]
