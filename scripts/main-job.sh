#!/usr/bin/env bash
# The project's main job (for now): set up a Debian 12 machine, build, and run
# the rdmalib ping-pong benchmark over tcp on loopback, next to the same
# ping-pong written directly against libfabric (the baseline).
#
# Usage: scripts/main-job.sh [ARGS...]   ARGS go to benchmarks/run-pingpong.sh
#        (e.g. --repeat 3, --sizes 8,1K, --providers "tcp shm"; see its --help)
#
# Output: a table of round-trip medians and p99 for send/recv and
# write-with-immediate at 8 B, 1 KiB, 64 KiB and 1 MiB, with the rdmalib/raw
# ratio; the same as CSV in $RFAAS_MAIN_BUILD_DIR/pingpong-tcp.csv.
#
# Environment:
#   RFAAS_MAIN_BUILD_DIR   build directory (default: build/main)
#   RFAAS_MAIN_JOBS        build parallelism (default: nproc)
#   RFAAS_SKIP_DEPS=1      do not run scripts/install-deps.sh
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  echo
  bash benchmarks/run-pingpong.sh --help
  exit 0
fi

build=${RFAAS_MAIN_BUILD_DIR:-build/main}
jobs=${RFAAS_MAIN_JOBS:-$(nproc)}
driver=benchmarks/run-pingpong.sh

step() { echo "==> main-job.sh: $*"; }

if [[ ${RFAAS_SKIP_DEPS:-0} != 1 ]]; then
  step "installing Debian packages"
  scripts/install-deps.sh
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

step "configuring $build (Release, libfabric backend, benchmarks on, tests off)"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRFAAS_NETWORK_BACKEND=libfabric -DRFAAS_BUILD_BENCHMARKS=ON -DRFAAS_BUILD_TESTS=OFF
step "building the ping-pong benchmarks with $jobs jobs"
cmake --build "$build" -j "$jobs" --target rdmalib_pingpong raw_libfabric_pingpong

if [[ ! -f $driver ]]; then
  echo "main-job.sh: $driver is missing: this checkout cannot run the ping-pong benchmark." >&2
  exit 1
fi

# Defaults first: any of them given again in ARGS wins (the driver keeps the
# last value of an option).
csv="$build/pingpong-tcp.csv"
step "running $driver (tcp on loopback; rdmalib against raw libfabric)"
exec bash "$driver" --bin-dir "$build/benchmarks" --providers tcp --csv "$csv" "$@"
