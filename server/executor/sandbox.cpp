#include "executor/sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <link.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/launch_spec.hpp"
#include "executor/seccomp_filter.hpp"

namespace rfaas::executor_process {

namespace {

std::string errno_text(const std::string &what) { return what + ": " + std::strerror(errno); }

bool write_proc(const std::string &path, const std::string &value, std::string &error) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    error = errno_text("open " + path);
    return false;
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    errno = saved;
    error = errno_text("write " + path);
    return false;
  }
  return true;
}

std::string dir_of(const std::string &path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

bool under(const std::string &path, const std::string &dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

/// mkdir -p of an absolute path.
bool make_dirs(const std::string &path, std::string &error) {
  std::string at;
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos)
      next = path.size();
    at = path.substr(0, next);
    if (!at.empty() && ::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      error = errno_text("mkdir " + at);
      return false;
    }
    pos = next + 1;
  }
  return true;
}

/// The flags a remount of a bind mount must keep: a mount namespace owned by
/// an unprivileged user may not clear nosuid, nodev or noexec that the
/// source mount has.
unsigned long locked_flags(const std::string &src) {
  struct statvfs s;
  if (::statvfs(src.c_str(), &s) != 0)
    return 0;
  unsigned long f = 0;
  if (s.f_flag & ST_NOSUID)
    f |= MS_NOSUID;
  if (s.f_flag & ST_NODEV)
    f |= MS_NODEV;
  if (s.f_flag & ST_NOEXEC)
    f |= MS_NOEXEC;
  if (s.f_flag & ST_NOATIME)
    f |= MS_NOATIME;
  if (s.f_flag & ST_NODIRATIME)
    f |= MS_NODIRATIME;
  if (s.f_flag & ST_RELATIME)
    f |= MS_RELATIME;
  return f;
}

/// Bind `src` (a path of the old root) at `dst` (inside the new one), read-
/// only unless `writable`. Files get an empty file to bind over.
bool bind_mount(const std::string &src, const std::string &dst, bool writable, std::string &error) {
  struct stat st;
  if (::stat(src.c_str(), &st) != 0) {
    error = errno_text("stat " + src);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    if (!make_dirs(dst, error))
      return false;
  } else {
    if (!make_dirs(dir_of(dst), error))
      return false;
    int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      error = errno_text("create " + dst);
      return false;
    }
    ::close(fd);
  }
  if (::mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    error = errno_text("bind " + src);
    return false;
  }
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | locked_flags(src);
  if (!writable)
    flags |= MS_RDONLY;
  if (::mount(nullptr, dst.c_str(), nullptr, flags, nullptr) != 0) {
    error = errno_text("remount " + dst + (writable ? "" : " read-only"));
    return false;
  }
  return true;
}

bool mount_tmpfs(const std::string &dst, const std::string &options, std::string &error) {
  if (!make_dirs(dst, error))
    return false;
  if (::mount("tmpfs", dst.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    error = errno_text("mount tmpfs on " + dst);
    return false;
  }
  return true;
}

/// Every capability gone: permitted, effective, inheritable, ambient and
/// the bounding set (so nothing can come back).
bool drop_capabilities(std::string &error) {
  for (int cap = 0; cap <= 63; ++cap)
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL)
      break;
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    error = errno_text("capset");
    return false;
  }
  return true;
}

int collect_dirs(struct dl_phdr_info *info, size_t, void *out) {
  auto *dirs = static_cast<std::vector<std::string> *>(out);
  if (info->dlpi_name && info->dlpi_name[0] == '/') {
    char real[PATH_MAX];
    if (::realpath(info->dlpi_name, real))
      dirs->push_back(dir_of(real));
  }
  return 0;
}

/// Kill and reap every child left (orphans of the executor, which a
/// subreaper inherits), read from `children_fd` (this process's
/// /proc/<pid>/task/<pid>/children).
void kill_leftovers(int children_fd) {
  for (int round = 0; round < 1000; ++round) {
    char buf[4096];
    ssize_t n = ::pread(children_fd, buf, sizeof buf - 1, 0);
    bool any = false;
    if (n > 0) {
      buf[n] = '\0';
      char *save = nullptr;
      for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(nullptr, " \n", &save)) {
        ::kill(static_cast<pid_t>(std::atol(tok)), SIGKILL);
        any = true;
      }
    }
    while (::waitpid(-1, nullptr, WNOHANG) > 0)
      any = true;
    if (!any)
      return;
    ::usleep(1000);
  }
}

