#include "executor/container_pool.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <rdmalib/logger.hpp>
#include <spdlog/spdlog.h>

#include "common/command_template.hpp"
#include "common/fd_io.hpp"
#include "common/hex.hpp"
#include "executor/sandbox.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::executor_process {

namespace {

/// How long after an allocation started the pool is refilled: starting a
/// container takes a core for a few hundred milliseconds, which must not fall
/// in the setup of the allocation that just started.
constexpr std::chrono::milliseconds kRefillDelay(200);

std::string join_cpus(const std::vector<int> &cpus) {
  std::string s;
  for (int c : cpus)
    s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

/// Move `fd` to `target` in a child about to exec (dup2 clears close-on-exec).
bool place_fd(int fd, int target) {
  if (fd == target)
    return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

/// Remove the groups that containers of a zygote that is gone left under
/// `parent` ("rfaas-<zygote pid>-<n>": a zygote killed before its
/// containers ended cannot remove them; their processes ended with their
/// lifeline). Best effort.
void remove_stale_groups(const std::string &parent) {
  if (parent.empty())
    return;
  DIR *dir = ::opendir(parent.c_str());
  if (!dir)
    return;
  while (dirent *e = ::readdir(dir)) {
    long zygote = 0;
    if (e->d_type != DT_DIR || std::sscanf(e->d_name, "rfaas-%ld-", &zygote) != 1 || zygote <= 0)
      continue;
    if (::kill(static_cast<pid_t>(zygote), 0) == 0 || errno != ESRCH)
      continue;
    const std::string group = parent + "/" + e->d_name;
    if (DIR *sub = ::opendir(group.c_str())) {
      while (dirent *c = ::readdir(sub))
        if (c->d_type == DT_DIR && c->d_name[0] != '.')
          ::rmdir((group + "/" + c->d_name).c_str());
      ::closedir(sub);
    }
    ::rmdir(group.c_str());
  }
  ::closedir(dir);
}

} // namespace

ContainerPool::ContainerPool(const server::SandboxConfig &config,
                             const rdmalib::DeviceConfig &device, const Sandbox &sandbox,
                             std::string self_exe, std::function<void()> child_setup)
    : config_(config), device_(device), sandbox_(sandbox), self_(std::move(self_exe)),
      child_setup_(std::move(child_setup)) {
  rdmalib::Fabric::ConfinementNeeds needs = rdmalib::Fabric::confinement_needs(device);
  host_paths_ = needs.host_paths;
  host_pids_ = needs.host_pids;
  keep_uid_ = needs.same_uid_peers;
  root_ = ::geteuid() == 0;
  std::string why;
  if (!identity_for(protocol::kAnonymousUid, pool_who_, why))
    pool_who_ = ExecutorIdentity{config_.uid, config_.gid, false}; // not reached: no owner
  if (config_.oci_podman.empty())
    config_.oci_podman = {"podman"};
  const CgroupSupport &g = sandbox_.cgroups();
  for (const std::string *parent : {&g.memory, &g.cpuset, &g.pids})
    remove_stale_groups(*parent);
}

ContainerPool::~ContainerPool() { shutdown(); }

bool ContainerPool::identity_for(uint32_t owner_uid, ExecutorIdentity &out,
                                 std::string &why) const {
  if (keep_uid_) {
    out = ExecutorIdentity{::getuid(), ::getgid(), false};
    return true;
  }
  if (!root_) {
    // A rootless engine maps executor.user into its own user namespace: the
    // owner's uid would be a subordinate id, not the owner.
    out = ExecutorIdentity{config_.uid, config_.gid, false};
    return true;
  }
  return sandbox_.identity_for(owner_uid, out, why);
}

bool ContainerPool::usable(std::string &why) const {
  if (config_.kind != server::SandboxKind::Command || sandbox_.cgroups().any())
    return true;
  for (const std::string &a : config_.command)
    if (a.find("{cgroup_parent}") != std::string::npos) {
      why = "executor.command names {cgroup_parent}, but this manager cannot make a cgroup (" +
            sandbox_.cgroups().describe() +
            "): run it as root or in a delegated cgroup subtree, or remove the argument that "
            "names {cgroup_parent} from the template";
      return false;
    }
  return true;
}

size_t ContainerPool::live_waiting() const {
  return static_cast<size_t>(std::count_if(waiting_.begin(), waiting_.end(),
                                           [](const auto &w) { return !w.second.dropped; }));
}

std::string ContainerPool::describe() const {
  const bool pool = config_.kind == server::SandboxKind::Oci && config_.oci_pool > 0;
  const std::string who =
      keep_uid_ ? "uid " + std::to_string(::getuid()) +
                      " (the provider connects processes of one uid only)"
      : root_ ? "the lease owner's uid (anonymous leases: uid " + std::to_string(config_.uid) +
                    (pool ? "; the pool's containers run as the last allocation's uid)" : ")")
              : "uid " + std::to_string(config_.uid) +
                    " for every lease (the engine is not root: the lease owner's uid does not "
                    "apply)";
  if (config_.kind == server::SandboxKind::Command) {
    std::string argv;
    for (const auto &a : config_.command)
      argv += (argv.empty() ? "" : " ") + a;
    return "command (the operator's template, one start per allocation: " + argv +
           "), {uid}:{gid} " + who + ", seccomp " + (config_.seccomp ? "on" : "OFF");
  }
  return "oci (image " + config_.oci_image + " through " + config_.oci_podman[0] + "; own mount, " +
         (host_pids_ ? "ipc, uts namespaces and the host's PID namespace, "
                       "which the provider needs; "
                     : "pid, ipc, uts namespaces; ") +
         "the network stays the host's), " + who +
         ", no capabilities, no_new_privs, read-only root, seccomp " +
         (config_.seccomp ? "on" : "OFF") + ", limits: " + sandbox_.cgroups().describe() +
         " (podman's group below ours), nofile " + std::to_string(config_.max_open_files) + ", " +
         std::to_string(config_.oci_pool) + " container(s) started ahead";
}

std::string ContainerPool::executor_path() const {
  return config_.kind == server::SandboxKind::Oci && !config_.oci_host_code ? config_.oci_executor
                                                                            : self_;
}

std::vector<std::string> ContainerPool::executor_args() const {
  std::string dev = rdmalib::DeviceDatabase({device_}).to_json();
  return {"--spare-fd",
          "3",
          "--lifeline-fd",
          "4",
          "--isolate-tenants",
          "--log-level",
          rdmalib::log::to_string(rdmalib::log::level()),
          "--device",
          server::to_hex(dev.data(), dev.size())};
}

std::vector<std::string> ContainerPool::oci_argv(const Container &c, const server::LaunchSpec *spec,
                                                 const std::string &image) const {
  std::vector<std::string> a = config_.oci_podman;
  const std::string nofile = std::to_string(config_.max_open_files);
  for (const char *s :
       {"run", "--rm", "--network=host", "--preserve-fds=2", "--log-driver=passthrough",
        "--cap-drop=all", "--security-opt=no-new-privileges", "--read-only", "--hostname",
        "rfaas-executor", "--env=FI_*", "--env=RFAAS_*"})
    a.emplace_back(s);
  a.push_back("--name=" + c.name);
  a.push_back("--user=" + std::to_string(c.who.uid) + ":" + std::to_string(c.who.gid));
  a.push_back("--pid=" + std::string(host_pids_ ? "host" : "private"));
  a.push_back("--tmpfs=/tmp:rw,nosuid,nodev,mode=1777,size=" + std::to_string(config_.tmp_mib) +
              "m");
  a.push_back("--pids-limit=" + std::to_string(config_.max_processes));
  a.push_back("--ulimit=nofile=" + nofile + ":" + nofile);
  if (!c.cgroup.empty())
    a.push_back("--cgroup-parent=/" + config_.cgroup_parent + "/" + c.name);
  if (spec) {
    // Started for this allocation: its limits from the start.
    if (!spec->cores.empty())
      a.push_back("--cpuset-cpus=" + join_cpus(spec->cores));
#if !defined(__SANITIZE_ADDRESS__)
    if (spec->memory_mib > 0)
      a.push_back("--memory=" + std::to_string(spec->memory_mib) + "m");
#endif
  }
  bool shm_bound = false;
  for (const std::string &p : host_paths_) {
    if (::access(p.c_str(), F_OK) != 0)
      continue;
    if (p == "/dev/shm") {
      a.push_back("--volume=/dev/shm:/dev/shm:rw");
      shm_bound = true;
    } else if (p.compare(0, 5, "/dev/") == 0) {
      a.push_back("--device=" + p);
    } else if (p != "/sys") { // podman mounts the host's /sys read-only already
      a.push_back("--volume=" + p + ":" + p + ":ro");
    }
  }
  if (!shm_bound)
    a.push_back("--shm-size=" + std::to_string(config_.tmp_mib) + "m");
  if (config_.oci_host_code) {
    a.push_back("--volume=/usr:/usr:ro");
    for (const std::string &d : sandbox_.code_dirs())
      a.push_back("--volume=" + d + ":" + d + ":ro");
    for (const char *f : Sandbox::etc_files())
      if (::access((std::string("/etc/") + f).c_str(), F_OK) == 0)
        a.push_back(std::string("--volume=/etc/") + f + ":/etc/" + f + ":ro");
  }
  a.insert(a.end(), config_.oci_run_options.begin(), config_.oci_run_options.end());
  a.push_back(image);
  a.push_back(executor_path());
  for (auto &x : executor_args())
    a.push_back(std::move(x));
  return a;
}

std::vector<std::string> ContainerPool::command_argv(const Container &c,
                                                     const server::LaunchSpec &spec) const {
  server::CommandValues v;
  v.scalars = {{"{executor}", executor_path()},
               {"{name}", c.name},
               {"{cores}", join_cpus(spec.cores)},
               {"{memory_mib}", std::to_string(spec.memory_mib)},
               {"{max_processes}", std::to_string(config_.max_processes)},
               {"{max_open_files}", std::to_string(config_.max_open_files)},
               {"{tmp_mib}", std::to_string(config_.tmp_mib)},
               {"{uid}", std::to_string(c.who.uid)},
               {"{gid}", std::to_string(c.who.gid)},
               {"{cgroup_parent}", "/" + config_.cgroup_parent + "/" + c.name}};
  v.executor_args = executor_args();
  for (const std::string &p : host_paths_)
    if (::access(p.c_str(), F_OK) == 0)
      v.host_paths.push_back(p);
  v.code_dirs = sandbox_.code_dirs();
  return server::expand_command_template(config_.command, v);
}

pid_t ContainerPool::start_container(Container &c, const server::LaunchSpec *spec,
                                     const std::string &image, std::string &why) {
  c.name = "rfaas-" + std::to_string(::getpid()) + "-" + std::to_string(++seq_);
  // A group of ours above the engine's (podman's --cgroup-parent, a
  // template's {cgroup_parent}): the allocation's limits are written there,
  // now when it is known, else when a waiting container binds (then the
  // cpuset into the engine's group, since ours cannot shrink below it).
  c.cgroup = sandbox_.make_cgroup(c.name);
  if (spec && !c.cgroup.empty()) {
#if defined(__SANITIZE_ADDRESS__)
    const uint64_t memory = 0; // AddressSanitizer's shadow exceeds any lease
#else
    const uint64_t memory = spec->memory_mib;
#endif
    if (!c.cgroup.limit(memory, spec->cores, config_.max_processes, why))
      return -1;
  }
  std::vector<std::string> argv;
  if (config_.kind == server::SandboxKind::Command) {
    // An empty {cgroup_parent} would leave the engine's default group, or
    // an argument the engine refuses: the allocation fails instead.
    if (c.cgroup.empty() &&
        std::any_of(config_.command.begin(), config_.command.end(), [](const std::string &a) {
          return a.find("{cgroup_parent}") != std::string::npos;
        })) {
      why = "no cgroup for {cgroup_parent} of executor.command (see the warning above)";
      return -1;
    }
    argv = command_argv(c, *spec);
  } else
    argv = oci_argv(c, spec, image);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    why = std::string("socketpair: ") + std::strerror(errno);
    return -1;
  }
  int life[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, life) != 0) {
    why = std::string("socketpair: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return -1;
  }
  std::vector<char *> cargv;
  for (auto &s : argv)
    cargv.push_back(s.data());
  cargv.push_back(nullptr);
  const pid_t zygote = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    why = std::string("fork: ") + std::strerror(errno);
    for (int fd : {sv[0], sv[1], life[0], life[1]})
      ::close(fd);
    return -1;
  }
  if (pid == 0) {
    child_setup_();
    if (::getppid() != zygote)
      _exit(0); // the zygote died before the death signal was armed
    // Out of the way of 3 and 4 first, then into them.
    int s = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    int l = ::fcntl(life[1], F_DUPFD_CLOEXEC, 10);
    if (s < 0 || l < 0 || !place_fd(s, 3) || !place_fd(l, 4))
      _exit(127);
    ::execvp(cargv[0], cargv.data());
    spdlog::error("zygote: cannot execute {}: {}", cargv[0], std::strerror(errno));
    _exit(127);
  }
  ::close(sv[1]);
  ::close(life[1]);
  c.socket = sv[0];
  c.lifeline = life[0];
  spdlog::debug("zygote: container {} starting (engine pid {})", c.name, pid);
  return pid;
}

