#!/usr/bin/env bash
# The project's main job: set up a Debian 12 machine, build, start an rFaaS
# executor manager on loopback (standalone, default device of
# config/executor_manager.json: tcp), run the example client against it
# (synchronous, asynchronous and parallel calls of echo, sum_squares and
# expand, every output verified), print the verified results and the median
# hot invocation latency, and stop everything.
#
# Usage: scripts/main-job.sh [CLIENT ARGS...]   ARGS go to rfaas-example-client
#        (e.g. --repetitions 5000, --size 1024, --cores 1; see its --help)
#
# Environment:
#   RFAAS_MAIN_BUILD_DIR   build directory (default: build/main)
#   RFAAS_MAIN_JOBS        build parallelism (default: nproc)
#   RFAAS_MAIN_DEVICE      device entry of config/devices.json (default: lo-tcp)
#   RFAAS_MAIN_PINGPONG=1  also run the rdmalib vs raw libfabric ping-pong
#                          (benchmarks/run-pingpong.sh) over tcp afterwards
#   RFAAS_SKIP_DEPS=1      do not run scripts/install-deps.sh
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

build=${RFAAS_MAIN_BUILD_DIR:-build/main}
jobs=${RFAAS_MAIN_JOBS:-$(nproc)}
device=${RFAAS_MAIN_DEVICE:-lo-tcp}

step() { echo "==> main-job.sh: $*"; }

if [[ ${RFAAS_SKIP_DEPS:-0} != 1 ]]; then
  step "installing Debian packages"
  scripts/install-deps.sh
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

step "configuring $build (Release, libfabric backend, tests off)"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRFAAS_NETWORK_BACKEND=libfabric -DRFAAS_BUILD_BENCHMARKS=ON -DRFAAS_BUILD_TESTS=OFF
# rfaas-info too: with it, the build holds everything `cmake --install` installs.
targets=(executor_manager executor rfaas-info rfaas_example_functions rfaas-example-client)
[[ ${RFAAS_MAIN_PINGPONG:-0} == 1 ]] && targets+=(rdmalib_pingpong raw_libfabric_pingpong)
step "building ${targets[*]} with $jobs jobs"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-main-job.XXXXXX")
# shellcheck source=lib/manager.sh
source scripts/lib/manager.sh
manager_pid=
cleanup() {
  stop_manager
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

step "starting executor_manager on loopback (device $device)"
if ! start_manager "$work/manager.log" 30 "$build/server/executor_manager/executor_manager" \
  --config config/executor_manager.json --skip-resource-manager --device "$device" \
  --host 127.0.0.1 --port 0; then
  echo "main-job.sh: the executor manager did not become ready (log follows)" >&2
  cat "$work/manager.log" >&2
  exit 1
fi
address=$manager_address
echo "$manager_line"

step "running the example client against $address"
status=0
"$build/examples/client/rfaas-example-client" --devices config/devices.json --device "$device" \
  --manager "$address" --library "$build/examples/functions/libfunctions.so" \
  --cores 1 --repetitions 2000 "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "main-job.sh: the example client failed (status $status); manager log:" >&2
  tail -n 30 "$work/manager.log" >&2
  exit "$status"
fi

if [[ ${RFAAS_MAIN_PINGPONG:-0} == 1 ]]; then
  step "running benchmarks/run-pingpong.sh (tcp on loopback; rdmalib against raw libfabric)"
  bash benchmarks/run-pingpong.sh --bin-dir "$build/benchmarks" --providers tcp \
    --csv "$build/pingpong-tcp.csv"
fi
step "done"
