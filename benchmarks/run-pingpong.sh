#!/usr/bin/env bash
# run-pingpong.sh: rdmalib ping-pong against the raw libfabric baseline, same
# provider, sizes and modes, in the same run. For each provider it
# runs raw_libfabric_pingpong and rdmalib_pingpong back to back (--repeat times,
# alternating, so both see the same machine load) and prints per (mode, size):
# raw median and p99, rdmalib median and p99, and rdmalib/raw: with --repeat N,
# the median of the N ratios of runs done back to back.
#
#   benchmarks/run-pingpong.sh                       # tcp and shm, all sizes
#   benchmarks/run-pingpong.sh --providers "tcp shm sockets tcp;ofi_rxm" --csv out.csv
#   benchmarks/run-pingpong.sh --sizes 8,1K --repeat 3 -- --no-pin --budget 0
#   benchmarks/run-pingpong.sh --interleaved --rounds 40 --sizes 8,1K
#   benchmarks/run-pingpong.sh --interleaved --repeat 9 --rounds 200 --endpoints 4 --sizes 8,1K
#
# Arguments after "--" go to both programs (see their --help). With --repeat N
# each figure is the median over the N runs of that run's median (or p99).
# With --interleaved, runs of raw_vs_rdmalib_pingpong instead: both
# implementations in the same processes, alternating blocks, --rounds rounds;
# lib/raw is then the median over rounds of the per-round ratio. With
# --repeat N it runs N pairs of processes per provider and prints each
# figure's median over them, with every run's ratio and, from 6 runs on,
# a 95 % confidence interval of the iqm's median (iqm_ci95): a run's ratio also
# carries where its pair of endpoints landed, which no number of rounds
# inside one run averages out. --endpoints K makes each run open K
# connections of each implementation and rotate the rounds over them, which
# averages that out within the run (raw against raw, --self-check, shm 8 B,
# ten runs on these VMs: 0.94-1.03 with one connection of each, 0.99-1.01
# with four; use --endpoints 4 on shm).
# Every run has a deadline; nothing is left running on exit or Ctrl-C.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir=""
providers="tcp shm"
sizes="8,1K,64K,1M"
modes="send,writeimm"
csv=""
json_dir=""
json_n=0
repeat=1
timeout_s=60
interleaved=0
rounds=40
endpoints=""
extra=()

usage() {
  sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF
Options:
  --bin-dir DIR      where raw_libfabric_pingpong and rdmalib_pingpong are
                     (default: next to this script, else build*/benchmarks)
  --providers LIST   space-separated providers (default: "$providers")
  --sizes LIST       comma-separated sizes (default: $sizes)
  --modes LIST       send,writeimm (default: $modes)
  --repeat N         runs of each program per provider, or with --interleaved
                     runs of raw_vs_rdmalib_pingpong (default: $repeat)
  --interleaved      run raw_vs_rdmalib_pingpong (both in the same processes,
                     alternating blocks) per provider instead of the pair
  --rounds N         with --interleaved: rounds per (mode, size) (default: $rounds)
  --endpoints K      with --interleaved: connections of each implementation per
                     run, rounds rotating over them (default: the program's, 1)
  --timeout S        deadline of one program run in seconds (default: $timeout_s)
  --csv FILE         write the comparison as CSV
  --json-dir DIR     keep each program run's JSON there (<impl>-<provider>-<n>.json,
                     interleaved-<provider>-<n>.json)
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --providers) providers="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --interleaved) interleaved=1; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --endpoints) endpoints="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --csv) csv="$2"; shift 2 ;;
    --json-dir) json_dir="$2"; mkdir -p "$json_dir"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run-pingpong.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "run-pingpong.sh: --repeat needs a positive integer" >&2; exit 1; }
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || { echo "run-pingpong.sh: --timeout needs a positive integer" >&2; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "run-pingpong.sh: --rounds needs a positive integer" >&2; exit 1; }
if [[ -n "$endpoints" ]]; then
  [[ $interleaved -eq 1 ]] || { echo "run-pingpong.sh: --endpoints needs --interleaved" >&2; exit 1; }
  [[ "$endpoints" =~ ^[1-9][0-9]*$ ]] || { echo "run-pingpong.sh: --endpoints needs a positive integer" >&2; exit 1; }