void ContainerPool::start() {
  if (config_.kind == server::SandboxKind::Oci && config_.oci_pool > 0)
    refill_due_ = Clock::now();
}

int ContainerPool::timeout_ms() const {
  if (refill_due_ == Clock::time_point{})
    return -1;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(refill_due_ - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left + 1));
}

void ContainerPool::tick() {
  if (refill_due_ == Clock::time_point{} || Clock::now() < refill_due_)
    return;
  refill_due_ = {};
  // The pool follows the last allocation's uid: containers waiting as
  // another uid are let go (their executors exit on end of file; reaped
  // without a report).
  for (auto &w : waiting_)
    if (!w.second.dropped && !(w.second.who == pool_who_)) {
      spdlog::debug("zygote: letting the waiting container {} (uid {}) go for one of uid {}",
                    w.second.name, w.second.who.uid, pool_who_.uid);
      close_container(w.second);
    }
  while (pool_on_ && live_waiting() < config_.oci_pool) {
    Container c;
    c.who = pool_who_;
    std::string why;
    pid_t pid = start_container(c, nullptr, config_.oci_image, why);
    if (pid < 0) {
      spdlog::warn("zygote: cannot start a container ahead: {}; no pool", why);
      close_container(c);
      pool_on_ = false;
      return;
    }
    waiting_.emplace(pid, std::move(c));
  }
}