/// The in-between process: stays in the zygote's PID namespace, passes
/// SIGTERM and SIGINT to the executor (PID 1 inside, or in the host's PID
/// namespace a subreaper's child), and ends as it did, after killing what
/// the executor left behind where no PID namespace does (`children_fd` >= 0).
[[noreturn]] void wait_for(pid_t child, int children_fd) {
  ::prctl(PR_SET_NAME, "executor-box");
  if (children_fd > 3)
    ::syscall(SYS_close_range, 3, children_fd - 1, 0);
  ::syscall(SYS_close_range, std::max(3, children_fd + 1), ~0u, 0);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) {
      if (children_fd >= 0)
        kill_leftovers(children_fd);
      if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        ::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, nullptr);
        ::prctl(PR_SET_DUMPABLE, 0); // no core file of the wrong process
        ::kill(::getpid(), sig);
      }
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    siginfo_t si;
    if (::sigwaitinfo(&set, &si) > 0 && si.si_signo != SIGCHLD)
      ::kill(child, si.si_signo);
  }
}

} // namespace

Sandbox::Sandbox(server::SandboxConfig config, rdmalib::Fabric::ConfinementNeeds needs)
    : config_(std::move(config)), host_paths_(std::move(needs.host_paths)), root_(::geteuid() == 0),
      keep_uid_(needs.same_uid_peers), host_pids_(needs.host_pids) {
  if (config_.kind == server::SandboxKind::Process)
    return;
  cgroups_ = CgroupSupport::probe(config_.cgroup_parent);
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    code_dirs_.push_back(dir_of(self));
  }
  dl_iterate_phdr(collect_dirs, &code_dirs_);
  std::sort(code_dirs_.begin(), code_dirs_.end());
  code_dirs_.erase(std::unique(code_dirs_.begin(), code_dirs_.end()), code_dirs_.end());
  // /usr is bound whole; a directory inside another one needs no bind.
  std::vector<std::string> kept;
  for (const std::string &d : code_dirs_)
    if (!under(d, "/usr") && (kept.empty() || !under(d, kept.back())))
      kept.push_back(d);
  code_dirs_ = kept;
}

const std::vector<const char *> &Sandbox::etc_files() {
  static const std::vector<const char *> files = {
      "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "hosts", "host.conf",
      "gai.conf",    "localtime",  "alternatives", "libibverbs.d",  "rdma"};
  return files;
}

std::string Sandbox::describe() const {
  if (config_.kind == server::SandboxKind::Process)
    return "process (no isolation: executors run as the manager's user with its view of the "
           "node; for a single trusted user only)";
  std::string who =
      keep_uid_ ? "the manager's uid " + std::to_string(::getuid()) +
                      " (the provider connects processes of one uid only: neither the lease "
                      "owner's uid nor executor.user applies)"
      : root_ ? "the lease owner's uid (anonymous leases: uid " + std::to_string(config_.uid) +
                    ", gid " + std::to_string(config_.gid) + ")"
              : "the manager's uid " + std::to_string(::getuid()) +
                    " for every lease (not root: neither the lease owner's uid nor executor.user "
                    "applies)";
  return std::string("namespaces (user, mount, ") +
         (host_pids_ ? "ipc, uts, cgroup; the host's PID namespace, which the provider needs, "
                       "without /proc; "
                     : "pid, ipc, uts, cgroup; ") +
         "the network stays the host's), " + who + ", no capabilities, no_new_privs, seccomp " +
         (config_.seccomp ? "on" : "OFF") + ", limits: " + cgroups_.describe() + ", nofile " +
         std::to_string(config_.max_open_files);
}

ExecutorCgroup Sandbox::make_cgroup(const std::string &name) const {
  if (config_.kind == server::SandboxKind::Process || !cgroups_.any())
    return {};
  std::string error;
  ExecutorCgroup g(cgroups_, name, error);
  // The executor is then held by rlimits alone (enter() sets them).
  if (g.empty())
    spdlog::warn("executor sandbox: no cgroup for {}: {}; rlimits apply", name, error);
  return g;
}

bool Sandbox::identity_for(uint32_t owner_uid, ExecutorIdentity &out, std::string &error) const {
  if (config_.kind == server::SandboxKind::Process || keep_uid_ || !root_) {
    out = ExecutorIdentity{::getuid(), ::getgid(), false};
    return true;
  }
  if (owner_uid == protocol::kAnonymousUid || owner_uid == 0) {
    out = ExecutorIdentity{config_.uid, config_.gid, false};
    return true;
  }
  // The account's primary group, as SLURM's slurmd does for a job's user:
  // the credential's gid is the client host's view, the node's own
  // accounts decide here.
  struct passwd pw;
  struct passwd *found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getpwuid_r(static_cast<uid_t>(owner_uid), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || !found) {
    error = "the lease's owner, uid " + std::to_string(owner_uid) +
            ", has no account on this node" +
            (rc != 0 ? std::string(" (") + std::strerror(rc) + ")" : std::string());
    return false;
  }
  out = ExecutorIdentity{static_cast<uid_t>(owner_uid), pw.pw_gid, true};
  return true;
}

