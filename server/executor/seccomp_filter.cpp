#include "executor/seccomp_filter.hpp"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace rfaas::executor_process {

namespace {

/// Refused outright, whatever their arguments.
const char *const kRefused[] = {
    // Other processes' memory and control.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    // The file system's shape and new namespaces.
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    // Kernel attack surface with no use in a function.
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "personality",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "quotactl",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "lookup_dcookie",
    "vhangup",
    "name_to_handle_at",
    "open_by_handle_at",
    "fanotify_init",
    // Running another program.
    "execve",
    "execveat",
    // Moving to cores the lease does not hold (the workers are pinned
    // before the filter goes in; a cpuset cgroup, where there is one,
    // refuses such a move too).
    "sched_setaffinity",
};

struct CtxDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};

} // namespace

const char *seccomp_refused_summary() noexcept {
  return "ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, mount and friends, "
         "pivot_root, chroot, unshare, setns, clone with namespace flags (clone3: ENOSYS), "
         "bpf, perf_event_open, keyctl, add_key, request_key, kexec_*, *_module, "
         "personality, userfaultfd, io_uring_*, execve, execveat, sched_setaffinity, "
         "signals to any process but itself (kill, tgkill, tkill, rt_*sigqueueinfo, pidfd_*), "
         "socket other than AF_INET/AF_INET6 stream (all sockets where the fabric opens "
         "none after setup)";
}

bool SeccompProgram::fits(const SeccompOptions &o) const noexcept {
  return !code.empty() && pid == ::getpid() && options.allow_inet_stream == o.allow_inet_stream;
}

bool compile_seccomp(const SeccompOptions &options, SeccompProgram &out,
                     std::string &error) noexcept {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) {
    error = "seccomp_init failed";
    return false;
  }
  auto fail = [&error](const char *what, int rc) {
    error = std::string("seccomp: ") + what + ": " + std::strerror(-rc);
    return false;
  };
  int rc;
  for (const char *name : kRefused) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
      continue; // not a system call on this architecture
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
      return fail(name, rc);
  }
  // clone() with any namespace flag (one rule per flag: rules of one call
  // and action are OR-ed); clone3() passes its flags in memory, which a
  // filter cannot read, so it answers ENOSYS and glibc falls back to clone()
  // for threads and fork.
  for (uint64_t flag : {uint64_t(CLONE_NEWNS), uint64_t(CLONE_NEWUSER), uint64_t(CLONE_NEWPID),
                        uint64_t(CLONE_NEWNET), uint64_t(CLONE_NEWIPC), uint64_t(CLONE_NEWUTS),
                        uint64_t(CLONE_NEWCGROUP)})
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                               SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag))) < 0)
      return fail("clone", rc);
  if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
    return fail("clone3", rc);
  // Signals to other processes: where the executor shares the host's PID
  // namespace and its uid with other processes (shm), kill() would reach
  // them. A function may signal itself (raise, abort, pthread_kill), not
  // its children, its group or anyone else.
  const uint64_t self = static_cast<uint64_t>(::getpid());
  for (int nr :
       {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)})
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 1,
                               SCMP_A0(SCMP_CMP_NE, self))) < 0)
      return fail("signals", rc);
  for (int nr : {SCMP_SYS(tkill), SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal)})
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
      return fail("signals", rc);
  // socket(): only TCP over IPv4/IPv6, and only where the fabric needs it.
  // Rules with the same action on one call are OR-ed, so the refusal is
  // spelled out case by case: any family but the two, or (for those) any
  // type but a stream.
  if (!options.allow_inet_stream) {
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 0)) < 0)
      return fail("socket", rc);
  } else {
    // Any family but AF_INET (2) and AF_INET6 (10): libseccomp takes one
    // comparison per argument and rule, so below, between and above them.
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_LT, AF_INET))) < 0 ||
        (rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_GT, AF_INET6))) < 0)
      return fail("socket family", rc);
    for (int family = AF_INET + 1; family < AF_INET6; ++family)
      if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                                 SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)))) < 0)
        return fail("socket family", rc);
    // The type argument carries SOCK_NONBLOCK | SOCK_CLOEXEC: compare the low bits.
    if ((rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW))) < 0 ||
        (rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM))) < 0 ||
        (rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_PACKET))) < 0 ||
        (rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                               SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_SEQPACKET))) < 0)
      return fail("socket type", rc);
  }
  // libseccomp 2.5 exports the program only to a descriptor.
  int fd = ::memfd_create("rfaas-seccomp", MFD_CLOEXEC);
  if (fd < 0) {
    error = std::string("seccomp: memfd_create: ") + std::strerror(errno);
    return false;
  }
  std::vector<sock_filter> code;
  rc = seccomp_export_bpf(ctx.get(), fd);
  const off_t size = rc < 0 ? -1 : ::lseek(fd, 0, SEEK_END);
  const size_t n = size > 0 ? static_cast<size_t>(size) / sizeof(sock_filter) : 0;
  if (rc >= 0 &&
      (n == 0 || n * sizeof(sock_filter) != static_cast<size_t>(size) || n > BPF_MAXINSNS))
    rc = -EINVAL;
  if (rc >= 0) {
    code.resize(n);
    const ssize_t want = static_cast<ssize_t>(n * sizeof(sock_filter));
    if (::pread(fd, &code[0], static_cast<size_t>(want), 0) != want)
      rc = -EIO;
  }
  ::close(fd);
  if (rc < 0)
    return fail("export", rc);
  out.code = std::move(code);
  out.options = options;
  out.pid = ::getpid();
  return true;
}

bool install_seccomp(const SeccompOptions &options, std::string &error,
                     const SeccompProgram *ahead) noexcept {
  SeccompProgram now;
  if (!ahead || !ahead->fits(options)) {
    if (!compile_seccomp(options, now, error))
      return false;
    ahead = &now;
  }
  // What seccomp_load() does with TSYNC and NNP set: no_new_privs, then the
  // program on every thread at once (a thread left without the filter would
  // be a way around it for code that reaches it: they share one address
  // space).
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    error = std::string("seccomp: no_new_privs: ") + std::strerror(errno);
    return false;
  }
  sock_fprog prog;
  prog.len = static_cast<unsigned short>(ahead->code.size());
  prog.filter = const_cast<sock_filter *>(ahead->code.data());
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  if (rc != 0) {
    error = rc > 0 ? "seccomp: thread " + std::to_string(rc) + " cannot take the filter"
                   : std::string("seccomp: load: ") + std::strerror(errno);
    return false;
  }
  return true;
}

} // namespace rfaas::executor_process
