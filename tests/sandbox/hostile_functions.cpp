// A library of hostile functions for the sandbox's escape suite
// (escape_test.sh): each tries one thing a tenant must not be able to do on
// a node, and writes one line: "ok <what it got>" when the attempt worked,
// "refused <errno> <text>" when it did not. The input is the attempt's
// target as text (a path, a pid, a core, a port, a size).
//
// Nothing here is harmful when it works: signals are SIGURG (ignored by
// default), a ptrace attach is detached at once, files written are named
// rfaas-escape-*, forked children exit by themselves.
#include <rfaas/function.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string arg(const void *in, uint32_t size) {
  return std::string(static_cast<const char *>(in), size);
}

uint32_t put(void *out, uint32_t cap, const std::string &s) {
  uint32_t n = static_cast<uint32_t>(s.size() < cap ? s.size() : cap);
  std::memcpy(out, s.data(), n);
  return n;
}

uint32_t ok(void *out, uint32_t cap, const std::string &what) {
  return put(out, cap, "ok " + what);
}

uint32_t refused(void *out, uint32_t cap, int err) {
  return put(out, cap, "refused " + std::to_string(err) + " " + std::strerror(err));
}

pid_t pid_of(const void *in, uint32_t size) {
  return static_cast<pid_t>(std::atol(arg(in, size).c_str()));
}

} // namespace

/// Read a file (the node secret, the manager's configuration, /etc/shadow).
RFAAS_FUNCTION(escape_read_file) {
  int fd = open(arg(in, in_size).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return refused(out, out_capacity, errno);
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  if (n < 0)
    return refused(out, out_capacity, e);
  return ok(out, out_capacity, "read " + std::to_string(n) + " bytes");
}

/// List /proc and look for the given pid among its entries.
RFAAS_FUNCTION(escape_list_proc) {
  const std::string want = arg(in, in_size);
  DIR *d = opendir("/proc");
  if (!d)
    return refused(out, out_capacity, errno);
  int pids = 0;
  bool seen = false;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') {
      ++pids;
      seen = seen || want == e->d_name;
    }
  }
  closedir(d);
  if (!seen)
    return refused(out, out_capacity, ESRCH);
  return ok(out, out_capacity, "pid " + want + " among " + std::to_string(pids) + " processes");
}

/// Send SIGURG (ignored by default) to a process.
RFAAS_FUNCTION(escape_signal) {
  if (kill(pid_of(in, in_size), SIGURG) != 0)
    return refused(out, out_capacity, errno);
  return ok(out, out_capacity, "signalled");
}

/// Attach to a process with ptrace (and detach at once).
RFAAS_FUNCTION(escape_ptrace) {
  pid_t pid = pid_of(in, in_size);
  if (ptrace(PTRACE_ATTACH, pid, nullptr, nullptr) != 0)
    return refused(out, out_capacity, errno);
  int status;
  waitpid(pid, &status, __WALL);
  ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  return ok(out, out_capacity, "attached");
}

/// Read another process's memory with process_vm_readv. EFAULT means the
/// kernel allowed the access and only the (guessed) address was wrong.
RFAAS_FUNCTION(escape_process_vm_readv) {
  char buf[8];
  iovec local{buf, sizeof buf};
  iovec remote{reinterpret_cast<void *>(0x400000), sizeof buf};
  ssize_t n = process_vm_readv(pid_of(in, in_size), &local, 1, &remote, 1, 0);
  if (n >= 0 || errno == EFAULT)
    return ok(out, out_capacity, n >= 0 ? "read" : "allowed (EFAULT at the guessed address)");
  return refused(out, out_capacity, errno);
}

/// Open another process's memory through /proc.
RFAAS_FUNCTION(escape_proc_mem) {
  std::string path = "/proc/" + std::to_string(pid_of(in, in_size)) + "/mem";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return refused(out, out_capacity, errno);
  close(fd);
  return ok(out, out_capacity, "opened " + path);
}

/// Move this thread to a core the lease does not hold.
RFAAS_FUNCTION(escape_setaffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(std::atoi(arg(in, in_size).c_str()), &set);
  cpu_set_t before;
  sched_getaffinity(0, sizeof before, &before);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    return refused(out, out_capacity, errno);
  sched_setaffinity(0, sizeof before, &before);
  return ok(out, out_capacity, "moved");
}

