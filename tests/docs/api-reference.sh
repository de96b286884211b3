#!/usr/bin/env bash
# Render the API reference (the public headers of rdmalib and librfaas) with
# the build's Doxyfile into a temporary directory, warnings as errors: an
# undocumented public call or a malformed comment fails with doxygen's
# "file:line: warning" lines. Checks that the main page and a class page
# were written, so a run that silently rendered nothing cannot pass.
#
# Usage: api-reference.sh DOXYFILE      (exit 77 = skipped: no doxygen)
set -euo pipefail
doxyfile=$1
if ! command -v doxygen >/dev/null 2>&1 || [[ ! -f $doxyfile ]]; then
  echo "SKIP: doxygen is not installed (Debian: doxygen graphviz), no Doxyfile at $doxyfile"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-api-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The configured Doxyfile, with only the output directory changed.
status=0
{ cat "$doxyfile"; echo "OUTPUT_DIRECTORY = $work"; } | doxygen - >"$work/doxygen.log" 2>&1 ||
  status=$?
if [[ $status -ne 0 ]] || grep -q 'warning:' "$work/doxygen.log"; then
  cat "$work/doxygen.log" >&2
  echo "FAIL: doxygen reported warnings (status $status): document every public call of the headers above" >&2
  exit 1
fi
for page in index.html classrdmalib_1_1Fabric.html classrfaas_1_1executor.html; do
  [[ -s $work/html/$page ]] || { echo "FAIL: doxygen wrote no $page" >&2; exit 1; }
done
echo "API reference: $(find "$work/html" -name '*.html' | wc -l) pages, no warnings"