pid_t ContainerPool::launch(const std::string &spec_text, const server::LaunchSpec &spec,
                            bool &from_pool, std::string &why) {
  from_pool = false;
  // The image the client named (the manager checked the index): the pool
  // holds containers of the default image only.
  std::string image = config_.oci_image;
  {
    protocol::AllocationRequest req;
    std::vector<protocol::BufferDescriptor> results;
    if (protocol::decode(spec.request.data(), spec.request.size(), req, results) && req.image > 0) {
      if (config_.kind != server::SandboxKind::Oci || req.image > config_.oci_images.size()) {
        why = "image " + std::to_string(req.image) + " is not in the allow-list";
        return -1;
      }
      image = config_.oci_images[req.image - 1];
    }
  }
  ExecutorIdentity who;
  if (!identity_for(spec.owner_uid, who, why))
    return -1;
  if (who.owner)
    spdlog::info("zygote: allocation {:x} runs as its lease's owner, uid {} gid {}",
                 spec.allocation_id, who.uid, who.gid);
  // The next refill starts the pool's containers as this allocation's uid.
  const ExecutorIdentity pooled_as = pool_who_;
  pool_who_ = who;
  // A waiting container of this uid whose executor answered (its fabric is
  // open, its cgroup exists) takes the allocation.
  for (auto it = waiting_.begin(); it != waiting_.end() && image == config_.oci_image; ++it) {
    Container &c = it->second;
    if (c.dropped || !(c.who == who))
      continue;
    if (!c.ready) {
      char answer = 0;
      c.ready = ::recv(c.socket, &answer, 1, MSG_DONTWAIT) == 1;
    }
    if (!c.ready)
      continue;
    std::string err;
#if defined(__SANITIZE_ADDRESS__)
    const uint64_t memory = 0; // AddressSanitizer's shadow exceeds any lease
#else
    const uint64_t memory = spec.memory_mib;
#endif
    if (!c.cgroup.empty() && (!c.cgroup.limit(memory, {}, config_.max_processes, err) ||
                              !c.cgroup.limit_cpus_below(spec.cores, err))) {
      // It would run less confined than configured: not this one.
      spdlog::warn("zygote: cannot limit the waiting container {}: {}; dropping it", c.name, err);
      ::kill(it->first, SIGTERM);
      close_container(c);
      continue; // reaped later, reported to nobody
    }
    if (!server::write_all(c.socket, spec_text)) {
      spdlog::warn("zygote: the waiting container {} cannot take an allocation: {}", c.name,
                   std::strerror(errno));
      close_container(c);
      continue;
    }
    ::close(c.socket); // EOF: the spec is complete
    c.socket = -1;
    const pid_t pid = it->first;
    spdlog::debug("zygote: allocation {:x} went to the waiting container {}", spec.allocation_id,
                  c.name);
    bound_.emplace(pid, std::move(c));
    waiting_.erase(it);
    if (pool_on_ && refill_due_ == Clock::time_point{})
      refill_due_ = Clock::now() + kRefillDelay;
    from_pool = true;
    return pid;
  }
  Container c;
  c.who = who;
  pid_t pid = start_container(c, &spec, image, why);
  if (pid < 0) {
    close_container(c);
    return -1;
  }
  if (!(pooled_as == who) && config_.kind == server::SandboxKind::Oci && config_.oci_pool > 0)
    spdlog::info("zygote: allocation {:x} starts its own container: the pool's run as uid {}; "
                 "the pool follows uid {} from now on",
                 spec.allocation_id, pooled_as.uid, who.uid);
  if (image != config_.oci_image)
    spdlog::info("zygote: allocation {:x} runs in image {} (container {})", spec.allocation_id,
                 image, c.name);
  // The spare protocol: the spec now, read once the fabric is open.
  if (!server::write_all(c.socket, spec_text)) {
    why = std::string("cannot hand the allocation to its container: ") + std::strerror(errno);
    ::kill(pid, SIGTERM);
    close_container(c);
    waiting_.emplace(pid, std::move(c)); // reaped silently
    return -1;
  }
  ::close(c.socket);
  c.socket = -1;
  bound_.emplace(pid, std::move(c));
  if (config_.kind == server::SandboxKind::Oci && pool_on_ && config_.oci_pool > 0 &&
      refill_due_ == Clock::time_point{})
    refill_due_ = Clock::now() + kRefillDelay;
  return pid;
}

