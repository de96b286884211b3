#include "rm_fleet_host.hpp"

#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "executor_manager/rm_link.hpp"

namespace rfaas::fleet {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;

namespace {

size_t count_fds(pid_t pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR *d = opendir(dir.c_str());
  if (!d)
    return 0;
  size_t n = 0;
  while (dirent *e = readdir(d))
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

} // namespace

ProcSample sample(pid_t pid) {
  ProcSample s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line))
    throw std::runtime_error("process " + std::to_string(pid) + " is gone");
  // Fields after the command (which may hold spaces) start after the last ')'.
  std::istringstream in(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14)
      utime = std::stoull(field);
    if (i == 15)
      stime = std::stoull(field);
  }
  s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0)
      s.rss_kib = std::stoull(line.substr(6));
  s.fds = count_fds(pid);
  return s;
}

bool write_full(int fd, const void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, static_cast<const char *>(buf) + done, len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool told_to_stop(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

/// One host: `nodes` simulated executor managers in this process until the
/// parent says stop, then their figures on `result_fd`.
void run_host(const FleetSetup &s, const std::vector<NodeSpec> &nodes, int stop_fd, int result_fd) {
  HostResult r;
  ProcSample before = sample(getpid());
  rdmalib::Fabric fabric(s.device);
  r.rss_kib_before = before.rss_kib;
  r.fds_before = before.fds;
  std::vector<std::unique_ptr<rfaas::manager::RmLink>> links;
  links.reserve(nodes.size());
  const rdmalib::Address rm = rdmalib::Address::parse(s.rm_address);
  for (size_t i = 0; i < nodes.size(); ++i) {
    rfaas::manager::RmLinkOptions o;
    o.resource_manager = rm;
    o.node = nodes[i].name;
    // Where clients would reach it: nobody does, the fleet only leases.
    o.address = "127.0.0.1:" + std::to_string(20000 + i % 40000);
    o.cores = s.cores;
    o.memory_mib = s.memory_mib;
    std::copy(nodes[i].secret.begin(), nodes[i].secret.end(), o.secret.begin());
    o.connect_timeout = s.connect_timeout;
    links.push_back(std::make_unique<rfaas::manager::RmLink>(fabric, o));
  }
  std::vector<proto::LeaseEnded> ended;
  // A registered link with no report to send is polled every kPollEvery (a
  // slice of the links per pass, in turn); one still registering, or with
  // reports queued (answers to lease-ended notices), at every pass. Polling
  // every link every pass cost four hosts of 2,500 links most of a core at
  // 10,000 nodes, taken from the resource manager and the clients being
  // measured (a real fleet's nodes poll on their own machines). Heartbeats
  // and notices are read at most kPollEvery late.
  constexpr auto kPassEvery = std::chrono::milliseconds(5);
  constexpr auto kPollEvery = std::chrono::milliseconds(50);
  const size_t slice = std::max<size_t>(1, links.size() * static_cast<size_t>(kPassEvery.count()) /
                                               kPollEvery.count());
  size_t next = 0;
  while (!told_to_stop(stop_fd)) {
    const auto pass = Clock::now();
    const size_t from = next, to = next + slice;
    next = links.empty() ? 0 : to % links.size();
    for (size_t i = 0; i < links.size(); ++i) {
      auto &l = links[i];
      const bool in_turn = (i >= from && i < to) || i + links.size() < to;
      if (!in_turn && l->registered() && l->queued() == 0)
        continue;
      ended.clear();
      l->poll(ended, 0);
      for (const proto::LeaseEnded &e : ended) {
        // What a manager reports when a lease's executors end (here: none ran).
        proto::AccountingReport rep;
        rep.lease_id = e.lease_id;
        rep.memory_mib = 64;
        rep.final = 1;
        l->report(rep);
        ++r.notices;
        ++r.reports;
      }
    }
    // A pass every few milliseconds: heartbeats are due every second, and a
    // spinning host would take the CPU the resource manager is measured on.
    auto spent = Clock::now() - pass;
    if (spent < kPassEvery)
      std::this_thread::sleep_for(kPassEvery - spent);
  }
  r.links = static_cast<uint32_t>(links.size());
  for (auto &l : links)
    r.registered += l->registered();
  ProcSample after = sample(getpid());
  r.rss_kib = after.rss_kib;
  r.fds = after.fds;
  // Leave without goodbyes or teardown: closing a tcp;ofi_rxm fabric took
  // this process tens of seconds, during which its links were silent and
  // their nodes went down one by one. The measurement is over; the kernel
  // closes the sockets.
  const bool sent = write_full(result_fd, &r, sizeof r);
  _exit(sent ? 0 : 1);
}

} // namespace rfaas::fleet