/// Allocate and touch the given number of MiB.
RFAAS_FUNCTION(escape_allocate) {
  size_t bytes = static_cast<size_t>(std::atol(arg(in, in_size).c_str())) << 20;
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return refused(out, out_capacity, errno);
  for (size_t off = 0; off < bytes; off += 4096)
    static_cast<char *>(p)[off] = 1;
  munmap(p, bytes);
  return ok(out, out_capacity, "touched " + arg(in, in_size) + " MiB");
}

/// Fork up to the given number of children (each exits after a second).
RFAAS_FUNCTION(escape_fork_many) {
  long want = std::atol(arg(in, in_size).c_str());
  long made = 0;
  int err = 0;
  for (; made < want; ++made) {
    pid_t c = fork();
    if (c == 0) {
      sleep(1);
      _exit(0);
    }
    if (c < 0) {
      err = errno;
      break;
    }
  }
  while (waitpid(-1, nullptr, 0) > 0) {
  }
  if (made < want)
    return put(out, out_capacity,
               "refused " + std::to_string(err) + " " + std::strerror(err) + " after " +
                   std::to_string(made) + " children");
  return ok(out, out_capacity, std::to_string(made) + " children");
}

/// Create a file at the given path (outside /tmp).
RFAAS_FUNCTION(escape_write_file) {
  int fd = open(arg(in, in_size).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return refused(out, out_capacity, errno);
  ssize_t n = write(fd, "rfaas", 5);
  close(fd);
  return ok(out, out_capacity, "wrote " + std::to_string(n) + " bytes");
}

/// Run /bin/sh (in a child, so that a success does not replace the executor).
RFAAS_FUNCTION(escape_exec_shell) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0)
    return refused(out, out_capacity, errno);
  pid_t c = fork();
  if (c < 0)
    return refused(out, out_capacity, errno);
  if (c == 0) {
    execl("/bin/sh", "sh", "-c", "exit 42", static_cast<char *>(nullptr));
    int e = errno;
    ssize_t ignored = write(pipefd[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(pipefd[1]);
  int e = 0;
  ssize_t n = read(pipefd[0], &e, sizeof e);
  close(pipefd[0]);
  int status = 0;
  waitpid(c, &status, 0);
  if (n == sizeof e)
    return refused(out, out_capacity, e);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 42)
    return ok(out, out_capacity, "/bin/sh ran");
  return put(out, out_capacity, "refused 0 child ended with status " + std::to_string(status));
}

/// Open a TCP connection to 127.0.0.1:<port>.
RFAAS_FUNCTION(escape_connect) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return refused(out, out_capacity, errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(arg(in, in_size).c_str())));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  int e = errno;
  close(fd);
  if (rc != 0)
    return refused(out, out_capacity, e);
  return ok(out, out_capacity, "connected");
}

/// Open a raw socket (any traffic of the host's network namespace).
RFAAS_FUNCTION(escape_raw_socket) {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return refused(out, out_capacity, errno);
  close(fd);
  return ok(out, out_capacity, "raw socket");
}

/// Leave a daemon behind: it renames itself and sleeps for the given seconds.
RFAAS_FUNCTION(escape_daemon) {
  unsigned seconds = static_cast<unsigned>(std::atoi(arg(in, in_size).c_str()));
  pid_t c = fork();
  if (c < 0)
    return refused(out, out_capacity, errno);
  if (c == 0) {
    setsid();
    if (fork() == 0) {
      prctl(PR_SET_NAME, "escape-daemon");
      sleep(seconds);
      _exit(0);
    }
    _exit(0);
  }
  waitpid(c, nullptr, 0);
  return ok(out, out_capacity, "daemon started");
}

/// Who the executor runs as: "uid U gid G" (the lease owner test,
/// owner_test.sh).
RFAAS_FUNCTION(identity) {
  (void)in;
  (void)in_size;
  return put(out, out_capacity,
             "uid " + std::to_string(::getuid()) + " gid " + std::to_string(::getgid()));
}
