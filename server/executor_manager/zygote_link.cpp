#include "executor_manager/zygote_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/fd_io.hpp"
#include "common/hex.hpp"

namespace rfaas::manager {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

ZygoteLink::ZygoteLink(std::string executor, rdmalib::DeviceConfig device, bool fork_from_zygote,
                       server::SandboxConfig sandbox, uint32_t pool, Handler on_event)
    : executor_(std::move(executor)), device_(std::move(device)),
      fork_from_zygote_(fork_from_zygote), sandbox_(std::move(sandbox)), pool_(pool),
      on_event_(std::move(on_event)) {}

ZygoteLink::~ZygoteLink() { stop(milliseconds(2000)); }

void ZygoteLink::start(milliseconds ready_within) {
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  std::string dev = rdmalib::DeviceDatabase({device_}).to_json();
  std::string hex = server::to_hex(dev.data(), dev.size());
  std::string box = sandbox_.serialize();
  std::string box_hex = server::to_hex(box.data(), box.size());
  std::string pool = std::to_string(fork_from_zygote_ ? pool_ : 0);
  std::string link_host = link_host_, link_port = std::to_string(link_port_),
              link_ms = std::to_string(link_connect_ms_);
  // A pooled executor has as long to report ready as an allocation's
  // executor has to start.
  std::string start_ms = std::to_string(ready_within.count());
  pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    const char *mode = fork_from_zygote_ ? nullptr : "--exec-each";
    std::vector<const char *> argv = {"executor",   "--zygote",      "--device", hex.c_str(),
                                      "--sandbox",  box_hex.c_str(), "--pool",   pool.c_str(),
                                      "--start-ms", start_ms.c_str()};
    if (link_port_ != 0) {
      argv.insert(argv.end(), {"--manager-host", link_host.c_str(), "--manager-port",
                               link_port.c_str(), "--connect-ms", link_ms.c_str()});
    }
    if (mode)
      argv.push_back(mode);
    argv.push_back(nullptr);
    execv(executor_.c_str(), const_cast<char *const *>(argv.data()));
    std::fprintf(stderr, "executor_manager: cannot execute %s: %s\n", executor_.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  pid_ = pid;
  in_ = to_child[1];
  out_ = from_child[0];
  buf_.clear();
  ready_ = false;
  refused_.clear();
  // Wait for the zygote to have loaded the backend, so that the first
  // allocation's cold start is the one every later allocation sees.
  auto deadline = Clock::now() + ready_within;
  while (!ready_ && refused_.empty() && pid_ > 0 && Clock::now() < deadline)
    read(100);
  if (!refused_.empty())
    throw std::runtime_error("the executor sandbox cannot start: " + refused_);
  if (!ready_)
    throw std::runtime_error("the executor zygote (" + executor_ +
                             " --zygote) did not become ready within " +
                             std::to_string(ready_within.count()) + " ms");
  spdlog::info("zygote {} ready ({}); executor sandbox: {}", pid_,
               fork_from_zygote_ ? "forks pre-initialised executors" : "executes each executor",
               sandbox_line_);
}

void ZygoteLink::stop(milliseconds grace) {
  if (pid_ <= 0)
    return;
  // Closing its command pipe makes the zygote kill and reap its executors.
  if (in_ >= 0)
    ::close(in_);
  in_ = -1;
  int status;
  auto deadline = Clock::now() + grace;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    read(20);
  }
  if (out_ >= 0)
    ::close(out_);
  out_ = -1;
  pid_ = -1;
}

bool ZygoteLink::read(int timeout_ms) {
  if (out_ < 0)
    return false;
  pollfd p{out_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0)
    return false;
  char buf[4096];
  ssize_t n = ::read(out_, buf, sizeof buf);
  if (n < 0 && errno == EINTR)
    return false;
  if (n <= 0) {
    if (in_ < 0)
      return true; // stop() closed its commands: this end of file is expected
    // The zygote died: its executors died with it (PR_SET_PDEATHSIG).
    int status;
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    ::close(out_);
    ::close(in_);
    out_ = in_ = -1;
    ZygoteEvent e;
    e.kind = ZygoteEvent::Kind::Died;
    e.pid = pid_;
    pid_ = -1;
    on_event_(e);
    return true;
  }
  buf_.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = buf_.find('\n')) != std::string::npos) {
    std::string line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    event_line(line);
  }
  return true;
}

void ZygoteLink::event_line(const std::string &line) {
  std::istringstream in(line);
  std::string what;
  in >> what;
  if (what == "refused") {
    // The sandbox cannot work as configured: start() says why and fails.
    std::getline(in >> std::ws, refused_);
    return;
  }
  if (what == "ready") {
    ready_ = true;
    std::getline(in >> std::ws, sandbox_line_);
    return;
  }
  ZygoteEvent e;
  in >> e.allocation;
  if (what == "started") {
    e.kind = ZygoteEvent::Kind::Started;
    std::string pooled;
    in >> e.pid >> pooled;
    e.pooled = pooled == "pooled";
  } else if (what == "failed") {
    e.kind = ZygoteEvent::Kind::Failed;
    std::getline(in, e.reason);
    if (!e.reason.empty() && e.reason[0] == ' ')
      e.reason.erase(0, 1);
  } else if (what == "exited") {
    e.kind = ZygoteEvent::Kind::Exited;
    in >> e.pid >> e.code;
  } else if (what == "pooled" || what == "unpooled") {
    // "pooled <pid> <secret>", "unpooled <pid>": no allocation in them.
    e.kind = what == "pooled" ? ZygoteEvent::Kind::Pooled : ZygoteEvent::Kind::Unpooled;
    e.pid = static_cast<pid_t>(e.allocation);
    e.allocation = 0;
    if (e.kind == ZygoteEvent::Kind::Pooled) {
      std::string hex;
      in >> hex;
      if (!server::from_hex(hex, e.secret.bytes, sizeof e.secret.bytes)) {
        spdlog::warn("zygote: a pooled executor's line without a secret");
        return;
      }
    }
  } else {
    spdlog::warn("zygote said something unexpected: \"{}\"", line);
    return;
  }
  on_event_(e);
}

bool ZygoteLink::spawn(const std::string &spec_text) {
  if (in_ < 0)
    return false;
  return server::write_all(in_, "spawn " + std::to_string(spec_text.size()) + "\n" + spec_text);
}

void ZygoteLink::signal(uint64_t allocation, int sig) {
  if (in_ >= 0)
    server::write_all(in_,
                      "signal " + std::to_string(allocation) + " " + std::to_string(sig) + "\n");
}

void ZygoteLink::unpool(pid_t pid, const std::string &why) {
  std::string line = why;
  std::replace(line.begin(), line.end(), '\n', ' ');
  if (in_ >= 0)
    server::write_all(in_, "unpool " + std::to_string(pid) + " " + line + "\n");
}

} // namespace rfaas::manager
