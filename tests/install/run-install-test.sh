#!/usr/bin/env bash
# Install the build tree into a temporary prefix, then build and run an
# out-of-tree consumer twice: with CMake (find_package(rfaas)) and with
# pkg-config (rfaas.pc). Also checks that the installed rfaas headers include
# nothing from rdmalib or the network backends.
#
# With a functions library given, the CMake-built consumer then also runs an
# invocation: it leases a core from the INSTALLED executor_manager (started on
# loopback tcp with the source tree's example configuration), ships the
# function library the consumer project built with rfaas::function, and checks
# the output of its "echo".
#
# Usage: run-install-test.sh BUILD_DIR CONSUMER_SOURCE_DIR [CMAKE_GENERATOR [FUNCTIONS_LIBRARY]]
set -euo pipefail
build=$1
consumer=$2
generator=${3:-}
library=${4:-}
source_dir=$(cd "$(dirname "$0")/../.." && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-install-test.XXXXXX")
# shellcheck source=../../scripts/lib/manager.sh
source "$source_dir/scripts/lib/manager.sh"
trap 'stop_manager; rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
echo "installed into $prefix"

if grep -rnE '#include *<(rdmalib/|rdma/|infiniband/|spdlog/|nlohmann/)|"common/protocol' \
  "$prefix/include/rfaas"; then
  echo "FAIL: installed rfaas headers include private dependencies" >&2
  exit 1
fi

# A sanitizer build installs a sanitized librfaas: a consumer must be built
# with the same runtime first in its link (as any user of such a build would).
san_flags=()
if grep -q '^RFAAS_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  san_flags=(-fsanitize=address,undefined -fno-omit-frame-pointer)
  echo "sanitizer build: the consumer is built with ${san_flags[*]}"
fi

libdir=$(dirname "$(find "$prefix" -name 'librfaas.so' | head -n1)")
[[ -n $libdir ]] || { echo "FAIL: librfaas.so was not installed" >&2; exit 1; }

# 1. CMake package.
gen=()
[[ -n $generator ]] && gen=(-G "$generator")
cmake -S "$consumer" -B "$work/cmake-build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_FLAGS="${san_flags[*]}" \
  >"$work/configure.log" || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/cmake-build" >"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer"

if [[ -n $library ]]; then
  for bin in executor_manager executor; do
    [[ -x $prefix/bin/$bin ]] || { echo "FAIL: $bin was not installed into $prefix/bin" >&2; exit 1; }
  done
  cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  if ! start_manager "$work/manager.log" 60 "$prefix/bin/executor_manager" \
    --config "$source_dir/config/executor_manager.json" --skip-resource-manager \
    --devices "$source_dir/config/devices.json" --device lo-tcp --host 127.0.0.1 --port 0 \
    --cores "$cores"; then
    echo "FAIL: the installed executor_manager did not start:" >&2
    cat "$work/manager.log" >&2
    exit 1
  fi
  echo "installed executor_manager listening on $manager_address"
  # The consumer's own function library, built against the installed package.
  LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer" "$source_dir/config/devices.json" lo-tcp \
    "$manager_address" "$work/cmake-build/libconsumer_functions.so" ||
    { cat "$work/manager.log" >&2; exit 1; }
  stop_manager
fi

# 2. pkg-config.
pc=$(find "$prefix" -name rfaas.pc | head -n1)
[[ -n $pc ]] || { echo "FAIL: rfaas.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
echo "pkg-config: $(pkg-config --cflags --libs rfaas)"
# shellcheck disable=SC2046
c++ "${san_flags[@]}" -o "$work/consumer-pc" "$consumer/main.cpp" $(pkg-config --cflags --libs rfaas)
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"
echo "install test: ok"
