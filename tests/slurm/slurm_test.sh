#!/usr/bin/env bash
# rFaaS under a real SLURM: starts a two-node cluster on this machine once
# (slurm-up.sh: munged, slurmctld, two slurmd), then, each as a real batch
# job:
#   tcp      rfaas-slurm deploys a resource manager and an executor manager
#            per node; two example clients, one per node, lease from it (one
#            names it with --resource-manager, the other finds it through
#            RFAAS_RESOURCE_MANAGER), and once the first client's node is
#            drained through REST the second must be placed on the other;
#   shm      the same deployment over shm, one client;
#   bad      --cores beyond the node's CPUs: a clear error at once;
#   hetjob   rFaaS on component 1 of a heterogeneous job, the client on 0;
#   salloc   rfaas-slurm under salloc, the client on the host salloc runs on;
#   scancel  a job cancelled while rFaaS serves it leaves no process behind;
#   bench    benchmarks/cluster/pingpong.sbatch and invocation.sbatch;
# after each job no rFaaS process of this build is left and the secrets are
# gone. The cluster is stopped on every exit path.
#
#   slurm_test.sh BUILD_DIR
# Exit 77 (skipped, with the reason) when not root or SLURM is not installed.
set -uo pipefail
build=$(realpath "${1:?usage: slurm_test.sh BUILD_DIR}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
PATH=$PATH:/usr/sbin
t0=$SECONDS

skip() {
  echo "SKIP: slurm: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "needs root (slurmd and munged run as root on this test cluster)"
for tool in munged mungekey slurmctld slurmd sbatch srun squeue scancel scontrol curl ip; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool not found (Debian packages: slurmctld slurmd slurm-client munge curl iproute2; scripts/install-deps.sh)"
done
library=$build/examples/functions/libfunctions.so
client=$build/examples/client/rfaas-example-client
for f in "$build/tools/rfaas-slurm" "$build/server/resource_manager/resource_manager" \
  "$build/server/executor_manager/executor_manager" "$client" "$library"; do
  [[ -e $f ]] || { echo "FAIL: slurm: $f is missing: build it first"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-slurm-test.XXXXXX")
chmod 755 "$tmp"
cluster=$tmp/cluster
jobs_dir=$tmp/jobs
mkdir -p "$jobs_dir"

# shellcheck source=lib.sh
source "$here/lib.sh"
cleanup() {
  local rc=$?
  "$here/slurm-down.sh" "$cluster" >/dev/null 2>&1
  kill_leftovers slurm || rc=1
  [[ -n ${RFAAS_SLURM_TEST_KEEP:-} ]] && echo "slurm: kept $tmp" || rm -rf "$tmp"
  echo "slurm: $((SECONDS - t0)) s in all"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: slurm: $*"
  local f
  for f in "$jobs_dir"/*.out "$jobs_dir"/*/rfaas-*/logs/*.log "$jobs_dir"/*/rfaas-*/logs/*.out; do
    [[ -s $f ]] && { echo "--- $f (last lines)"; tail -n 20 "$f"; }
  done
  exit 1
}
step() { echo "slurm: [$((SECONDS - t0)) s] $*"; }

step "starting the cluster"
up=$SECONDS
env=$("$here/slurm-up.sh" "$cluster" 2>"$tmp/up.log") || { cat "$tmp/up.log"; fail "the cluster did not start"; }
eval "$env"
mapfile -t nodes < <(sinfo -h -N -o %N | sort -u)
((${#nodes[@]} == 2)) || fail "expected two nodes, sinfo lists: ${nodes[*]}"
step "cluster up, nodes ${nodes[*]} idle in $((SECONDS - up)) s"

# Submits a batch job and waits for it to leave the queue (squeue polling:
# `sbatch --wait` polls slowly). Sets job_id; the job's output is
# $jobs_dir/NAME.out.
run_job() { # name timeout-seconds sbatch-arguments...
  local name=$1 limit=$2
  shift 2
  mkdir -p "$jobs_dir/$name"
  job_id=$(cd "$jobs_dir/$name" && sbatch --parsable -o "$jobs_dir/$name.out" -J "$name" "$@") ||
    fail "$name: sbatch refused the job"
  local deadline=$((SECONDS + limit))
  while [[ -n $(squeue -h -j "$job_id" -o %T 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || { scancel "$job_id"; fail "$name: job $job_id still running after $limit s"; }
    sleep 0.1
  done
}

# Nothing of this build runs once a job left the queue, and the job's
# secrets are gone.
check_clean() { # name
  local left
  left=$(ours)
  [[ -z $left ]] || fail "$1: processes left after the job: $left"
  if compgen -G "$jobs_dir/$1/rfaas-*/secrets" >/dev/null; then
    fail "$1: the secrets directory is still there"
  fi
  # Tokens and node secrets are 64 hex digits; nothing left (logs,
  # configurations) may hold one.
  local leak
  leak=$(grep -rlE '[0-9a-f]{64}' "$jobs_dir/$1"/rfaas-* 2>/dev/null)
  [[ -z $leak ]] || fail "$1: a secret or token is left in $leak"
}

# ---- the per-job deployment over tcp, a client on each node ---------------
# The application: client A (node 1, --resource-manager given) leases one
# core wherever the resource manager places it; that node is then drained
# through REST with the job's operator token, so that client B (node 2,
# address from RFAAS_RESOURCE_MANAGER) must lease on the other node.
cat >"$jobs_dir/app.sh" <<EOF
#!/usr/bin/env bash
set -u
echo "app: RFAAS_RESOURCE_MANAGER=\$RFAAS_RESOURCE_MANAGER"
grep -q "\"resource_manager\": \"\$RFAAS_RESOURCE_MANAGER\"" "\$RFAAS_GROUP_FILE" && echo "app: group file names it"
nodes=(\$(scontrol show hostnames "\$SLURM_JOB_NODELIST"))
common=(--devices "\$RFAAS_DEVICES" --library "$library" --hot-timeout 0 --repetitions 500)
srun --overlap -N1 -n1 -w "\${nodes[0]}" -o "\$PWD/client-a.txt" "$client" "\${common[@]}" \\
  --device "\${nodes[0]}" --resource-manager "\$RFAAS_RESOURCE_MANAGER"
echo "app: client A exit \$?"
[[ \${SECOND_CLIENT:-1} == 1 ]] || exit 0
used=\$(sed -n 's/^lease [0-9]*: 1 core(s) on node \([^ ]*\) .*/\1/p' "\$PWD/client-a.txt")
curl -sS -o /dev/null -w 'app: drain %{http_code}\n' -X POST \\
  -H @"\$(dirname "\$RFAAS_GROUP_FILE")/secrets/auth-header" "\$RFAAS_REST/nodes/\$used/drain"
srun --overlap -N1 -n1 -w "\${nodes[1]}" -o "\$PWD/client-b.txt" "$client" "\${common[@]}" \\
  --device "\${nodes[1]}"
echo "app: client B exit \$?"
curl -sS -H @"\$(dirname "\$RFAAS_GROUP_FILE")/secrets/auth-header" "\$RFAAS_REST/leases?state=all" >"\$PWD/leases.json"
EOF
chmod +x "$jobs_dir/app.sh"

deploy_job() { # name provider [rfaas-slurm options...]
  local name=$1 provider=$2
  shift 2
  cat >"$jobs_dir/$name.sbatch" <<EOF
#!/usr/bin/env bash
"$build/tools/rfaas-slurm" --provider $provider --interface lo --same-host --cores 1 $* -- "$jobs_dir/app.sh"
echo "rfaas-slurm exit \$?"
EOF
}

check_client() { # name file
  local f=$jobs_dir/$1/$2
  [[ -s $f ]] || fail "$1: $2 is empty or missing"
  grep -Eq '^verified [0-9]+ results, 0 failures' "$f" || fail "$1: $2 did not verify its results: $(cat "$f")"
}

step "tcp: rfaas-slurm with a client on each node"
deploy_job tcp tcp
run_job tcp 60 -N2 "$jobs_dir/tcp.sbatch"
out=$jobs_dir/tcp.out
grep -q '^rfaas-slurm exit 0$' "$out" || fail "tcp: rfaas-slurm did not exit 0"
grep -q '^app: group file names it$' "$out" || fail "tcp: the group file does not name RFAAS_RESOURCE_MANAGER"
grep -q '^app: client A exit 0$' "$out" || fail "tcp: client A failed"
grep -q '^app: drain 200$' "$out" || fail "tcp: draining the first client's node through REST failed"
grep -q '^app: client B exit 0$' "$out" || fail "tcp: client B (address from RFAAS_RESOURCE_MANAGER) failed"
check_client tcp client-a.txt
check_client tcp client-b.txt
node_a=$(sed -n 's/^lease [0-9]*: 1 core(s) on node \([^ ]*\) .*/\1/p' "$jobs_dir/tcp/client-a.txt")
node_b=$(sed -n 's/^lease [0-9]*: 1 core(s) on node \([^ ]*\) .*/\1/p' "$jobs_dir/tcp/client-b.txt")
[[ -n $node_a && -n $node_b ]] || fail "tcp: the clients do not name the nodes of their leases"
[[ $node_a != "$node_b" ]] ||
  fail "tcp: both leases went to $node_a (drained after the first: $(cat "$jobs_dir/tcp/leases.json"))"
grep -q 'ready in' "$out" || fail "tcp: rfaas-slurm did not report readiness"
check_clean tcp
step "tcp: leases on $node_a and $node_b, $(grep -o 'ready in [0-9]* s' "$out")"

step "shm: rfaas-slurm, one client"
cat >"$jobs_dir/shm-app.sh" <<EOF
#!/usr/bin/env bash
SECOND_CLIENT=0 exec "$jobs_dir/app.sh"
EOF
chmod +x "$jobs_dir/shm-app.sh"
cat >"$jobs_dir/shm.sbatch" <<EOF
#!/usr/bin/env bash
"$build/tools/rfaas-slurm" --provider shm --interface lo --same-host --cores 1 -- "$jobs_dir/shm-app.sh"
echo "rfaas-slurm exit \$?"
EOF
run_job shm 60 -N2 "$jobs_dir/shm.sbatch"
grep -q '^rfaas-slurm exit 0$' "$jobs_dir/shm.out" || fail "shm: rfaas-slurm did not exit 0"
grep -q '"provider": "shm"' "$jobs_dir/shm/"rfaas-*/nodes/*.devices.json || fail "shm: the nodes did not use shm"
check_client shm client-a.txt
check_clean shm

# ---- a deployment that cannot start: a clear error, nothing left ---------
step "bad: rfaas-slurm --cores 999 fails at once"
cat >"$jobs_dir/bad.sbatch" <<EOF
#!/usr/bin/env bash
"$build/tools/rfaas-slurm" --interface lo --same-host --cores 999 -- true
echo "rfaas-slurm exit \$?"
EOF
run_job bad 60 -N2 "$jobs_dir/bad.sbatch"
grep -q '^rfaas-slurm exit 1$' "$jobs_dir/bad.out" || fail "bad: rfaas-slurm did not exit 1"
grep -q -- "--cores 999, but only" "$jobs_dir/bad.out" || fail "bad: the error does not name the cause"
check_clean bad

# ---- a heterogeneous job: rFaaS on component 1, the client on component 0 --
step "hetjob: rfaas-slurm --het-group 1, the client on component 0"
cat >"$jobs_dir/hetjob.sbatch" <<EOF
#!/usr/bin/env bash
#SBATCH --nodes=1
#SBATCH hetjob
#SBATCH --nodes=1
"$build/tools/rfaas-slurm" --het-group 1 --interface lo --same-host --cores 1 -- \\
  bash -c '"$client" --devices "\$RFAAS_DEVICES" --device "\$SLURMD_NODENAME" --library "$library" \\
    --hot-timeout 0 --repetitions 200 >"\$PWD/client-a.txt" 2>&1'
echo "rfaas-slurm exit \$?"
EOF
run_job hetjob 60 "$jobs_dir/hetjob.sbatch"
grep -q '^rfaas-slurm exit 0$' "$jobs_dir/hetjob.out" || fail "hetjob: rfaas-slurm did not exit 0"
grep -q "executor managers on ${nodes[1]}, ready" "$jobs_dir/hetjob.out" ||
  fail "hetjob: rFaaS did not run on component 1 (${nodes[1]}) alone"
check_client hetjob client-a.txt
grep -q "on node ${nodes[1]} " "$jobs_dir/hetjob/client-a.txt" || fail "hetjob: the lease is not on ${nodes[1]}"
check_clean hetjob

# ---- salloc: the application on the host salloc runs on -------------------
step "salloc: rfaas-slurm from salloc, the client where salloc runs"
mkdir -p "$jobs_dir/salloc"
(cd "$jobs_dir/salloc" && timeout -k 5 60 salloc -N2 "$build/tools/rfaas-slurm" --interface lo \
  --same-host --cores 1 -- bash -c '"$0" --devices "$RFAAS_DEVICES" --device "$(hostname -s)" \
    --library "$1" --hot-timeout 0 --repetitions 100 >client-a.txt 2>&1' "$client" "$library") \
  >"$jobs_dir/salloc.out" 2>&1 || fail "salloc: rfaas-slurm under salloc failed"
check_client salloc client-a.txt
check_clean salloc

# ---- a job cancelled while rFaaS serves it --------------------------------
step "scancel: a job cancelled while rFaaS runs"
cat >"$jobs_dir/hold.sh" <<'EOF'
#!/usr/bin/env bash
touch "$PWD/holding"
exec sleep 600
EOF
chmod +x "$jobs_dir/hold.sh"
cat >"$jobs_dir/scancel.sbatch" <<EOF
#!/usr/bin/env bash
"$build/tools/rfaas-slurm" --provider tcp --interface lo --same-host --cores 1 -- "$jobs_dir/hold.sh"
EOF
mkdir -p "$jobs_dir/scancel"
job_id=$(cd "$jobs_dir/scancel" && sbatch --parsable -N2 -o "$jobs_dir/scancel.out" "$jobs_dir/scancel.sbatch") ||
  fail "scancel: sbatch refused the job"
deadline=$((SECONDS + 60))
until [[ -f $jobs_dir/scancel/holding ]]; do
  ((SECONDS < deadline)) || { scancel "$job_id"; fail "scancel: rFaaS was not up within 60 s"; }
  [[ -n $(squeue -h -j "$job_id" -o %T 2>/dev/null) ]] || fail "scancel: the job ended by itself"
  sleep 0.1
done
[[ $(ours | grep -c /executor_manager) == 2 ]] || fail "scancel: expected two executor managers, found: $(ours)"
scancel "$job_id"
deadline=$((SECONDS + 30))
while [[ -n $(squeue -h -j "$job_id" -o %T 2>/dev/null) ]]; do
  ((SECONDS < deadline)) || fail "scancel: job $job_id still in the queue 30 s after scancel"
  sleep 0.1
done
check_clean scancel

# ---- benchmarks/cluster under this SLURM ----------------------------------
step "bench: benchmarks/cluster/pingpong.sbatch and invocation.sbatch"
port=$(sed -n 's/^SlurmctldPort=//p' "$SLURM_CONF")
bench_env="--export=ALL,RFAAS_BUILD=$build,RFAAS_PROVIDER=tcp,RFAAS_IFACE=lo,RFAAS_REPEAT=1,RFAAS_SIZES=8,RFAAS_TIMEOUT=60,RFAAS_SERVER_CORE=0,RFAAS_CLIENT_CORE=$(($(nproc) > 1 ? 1 : 0)),RFAAS_CLUSTER_DIR=$repo/benchmarks/cluster"
run_job pingpong 90 "$bench_env,RFAAS_PORT=$((port + 40)),RFAAS_OUT=$jobs_dir/pingpong/out" \
  "$repo/benchmarks/cluster/pingpong.sbatch"
for mode in send writeimm; do
  grep -Eq "^$mode +8 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]+" "$jobs_dir/pingpong.out" ||
    fail "pingpong.sbatch: no '$mode 8' row with a ratio"
done
grep -q "nodes: server ${nodes[0]}, client ${nodes[1]}" "$jobs_dir/pingpong.out" ||
  fail "pingpong.sbatch: did not run across ${nodes[*]}"
run_job invocation 90 "$bench_env,RFAAS_PORT=$((port + 50)),RFAAS_OUT=$jobs_dir/invocation/out,RFAAS_CORES=0" \
  "$repo/benchmarks/cluster/invocation.sbatch"
grep -Eq "^ +8 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]+" "$jobs_dir/invocation.out" ||
  fail "invocation.sbatch: no '8' row with a ratio"
check_clean invocation

step "stopping the cluster"
down=$SECONDS
"$here/slurm-down.sh" "$cluster"
for f in "$cluster"/run/*.pid "$cluster"/munge/munged.pid; do
  p=$(cat "$f" 2>/dev/null) || continue
  kill -0 "$p" 2>/dev/null && fail "$(basename "$f" .pid) (pid $p) still runs after slurm-down.sh"
done
step "cluster stopped in $((SECONDS - down)) s"
echo "slurm: per-job deployment on tcp and shm, a failed start, a heterogeneous job, salloc, scancel, benchmarks/cluster: passed"
