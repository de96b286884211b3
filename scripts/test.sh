#!/usr/bin/env bash
# The project's test command: set up a Debian 12 machine and run every test.
# This is what the README documents and what .ci/run runs.
#
# Phases (each prints a header and its wall time; a failed phase does not stop
# the independent ones that follow):
#   deps       scripts/install-deps.sh (apt-get only when something is missing)
#   build      configure + build the libfabric backend (RelWithDebInfo, warnings as errors;
#              -g1: line tables and function names, enough for any stack trace)
#   test       ctest on that build: unit, conformance over every provider, e2e
#   san-build  the same with AddressSanitizer + UBSan (-DRFAAS_SANITIZE=ON; warnings not
#              fatal there: GCC's sanitizer instrumentation causes false positives),
#              at -O1 -g1, the level ASan recommends (it compiles in half the time of -O2)
#   san-test   ctest on the sanitizer build, without the tests that do not run its
#              code (labels docs, install, packaging, python, slurm, sandbox and scripts:
#              docs.* only compile the documentation's snippets and render the API
#              reference, install.* install and configure trees or build and install
#              the .deb packages, packaging.* check the Spack recipe and configure
#              trees, the sanitizer build has no Python module, slurm.* test the
#              SLURM deployment scripts (~40 s), and sandbox.* hold executors to
#              the lease's memory, which AddressSanitizer's shadow exceeds, and
#              scripts.* are Python only: the benchmarks' statistics and plot.py)
#   fuzz       scripts/fuzz.sh --smoke: every libFuzzer target of tests/fuzz/ for 8 s,
#              two at a time (~30 s), after a clang-14 build of only the parsers
#              in <build root>/fuzz
#   verbs      scripts/run-verbs-tests.sh: verbs backend on soft-RoCE in a VM
#   format     scripts/check-format.sh
# The summary line reads "N passed, M failed, K skipped"; after it come the failed
# tests of a failed ctest phase, and tests that failed once and passed when run
# again ("FLAKY", at most RFAAS_TEST_MAX_RERUNS=3 are rerun), each with its
# failure messages. Exit status is 0 only if no phase failed.
#
# Environment (for quick local runs; under CI=true every phase runs):
#   RFAAS_TEST_SKIP_DEPS=1 RFAAS_TEST_SKIP_SANITIZE=1 RFAAS_TEST_SKIP_VERBS=1
#   RFAAS_TEST_SKIP_FUZZ=1 RFAAS_TEST_SKIP_FORMAT=1   skip that phase
#   RFAAS_TEST_BUILD_DIR       build root (default: build/test), holds release/, sanitize/,
#                              verbs/ and verbs-libfabric/
#   RFAAS_TEST_JOBS            build parallelism (default: nproc)
#   RFAAS_TEST_CTEST_JOBS      tests run at once (default: nproc); the ones that
#                              busy-poll (conformance, e2e, ...) are RUN_SERIAL in
#                              CMake and always run alone
#   RFAAS_TEST_CTEST_ARGS      extra ctest arguments, e.g. "-R conformance"
#   RFAAS_TEST_TIMEOUT         default per-test timeout in seconds (default 600)
#   RFAAS_TEST_MAX_RERUNS      rerun the failed tests once when at most this many
#                              failed (default 3; 0 = never rerun)
set -uo pipefail

case "${1:-}" in
-h | --help)
  # The header comment above is the manual.
  sed -n '2,/^set -uo pipefail/{/^#/s/^# \{0,1\}//p}' "$0"
  exit 0
  ;;
"") ;;
*)
  echo "test.sh: unknown argument \"$1\"; it takes none, only the environment variables listed by --help" >&2
  exit 2
  ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

build_root=${RFAAS_TEST_BUILD_DIR:-build/test}
jobs=${RFAAS_TEST_JOBS:-$(nproc)}
ctest_jobs=${RFAAS_TEST_CTEST_JOBS:-$(nproc)}
test_timeout=${RFAAS_TEST_TIMEOUT:-600}
read -r -a ctest_extra <<<"${RFAAS_TEST_CTEST_ARGS:-}"

skip_requested() { # $1 = variable name
  [[ ${!1:-0} == 1 ]] || return 1
  if [[ ${CI:-} == true ]]; then
    echo "test.sh: ignoring $1=1 because CI=true (CI runs every phase)"
    return 1
  fi
  return 0
}

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

declare -a names=() results=() times=()
passed=0
failed=0
skipped=0
start_all=$(date +%s.%N)

