#!/usr/bin/env bash
# run-links.sh: what one executor manager pays per client link. For each
# device and each link count N it starts a manager (admission limits raised
# to N), opens N links to it from one client process (rfaas_server_probe
# --scenario flood: a valid hello each, then idle), and measures both
# processes while the links are held: file descriptors, RSS and, on shm, the
# shared-memory bytes in /dev/shm; then the same per link against the
# baseline before the links (taken after one warm-up lease), the time to open
# them, and what the manager holds above its baseline once they have closed
# (after the last round, see --rounds; mgr_after: descriptors, KiB; both
# should be near 0; maps_after: mappings of deleted /dev/shm files it still
# holds, 0). With --rounds R the client
# opens and closes its N links R times against the same manager, and
# KiB/link/round is how much the manager's RSS after close grew per link
# between the last two rounds: what it keeps of every link it ever served
# (0 but for noise; shm 1.17 keeps ~1 KiB, docs/BACKEND-BUGS.md). Prints one
# row per (device, N); --csv appends them.
#
#   benchmarks/run-links.sh --build-dir build
#   benchmarks/run-links.sh --devices-list "lo-shm lo-rxm" --links "1 16 64 256" --csv links.csv
#   benchmarks/run-links.sh --devices-list "lo-shm lo-tcp" --links 256 --rounds 10
#
# A link here is a connection that has said hello and holds its place in the
# manager's admission queue; an allocation adds its own buffers and executor
# processes on top (docs/runtime.md). /dev/shm is counted system-wide: run it
# on a quiet machine. A count whose memory (extrapolated from the previous
# count) would not fit is skipped with the figure.
set -euo pipefail

# Run from the source tree (it is not copied into the build tree).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=""
devices_list="lo-tcp lo-rxm lo-shm"
links="1 16 64 256"
rounds=1
csv=""

usage() {
  sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "Options:"
  echo "  --build-dir DIR       build tree (default: the first build*/ holding the binaries)"
  echo "  --devices-list LIST   config/devices.json entries (default: \"$devices_list\")"
  echo "  --links LIST          link counts (default: \"$links\")"
  echo "  --rounds R            open and close the N links R times per manager (default: $rounds)"
  echo "  --csv FILE            append the rows as CSV"
}
while [[ $# -gt 0 ]]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --devices-list) devices_list=$2; shift 2 ;;
  --links) links=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run-links.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in $links; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "run-links.sh: --links: '$n' is not a positive count" >&2; exit 2; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "run-links.sh: --rounds: '$rounds' is not a positive count" >&2; exit 2; }

