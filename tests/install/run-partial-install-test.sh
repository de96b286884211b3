#!/usr/bin/env bash
# `cmake --install` after a partial build. Configures a fresh build directory
# of the source tree and builds none of its targets (the extreme case of
# building only some, as scripts/main-job.sh does), then installs it: the
# install must succeed, warn about each target that was not built with the
# command that builds it, and still install what needs no build (headers,
# CMake package, pkg-config file, example configuration). The complete layout
# after a full build is checked by run-install-test.sh.
#
# Usage: run-partial-install-test.sh SOURCE_DIR NETWORK_BACKEND [CMAKE_GENERATOR]
set -euo pipefail
source_dir=$1
backend=$2
generator=${3:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-partial-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

gen=()
[[ -n $generator ]] && gen=(-G "$generator")
cmake -S "$source_dir" -B "$work/build" "${gen[@]}" -DRFAAS_NETWORK_BACKEND="$backend" \
  -DRFAAS_BUILD_TESTS=OFF -DRFAAS_BUILD_BENCHMARKS=OFF >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "configuring $source_dir failed"; }

if ! cmake --install "$work/build" --prefix "$work/prefix" >"$work/install.log" 2>&1; then
  cat "$work/install.log" >&2
  fail "cmake --install fails when some targets were not built"
fi
# CMake wraps warnings; join the lines before matching.
log=$(tr -s ' \n' ' ' <"$work/install.log")
for target in rfaas rdmalib rfaas-info executor_manager executor; do
  grep -qF "rFaaS: $target was not built, so it is not installed." <<<"$log" ||
    fail "no warning that $target was not built (install log: $work/install.log)"
  grep -qF -- "--target $target" <<<"$log" || fail "the warning for $target does not name the fix"
done
for f in include/rfaas/rfaas.hpp include/rdmalib/rdmalib.hpp include/rdmalib/config.hpp \
  lib/pkgconfig/rfaas.pc lib/cmake/rfaas/rfaasConfig.cmake lib/cmake/rfaas/rfaasRdmalibTargets.cmake; do
  [[ -f $work/prefix/$f ]] || fail "$f was not installed"
done
for config in "$source_dir"/config/*.json; do
  [[ -f $work/prefix/share/rfaas/$(basename "$config") ]] ||
    fail "$(basename "$config") was not installed into share/rfaas/"
done
# rfaas-slurm is a script, installed whether or not anything was built.
[[ -x $work/prefix/bin/rfaas-slurm ]] || fail "bin/rfaas-slurm (a script, needs no build) was not installed"
stray=$(find "$work/prefix" -type f \( -path '*/bin/*' -o -path '*/libexec/*' -o -name '*.so*' -o -name '*.a' \) \
  ! -path '*/bin/rfaas-slurm')
[[ -z $stray ]] || fail "files installed although nothing was built: $stray"
echo "partial install test: ok"
