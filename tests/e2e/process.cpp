#include "process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace rfaas::e2e {

using Clock = std::chrono::steady_clock;

Process::Process(const std::vector<std::string> &argv, const std::string &stderr_path) {
  int out[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(in[0], 0);
    if (!stderr_path.empty()) {
      int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0)
        dup2(fd, 2);
    }
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(in[0]);
  out_ = out[0];
  in_ = in[1];
}

Process::~Process() {
  if (pid_ > 0)
    stop();
  if (out_ >= 0)
    close(out_);
  if (in_ >= 0)
    close(in_);
}

Process::Process(Process &&o) noexcept { *this = std::move(o); }
Process &Process::operator=(Process &&o) noexcept {
  std::swap(pid_, o.pid_);
  std::swap(out_, o.out_);
  std::swap(in_, o.in_);
  std::swap(buffered_, o.buffered_);
  return *this;
}

std::string Process::wait_for_line(const std::string &needle, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    size_t nl;
    while ((nl = buffered_.find('\n')) != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      if (line.find(needle) != std::string::npos)
        return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || out_ < 0)
      return "";
    pollfd p{out_, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return "";
    char buf[4096];
    ssize_t n = read(out_, buf, sizeof buf);
    if (n <= 0)
      return "";
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

int Process::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0)
    return 0;
  ::kill(pid_, SIGTERM);
  const Clock::time_point deadline = Clock::now() + grace;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      break;
    if (Clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    // Reaping has no fd to wait on; a short pause between checks.
    usleep(10000);
  }
  pid_ = -1;
  return status;
}

void Process::kill_now() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

namespace {
bool read_stat(pid_t pid, pid_t &ppid, char &state) {
  // Plain read(2): the process may exit between open and read, and the
  // kernel then fails the read with ESRCH, which libstdc++'s filebuf turns
  // into an exception; here it only means "not a live child".
  int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return false;
  std::string text(buf, static_cast<size_t>(n));
  // The command name may contain spaces and parentheses: parse after the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos)
    return false;
  std::istringstream rest(text.substr(close + 1));
  long pp = 0;
  rest >> state >> pp;
  ppid = static_cast<pid_t>(pp);
  return static_cast<bool>(rest);
}
} // namespace

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  DIR *d = opendir("/proc");
  if (!d)
    return out;
  while (dirent *e = readdir(d)) {
    char *end;
    long p = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || p <= 0)
      continue;
    pid_t ppid;
    char state;
    if (read_stat(static_cast<pid_t>(p), ppid, state) && ppid == pid)
      out.push_back(static_cast<pid_t>(p));
  }
  closedir(d);
  return out;
}

std::vector<pid_t> descendants_of(pid_t pid) {
  std::vector<pid_t> out, frontier{pid};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    for (pid_t c : children_of(p)) {
      out.push_back(c);
      frontier.push_back(c);
    }
  }
  return out;
}

std::string process_name(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

std::vector<pid_t> busy_descendants_of(pid_t pid) {
  std::vector<pid_t> out;
  for (pid_t p : descendants_of(pid))
    if (process_name(p) != kSpareExecutorName && process_name(p) != kSandboxWaiterName)
      out.push_back(p);
  return out;
}

bool alive(pid_t pid) {
  pid_t ppid;
  char state = 0;
  return read_stat(pid, ppid, state) && state != 'Z' && state != 'X';
}

size_t private_resident_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0, shared = 0;
  f >> size >> resident >> shared;
  return (resident - std::min(resident, shared)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

size_t heap_in_use_bytes() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

} // namespace rfaas::e2e
