#!/usr/bin/env bash
# The SLURM batch scripts of benchmarks/cluster/ on this host, under a
# stand-in for SLURM: `scontrol show hostnames` names this host twice and
# `srun` runs its command here, so the scripts' own logic (node and address
# discovery, the two sides of each run, the device files, the CSV they
# collect, the summary) runs as on two nodes, over loopback tcp. Runs
# pingpong.sbatch as the separate programs and with RFAAS_INTERLEAVED=1, and
# invocation.sbatch (a real executor manager); checks that each prints a
# ratio per row and that a bad setting is refused.
#
#   cluster_scripts.sh BUILD_DIR
set -uo pipefail
build=$1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cluster=$here/../../benchmarks/cluster
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: cluster_scripts: $*"
  for f in "$tmp"/*.log "$tmp"/out*/*.log; do [[ -s $f ]] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}

command -v ip >/dev/null || { echo "SKIP: cluster_scripts: no 'ip' command (iproute2) to read lo's address"; exit 0; }

# The stand-in for SLURM: srun drops its own options (all --name or
# --name=value) and runs the rest here.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/srun" <<'EOF'
#!/usr/bin/env bash
while [[ $# -gt 0 && $1 == --* ]]; do shift; done
exec "$@"
EOF
cat >"$tmp/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
[[ $1 == show && $2 == hostnames ]] || { echo "scontrol stand-in: only 'show hostnames'" >&2; exit 1; }
echo localhost
echo localhost
EOF
chmod +x "$tmp/bin/srun" "$tmp/bin/scontrol"

# A base port for the scripts' fixed ports (RFAAS_PORT and the next few; each
# run below moves on by 8). It lies below the kernel's ephemeral range, so
# that no connection another test opens meanwhile is given one of them: a
# base the kernel handed out (bind to port 0) is in that range, and a port a
# few above it was taken by the time the executor manager listened ("Address
# already in use"). The 32 ports from the base are free now.
port=$(/usr/bin/env python3 - 2>/dev/null <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    low = 32768
for _ in range(100):
    base = random.randrange(10000, max(10002, low - 64), 2)
    held = []
    try:
        for p in range(base, base + 32):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(base)
    break
PY
)
[[ -n $port ]] || port=$((20000 + $$ % 10000))
client_core=0
(($(nproc) > 1)) && client_core=1

run() { # script label, then extra environment assignments
  local script=$cluster/$1 label=$2
  shift 2
  env PATH="$tmp/bin:$PATH" SLURM_JOB_NODELIST=fake SLURM_JOB_ID="$label" RFAAS_BUILD="$build" \
    RFAAS_PROVIDER=tcp RFAAS_IFACE=lo RFAAS_OUT="$tmp/out-$label" RFAAS_REPEAT=2 RFAAS_SIZES=8 \
    RFAAS_TIMEOUT=60 RFAAS_PORT="$port" RFAAS_SERVER_CORE=0 RFAAS_CLIENT_CORE="$client_core" "$@" \
    timeout -k 5 60 bash "$script" >"$tmp/$label.log" 2>&1
}

# Each summary line: mode, size, raw_us, rdmalib_us, rdmalib/raw (a number).
check_rows() { # label
  for mode in send writeimm; do
    grep -Eq "^$mode +8 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]+" "$tmp/$1.log" ||
      fail "$1: no '$mode 8' row with a ratio in the summary"
  done
}

run pingpong.sbatch separate || fail "pingpong.sbatch (separate programs) failed"
check_rows separate
rows=$(wc -l <"$tmp/out-separate/pingpong.csv")
# Two runs of two programs, two modes each.
((rows == 8)) || fail "separate: $rows CSV rows, expected 8"
port=$((port + 8))

if [[ -x $build/benchmarks/raw_vs_rdmalib_pingpong ]]; then
  # Two connections of each implementation, the rounds rotating over them.
  run pingpong.sbatch interleaved RFAAS_INTERLEAVED=1 RFAAS_ROUNDS=4 RFAAS_ENDPOINTS=2 ||
    fail "pingpong.sbatch (RFAAS_INTERLEAVED=1) failed"
  check_rows interleaved
  grep -q "over 2 connection(s) of each implementation" "$tmp/interleaved.log" ||
    fail "interleaved: the summary does not say it used 2 connections of each"
  awk -F, 'NR > 1 && $20 != 2 { bad = 1 } END { exit bad }' "$tmp/out-interleaved/raw_vs_rdmalib_pingpong-1.csv" ||
    fail "interleaved: the CSV does not record --endpoints 2"
  # rdmalib's cost per round trip in ns, then every run's ratio: two per row.
  for mode in send writeimm; do
    grep -Eq "^$mode +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ +-?[0-9]+\.[0-9] " "$tmp/interleaved.log" ||
      fail "interleaved: '$mode 8' has no +ns figure"
    n=$(grep -E "^$mode +8 " "$tmp/interleaved.log" | awk '{ print NF - 6 }')
    [[ $n == 2 ]] || fail "interleaved: '$mode 8' lists $n per-run ratios, expected 2"
  done
  port=$((port + 8))
else
  echo "interleaved: not run (no raw_vs_rdmalib_pingpong: the verbs backend)"
fi

if run pingpong.sbatch bad RFAAS_INTERLEAVED=yes; then fail "RFAAS_INTERLEAVED=yes was accepted"; fi
grep -q "RFAAS_INTERLEAVED must be 0 or 1" "$tmp/bad.log" || fail "no clear error for RFAAS_INTERLEAVED=yes"
if run pingpong.sbatch bad RFAAS_INTERLEAVED=1 RFAAS_ENDPOINTS=0; then fail "RFAAS_ENDPOINTS=0 was accepted"; fi
grep -q "RFAAS_ENDPOINTS must be an integer from 1 to 16" "$tmp/bad.log" ||
  fail "no clear error for RFAAS_ENDPOINTS=0"

# An executor manager on the "first node", the invocation benchmark and the
# raw write-with-immediate ping-pong from the "second"; one worker core.
run invocation.sbatch invocation RFAAS_REPEAT=1 RFAAS_CORES="$client_core" ||
  fail "invocation.sbatch failed"
grep -Eq "^ +8 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]+" "$tmp/invocation.log" ||
  fail "invocation: no '8' row with a ratio in the summary"
echo "cluster_scripts: pingpong.sbatch (separate programs, interleaved) and invocation.sbatch ran"