if [[ -z $build ]]; then
  for d in "$repo"/build*/ "$repo"/build/*/; do
    [[ -x $d/server/executor_manager/executor_manager && -x $d/tests/servers/executor/rfaas_server_probe ]] &&
      { build=$d; break; }
  done
fi
manager=$build/server/executor_manager/executor_manager
probe=$build/tests/servers/executor/rfaas_server_probe
library=$build/examples/functions/libfunctions.so
for f in "$manager" "$probe" "$library"; do
  [[ -e $f ]] || {
    echo "run-links.sh: $f not found; build executor_manager executor rfaas_server_probe" \
      "rfaas_example_functions (--build-dir DIR)" >&2
    exit 1
  }
done
# shellcheck source=../scripts/lib/manager.sh
source "$repo/scripts/lib/manager.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-links.XXXXXX")
flood_pid=
cleanup() {
  # Under set -e a failing test here would end the handler before the
  # manager is stopped.
  if [[ -n $flood_pid ]]; then kill -KILL "$flood_pid" 2>/dev/null || true; fi
  stop_manager
  rm -rf "$work"
}
trap cleanup EXIT
# The file limit must hold every link's descriptors on both sides.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
shm_kib() { du -sk /dev/shm 2>/dev/null | awk '{print $1}'; }
# Mappings of /dev/shm files that no longer exist: regions of peers gone.
deleted_maps() { grep -c '/dev/shm/.*(deleted)' "/proc/$1/maps" 2>/dev/null || true; }
ms_now() { date +%s%3N; }
# Wait until a process's descriptor count and RSS stop changing (two equal
# samples 100 ms apart, at most 5 s).
settle() {
  local last="" now
  for _ in $(seq 50); do
    now="$(fds "$1") $(rss_kib "$1")"
    [[ $now == "$last" ]] && return 0
    last=$now
    sleep 0.1
  done
}

# open_ms includes starting the client process (loading libfabric: ~0.3-0.5 s);
# ms/link is the marginal cost, (open_ms - open_ms of the 1-link run) / (N - 1),
# when the device ran with 1 link first.
printf '%-8s %6s %9s %9s %11s %11s %11s %11s %12s %15s %10s %16s\n' device links open_ms ms/link \
  mgr_fd/link mgr_KiB/link cli_fd/link cli_KiB/link shm_KiB/link "mgr_after(fd,KiB)" maps_after \
  KiB/link/round
incomplete=0
[[ -n $csv && ! -s $csv ]] &&
  echo "device,links,opened,open_ms,manager_fds_per_link,manager_rss_kib_per_link,client_fds_per_link,client_rss_kib_per_link,shm_kib_per_link,manager_fds_after,manager_rss_kib_after,manager_deleted_shm_maps_after,rounds,manager_rss_kib_per_link_last_round" >"$csv"

for dev in $devices_list; do
  one_ms='' link_kib=''
  for n in $links; do
    # Both processes grow with every link on providers that open an endpoint
    # per link: skip a count that would not fit in the memory available now,
    # as measured per link by the previous count.
    avail=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo)
    if [[ -n $link_kib ]] && awk -v l="$link_kib" -v n="$n" -v a="$avail" 'BEGIN { exit !(l * n > a * 0.6) }'; then
      printf '%-8s %6s  skipped: ~%s MiB needed (%s KiB per link), %s MiB available\n' "$dev" "$n" \
        "$(awk -v l="$link_kib" -v n="$n" 'BEGIN { printf "%d", l * n / 1024 }')" "$link_kib" "$((avail / 1024))"
      if [[ -n $csv ]]; then echo "$dev,$n,skipped,,,,,," >>"$csv"; fi
      continue
    fi
    # Admission limits above N, and a request deadline longer than the run,
    # so that every link stays held while it is measured.
    sed -e "s/\"max_pending\": [0-9]*/\"max_pending\": $((n + 8))/" \
      -e "s/\"max_pending_per_peer\": [0-9]*/\"max_pending_per_peer\": $((n + 8))/" \
      -e "s/\"request_ms\": [0-9]*/\"request_ms\": 600000/" \
      "$repo/config/executor_manager.json" >"$work/manager.json"
    if ! start_manager "$work/manager.log" 60 "$manager" --config "$work/manager.json" \
      --skip-resource-manager --devices "$repo/config/devices.json" --device "$dev" \
      --host 127.0.0.1 --port 0 --cores 0; then
      echo "run-links.sh: the manager did not start on $dev:" >&2
      cat "$work/manager.log" >&2
      exit 1
    fi
    # One lease first, so that the baseline holds what the first allocation
    # loads once (the executor's library, the zygote), not what a link costs.
    "$probe" --devices "$repo/config/devices.json" --device "$dev" --manager "$manager_address" \
      --library "$library" --scenario latency --iterations 20 >"$work/warm.out" 2>&1 ||
      echo "run-links.sh: $dev: the warm-up lease failed: $(tail -n 2 "$work/warm.out")" >&2
    settle "$manager_pid"
    base_mgr_fd=$(fds "$manager_pid") base_mgr_rss=$(rss_kib "$manager_pid")
    base_shm=$(shm_kib)
    prev_rss='' last_rss=''
    for round in $(seq "$rounds"); do
      rm -f "$work/hold" "$work/flood.out"
      mkfifo "$work/hold"
      t0=$(ms_now)
      "$probe" --devices "$repo/config/devices.json" --device "$dev" --manager "$manager_address" \
        --library "$library" --scenario flood --flood "$n" <"$work/hold" >"$work/flood.out" 2>&1 &
      flood_pid=$!
      exec {hold}>"$work/hold"
      # The client's baseline: its process once libfabric is up, before the first
      # link (measured from the first-link time; a 1-link run shows it whole).
      for _ in $(seq 6000); do
        grep -q '^flood: .* open' "$work/flood.out" && break
        kill -0 "$flood_pid" 2>/dev/null || { echo "run-links.sh: the client died: $(cat "$work/flood.out")" >&2; exit 1; }
        sleep 0.05
      done
      t1=$(ms_now)
      line=$(grep '^flood: .* open' "$work/flood.out") ||
        { echo "run-links.sh: $n links on $dev did not open within 300 s" >&2; exit 1; }
      opened=$(echo "$line" | awk '{print $2}')
      # The manager answers hellos in the background: measure once it has.
      settle "$manager_pid"
      mgr_fd=$(fds "$manager_pid") mgr_rss=$(rss_kib "$manager_pid")
      cli_fd=$(fds "$flood_pid") cli_rss=$(rss_kib "$flood_pid")
      shm=$(shm_kib)
      exec {hold}>&-
      wait "$flood_pid" 2>/dev/null || true
      flood_pid=
      # Everything a link took must come back when it closes.
      for _ in $(seq 100); do
        (($(fds "$manager_pid") <= base_mgr_fd)) && break
        sleep 0.1
      done
      settle "$manager_pid"
      after_fd=$(fds "$manager_pid") after_rss=$(rss_kib "$manager_pid")
      prev_rss=$last_rss last_rss=$after_rss
      if ((round == 1)); then
        first=("$((t1 - t0))" "$opened" "$mgr_fd" "$mgr_rss" "$cli_fd" "$cli_rss" "$shm")
      elif [[ $opened -ne $n ]]; then
        echo "run-links.sh: $dev: round $round opened only $opened of $n links ($line)" >&2
        incomplete=1
      fi
    done
    # The figures while the links are held are the first round's.
    open_ms=${first[0]} opened=${first[1]} mgr_fd=${first[2]} mgr_rss=${first[3]}
    cli_fd=${first[4]} cli_rss=${first[5]} shm=${first[6]}
    maps_after=$(deleted_maps "$manager_pid")
    growth=-
    [[ -n $prev_rss && $opened -gt 0 ]] &&
      growth=$(awk -v a="$last_rss" -v b="$prev_rss" -v n="$opened" 'BEGIN { printf "%.2f", (a - b) / n }')
    stop_manager
    if [[ $opened -ne $n ]]; then
      echo "run-links.sh: $dev: only $opened of $n links opened ($line)" >&2
      incomplete=1
    fi
    per() { awk -v a="$1" -v b="$2" -v n="$opened" 'BEGIN { printf "%.1f", n ? (a - b) / n : 0 }'; }
    # The client's own baseline is not measurable before its first link: its
    # per-link figures are totals over N (they include the process itself,
    # which a large N amortises).
    row=("$dev" "$n" "$opened" "$open_ms" "$(per "$mgr_fd" "$base_mgr_fd")"
      "$(per "$mgr_rss" "$base_mgr_rss")" "$(per "$cli_fd" 0)" "$(per "$cli_rss" 0)"
      "$(per "$shm" "$base_shm")" "$((after_fd - base_mgr_fd))" "$((after_rss - base_mgr_rss))"
      "$maps_after" "$rounds" "$growth")
    [[ $n -eq 1 ]] && one_ms=${row[3]}
    # Per link, both sides (the client's figure includes its process, so this
    # overestimates at small counts, which errs on the safe side).
    link_kib=$(awk -v m="${row[5]}" -v c="${row[7]}" -v s="${row[8]}" 'BEGIN { printf "%d", m + c + (s > 0 ? s : 0) }')
    marginal=-
    [[ -n $one_ms && $n -gt 1 ]] &&
      marginal=$(awk -v t="${row[3]}" -v o="$one_ms" -v n="$opened" 'BEGIN { printf "%.1f", (t - o) / (n - 1) }')
    printf '%-8s %6s %9s %9s %11s %11s %11s %11s %12s %15s %10s %16s\n' "$dev" "$n" "${row[3]}" \
      "$marginal" "${row[4]}" "${row[5]}" "${row[6]}" "${row[7]}" "${row[8]}" \
      "$((after_fd - base_mgr_fd)),$((after_rss - base_mgr_rss))" "$maps_after" "$growth"
    if [[ -n $csv ]]; then
      (IFS=,; echo "${row[*]}") >>"$csv"
    fi
  done
done
exit "$incomplete"
