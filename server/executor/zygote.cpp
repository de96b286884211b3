#include "executor/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <sstream>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "common/fd_io.hpp"
#include "common/launch_spec.hpp"
#include "executor/executor.hpp"

namespace rfaas::executor_process {

using rfaas::server::write_all;

namespace {

class Zygote {
public:
  Zygote(bool exec_each, std::string self) : exec_each_(exec_each), self_(std::move(self)) {}

  int run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old_mask_);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
      spdlog::error("zygote: signalfd: {}", std::strerror(errno));
      return 1;
    }
    emit("ready");
    std::string in;
    bool open = true;
    while (open || !children_.empty()) {
      pollfd p[2] = {{sfd, POLLIN, 0}, {open ? 0 : -1, POLLIN, 0}};
      int rc = ::poll(p, 2, 1000);
      if (rc < 0 && errno != EINTR)
        break;
      if (p[0].revents & POLLIN) {
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) > 0) {
        }
      }
      reap();
      if (open && (p[1].revents & (POLLIN | POLLHUP))) {
        char buf[65536];
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
          // The manager is gone or ends: take the executors down with us.
          open = false;
          for (auto &c : children_)
            ::kill(c.first, SIGKILL);
        } else if (n > 0) {
          in.append(buf, static_cast<size_t>(n));
          handle(in);
        }
      }
    }
    return 0;
  }

private:
  void emit(const std::string &line) {
    if (!write_all(1, line + "\n"))
      spdlog::warn("zygote: cannot report \"{}\" to the manager", line);
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0)
        return;
      auto it = children_.find(pid);
      uint64_t id = it == children_.end() ? 0 : it->second;
      if (it != children_.end())
        children_.erase(it);
      long code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      emit("exited " + std::to_string(id) + " " + std::to_string(pid) + " " + std::to_string(code));
    }
  }

  /// Consume complete commands from `in`.
  void handle(std::string &in) {
    for (;;) {
      size_t nl = in.find('\n');
      if (nl == std::string::npos)
        return;
      std::istringstream line(in.substr(0, nl));
      std::string cmd;
      line >> cmd;
      if (cmd == "spawn") {
        size_t bytes = 0;
        line >> bytes;
        if (in.size() < nl + 1 + bytes)
          return; // wait for the rest of the spec
        std::string text = in.substr(nl + 1, bytes);
        in.erase(0, nl + 1 + bytes);
        spawn(text);
      } else if (cmd == "signal") {
        uint64_t id = 0;
        int sig = 0;
        line >> id >> sig;
        in.erase(0, nl + 1);
        for (auto &c : children_)
          if (c.second == id)
            ::kill(c.first, sig);
      } else {
        in.erase(0, nl + 1);
        spdlog::warn("zygote: unknown command \"{}\"", cmd);
      }
    }
  }

  void spawn(const std::string &text) {
    server::LaunchSpec spec;
    try {
      spec = server::LaunchSpec::parse(text);
    } catch (const std::exception &e) {
      emit(std::string("failed 0 ") + e.what());
      return;
    }
    int memfd = -1;
    if (exec_each_) {
      memfd = memfd_create("rfaas-launch-spec", 0);
      if (memfd < 0 || !write_all(memfd, text) || ::lseek(memfd, 0, SEEK_SET) != 0) {
        emit("failed " + std::to_string(spec.allocation_id) + " memfd: " + std::strerror(errno));
        if (memfd >= 0)
          ::close(memfd);
        return;
      }
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      emit("failed " + std::to_string(spec.allocation_id) + " fork: " + std::strerror(errno));
      if (memfd >= 0)
        ::close(memfd);
      return;
    }
    if (pid == 0) {
      // Executor: dies with the zygote (and so with the manager).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      signal(SIGCHLD, SIG_DFL);
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) {
        ::dup2(devnull, 0);
        ::close(devnull);
      }
      ::dup2(2, 1); // stdout is the manager's event pipe
      if (exec_each_) {
        std::string fd = std::to_string(memfd);
        execl(self_.c_str(), "executor", "--spec-fd", fd.c_str(), static_cast<char *>(nullptr));
        spdlog::error("zygote: exec {}: {}", self_, std::strerror(errno));
        _exit(127);
      }
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      _exit(run_executor(spec));
    }
    if (memfd >= 0)
      ::close(memfd);
    children_[pid] = spec.allocation_id;
    emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid));
  }

  bool exec_each_;
  std::string self_;
  sigset_t old_mask_;
  std::map<pid_t, uint64_t> children_;
};

} // namespace

int run_zygote(const rdmalib::DeviceConfig &warm_device, bool exec_each,
               const std::string &self_exe) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1)
    return 1; // the manager died before we armed the death signal
  signal(SIGPIPE, SIG_IGN);
  if (!exec_each) {
    // Load and initialise the backend and its providers once, here, so forked
    // executors only open their own fabric and endpoints; nothing stays open
    // (a child must not share a parent's device, endpoints or queues).
    try {
      rdmalib::Fabric::preload(warm_device);
    } catch (const std::exception &e) {
      spdlog::warn("zygote: warming the fabric failed (executors will open it cold): {}", e.what());
    }
  }
  return Zygote(exec_each, self_exe).run();
}

int run_from_spec_fd(int fd) {
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  try {
    return run_executor(server::LaunchSpec::parse(text));
  } catch (const std::exception &e) {
    spdlog::error("executor: {}", e.what());
    return ExitSetupFailed;
  }
}

} // namespace rfaas::executor_process
