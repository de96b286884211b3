#!/usr/bin/env bash
# Install the build tree into a temporary prefix, check the layout (example
# configuration in share/rfaas/, the internal executor in libexec/rfaas/ and
# not in bin/, rfaas.pc without a language-standard flag), MOVE the prefix to
# another directory (the installation must be relocatable), then build and run
# an out-of-tree consumer twice: with CMake (find_package(rfaas)) and with
# pkg-config (rfaas.pc), and a program that uses rdmalib alone
# (find_package(rfaas COMPONENTS rdmalib)). Also checks that the installed
# rfaas headers include nothing from rdmalib but rfaas::device's, and that no
# installed header includes the network backends'.
#
# With a functions library given, the CMake-built consumer then also runs an
# invocation: it leases a core from the INSTALLED executor_manager (started on
# loopback tcp with the INSTALLED example configuration, from the moved
# prefix, so it must find its executor relative to itself), ships the
# function library the consumer project built with rfaas::function, and checks
# the output of its "echo". When RFAAS_INSTALL_TEST_PYTHON_DIR names where the
# Python module is installed (relative to the prefix), the installed module
# (run by RFAAS_INSTALL_TEST_PYTHON) calls echo on that manager too.
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

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install failed"; }
echo "installed into $prefix"

# Layout.
for config in "$source_dir"/config/*.json; do
  [[ -f $prefix/share/rfaas/$(basename "$config") ]] ||
    fail "example configuration $(basename "$config") was not installed into share/rfaas/"
done
if [[ -n $library ]]; then
  [[ -x $prefix/bin/executor_manager ]] || fail "executor_manager was not installed into bin/"
  [[ -x $prefix/libexec/rfaas/executor ]] || fail "the executor was not installed into libexec/rfaas/"
  [[ ! -e $prefix/bin/executor ]] || fail "the internal executor is in bin/"
fi
pc=$(find "$prefix" -name rfaas.pc | head -n1)
[[ -n $pc ]] || fail "rfaas.pc was not installed"
if grep -n -- '-std=' "$pc"; then
  fail "rfaas.pc forces a language standard on its users"
fi

# Relocatable: everything below runs from another directory.
mv "$prefix" "$work/moved"
prefix=$work/moved
echo "moved the installation to $prefix"

# The one exception: rdmalib/device_config.hpp (rfaas::device), itself
# standard C++ only, installed next to them.
if grep -rnE '#include *<(rdmalib/|rdma/|infiniband/|spdlog/|nlohmann/)|"protocol/' \
  "$prefix/include/rfaas" | grep -v '#include <rdmalib/device_config.hpp>'; then
  echo "FAIL: installed rfaas headers include private dependencies" >&2
  exit 1
fi
[[ -f $prefix/include/rdmalib/device_config.hpp ]] ||
  { echo "FAIL: rdmalib/device_config.hpp (rfaas::device) was not installed" >&2; exit 1; }
if grep -nE '#include *<' "$prefix/include/rdmalib/device_config.hpp" | grep -vE '<(cstdint|string)>'; then
  echo "FAIL: rdmalib/device_config.hpp must hold standard C++ only" >&2
  exit 1
fi
# rdmalib's own headers (the component rfaas::rdmalib): backend-neutral, so
# none includes libfabric or ibverbs.
for header in rdmalib.hpp config.hpp; do
  [[ -f $prefix/include/rdmalib/$header ]] || fail "rdmalib/$header was not installed"
done
if grep -rnE '#include *<(rdma/|infiniband/)' "$prefix/include/rdmalib"; then
  fail "installed rdmalib headers include the network backend's"
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
  cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  if ! start_manager "$work/manager.log" 60 "$prefix/bin/executor_manager" \
    --config "$prefix/share/rfaas/executor_manager.json" --skip-resource-manager \
    --device lo-tcp --host 127.0.0.1 --port 0 --cores "$cores"; then
    echo "FAIL: the installed executor_manager did not start:" >&2
    cat "$work/manager.log" >&2
    exit 1
  fi
  echo "installed executor_manager listening on $manager_address"
  # The consumer's own function library, built against the installed package.
  LD_LIBRARY_PATH=$libdir "$work/cmake-build/consumer" "$prefix/share/rfaas/devices.json" lo-tcp \
    "$manager_address" "$work/cmake-build/libconsumer_functions.so" ||
    { cat "$work/manager.log" >&2; exit 1; }
  # The installed Python module (when the build has one: ctest passes the
  # interpreter and the module's directory below the prefix): it loads from
  # the moved prefix, finds librfaas and the installed device database
  # relative to itself, and calls echo on the installed manager.
  if [[ -n ${RFAAS_INSTALL_TEST_PYTHON_DIR:-} ]]; then
    PYTHONPATH=$prefix/$RFAAS_INSTALL_TEST_PYTHON_DIR "$RFAAS_INSTALL_TEST_PYTHON" - \
      "$prefix/$RFAAS_INSTALL_TEST_PYTHON_DIR" "$manager_address" "$library" <<'PY' ||
import sys
import rfaas
where, manager, library = sys.argv[1:]
assert rfaas.__file__.startswith(where + "/"), rfaas.__file__
with rfaas.Executor("lo-tcp") as ex:
    ex.allocate(manager, library, hot_timeout_ms=0)
    assert ex.execute("echo", b"installed") == b"installed"
print("installed Python module " + rfaas.__file__ + ": echo ok")
PY
      { cat "$work/manager.log" >&2; fail "the installed Python module"; }
  fi
  stop_manager
fi

# 2. rdmalib alone: find_package(rfaas COMPONENTS rdmalib), rfaas::rdmalib.
# It connects to itself on loopback tcp, from the installed device database.
cmake -S "$source_dir/tests/install/rdmalib_consumer" -B "$work/rdmalib-build" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="${san_flags[*]}" \
  >"$work/rdmalib-configure.log" || { cat "$work/rdmalib-configure.log" >&2; fail "find_package(rfaas COMPONENTS rdmalib)"; }
cmake --build "$work/rdmalib-build" >"$work/rdmalib-build.log" ||
  { cat "$work/rdmalib-build.log" >&2; fail "building against rfaas::rdmalib"; }
"$work/rdmalib-build/rdmalib_consumer" "$prefix/share/rfaas/devices.json" lo-tcp ||
  fail "the rdmalib consumer"

# 3. pkg-config.
pc=$(find "$prefix" -name rfaas.pc | head -n1)
export PKG_CONFIG_PATH=$(dirname "$pc")
echo "pkg-config: $(pkg-config --cflags --libs rfaas)"
# shellcheck disable=SC2046
c++ "${san_flags[@]}" -o "$work/consumer-pc" "$consumer/main.cpp" $(pkg-config --cflags --libs rfaas)
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"
echo "install test: ok"