elapsed_since() { # $1 = start time from date +%s.%N
  awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'
}

record() { # $1 = name, $2 = PASSED|FAILED|SKIPPED, $3 = seconds, $4 = note
  names+=("$1")
  results+=("$2${4:+ ($4)}")
  times+=("$3")
  case $2 in
    PASSED) passed=$((passed + 1)) ;;
    FAILED) failed=$((failed + 1)) ;;
    *) skipped=$((skipped + 1)) ;;
  esac
}

# phase NAME DESCRIPTION COMMAND... : run one phase with a header and its time.
phase() {
  local name=$1 description=$2
  shift 2
  echo
  echo "=================================================================="
  echo "==> $name: $description"
  echo "    $*"
  echo "=================================================================="
  local start status
  start=$(date +%s.%N)
  "$@"
  status=$?
  local secs
  secs=$(elapsed_since "$start")
  if [[ $status -eq 0 ]]; then
    echo "<== $name: PASSED in ${secs} s"
    record "$name" PASSED "$secs"
  else
    echo "<== $name: FAILED (exit $status) in ${secs} s"
    record "$name" FAILED "$secs" "exit $status"
  fi
  return $status
}

skip() { # $1 = name, $2 = reason
  echo
  echo "==> $1: SKIPPED ($2)"
  record "$1" SKIPPED 0 "$2"
}

# configure_and_build DIR OPT CMAKE_ARGS...: RelWithDebInfo at optimisation OPT
# (-O2, -O1) with -g1 instead of -g: tests and sanitizer reports need line
# numbers and function names only, and full debug information made the builds
# a quarter to a third slower.
configure_and_build() {
  local dir=$1 flags="$2 -g1 -DNDEBUG"
  shift 2
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$flags" \
    -DRFAAS_NETWORK_BACKEND=libfabric "$@" &&
    cmake --build "$dir" -j "$jobs"
}

# ctest_failures DIR: the failed tests of the last ctest run in DIR, each with
# its failure messages and the tail of its output (ctest keeps the full log in
# Testing/Temporary).
ctest_failures() {
  local dir=$1 failed_list=$1/Testing/Temporary/LastTestsFailed.log
  local log=$1/Testing/Temporary/LastTest.log
  [[ -s $failed_list ]] || return 0
  echo
  echo "=================================================================="
  echo "failed tests in $dir (full output: $log)"
  local line name
  while IFS= read -r line; do
    name=${line#*:}
    awk -v want="$name" '
      $0 ~ /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); current = $0; next }
      current == want && /^Output:$/ { inside = 1; getline; next }
      inside && /^<end of output>$/ { inside = 0; current = ""; next }
      inside { print }
    ' "$log" >"$dir/failed-output.txt"
    echo "---- $name: its failure messages"
    grep -E -A6 'Failure$|\bFAILED\b|\berror\b|\bERROR\b|SUMMARY:|Assertion|FAIL:' \
      "$dir/failed-output.txt" | head -n 30
    echo "---- $name: last 12 lines of its output"
    tail -n 12 "$dir/failed-output.txt"
  done <"$failed_list"
}

# run_ctest DIR: the suite, then the failed tests once more when there are at
# most $max_reruns of them. A test that passes on the rerun is reported as
# FLAKY at the end of the log with its first failure, never hidden; a test that
# fails twice fails the phase.
max_reruns=${RFAAS_TEST_MAX_RERUNS:-3}
run_ctest() { # $1 = build dir, then more ctest arguments
  local dir=$1 tmp=$1/Testing/Temporary
  shift
  local args=(-j "$ctest_jobs" --output-on-failure --timeout "$test_timeout" "$@" "${ctest_extra[@]}")
  rm -rf "$dir/first-attempt"
  ctest --test-dir "$dir" --no-tests=error "${args[@]}" && return 0
  local status=$? count=0
  [[ -s $tmp/LastTestsFailed.log ]] && count=$(wc -l <"$tmp/LastTestsFailed.log")
  if [[ $count -eq 0 || $count -gt $max_reruns ]]; then
    return $status
  fi
  mkdir -p "$dir/first-attempt/Testing/Temporary"
  cp "$tmp/LastTest.log" "$tmp/LastTestsFailed.log" "$dir/first-attempt/Testing/Temporary/"
  echo "test.sh: $count test(s) failed; running them once more to tell a flake from a failure"
  ctest --test-dir "$dir" --rerun-failed "${args[@]}"
}