bool Sandbox::enter(const ExecutorCgroup &cgroup, const ExecutorIdentity &who,
                    std::string &error) const {
  if (config_.kind != server::SandboxKind::Namespaces)
    return true; // process: nothing; oci and command: the container does it
  if (!cgroup.empty() && !cgroup.join(error))
    return false;
  if (!enter_namespaces(who, error))
    return false;
  if (!build_root(error))
    return false;
  static const char host[] = "rfaas-executor";
  ::sethostname(host, sizeof host - 1);
  // Processes are limited by this executor's pids cgroup where it has one.
  if (!set_limits(cgroup.has_pids(), error))
    return false;
  if (!drop_capabilities(error))
    return false;
  // Nobody of the same uid may ptrace this process or read its memory
  // through /proc (other executors of the same executor.user among them).
  ::prctl(PR_SET_DUMPABLE, 0);
  return true;
}

bool Sandbox::enter_namespaces(const ExecutorIdentity &who, std::string &error) const {
  const pid_t zygote = ::getppid();
  uid_t uid = ::getuid();
  gid_t gid = ::getgid();
  if (root_ && !keep_uid_) {
    if (who.uid == 0 || who.gid == 0) {
      error = who.owner ? "the lease's owner must not run as root or group 0 in a sandbox"
                        : "executor.user must not be root in a sandbox";
      return false;
    }
    uid = who.uid;
    gid = who.gid;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      error =
          errno_text("cannot become uid " + std::to_string(uid) + " gid " + std::to_string(gid));
      return false;
    }
    // A change of credentials cleared the death signal.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != zygote)
      _exit(0);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    error = errno_text("no_new_privs");
    return false;
  }
  // Writing our own id maps needs a dumpable process (the uid change above
  // made it non-dumpable); it is made non-dumpable again at the end.
  ::prctl(PR_SET_DUMPABLE, 1);
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP |
                (host_pids_ ? 0 : CLONE_NEWPID)) != 0) {
    error = errno_text("unshare (user namespaces must be enabled: user.max_user_namespaces > 0)");
    return false;
  }
  if (!write_proc("/proc/self/setgroups", "deny", error) ||
      !write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n",
                  error) ||
      !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n",
                  error))
    return false;
  // In the host's PID namespace the process in between inherits what the
  // executor leaves (a subreaper) and finds it in its children file.
  int children_fd = -1;
  if (host_pids_) {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    const std::string self = std::to_string(::getpid());
    children_fd =
        ::open(("/proc/" + self + "/task/" + self + "/children").c_str(), O_RDONLY | O_CLOEXEC);
  }
  pid_t child = ::fork();
  if (child < 0) {
    error = errno_text("fork into the new PID namespace");
    return false;
  }
  if (child > 0)
    wait_for(child, children_fd);
  if (children_fd >= 0)
    ::close(children_fd);
  // Its own session: a signal to "its process group" reaches only it and
  // what it starts.
  ::setsid();
  // PID 1 of the new namespace: dies with the process in between (which
  // waits for it, so it is there when this is armed).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  return true;
}

