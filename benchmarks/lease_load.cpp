#include "lease_load.hpp"

#include "pipe_io.hpp"
#include "stats.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace rfaas::bench {

namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median_of(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return bench_stats::median_sorted(v);
}

/// What one client reports to the parent (a fixed-size record on a pipe).
struct ClientResult {
  uint64_t granted = 0;
  uint64_t refused = 0;
  uint64_t errors = 0;
  double seconds = 0;
  double lease_median_us = 0;
  char error[160] = {};
};

/// The body of one client (a child process). Never returns.
[[noreturn]] void client_process(const LeaseLoad &s, int index, int ready_fd, int go_fd,
                                 int result_fd, double seconds) {
  ClientResult r;
  try {
    rfaas::resource_manager rm(s.device, s.address, "bench-" + std::to_string(index),
                               patient_timeouts());
    char one = 'r';
    if (write(ready_fd, &one, 1) != 1)
      _exit(1);
    // The parent closes the go pipe: every client starts at the same moment.
    char c;
    while (read(go_fd, &c, 1) > 0) {
    }
    std::vector<double> lease_us;
    lease_us.reserve(1 << 16);
    const Clock::time_point start = Clock::now();
    const auto end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    Clock::time_point now = start;
    while (now < end) {
      try {
        Clock::time_point t0 = Clock::now();
        rfaas::lease l = rm.lease(s.cores, s.memory_mib, s.duration);
        Clock::time_point t1 = Clock::now();
        if (lease_us.size() < lease_us.capacity())
          lease_us.push_back(us_between(t0, t1));
        rm.release(l);
        ++r.granted;
      } catch (const rfaas::Error &e) {
        if (e.code() == rfaas::status::resources_unavailable) {
          ++r.refused;
        } else {
          ++r.errors;
          if (!r.error[0])
            std::snprintf(r.error, sizeof r.error, "%s", e.what());
          if (e.code() == rfaas::status::closed || e.code() == rfaas::status::network_error)
            break; // the connection is gone: nothing more to measure
        }
      }
      now = Clock::now();
    }
    r.seconds = us_between(start, now) / 1e6;
    r.lease_median_us = median_of(std::move(lease_us));
  } catch (const std::exception &e) {
    ++r.errors;
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  }
  ssize_t n = write(result_fd, &r, sizeof r);
  _exit(n == static_cast<ssize_t>(sizeof r) ? 0 : 1);
}

} // namespace

rfaas::timeouts patient_timeouts() {
  rfaas::timeouts t;
  t.connect = std::chrono::seconds(30);
  return t;
}

LeaseLoadResult
run_lease_load(const LeaseLoad &s, int clients, double seconds,
               const std::function<void(std::chrono::steady_clock::time_point)> &alongside) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<pid_t> pids;
  std::vector<int> results;
  const pid_t parent = getpid();
  for (int i = 0; i < clients; ++i) {
    int res[2];
    if (pipe(res) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      close(ready[0]);
      close(go[1]);
      close(res[0]);
      for (int fd : results)
        close(fd);
      client_process(s, i, ready[1], go[0], res[1], seconds);
    }
    close(res[1]);
    results.push_back(res[0]);
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  LeaseLoadResult out;
  out.clients = clients;
  // Every client connected (or died trying) before the clock starts.
  char c;
  while (out.connected < clients && read_full(ready[0], &c, 1, 60000))
    ++out.connected;
  close(ready[0]);
  close(go[1]); // go
  if (alongside)
    alongside(Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  std::vector<ClientResult> rs(static_cast<size_t>(clients));
  const int wait_ms = static_cast<int>(seconds * 1000) + 60000;
  for (size_t i = 0; i < static_cast<size_t>(clients); ++i) {
    if (!read_full(results[i], &rs[i], sizeof(ClientResult), wait_ms)) {
      ++out.missing;
      kill(pids[i], SIGKILL);
    }
    close(results[i]);
  }
  for (pid_t pid : pids)
    waitpid(pid, nullptr, 0);

  std::vector<double> medians;
  for (const ClientResult &r : rs) {
    out.granted += r.granted;
    out.refused += r.refused;
    out.errors += r.errors;
    out.seconds = std::max(out.seconds, r.seconds);
    if (r.granted)
      medians.push_back(r.lease_median_us);
    if (r.error[0])
      out.messages.emplace_back(r.error);
  }
  out.lease_median_us = median_of(std::move(medians));
  return out;
}

} // namespace rfaas::bench
