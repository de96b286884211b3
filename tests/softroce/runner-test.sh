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
# Each case must end with exit status 0, exactly one fallback line, and the
# guest's output. A third case starts a TCG guest with a sign-of-life
# deadline of 0 s: it must be started once more, in one line, and run. scripts/run-verbs-tests.sh runs this before the verbs suites.
#
# Usage: tests/softroce/runner-test.sh      (exit 0 when both cases pass)
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
runner=tests/softroce/run-in-vm.sh
failed=0

check() { # name, then environment assignments for the runner
  local name=$1
  shift
  local out rc t0
  t0=$(date +%s)
  out=$(env "$@" SOFTROCE_VM_ACCEL=kvm "$runner" --no-rxe --timeout 120 -- \
    sh -c 'echo "guest says hello"' 2>&1)
  rc=$?
  local fallbacks
  fallbacks=$(grep -c 'KVM did not bring the guest up' <<<"$out")
  if [[ $rc -eq 0 && $fallbacks -eq 1 ]] && grep -q '^guest says hello$' <<<"$out" &&
    grep -q 'accel=tcg' <<<"$out"; then
    echo "runner-test: $name: PASSED in $(($(date +%s) - t0)) s: $(grep 'KVM did not' <<<"$out")"
  else
    echo "runner-test: $name: FAILED (exit $rc, $fallbacks fallback line(s)); runner output:"
    sed 's/^/    /' <<<"$out"
    failed=$((failed + 1))
  fi
}

check "kvm aborts at once" SOFTROCE_VM_KVM_ARGS="-cpu rfaas-no-such-cpu-model"
check "kvm shows no sign of life" SOFTROCE_VM_KVM_ACCEL=tcg SOFTROCE_VM_KVM_ARGS=-S \
  SOFTROCE_VM_KVM_DEADLINE=3
# A TCG guest that stays silent is started once more: a deadline of 0 s
# makes the first start silent for certain.
t0=$(date +%s)
out=$(SOFTROCE_VM_ACCEL=tcg SOFTROCE_VM_TCG_DEADLINE=0 "$runner" --no-rxe --timeout 120 -- \
  sh -c 'echo "guest says hello"' 2>&1)
rc=$?
again=$(grep -c 'showed no sign of life within 0 s; starting it once more' <<<"$out")
if [[ $rc -eq 0 && $again -eq 1 ]] && grep -q '^guest says hello$' <<<"$out"; then
  echo "runner-test: tcg silent at first: PASSED in $(($(date +%s) - t0)) s"
else
  echo "runner-test: tcg silent at first: FAILED (exit $rc, $again restart line(s)); runner output:"
  sed 's/^/    /' <<<"$out"
  failed=$((failed + 1))
fi
[[ $failed -eq 0 ]]