fi
programs=(raw_libfabric_pingpong rdmalib_pingpong)
[[ $interleaved -eq 1 ]] && programs=(raw_vs_rdmalib_pingpong)
find_bins() {
  local d p ok
  for d in "$bin_dir" "$here" "$here"/../build*/benchmarks; do
    [[ -n "$d" ]] || continue
    ok=1
    for p in "${programs[@]}"; do [[ -x "$d/$p" ]] || ok=0; done
    [[ $ok -eq 1 ]] && { echo "$d"; return 0; }
  done
  return 1
}
if ! bin_dir="$(find_bins)"; then
  echo "run-pingpong.sh: ${programs[*]} not found; build them" >&2
  echo "  (cmake --build <build-dir> --target ${programs[*]})" >&2
  echo "  or pass --bin-dir <build-dir>/benchmarks" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/pingpong.XXXXXX")"
child=""
cleanup() {
  # The programs kill their own client with them and have deadlines; this only
  # covers the driver being interrupted while one runs.
  if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One program run, under a hard deadline beyond its own (--timeout).
run_one() { # impl provider wait csvfile
  local prog="$bin_dir/${1}_pingpong"
  [[ "$1" == raw ]] && prog="$bin_dir/raw_libfabric_pingpong"
  local log="$work/log" json=()
  if [[ -n "$json_dir" ]]; then
    json=(--json "$json_dir/$1-${2//;/+}-$json_n.json")
    json_n=$((json_n + 1))
  fi
  timeout -k 5 $((timeout_s + 10)) "$prog" --provider "$2" --wait "$3" --sizes "$sizes" \
    --modes "$modes" --timeout "$timeout_s" --csv "$4" --quiet "${json[@]}" "${extra[@]}" \
    >"$log" 2>&1 &
  child=$!
  if ! wait "$child"; then
    child=""
    echo "run-pingpong.sh: $(basename "$prog") --provider '$2' failed:" >&2
    sed 's/^/  /' "$log" >&2
    return 1
  fi
  child=""
}

# --interleaved: one run of raw_vs_rdmalib_pingpong, whose CSV rows carry the
# comparison already (it appends to csvfile).
run_interleaved() { # provider wait csvfile run
  local log="$work/log" json=() eps=()
  [[ -n "$json_dir" ]] && json=(--json "$json_dir/interleaved-${1//;/+}-$4.json")
  [[ -n "$endpoints" ]] && eps=(--endpoints "$endpoints")
  timeout -k 5 $((timeout_s + 10)) "$bin_dir/raw_vs_rdmalib_pingpong" --provider "$1" \
    --wait "$2" --sizes "$sizes" --modes "$modes" --rounds "$rounds" --timeout "$timeout_s" \
    --csv "$3" --quiet "${eps[@]}" "${json[@]}" "${extra[@]}" >"$log" 2>&1 &
  child=$!
  if ! wait "$child"; then
    child=""
    echo "run-pingpong.sh: raw_vs_rdmalib_pingpong --provider '$1' failed:" >&2
    sed 's/^/  /' "$log" >&2
    return 1
  fi
  child=""
}

# Median over the runs, per key: input "key,value" lines; output "key,median"
# (rfaas_stats.py: the one definition of the benchmarks' statistics).
stats_py="$here/rfaas_stats.py"
median_by_key() {
  /usr/bin/python3 "$stats_py" median-by-key
}

status=0
results="$work/results"
: >"$results"
for provider in $providers; do
  # sockets progresses from a thread that a spinning process starves on small
  # machines (DESIGN.md §3): both programs block in the provider there.
  wait_policy=busy
  [[ "$provider" == sockets ]] && wait_policy=block
  # rdmalib lowers RxM's connection-manager polling interval for itself; give
  # the baseline the same environment so that only the library differs.
  if [[ "$provider" == "tcp;ofi_rxm" || "$provider" == rxm ]]; then
    export FI_OFI_RXM_CM_PROGRESS_INTERVAL="${FI_OFI_RXM_CM_PROGRESS_INTERVAL:-100}"
  fi
  if [[ $interleaved -eq 1 ]]; then
    for ((r = 0; r < repeat; r++)); do
      run_interleaved "$provider" "$wait_policy" "$work/interleaved.csv" "$r" || { status=1; break; }
    done
    continue
  fi
  raw_csv="$work/raw.csv" lib_csv="$work/lib.csv"
  rm -f "$raw_csv" "$lib_csv"
  ok=1
  for ((r = 0; r < repeat; r++)); do
    # Alternate which program goes first, so that a drift in machine load
    # during a repetition does not always favour the same one.
    if ((r % 2 == 0)); then
      run_one raw "$provider" "$wait_policy" "$raw_csv" || { ok=0; break; }
      run_one rdmalib "$provider" "$wait_policy" "$lib_csv" || { ok=0; break; }
    else
      run_one rdmalib "$provider" "$wait_policy" "$lib_csv" || { ok=0; break; }
      run_one raw "$provider" "$wait_policy" "$raw_csv" || { ok=0; break; }
    fi
  done
  if [[ $ok -eq 0 ]]; then status=1; continue; fi
  # CSV columns: impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,...
  # Keys are mode|size: with --budget the measured count can differ between runs.
  for f in "$raw_csv" "$lib_csv"; do
    tail -n +2 "$f" | awk -F, '{ printf "%s|%s,%s\n", $5, $6, $8 }' | median_by_key >"$f.med"
    tail -n +2 "$f" | awk -F, '{ printf "%s|%s,%s\n", $5, $6, $9 }' | median_by_key >"$f.p99"
    tail -n +2 "$f" | awk -F, '{ n[$5 "|" $6] += $7 } END { for (k in n) printf "%s,%d\n", k, n[k] }' >"$f.n"
  done
  # The ratio: per repetition, rdmalib's median over the raw median of the run
  # next to it, then the median of those ratios. Adjacent runs see the same
  # machine state; on a shared host the round trip can jump between two levels
  # (measured here: 0.65 and 1.9 us on shm) from one run to the next, which a
  # ratio of medians taken across all runs would mix.
  awk -F, '
    FNR == 1 { next }
    FILENAME == ARGV[1] { k = $5 "|" $6; raw[k, ++rc[k]] = $8; next }
    { k = $5 "|" $6; i = ++lc[k]; if (((k, i) in raw) && raw[k, i] > 0) printf "%s,%.6f\n", k, $8 / raw[k, i] }
  ' "$raw_csv" "$lib_csv" | median_by_key >"$work/ratio"
  endpoint="$(tail -n 1 "$lib_csv" | awk -F, '{ print $3 }')"
  # Join on mode|size, keeping the order of --modes and --sizes.
  awk -F, -v OFS=, -v prov="$provider" -v ep="$endpoint" -v w="$wait_policy" '
    FILENAME == ARGV[1] { rm[$1] = $2; next }
    FILENAME == ARGV[2] { rp[$1] = $2; next }
    FILENAME == ARGV[3] { rn[$1] = $2; next }
    FILENAME == ARGV[4] { lm[$1] = $2; next }
    FILENAME == ARGV[5] { lp[$1] = $2; next }
    FILENAME == ARGV[6] { ln[$1] = $2; next }
    FILENAME == ARGV[7] { ratio[$1] = $2; next }
    FNR > 1 {
      k = $5 "|" $6
      if (seen[k]++ || !(k in rm) || !(k in lm)) next
      split(k, p, "|")
      print prov, ep, w, p[1], p[2], rn[k], ln[k], rm[k], rp[k], lm[k], lp[k], (k in ratio ? ratio[k] : 0)
    }' "$raw_csv.med" "$raw_csv.p99" "$raw_csv.n" "$lib_csv.med" "$lib_csv.p99" "$lib_csv.n" \
    "$work/ratio" "$lib_csv" >>"$results"
done

if [[ $interleaved -eq 1 && -s "$work/interleaved.csv" ]]; then
  # Columns: provider,endpoint,wait,mode,size,rounds,block,warmup,raw_iters,rdmalib_iters,
  # raw_median_us,raw_p99_us,rdmalib_median_us,rdmalib_p99_us,ratio_of_medians,
  # round_ratio_median,round_ratio_min,round_ratio_max,round_iqm_ratio_median,endpoints,
  # round_iqm_extra_ns_median
  # One line per (provider, mode, size) in the order of the runs: each figure
  # is its median over the --repeat runs, but the range of the per-round
  # ratios spans all of them; "runs" lists every run's iqm ratio.
  printf '%-12s %-4s %-9s %8s %6s %10s %10s %10s %10s %7s %7s %15s %7s %12s %6s  %s\n' provider ep \
    mode size block raw_med raw_p99 lib_med lib_p99 med/med lib/raw "rounds min..max" iqm iqm_ci95 +ns \
    runs
  tail -n +2 "$work/interleaved.csv" | tr -d '"' >"$work/interleaved.rows"
  /usr/bin/python3 - "$here" "$work/interleaved.rows" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import rfaas_stats as st

order, rows = [], {}
for line in open(sys.argv[2]):
    c = line.rstrip("\n").split(",")
    if len(c) < 21:
        continue
    key = (c[0], c[3], c[4])
    if key not in rows:
        order.append(key)
        rows[key] = {"ep": c[1], "block": c[6], "cols": {i: [] for i in range(10, 21)}, "runs": []}
    for i in range(10, 21):
        rows[key]["cols"][i].append(float(c[i]))
    rows[key]["runs"].append("%.3f" % float(c[18]))
for key in order:
    r = rows[key]
    col = r["cols"]
    med = lambda i: st.median(col[i])
    # A distribution-free 95 % confidence interval of the median of the
    # per-run ratios (order statistics; 6 runs or more, "-" below).
    ci = st.median_ci95([float(x) for x in r["runs"]])
    ci_text = "%.3f..%.3f" % ci if ci else "-"
    print("%-12s %-4s %-9s %8s %6s %10.2f %10.2f %10.2f %10.2f %7.3f %7.3f %7.3f..%.3f %7.3f %12s %6.1f  %s"
          % (key[0], r["ep"], key[1], key[2], r["block"], med(10), med(11), med(12), med(13),
             med(14), med(15), min(col[16]), max(col[17]), med(18), ci_text, med(20),
             " ".join(r["runs"])))
PY
  echo "(round-trip times in microseconds over all $rounds rounds of blocks of each implementation"
  echo " (over ${endpoints:-1} connection(s) of each),"
  echo " run alternately in the same two processes; med/med = rdmalib median / raw median;"
  echo " lib/raw = median over the rounds of rdmalib's block median / raw's block median of the"
  echo " same round, with its range; iqm = the same ratio of the blocks' interquartile means;"
  echo " +ns = rdmalib's interquartile mean minus raw's, median over the rounds, in nanoseconds"
  echo " per round trip: what rdmalib adds, which carries over to a fabric with longer round trips;"
  echo " block = round trips measured per block; each figure is the median over $repeat run(s),"
  echo " each a new pair of processes, the range spans all of them, and runs = each run's iqm;"
  echo " iqm_ci95 = a 95 % confidence interval of the iqm's median from the runs' order"
  echo " statistics (distribution-free; needs --repeat 6 or more))"
  if [[ -n "$csv" ]]; then
    # One row per run and (mode, size), as raw_vs_rdmalib_pingpong wrote them.
    cp "$work/interleaved.csv" "$csv"
    echo "wrote $csv"
  fi
elif [[ -s "$results" ]]; then
  printf '%-12s %-4s %-9s %8s %6s %10s %10s %10s %10s %7s\n' provider ep mode size iters \
    raw_med raw_p99 lib_med lib_p99 lib/raw
  while IFS=, read -r prov ep _ mode size rn ln rmed rp99 lmed lp99 ratio; do
    printf '%-12s %-4s %-9s %8s %6s %10.2f %10.2f %10.2f %10.2f %7.3f\n' "$prov" "$ep" "$mode" \
      "$size" "$((rn < ln ? rn : ln))" "$rmed" "$rp99" "$lmed" "$lp99" "$ratio"
  done <"$results"
  echo "(round-trip times in microseconds; medians over $repeat run(s) of each program;"
  echo " lib/raw = median over the runs of rdmalib's median / the raw median of the run beside it;"
  echo " iters = round trips measured per program, summed over runs; p99 reflects machine load)"
  if [[ -n "$csv" ]]; then
    {
      echo "provider,endpoint,wait,mode,size,raw_iters,rdmalib_iters,raw_median_us,raw_p99_us,rdmalib_median_us,rdmalib_p99_us,ratio_paired_median"
      awk -F, -v OFS=, '{ $12 = sprintf("%.4f", $12); $1 = "\"" $1 "\""; print }' "$results"
    } >"$csv"
    echo "wrote $csv"
  fi
fi
exit $status
