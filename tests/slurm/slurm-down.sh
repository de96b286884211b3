#!/usr/bin/env bash
# Stops the cluster slurm-up.sh DIR started and leaves nothing of it running:
# cancels its jobs, stops slurmctld and the slurmd (by the pids in their pid
# files; SIGKILL after 10 s), ends any slurmstepd or job process still in the
# cluster's cgroups and removes those cgroups, then stops munged. Safe to run
# twice, and on a cluster that only half started. DIR itself is left for the
# caller (logs).
#
#   tests/slurm/slurm-down.sh DIR
set -uo pipefail
dir=$(realpath -m "${1:?usage: slurm-down.sh DIR}")
export SLURM_CONF=$dir/slurm.conf
PATH=$PATH:/usr/sbin
prefix=$(cat "$dir/node-prefix" 2>/dev/null || true)

# Waits up to 10 s for every pid given to be gone; SIGKILL to what is left.
reap() {
  local p alive
  for _ in $(seq 1 100); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null
  return 0
}

ctld=$(cat "$dir/run/slurmctld.pid" 2>/dev/null || true)
if [[ -n $ctld ]] && kill -0 "$ctld" 2>/dev/null; then
  # Jobs first, while slurmctld and the slurmd can still end them in order.
  mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
  if ((${#jobs[@]})); then
    scancel --full --quiet "${jobs[@]}" 2>/dev/null
    for _ in $(seq 1 100); do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.1
    done
  fi
fi

pids=()
for f in "$dir"/run/slurmctld.pid "$dir"/run/slurmd-*.pid; do
  [[ -f $f ]] || continue
  p=$(cat "$f")
  [[ -n $p ]] && kill -0 "$p" 2>/dev/null && pids+=("$p")
done
if ((${#pids[@]})); then
  kill -TERM "${pids[@]}" 2>/dev/null
  reap "${pids[@]}"
fi

# Whatever is still in this cluster's cgroups (a slurmstepd that outlived
# its slurmd, a job's process) belongs to no one now. proctrack/cgroup names
# them slurm_<node>; on cgroup v1 the freezer hierarchy holds every task.
if [[ -n $prefix ]]; then
  for c in /sys/fs/cgroup/*/slurm_"$prefix"* /sys/fs/cgroup/unified/slurm_"$prefix"* /sys/fs/cgroup/system.slice/slurm_"$prefix"*; do
    [[ -d $c ]] || continue
    mapfile -t left < <(find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    if ((${#left[@]})); then
      # A frozen cgroup ignores signals until thawed.
      find "$c" -name freezer.state -exec sh -c 'echo THAWED > "$1"' _ {} \; 2>/dev/null
      kill -KILL "${left[@]}" 2>/dev/null
      reap "${left[@]}"
    fi
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
fi

m=$(cat "$dir/munge/munged.pid" 2>/dev/null || true)
if [[ -n $m ]] && kill -0 "$m" 2>/dev/null; then
  kill -TERM "$m" 2>/dev/null
  reap "$m"
fi
exit 0
