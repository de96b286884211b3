#!/usr/bin/env bash
# scripts/fuzz.sh - build the libFuzzer targets of tests/fuzz/ with clang and run
# each for a while: the parsers of everything that comes from outside (wire
# protocol, the manager's and the executor's received messages, device
# database, server list, manager configuration, ELF symbol reader).
#
#   scripts/fuzz.sh                 long campaign: 600 s per target
#   scripts/fuzz.sh --seconds 3600  longer
#   scripts/fuzz.sh --smoke         ~8 s per target (scripts/test.sh's fuzz phase)
#   scripts/fuzz.sh --targets protocol,elf_symbols --seconds 120
#
# Options:
#   --seconds N      run each target for N seconds (default 600)
#   --smoke          short run of every target (8 s each), for CI
#   --targets LIST   comma-separated targets (default: all; --list shows them)
#   --jobs N         targets fuzzed at the same time (default: nproc)
#   --build-dir DIR  where to build and keep the working corpora (default build/fuzz,
#                    with --smoke build/fuzz-smoke: unoptimised, it builds in half the time)
#   --cxx COMPILER   clang++ to build with (default clang++-14, else clang++)
#   --list           print the targets and exit
#   -h, --help       this text
#
# Each target starts from its seeds (tests/fuzz/corpus/<target>/) and the crashes
# found so far (tests/fuzz/regressions/<target>/), with the tokens of its format
# (tests/fuzz/dict/<target>.dict) when there is one, and grows a working corpus in
# DIR/corpus/<target>/ that later runs continue from. A crash, a leak, a timeout
# (10 s for one input) or an out-of-memory input is saved under
# DIR/crashes/<target>/ and printed. Fix the parser, then copy the input to
# tests/fuzz/regressions/<target>/: ctest replays it from then on (label fuzz).
#
# Exit status: 0 no target found anything, 1 a target crashed (or failed to
# run), 2 usage error or the build failed.
set -uo pipefail
# The whole script is one block, read before it runs: editing it during a long
# campaign cannot change what the running copy does.
{

repo=$(cd "$(dirname "$0")/.." && pwd)
all_targets=(protocol manager_messages executor_messages device_database server_list
  manager_config rm_config elf_symbols)

# Longest input worth trying per target: the largest AllocationRequest (with 256
# descriptors) is 10544 bytes, a launch spec carries it in hex, ELF seeds are small
# libraries, configuration files are a few KiB.
max_len_of() {
  case $1 in
    protocol | manager_messages) echo 11000 ;;
    executor_messages) echo 24576 ;;
    elf_symbols) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

seconds=600
smoke=0
targets_arg=""
jobs=$(nproc)
build_dir=""
cxx=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --seconds needs a positive integer" >&2; exit 2; }
      seconds=$2
      shift 2
      ;;
    --smoke) smoke=1; shift ;;
    --targets)
      [[ -n ${2:-} ]] || { echo "fuzz.sh: --targets needs a list, e.g. protocol,elf_symbols" >&2; exit 2; }
      targets_arg=$2
      shift 2
      ;;
    --jobs)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs needs a positive integer" >&2; exit 2; }
      jobs=$2
      shift 2
      ;;
    --build-dir)
      [[ -n ${2:-} ]] || { echo "fuzz.sh: --build-dir needs a directory" >&2; exit 2; }
      build_dir=$2
      shift 2
      ;;
    --cxx)
      [[ -n ${2:-} ]] || { echo "fuzz.sh: --cxx needs a compiler" >&2; exit 2; }
      cxx=$2
      shift 2
      ;;
    --list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fuzz.sh: unknown argument \"$1\" (see --help)" >&2; exit 2 ;;
  esac
done
build_type=Fuzz
if [[ $smoke -eq 1 ]]; then
  seconds=8
  build_type=FuzzSmoke
  build_dir=${build_dir:-build/fuzz-smoke}
fi
build_dir=${build_dir:-build/fuzz}