void ContainerPool::signal(pid_t pid, int sig) {
  auto it = bound_.find(pid);
  if (it == bound_.end())
    return;
  if (sig == SIGKILL) {
    if (it->second.lifeline >= 0)
      ::close(it->second.lifeline);
    it->second.lifeline = -1;
    return;
  }
  ::kill(pid, sig);
}

void ContainerPool::poll_fds(std::vector<pollfd> &fds) const {
  for (const auto &b : bound_)
    if (b.second.lifeline >= 0 && !b.second.reported)
      fds.push_back({b.second.lifeline, POLLIN, 0});
}

std::vector<std::pair<pid_t, int>> ContainerPool::collect_exits(const std::vector<pollfd> &fds) {
  std::vector<std::pair<pid_t, int>> exits;
  for (auto &b : bound_) {
    Container &c = b.second;
    if (c.lifeline < 0 || c.reported)
      continue;
    auto f =
        std::find_if(fds.begin(), fds.end(), [&c](const pollfd &p) { return p.fd == c.lifeline; });
    if (f == fds.end() || !(f->revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    int32_t code = 0;
    ssize_t n = ::recv(c.lifeline, &code, sizeof code, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof code)) {
      c.reported = true;
      exits.emplace_back(b.first, static_cast<int>(code));
    }
    // Its exit code, or its end without one (killed: the engine's status
    // then stands for it): either way nothing more comes.
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
      ::close(c.lifeline);
      c.lifeline = -1;
    }
  }
  return exits;
}

