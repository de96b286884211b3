#include "executor/cgroup.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace rfaas::executor_process {

namespace {

bool exists(const std::string &path) { return ::access(path.c_str(), F_OK) == 0; }

bool write_file(const std::string &path, const std::string &value, std::string &error) {
  std::ofstream f(path);
  if (f)
    f << value;
  if (f)
    f.flush();
  if (f)
    return true;
  error = "cannot write \"" + value + "\" to " + path + ": " + std::strerror(errno);
  return false;
}

std::string read_file(const std::string &path) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

bool make_dir(const std::string &path, std::string &error) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST)
    return true;
  error = "mkdir " + path + ": " + std::strerror(errno);
  return false;
}

/// The v2 tree, if any: the whole /sys/fs/cgroup, or a hybrid's unified part.
std::string v2_root() {
  for (const char *d : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
    if (exists(std::string(d) + "/cgroup.controllers"))
      return d;
  return {};
}

bool has_word(const std::string &list, const std::string &word) {
  std::istringstream in(list);
  std::string w;
  while (in >> w)
    if (w == word)
      return true;
  return false;
}

std::string join_cpus(const std::vector<int> &cpus) {
  std::string s;
  for (int c : cpus)
    s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

} // namespace

std::string CgroupSupport::describe() const {
  if (!any())
    return "rlimits (no cgroup: " + missing + ")";
  std::string v1, v2;
  auto add = [](std::string &to, const char *name) {
    to += (to.empty() ? "" : "+") + std::string(name);
  };
  if (!memory.empty())
    add(memory_v2 ? v2 : v1, "memory");
  if (!cpuset.empty())
    add(cpuset_v2 ? v2 : v1, "cpuset");
  if (!pids.empty())
    add(pids_v2 ? v2 : v1, "pids");
  std::string s = "cgroup";
  if (!v2.empty())
    s += " v2 " + v2;
  if (!v1.empty())
    s += std::string(v2.empty() ? "" : ",") + " v1 " + v1;
  if (!missing.empty())
    s += " (rlimits for the rest: " + missing + ")";
  return s;
}

CgroupSupport CgroupSupport::probe(const std::string &parent) {
  CgroupSupport s;
  const std::string root2 = v2_root();
  const std::string available = root2.empty() ? "" : read_file(root2 + "/cgroup.controllers");
  auto note = [&s](const std::string &why) { s.missing += (s.missing.empty() ? "" : "; ") + why; };
  struct Want {
    const char *name;
    const char *v1_file;
    std::string *dir;
    bool *v2;
  } wants[] = {{"memory", "memory.limit_in_bytes", &s.memory, &s.memory_v2},
               {"cpuset", "cpuset.cpus", &s.cpuset, &s.cpuset_v2},
               {"pids", "cgroup.procs", &s.pids, &s.pids_v2}};
  for (Want &w : wants) {
    std::string error;
    if (has_word(available, w.name)) {
      // v2: the controller must be enabled for the parent's children, and
      // the parent itself gets it from the root.
      const std::string dir = root2 + "/" + parent;
      if (write_file(root2 + "/cgroup.subtree_control", std::string("+") + w.name, error) &&
          make_dir(dir, error) &&
          write_file(dir + "/cgroup.subtree_control", std::string("+") + w.name, error)) {
        *w.dir = dir;
        *w.v2 = true;
        continue;
      }
      note(std::string(w.name) + ": " + error);
      continue;
    }
    const std::string mount = std::string("/sys/fs/cgroup/") + w.name;
    if (!exists(mount + "/" + w.v1_file)) {
      note(std::string(w.name) + ": no such controller");
      continue;
    }
    const std::string dir = mount + "/" + parent;
    if (!make_dir(dir, error)) {
      note(std::string(w.name) + ": " + error);
      continue;
    }
    // v1 cpuset: a group takes no process before it has cpus and mems.
    if (std::string(w.name) == "cpuset" &&
        (!write_file(dir + "/cpuset.cpus", read_file(mount + "/cpuset.cpus"), error) ||
         !write_file(dir + "/cpuset.mems", read_file(mount + "/cpuset.mems"), error))) {
      note(std::string(w.name) + ": " + error);
      continue;
    }
    *w.dir = dir;
  }
  return s;
}

ExecutorCgroup::ExecutorCgroup(const CgroupSupport &s, const std::string &name,
                               std::string &error) {
  auto make = [&](const std::string &parent, bool v2, std::string &out, bool &out_v2) {
    if (parent.empty())
      return true;
    const std::string dir = parent + "/" + name;
    if (!make_dir(dir, error))
      return false;
    dirs_.push_back({dir, v2});
    out = dir;
    out_v2 = v2;
    return true;
  };
  bool ok = make(s.memory, s.memory_v2, memory_dir_, memory_v2_) &&
            make(s.cpuset, s.cpuset_v2, cpuset_dir_, cpuset_v2_) &&
            make(s.pids, s.pids_v2, pids_dir_, pids_v2_);
  if (ok && !cpuset_dir_.empty() && !cpuset_v2_) {
    ok = write_file(cpuset_dir_ + "/cpuset.cpus", read_file(s.cpuset + "/cpuset.cpus"), error) &&
         write_file(cpuset_dir_ + "/cpuset.mems", read_file(s.cpuset + "/cpuset.mems"), error);
  }
  if (!ok)
    remove();
}

ExecutorCgroup::ExecutorCgroup(ExecutorCgroup &&o) noexcept { *this = std::move(o); }

ExecutorCgroup &ExecutorCgroup::operator=(ExecutorCgroup &&o) noexcept {
  if (this != &o) {
    remove();
    dirs_ = std::move(o.dirs_);
    o.dirs_.clear();
    memory_dir_ = std::move(o.memory_dir_);
    cpuset_dir_ = std::move(o.cpuset_dir_);
    pids_dir_ = std::move(o.pids_dir_);
    memory_v2_ = o.memory_v2_;
    cpuset_v2_ = o.cpuset_v2_;
    pids_v2_ = o.pids_v2_;
  }
  return *this;
}

ExecutorCgroup::~ExecutorCgroup() { remove(); }

bool ExecutorCgroup::join(std::string &error) const noexcept {
  const std::string pid = std::to_string(::getpid());
  for (const Dir &d : dirs_)
    if (!write_file(d.path + "/cgroup.procs", pid, error))
      return false;
  return true;
}

bool ExecutorCgroup::limit(uint64_t memory_mib, const std::vector<int> &cpus,
                           uint32_t max_processes, std::string &error) {
  if (!memory_dir_.empty() && memory_mib > 0) {
    const std::string bytes = std::to_string(memory_mib << 20);
    if (memory_v2_) {
      if (!write_file(memory_dir_ + "/memory.max", bytes, error))
        return false;
      if (exists(memory_dir_ + "/memory.swap.max"))
        write_file(memory_dir_ + "/memory.swap.max", "0", error);
    } else {
      if (!write_file(memory_dir_ + "/memory.limit_in_bytes", bytes, error))
        return false;
      // Swap counts too where the kernel accounts it (memsw must stay >= the
      // memory limit, so it is written after).
      if (exists(memory_dir_ + "/memory.memsw.limit_in_bytes"))
        write_file(memory_dir_ + "/memory.memsw.limit_in_bytes", bytes, error);
    }
  }
  if (!cpuset_dir_.empty() && !cpus.empty()) {
    if (!write_file(cpuset_dir_ + "/cpuset.cpus", join_cpus(cpus), error))
      return false;
  }
  if (!pids_dir_.empty() && max_processes > 0) {
    if (!write_file(pids_dir_ + "/pids.max", std::to_string(max_processes), error))
      return false;
  }
  return true;
}

bool ExecutorCgroup::limit_cpus_below(const std::vector<int> &cpus, std::string &error) {
  if (cpuset_dir_.empty() || cpus.empty())
    return true;
  DIR *dir = ::opendir(cpuset_dir_.c_str());
  if (!dir) {
    error = "open " + cpuset_dir_ + ": " + std::strerror(errno);
    return false;
  }
  bool any = false, ok = true;
  while (dirent *e = ::readdir(dir)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.')
      continue;
    any = true;
    ok = write_file(cpuset_dir_ + "/" + e->d_name + "/cpuset.cpus", join_cpus(cpus), error) && ok;
  }
  ::closedir(dir);
  if (!any && ok)
    error = "no group below " + cpuset_dir_ + " yet";
  return any && ok;
}

void ExecutorCgroup::remove() noexcept {
  // Groups a container engine made below ours: what is left in them (a
  // daemon of the executor's, in a container that shares the host's PID
  // namespace, outlives the container's first process) is killed with the
  // allocation, as in our own group below.
  for (const Dir &d : dirs_) {
    DIR *dir = ::opendir(d.path.c_str());
    if (!dir)
      continue;
    while (dirent *e = ::readdir(dir)) {
      if (e->d_type != DT_DIR || e->d_name[0] == '.')
        continue;
      const std::string sub = d.path + "/" + e->d_name;
      for (int attempt = 0; attempt < 100; ++attempt) {
        if (::rmdir(sub.c_str()) == 0 || errno != EBUSY)
          break;
        std::istringstream procs(read_file(sub + "/cgroup.procs"));
        pid_t pid;
        while (procs >> pid)
          ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ::closedir(dir);
  }
  for (const Dir &d : dirs_) {
    // A process the executor left behind (the PID namespace usually took
    // them down already) must not keep the group, or its limits, alive.
    for (int attempt = 0; attempt < 100; ++attempt) {
      if (::rmdir(d.path.c_str()) == 0 || errno == ENOENT)
        break;
      if (errno != EBUSY)
        break;
      if (d.v2 && exists(d.path + "/cgroup.kill")) {
        std::string ignored;
        write_file(d.path + "/cgroup.kill", "1", ignored);
      } else {
        std::istringstream procs(read_file(d.path + "/cgroup.procs"));
        pid_t pid;
        while (procs >> pid)
          ::kill(pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  dirs_.clear();
  memory_dir_.clear();
  cpuset_dir_.clear();
  pids_dir_.clear();
}

} // namespace rfaas::executor_process
