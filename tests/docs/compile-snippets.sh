#!/usr/bin/env bash
# Compiles every ```cpp (or ```c++) block of the documentation against the build tree's
# public headers, so that a snippet cannot rot: one that does not compile
# fails the test, with its file and line.
#
# A block is compiled as a translation unit of its own (-fsyntax-only: checked,
# not linked), so it includes what it uses. A block that only illustrates and
# is not meant to compile (two alternatives side by side, names from the
# surrounding text) is marked on the line before its fence:
#
#   <!-- snippet: fragment -->
#   ```cpp
#
# Usage: compile-snippets.sh CXX INCLUDE_DIRS FILE.md...
#        INCLUDE_DIRS: colon-separated include directories (the public headers)
set -euo pipefail
cxx=$1
include_dirs=$2
shift 2

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-doc-snippets.XXXXXX")
trap 'rm -rf "$work"' EXIT

flags=(-std=c++17 -fsyntax-only -Wall -Wextra -x c++)
IFS=: read -r -a dirs <<<"$include_dirs"
for d in "${dirs[@]}"; do
  [[ -n $d ]] && flags+=(-I "$d")
done

compiled=0 fragments=0 failed=0
for md in "$@"; do
  # One file per block: <n>.cpp, and <n>.where = "file:line [fragment]".
  rm -f "$work"/*.cpp "$work"/*.where
  awk -v dir="$work" -v md="$md" '
    /^[[:space:]]*<!--[[:space:]]*snippet:[[:space:]]*fragment[[:space:]]*-->/ { mark = NR; next }
    !inblock && /^[[:space:]]*```(cpp|c\+\+)[[:space:]]*$/ {
      inblock = 1; n++
      out = sprintf("%s/%04d.cpp", dir, n)
      printf "" > out
      kind = (mark == NR - 1) ? " fragment" : ""
      printf "%s:%d%s\n", md, NR, kind > sprintf("%s/%04d.where", dir, n)
      next
    }
    inblock && /^[[:space:]]*```[[:space:]]*$/ { inblock = 0; close(out); next }
    inblock { print > out }
    !/^[[:space:]]*$/ && NR != mark { mark = 0 }
  ' "$md"
  for where_file in "$work"/*.where; do
    [[ -e $where_file ]] || continue
    read -r where kind <"$where_file"
    if [[ ${kind:-} == fragment ]]; then
      echo "fragment (not compiled): $where"
      fragments=$((fragments + 1))
      continue
    fi
    if "$cxx" "${flags[@]}" "${where_file%.where}.cpp" >"$work/out" 2>&1; then
      echo "compiled: $where"
      compiled=$((compiled + 1))
    else
      echo "FAIL: the snippet at $where does not compile:" >&2
      sed "s|${where_file%.where}.cpp|$where (snippet)|" "$work/out" >&2
      failed=$((failed + 1))
    fi
  done
done
echo "$compiled snippets compiled, $fragments fragments skipped, $failed failed"
[[ $failed -eq 0 && $compiled -gt 0 ]]