targets=("${all_targets[@]}")
if [[ -n $targets_arg ]]; then
  IFS=, read -r -a targets <<<"$targets_arg"
  for t in "${targets[@]}"; do
    known=0
    for a in "${all_targets[@]}"; do [[ $a == "$t" ]] && known=1; done
    if [[ $known -eq 0 ]]; then
      echo "fuzz.sh: unknown target \"$t\" (targets: ${all_targets[*]})" >&2
      exit 2
    fi
  done
fi

if [[ -z $cxx ]]; then
  for c in clang++-14 clang++; do
    command -v "$c" >/dev/null 2>&1 && { cxx=$c; break; }
  done
fi
if [[ -z $cxx ]] || ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: no clang++ found (install clang-14, or pass --cxx)" >&2
  exit 2
fi

cd "$repo" || exit 2
mkdir -p "$build_dir" || exit 2
build_dir=$(cd "$build_dir" && pwd)

# ---- build (only the parser sources the targets need; see tests/fuzz/CMakeLists.txt)
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
[[ -f $build_dir/CMakeCache.txt ]] && generator=() # keep the generator it was made with
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "fuzz_$t"); done
echo "fuzz.sh: building ${#targets[@]} target(s) with $cxx in $build_dir"
start=$(date +%s)
if ! cmake -S tests/fuzz -B "$build_dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="$build_type" "${launcher[@]}" >"$build_dir/configure.log" 2>&1; then
  cat "$build_dir/configure.log" >&2
  echo "fuzz.sh: configuring the fuzz targets failed" >&2
  exit 2
fi
if ! cmake --build "$build_dir" -j "$(nproc)" "${build_targets[@]}"; then
  echo "fuzz.sh: building the fuzz targets failed" >&2
  exit 2
fi
echo "fuzz.sh: built in $(($(date +%s) - start)) s"

# ---- run
run_one() { # $1 = target; writes $build_dir/logs/<target>.log, returns libFuzzer's status
  local t=$1
  local corpus=$build_dir/corpus/$t crashes=$build_dir/crashes/$t
  mkdir -p "$corpus" "$crashes"
  local seeds=("$repo/tests/fuzz/corpus/$t" "$repo/tests/fuzz/regressions/$t")
  local dict=()
  [[ -f $repo/tests/fuzz/dict/$t.dict ]] && dict=(-dict="$repo/tests/fuzz/dict/$t.dict")
  # The first directory receives new inputs; the seeds are only read.
  "$build_dir/fuzz_$t" "$corpus" "${seeds[@]}" "${dict[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len_of "$t")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" >"$build_dir/logs/$t.log" 2>&1
}

mkdir -p "$build_dir/logs"
echo "fuzz.sh: fuzzing ${#targets[@]} target(s) for $seconds s each, $jobs at a time"
declare -A pid_of=() status_of=()
running=0
for t in "${targets[@]}"; do
  if [[ $running -ge $jobs ]]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$t" &
  pid_of[$t]=$!
  running=$((running + 1))
done
for t in "${targets[@]}"; do
  wait "${pid_of[$t]}"
  status_of[$t]=$?
done

# ---- report
found=0
printf '\n%-20s %14s %8s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  log=$build_dir/logs/$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  size=$(find "$build_dir/corpus/$t" -type f | wc -l)
  if [[ ${status_of[$t]} -eq 0 ]]; then
    result=ok
  else
    result="FAILED (exit ${status_of[$t]}, log $log)"
    found=1
  fi
  printf '%-20s %14s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$size" "$result"
done
for t in "${targets[@]}"; do
  [[ ${status_of[$t]} -eq 0 ]] && continue
  log=$build_dir/logs/$t.log
  echo
  echo "==== $t: what libFuzzer reported (full log: $log)"
  grep -E -m 1 -A 25 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error|fuzz property violated|terminate called|==[0-9]+==' "$log" ||
    tail -n 30 "$log"
  grep -E 'Test unit written to|artifact_prefix' "$log" | sed 's/^/    /'
  echo "    once fixed, keep the input as a regression test:"
  echo "    cp $build_dir/crashes/$t/<file> tests/fuzz/regressions/$t/"
done
if [[ $found -ne 0 ]]; then
  echo "fuzz.sh: FAILED: a target found a crash"
  exit 1
fi
echo "fuzz.sh: no crash found"
exit 0
}