# Sanitizer runs: stop at the first report, with a stack, and fail the test.
# The tests the header names do not run the sanitized code, or cannot.
run_ctest_sanitized() { # $1 = build dir
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_init_order=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    run_ctest "$1" -LE '^(docs|install|packaging|python|slurm|sandbox|scripts)$'
}

echo "test.sh: rFaaS at $repo ($(git rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))," \
  "$(nproc) cores, build root $build_root, CI=${CI:-unset}"

# ---- deps
if skip_requested RFAAS_TEST_SKIP_DEPS; then
  skip deps "RFAAS_TEST_SKIP_DEPS=1"
else
  phase deps "install Debian packages" scripts/install-deps.sh
fi

# ---- libfabric backend, release-ish build
if phase build "configure + build, libfabric backend" \
  configure_and_build "$build_root/release" -O2 -DRFAAS_WERROR=ON; then
  phase test "ctest, libfabric backend" run_ctest "$build_root/release"
else
  skip test "build failed"
fi

# ---- sanitizer build
if skip_requested RFAAS_TEST_SKIP_SANITIZE; then
  skip san-build "RFAAS_TEST_SKIP_SANITIZE=1"
  skip san-test "RFAAS_TEST_SKIP_SANITIZE=1"
elif phase san-build "configure + build with ASan + UBSan" \
  configure_and_build "$build_root/sanitize" -O1 -DRFAAS_SANITIZE=ON -DRFAAS_BUILD_BENCHMARKS=OFF; then
  phase san-test "ctest, ASan + UBSan build" run_ctest_sanitized "$build_root/sanitize"
else
  skip san-test "sanitizer build failed"
fi

# ---- fuzzing smoke: the parsers of outside input (the long campaign is scripts/fuzz.sh)
if skip_requested RFAAS_TEST_SKIP_FUZZ; then
  skip fuzz "RFAAS_TEST_SKIP_FUZZ=1"
else
  phase fuzz "libFuzzer smoke of every parser" \
    scripts/fuzz.sh --smoke --build-dir "$build_root/fuzz"
fi

# ---- verbs backend in a soft-RoCE VM (scripts/run-verbs-tests.sh does the work)
run_verbs() {
  # Keep its verbs build under this run's build root, next to the others;
  # libfabric's verbs providers run with the release build of the build phase.
  RFAAS_VERBS_BUILD_DIR=${RFAAS_VERBS_BUILD_DIR:-$build_root/verbs} \
    RFAAS_VERBS_LF_BUILD_DIR=${RFAAS_VERBS_LF_BUILD_DIR:-$build_root/release} \
    RFAAS_VERBS_JOBS=${RFAAS_VERBS_JOBS:-$jobs} \
    bash scripts/run-verbs-tests.sh
}
if skip_requested RFAAS_TEST_SKIP_VERBS; then
  skip verbs "RFAAS_TEST_SKIP_VERBS=1"
elif [[ -f scripts/run-verbs-tests.sh ]]; then
  phase verbs "verbs backend on soft-RoCE (VM)" run_verbs
else
  skip verbs "scripts/run-verbs-tests.sh does not exist yet"
fi

# ---- formatting
if skip_requested RFAAS_TEST_SKIP_FORMAT; then
  skip format "RFAAS_TEST_SKIP_FORMAT=1"
else
  phase format "clang-format check" scripts/check-format.sh
fi

# ---- summary
echo
echo "=================================================================="
echo "test.sh summary"
for i in "${!names[@]}"; do
  printf '  %-10s %-40s %8s s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
summary_line="$passed passed, $failed failed, $skipped skipped ($(elapsed_since "$start_all") s)"
echo "$summary_line"

# ---- failures, repeated at the end so that a log cut to its tail still names them
for i in "${!names[@]}"; do
  dir=""
  case ${names[$i]} in
    test) dir=$build_root/release ;;
    san-test) dir=$build_root/sanitize ;;
  esac
  [[ -n $dir ]] || continue
  if [[ ${results[$i]} == FAILED* ]]; then
    ctest_failures "$dir"
  elif [[ -d $dir/first-attempt ]]; then
    echo
    echo "FLAKY in ${names[$i]}: failed once, passed when run again:"
    sed 's/^[0-9]*:/  /' "$dir/first-attempt/Testing/Temporary/LastTestsFailed.log"
    ctest_failures "$dir/first-attempt"
  fi
done
[[ $failed -eq 0 ]] || echo "test.sh: FAILED: $summary_line"
[[ $failed -eq 0 ]]
