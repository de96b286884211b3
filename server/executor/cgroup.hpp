// One cgroup per executor: its memory limit, its cores (a function cannot move
// to a core its lease does not hold) and a limit on its processes. Both
// hierarchies are supported: HPC clusters run cgroup v1 (RHEL 8) and v2, and
// some machines are hybrid (v1 controllers under /sys/fs/cgroup, a v2 tree
// with few controllers at /sys/fs/cgroup/unified): each controller is taken
// from the hierarchy where it is available.
//
// Used by the zygote only (it creates the group before the fork, the child
// joins it, the zygote writes the limits when the executor gets its
// allocation and removes the group after the executor was reaped).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace rfaas::executor_process {

/// What this process can do with cgroups, found once.
struct CgroupSupport {
  /// Directories under which a group per executor is made, one per
  /// hierarchy in use: "/sys/fs/cgroup/memory/rfaas" (v1) or
  /// "/sys/fs/cgroup/rfaas" (v2).
  std::string memory, cpuset, pids;
  bool memory_v2 = false, cpuset_v2 = false, pids_v2 = false;
  /// Why a controller is missing, for the start-up line.
  std::string missing;

  bool any() const { return !memory.empty() || !cpuset.empty() || !pids.empty(); }
  /// "cgroup v1 memory+cpuset+pids" or "rlimits (no cgroup: why)".
  std::string describe() const;

  /// Probe the hierarchies and create `parent` in each where this process
  /// may. Never throws.
  static CgroupSupport probe(const std::string &parent);
};

class ExecutorCgroup {
public:
  ExecutorCgroup() = default;
  /// Make the groups named `name` under `support`'s parents. On failure the
  /// group is empty (no limits from cgroups) and `error` says why.
  ExecutorCgroup(const CgroupSupport &support, const std::string &name, std::string &error);
  ExecutorCgroup(ExecutorCgroup &&o) noexcept;
  ExecutorCgroup &operator=(ExecutorCgroup &&o) noexcept;
  ~ExecutorCgroup();

  bool empty() const { return dirs_.empty(); }
  /// Move the calling process into every group (the child does this before
  /// it drops its privileges). False with `error` on failure.
  bool join(std::string &error) const noexcept;
  /// Write the allocation's limits: `memory_mib` (0: none), `cpus` (empty:
  /// none), `max_processes` (0: none). False with `error` on failure.
  bool limit(uint64_t memory_mib, const std::vector<int> &cpus, uint32_t max_processes,
             std::string &error);
  /// Where a container engine made its own groups below this one (podman's
  /// --cgroup-parent): write `cpus` as the cpuset of each of them, since
  /// this group's own cpuset may not shrink below its children's. False
  /// with `error` when there is none yet or a write failed.
  bool limit_cpus_below(const std::vector<int> &cpus, std::string &error);
  /// This executor has a group in the pids hierarchy (its limit is written
  /// when it gets its allocation).
  bool has_pids() const { return !pids_dir_.empty(); }
  /// Kill every process left in the groups and remove them (best effort;
  /// also done by the destructor).
  void remove() noexcept;

private:
  struct Dir {
    std::string path;
    bool v2 = false;
  };
  std::vector<Dir> dirs_;
  std::string memory_dir_, cpuset_dir_, pids_dir_;
  bool memory_v2_ = false, cpuset_v2_ = false, pids_v2_ = false;
};

} // namespace rfaas::executor_process