bool ContainerPool::reaped(pid_t pid, int status) {
  auto b = bound_.find(pid);
  if (b != bound_.end()) {
    const bool reported = b->second.reported;
    close_container(b->second);
    bound_.erase(b);
    return reported;
  }
  auto w = waiting_.find(pid);
  if (w == waiting_.end())
    return false;
  if (!w->second.dropped && pool_on_) {
    // Not let go by us: the engine or the image does not work here.
    spdlog::warn("zygote: the waiting container {} ended before use ({} {}); no more containers "
                 "started ahead (allocations start their own)",
                 w->second.name, WIFSIGNALED(status) ? "signal" : "exit code",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    pool_on_ = false;
  }
  close_container(w->second);
  waiting_.erase(w);
  return true;
}

void ContainerPool::close_container(Container &c) {
  if (c.socket >= 0)
    ::close(c.socket);
  if (c.lifeline >= 0)
    ::close(c.lifeline);
  c.socket = c.lifeline = -1;
  // Its cgroup goes when it is erased, after its engine was reaped.
  c.dropped = true;
}

void ContainerPool::shutdown() {
  pool_on_ = false;
  refill_due_ = {};
  // End of file on the sockets lets waiting executors go, a closed lifeline
  // ends the others; their cgroups are removed when they are reaped.
  for (auto &w : waiting_)
    close_container(w.second);
  for (auto &b : bound_) {
    if (b.second.lifeline >= 0)
      ::close(b.second.lifeline);
    b.second.lifeline = -1;
  }
}

} // namespace rfaas::executor_process