bool Sandbox::build_root(std::string &error) const {
  // A mount namespace of its own: the process in between keeps the view it
  // had (it reads /proc after the executor ended).
  if (::unshare(CLONE_NEWNS) != 0) {
    error = errno_text("unshare the mount namespace");
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    error = errno_text("make mounts private");
    return false;
  }
  // The staging area covers /tmp only until the first pivot: after it the
  // old root (with the host's /tmp visible again) is at /oldroot.
  if (!mount_tmpfs("/tmp", "mode=0755,size=1m", error) || ::chdir("/tmp") != 0 ||
      ::mkdir("oldroot", 0755) != 0 || ::mkdir("newroot", 0755) != 0) {
    if (error.empty())
      error = errno_text("prepare the staging root");
    return false;
  }
  if (::syscall(SYS_pivot_root, ".", "oldroot") == 0) {
    if (::chdir("/") != 0) {
      error = errno_text("chdir / in the staging root");
      return false;
    }
    if (!mount_tmpfs("/newroot", "mode=0755,size=1m", error) ||
        !populate("/newroot", "/oldroot", error))
      return false;
    // Into the new root; the staging area and the old root go away.
    if (::umount2("/oldroot", MNT_DETACH) != 0 || ::chdir("/newroot") != 0 ||
        ::syscall(SYS_pivot_root, ".", ".") != 0 || ::umount2(".", MNT_DETACH) != 0 ||
        ::chdir("/") != 0) {
      error = errno_text("pivot into the executor's root");
      return false;
    }
  } else if (errno == EINVAL) {
    // The host's root is the initial ramfs (a diskless node booted without
    // switching root, or a VM's initramfs), which pivot_root cannot move.
    // The new root is built on a tmpfs over /mnt instead, moved onto / and
    // entered with chroot, as switch_root does; without capabilities and
    // with chroot refused by the seccomp filter, nothing leads back out.
    if (::chdir("/") != 0 || ::umount2("/tmp", MNT_DETACH) != 0) {
      error = errno_text("leave the staging root");
      return false;
    }
    const std::string R = ::access("/mnt", F_OK) == 0 ? "/mnt" : "/media";
    if (!mount_tmpfs(R, "mode=0755,size=1m", error) || !populate(R, "", error))
      return false;
    if (::chdir(R.c_str()) != 0 || ::mount(".", "/", nullptr, MS_MOVE, nullptr) != 0 ||
        ::chroot(".") != 0 || ::chdir("/") != 0) {
      error = errno_text("move the executor's root onto / (the host's root is the initial ramfs)");
      return false;
    }
  } else {
    error = errno_text("pivot into the staging root");
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0) {
    error = errno_text("remount / read-only");
    return false;
  }
  return true;
}

/// Fill the new root `R` from the host's, seen at `O` ("" when it is still /).
bool Sandbox::populate(const std::string &R, const std::string &O, std::string &error) const {
  for (const char *d : {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
    const std::string src = O + "/" + d;
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = ::readlink(src.c_str(), target, sizeof target - 1);
      if (n <= 0)
        continue;
      target[n] = '\0';
      if (::symlink(target, (R + "/" + d).c_str()) != 0) {
        error = errno_text(std::string("symlink /") + d);
        return false;
      }
    } else if (!bind_mount(src, R + "/" + d, false, error)) {
      return false;
    }
  }
  // What the C library and the fabric's libraries read from /etc: not the
  // rest of it (passwords, the manager's configuration under /etc/rfaas).
  for (const char *f : etc_files()) {
    const std::string src = O + "/etc/" + f;
    if (::access(src.c_str(), F_OK) == 0 && !bind_mount(src, R + "/etc/" + f, false, error))
      return false;
  }
  for (const std::string &d : code_dirs_)
    if (::access((O + d).c_str(), F_OK) == 0 && !bind_mount(O + d, R + d, false, error))
      return false;
  if (!mount_tmpfs(R + "/dev", "mode=0755,size=64k", error))
    return false;
  for (const char *dev : {"null", "zero", "full", "random", "urandom"})
    if (!bind_mount(O + "/dev/" + dev, R + "/dev/" + dev, true, error))
      return false;
  const std::string tmp = "mode=1777,size=" + std::to_string(config_.tmp_mib) + "m";
  bool shared_shm = false;
  for (const std::string &p : host_paths_) {
    if (::access((O + p).c_str(), F_OK) != 0)
      continue;
    shared_shm = shared_shm || p == "/dev/shm";
    if (!bind_mount(O + p, R + p, under(p, "/dev"), error))
      return false;
  }
  if (!shared_shm && !mount_tmpfs(R + "/dev/shm", tmp, error))
    return false;
  if (!mount_tmpfs(R + "/tmp", tmp, error))
    return false;
  // A /proc of its own PID namespace; none in the host's (it would list,
  // and let same-uid code open, every process of the node).
  if (!host_pids_) {
    if (!make_dirs(R + "/proc", error))
      return false;
    if (::mount("proc", (R + "/proc").c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
        0) {
      error = errno_text("mount /proc");
      return false;
    }
  }
  return true;
}

bool Sandbox::set_limits(bool pids_limited, std::string &error) const {
  rlimit files{config_.max_open_files, config_.max_open_files};
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
    error = errno_text("setrlimit(RLIMIT_NOFILE)");
    return false;
  }
  if (!pids_limited) {
    rlimit procs{config_.max_processes, config_.max_processes};
    if (::setrlimit(RLIMIT_NPROC, &procs) != 0) {
      error = errno_text("setrlimit(RLIMIT_NPROC)");
      return false;
    }
  }
  rlimit core{0, 0};
  ::setrlimit(RLIMIT_CORE, &core);
  return true;
}

} // namespace rfaas::executor_process
