#!/usr/bin/env bash
# benchmarks/run-pingpong.sh's interleaved campaign, shortened: six runs of
# raw_vs_rdmalib_pingpong on tcp. Checks that the comparison table has its row
# and that iqm_ci95, the confidence interval of the runs' median, is what the
# order statistics give for six runs: the smallest and the largest run, with
# the median between them.
#
#   run_pingpong.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src=$1 bin=$2
out=$(bash "$src/benchmarks/run-pingpong.sh" --bin-dir "$bin" --interleaved --repeat 6 \
  --rounds 2 --endpoints 1 --providers tcp --sizes 8 --modes send -- -n 50 2>&1)
rc=$?
fail() {
  echo "FAIL: run-pingpong.sh: $*"
  echo "$out"
  exit 1
}
[[ $rc -eq 0 ]] || fail "exit status $rc"
header=$(grep -E '^provider ' <<<"$out")
row=$(grep -E '^tcp +(msg|rdm) +send +8 ' <<<"$out")
[[ -n $header && -n $row ]] || fail "no header or no row for tcp send 8"
# Columns by name, from the header (the "rounds min..max" heading is two words).
read -r -a names <<<"${header/rounds min..max/rounds}"
read -r -a cells <<<"$row"
declare -A at
for i in "${!names[@]}"; do at[${names[$i]}]=$i; done
for c in iqm iqm_ci95 runs; do [[ -n ${at[$c]+set} ]] || fail "no column $c in: $header"; done
iqm=${cells[${at[iqm]}]} ci=${cells[${at[iqm_ci95]}]}
runs=("${cells[@]:${at[runs]}}")
[[ ${#runs[@]} -eq 6 ]] || fail "expected 6 run ratios, got ${#runs[@]}: ${runs[*]}"
[[ $ci =~ ^([0-9.]+)\.\.([0-9.]+)$ ]] || fail "iqm_ci95 is '$ci', not LO..HI"
lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
min=$(printf '%s\n' "${runs[@]}" | sort -g | head -n 1)
max=$(printf '%s\n' "${runs[@]}" | sort -g | tail -n 1)
[[ $lo == "$min" && $hi == "$max" ]] || fail "six runs: interval $lo..$hi, expected $min..$max"
awk -v l="$lo" -v m="$iqm" -v h="$hi" 'BEGIN { exit !(l <= m && m <= h) }' ||
  fail "median iqm $iqm outside its interval $lo..$hi"
echo "run-pingpong.sh: tcp send 8 B, 6 runs: iqm $iqm, 95 % interval $lo..$hi"
