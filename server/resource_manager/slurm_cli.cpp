#include "resource_manager/slurm_cli.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

namespace rfaas::rm::slurm {

std::string CommandResult::describe(const std::string &what) const {
  std::string s = what + ": ";
  if (timed_out)
    s += "no answer within its deadline (killed)";
  else if (status < 0)
    s += "could not run";
  else
    s += "exit status " + std::to_string(status);
  std::string text = err.empty() ? out : err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  if (text.size() > 400)
    text = text.substr(0, 400) + "...";
  for (char &c : text)
    if (c == '\n')
      c = ' ';
  if (!text.empty())
    s += ": " + text;
  return s;
}

namespace {

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() { close_both(); }
  void close_both() {
    for (int &f : fd)
      if (f >= 0) {
        ::close(f);
        f = -1;
      }
  }
};

} // namespace

CommandResult run(const std::vector<std::string> &argv, std::chrono::milliseconds timeout) {
  CommandResult r;
  if (argv.empty()) {
    r.err = "no command";
    return r;
  }
  Pipe out, err, status;
  if (::pipe2(out.fd, O_CLOEXEC) != 0 || ::pipe2(err.fd, O_CLOEXEC) != 0 ||
      ::pipe2(status.fd, O_CLOEXEC) != 0) {
    r.err = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.err = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec: the parent has threads.
    ::setpgid(0, 0);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0)
      ::dup2(null, 0);
    ::dup2(out.fd[1], 1);
    ::dup2(err.fd[1], 2);
    ::execvp(args[0], args.data());
    int e = errno;
    ssize_t ignored = ::write(status.fd[1], &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid); // also from here: whichever runs first
  ::close(out.fd[1]);
  out.fd[1] = -1;
  ::close(err.fd[1]);
  err.fd[1] = -1;
  ::close(status.fd[1]);
  status.fd[1] = -1;

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<pollfd, 2> fds{pollfd{out.fd[0], POLLIN, 0}, pollfd{err.fd[0], POLLIN, 0}};
  std::array<std::string *, 2> sinks{&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        // A runaway command's output is bounded here too.
        if (sinks[i]->size() < (1u << 20))
          sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int wstatus = 0;
  if (r.timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
  } else {
    // Both pipes closed: the command is ending. Its exit is awaited up to
    // the deadline too.
    for (;;) {
      pid_t w = ::waitpid(pid, &wstatus, WNOHANG);
      if (w == pid)
        break;
      if (w < 0 && errno != EINTR)
        break;
      if (std::chrono::steady_clock::now() >= deadline) {
        r.timed_out = true;
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &wstatus, 0);
        break;
      }
      ::usleep(1000);
    }
  }
  int exec_errno = 0;
  if (::read(status.fd[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    r.err = "cannot run " + argv[0] + ": " + std::strerror(exec_errno);
    r.status = -1;
    return r;
  }
  if (r.timed_out)
    return r;
  if (WIFEXITED(wstatus))
    r.status = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus))
    r.status = 128 + WTERMSIG(wstatus);
  r.ok = r.status == 0;
  return r;
}

namespace {

bool all_digits(const std::string &s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); });
}

// Splits at commas outside brackets.
std::vector<std::string> top_level_items(const std::string &list, bool &ok) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[')
      ++depth;
    else if (c == ']')
      --depth;
    if (depth < 0 || depth > 1)
      ok = false;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0)
    ok = false;
  items.push_back(cur);
  return items;
}

} // namespace

std::optional<std::vector<std::string>> expand_hostlist(const std::string &list) {
  std::vector<std::string> out;
  if (list.empty() || list == "(null)")
    return out;
  bool ok = true;
  for (const std::string &item : top_level_items(list, ok)) {
    if (!ok || item.empty())
      return std::nullopt;
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      if (item.find(']') != std::string::npos)
        return std::nullopt;
      out.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos || item.find('[', open + 1) != std::string::npos)
      return std::nullopt;
    const std::string prefix = item.substr(0, open);
    const std::string suffix = item.substr(close + 1);
    std::stringstream ranges(item.substr(open + 1, close - open - 1));
    std::string range;
    while (std::getline(ranges, range, ',')) {
      const size_t dash = range.find('-');
      const std::string lo = range.substr(0, dash);
      const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
        return std::nullopt;
      const uint64_t a = std::stoull(lo), b = std::stoull(hi);
      if (b < a || b - a > 100'000)
        return std::nullopt;
      for (uint64_t i = a; i <= b; ++i) {
        std::string n = std::to_string(i);
        if (n.size() < lo.size())
          n.insert(0, lo.size() - n.size(), '0');
        out.push_back(prefix + n + suffix);
      }
    }
  }
  return out;
}

std::optional<uint64_t> parse_job_id(const std::string &text) {
  std::string t = text.substr(0, text.find_first_of(";\n"));
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back())))
    t.pop_back();
  if (!all_digits(t) || t.size() > 18)
    return std::nullopt;
  const uint64_t id = std::stoull(t);
  return id == 0 ? std::nullopt : std::optional<uint64_t>(id);
}

std::map<uint64_t, JobInfo> parse_squeue(const std::string &text) {
  std::map<uint64_t, JobInfo> jobs;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    for (int i = 0; i < 4; ++i) {
      const size_t bar = line.find('|', start);
      if (bar == std::string::npos)
        break;
      f.push_back(line.substr(start, bar - start));
      start = bar + 1;
    }
    f.push_back(line.substr(start)); // the reason, '|' and all
    if (f.size() < 5 || !all_digits(f[0]) || f[0].size() > 18)
      continue; // a heading, a step ("12.0"), an array element ("12_3")
    JobInfo j;
    j.job_id = std::stoull(f[0]);
    j.state = f[1];
    j.nodelist = f[2];
    j.name = f[3];
    j.reason = f[4];
    jobs[j.job_id] = j;
  }
  return jobs;
}

bool is_terminal(const std::string &state) {
  static const std::set<std::string> kEnded{
      "COMPLETING", "COMPLETED", "CANCELLED", "FAILED",        "TIMEOUT",      "NODE_FAIL",
      "PREEMPTED",  "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"};
  return kEnded.count(state) != 0;
}

bool is_running(const std::string &state) { return state == "RUNNING"; }

} // namespace rfaas::rm::slurm
