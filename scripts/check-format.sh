#!/usr/bin/env bash
# Check that every C/C++ source follows the checked-in .clang-format.
#
# Usage: scripts/check-format.sh          list unformatted files, exit 1 if any
#        scripts/check-format.sh --fix    reformat them in place
#        scripts/check-format.sh FILE...  check (or with --fix, fix) only these
#
# Files: *.cpp *.hpp *.h *.c under rdmalib rfaas server tools tests benchmarks
# examples, as git knows them (tracked or untracked but not ignored, so build
# directories never count); outside a git checkout, whatever find sees there.
# Environment: CLANG_FORMAT names the binary (default clang-format, then
# clang-format-14).
set -euo pipefail

cd "$(dirname "$0")/.."

fix=0
files=()
for arg in "$@"; do
  case $arg in
    --fix) fix=1 ;;
    -h | --help)
      sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "check-format.sh: unknown option '$arg' (try --help)" >&2
      exit 2
      ;;
    *) files+=("$arg") ;;
  esac
done

clang_format=${CLANG_FORMAT:-}
if [[ -z $clang_format ]]; then
  for candidate in clang-format clang-format-14; do
    if command -v "$candidate" >/dev/null 2>&1; then
      clang_format=$candidate
      break
    fi
  done
fi
if [[ -z $clang_format ]] || ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check-format.sh: clang-format not found; install it with: apt-get install clang-format" >&2
  echo "  (or run scripts/install-deps.sh, which installs everything the project needs)" >&2
  exit 2
fi

# A broken .clang-format would otherwise make every file look unformatted.
if ! err=$("$clang_format" --style=file --dump-config 2>&1 >/dev/null) || [[ -n $err ]]; then
  echo "check-format.sh: $clang_format rejects .clang-format:" >&2
  echo "$err" >&2
  exit 2
fi

dirs=(rdmalib rfaas server tools tests benchmarks examples)
if [[ ${#files[@]} -eq 0 ]]; then
  existing=()
  for d in "${dirs[@]}"; do
    [[ -d $d ]] && existing+=("$d")
  done
  if [[ ${#existing[@]} -gt 0 ]]; then
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      mapfile -t files < <(git ls-files --cached --others --exclude-standard -- "${existing[@]}" |
        grep -E '\.(cpp|hpp|h|c)$' | sort -u)
    else
      mapfile -t files < <(find "${existing[@]}" -type f \
        \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) | sort)
    fi
  fi
fi

# git ls-files also lists tracked files deleted in the working tree; files
# named on the command line count only if they are C/C++ (clang-format would
# happily reflow a README).
present=()
for f in "${files[@]}"; do
  if [[ ! $f =~ \.(cpp|hpp|h|c)$ ]]; then
    echo "check-format.sh: $f is not C/C++; skipped" >&2
    continue
  fi
  [[ -f $f ]] && present+=("$f")
done
if [[ ${#present[@]} -eq 0 ]]; then
  echo "check-format.sh: no C/C++ files to check"
  exit 0
fi

if [[ $fix -eq 1 ]]; then
  "$clang_format" --style=file -i "${present[@]}"
  echo "check-format.sh: formatted ${#present[@]} files with $("$clang_format" --version)"
  exit 0
fi

# One clang-format per file, nproc at a time; each prints its name if it differs.
mapfile -t bad < <(printf '%s\0' "${present[@]}" |
  xargs -0 -n 1 -P "$(nproc)" sh -c \
    '"$0" --style=file --dry-run --Werror "$1" >/dev/null 2>&1 || printf "%s\n" "$1"' \
    "$clang_format" |
  sort)

if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check-format.sh: ${#bad[@]} of ${#present[@]} files are not formatted:"
  printf '  %s\n' "${bad[@]}"
  echo "Fix with: scripts/check-format.sh --fix   (or clang-format -i FILE)"
  exit 1
fi
echo "check-format.sh: all ${#present[@]} files are formatted ($("$clang_format" --version | head -n1))"
