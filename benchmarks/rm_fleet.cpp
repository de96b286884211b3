// rm_fleet: one real resource manager against a simulated fleet of N
// executor managers and M leasing clients.
//
//   rm_fleet --device lo-rxm --resource-manager 127.0.0.1:PORT --rest-port P --token-file F
//            --rm-pid PID --database rm.sqlite --nodes 1000 --hosts 4 --clients 4
//
// The simulated managers are the executor manager's own resource-manager link
// (server/executor_manager/rm_link.cpp) with nothing behind it: they register
// with a MAC over their node secret, send heartbeats at the period the
// resource manager asks, take lease-ended notices and answer each with a
// final accounting report, as a real manager does when its executors end.
// Many links share one process (a "host"): over a reliable-datagram provider
// they share the process's one endpoint; over a connected one each link is an
// endpoint of its own, as it is between real nodes.
//
// Phases, each measured on the resource manager's process (/proc/PID):
//   add:        N nodes added over REST (POST /nodes with a fresh secret each);
//   register:   the hosts connect every link; done when /metrics counts N up;
//   heartbeats: --idle-seconds with heartbeats only: the resource manager's
//               CPU per second, per heartbeat, its RSS and descriptors;
//   leases:     --seconds of M client processes (librfaas) leasing and
//               releasing one core at --rate each (0: as fast as they can)
//               while a thread times GET /nodes and GET /metrics;
//   settle:     until the resource manager stored a final accounting record
//               for every lease (GET /accounting), then the hosts stop and
//               count what their links saw.
// One JSON object is printed on stdout (one line; --json appends it to a file).
//
// Lease churn is real but short: the database growth per lease is measured
// and the size after an hour at the measured rate, and at the retention
// limit, are extrapolated from it (the resource manager's clock is the wall
// clock; nothing here fakes time).
#include <rfaas/rfaas.hpp>

#include "http_client.hpp"
#include "pipe_io.hpp"
#include "rm_fleet_host.hpp"
#include "stats.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli.hpp"
#include "options.hpp"

namespace {

using namespace rfaas::fleet;
using rfaas::bench::read_full;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t file_size(const std::string &path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

/// The database with its write-ahead log (where recent commits live).
uint64_t database_bytes(const std::string &path) {
  return file_size(path) + file_size(path + "-wal");
}

/// REST calls of the fleet (a connection each, tools/http): 10,000 nodes on a
/// loaded host answer slowly.
constexpr std::chrono::seconds kRestTimeout{30};

/// One gauge's value from the Prometheus text, -1 when absent.
double metric_value(const std::string &text, const std::string &name) {
  size_t at = 0;
  while ((at = text.find(name, at)) != std::string::npos) {
    bool line_start = at == 0 || text[at - 1] == '\n';
    size_t after = at + name.size();
    if (line_start && after < text.size() && text[after] == ' ')
      return std::strtod(text.c_str() + after + 1, nullptr);
    at = after;
  }
  return -1;
}

std::string hex(const uint8_t *p, size_t n) {
  static const char *digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// ---- pipes between the parent and its children ------------------------------------

struct Child {
  pid_t pid = -1;
  int stop = -1;   ///< write end: closing it stops the child
  int result = -1; ///< read end: the child's result
};

/// The parent's ends of its children's pipes. A child closes those it
/// inherited: holding an earlier child's stop end, it kept that child from
/// seeing its stop while it itself waited to write a result the parent had
/// not come to read yet (two clients with over 64 KiB of samples each hung
/// for the whole read timeout).
std::vector<int> &parent_ends() {
  static std::vector<int> ends;
  return ends;
}

/// Closes a parent's end of a child's pipe.
void close_end(int &fd) {
  auto &ends = parent_ends();
  ends.erase(std::remove(ends.begin(), ends.end(), fd), ends.end());
  close(fd);
  fd = -1;
}

/// Forks a child that runs `body(stop_fd, result_fd)` and exits; it dies with
/// the parent.
template <class F> Child spawn(F body) {
  int stop[2], result[2];
  if (pipe2(stop, O_CLOEXEC) != 0 || pipe2(result, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    close(stop[1]);
    close(result[0]);
    for (int fd : parent_ends())
      close(fd);
    parent_ends().clear();
    int rc = 1;
    try {
      rc = body(stop[0], result[1]);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "rm_fleet: child %d: %s\n", getpid(), e.what());
    }
    _exit(rc);
  }
  close(stop[0]);
  close(result[1]);
  parent_ends().push_back(stop[1]);
  parent_ends().push_back(result[0]);
  return Child{pid, stop[1], result[0]};
}

// ---- the leasing clients -------------------------------------------------------

struct ClientHeader {
  uint64_t granted = 0;
  uint64_t refused = 0;
  uint64_t errors = 0;
  double seconds = 0;
  uint32_t samples = 0;
  char error[160] = {};
};

int run_client(const FleetSetup &s, int index, double rate, int stop_fd, int result_fd,
               int ready_fd) {
  ClientHeader h;
  std::vector<double> lease_us;
  lease_us.reserve(1 << 18);
  try {
    rfaas::timeouts t;
    t.connect = std::chrono::seconds(60);
    rfaas::resource_manager rm(s.device, s.rm_address, "fleet-client-" + std::to_string(index), t);
    char one = 'r';
    if (!write_full(ready_fd, &one, 1))
      return 1;
    close(ready_fd);
    const auto start = Clock::now();
    const auto period =
        rate > 0 ? std::chrono::duration<double>(1.0 / rate) : std::chrono::duration<double>(0);
    auto next = start;
    while (!told_to_stop(stop_fd)) {
      if (rate > 0) {
        next += std::chrono::duration_cast<Clock::duration>(period);
        std::this_thread::sleep_until(next);
      }
      try {
        auto t0 = Clock::now();
        rfaas::lease l = rm.lease(1, 64, std::chrono::seconds(60));
        auto t1 = Clock::now();
        if (lease_us.size() < lease_us.capacity())
          lease_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        rm.release(l);
        ++h.granted;
      } catch (const rfaas::Error &e) {
        if (e.code() == rfaas::status::resources_unavailable) {
          ++h.refused;
        } else {
          ++h.errors;
          if (!h.error[0])
            std::snprintf(h.error, sizeof h.error, "%s", e.what());
          if (e.code() == rfaas::status::closed || e.code() == rfaas::status::network_error)
            break;
        }
      }
    }
    h.seconds = seconds_since(start);
  } catch (const std::exception &e) {
    ++h.errors;
    std::snprintf(h.error, sizeof h.error, "%s", e.what());
    char zero = 'x';
    (void)!write(ready_fd, &zero, 1);
  }
  h.samples = static_cast<uint32_t>(lease_us.size());
  if (!write_full(result_fd, &h, sizeof h))
    return 1;
  return write_full(result_fd, lease_us.data(), lease_us.size() * sizeof(double)) ? 0 : 1;
}

// ---- REST latency while the fleet runs ------------------------------------------

struct RestTimes {
  /// GET /nodes (the whole table), GET /nodes?limit=100 (an operator's
  /// page), GET /nodes/{name} (one node) and GET /metrics.
  std::vector<double> nodes_ms, page_ms, node_ms, metrics_ms;
  uint64_t errors = 0;
};

void time_rest(uint16_t port, const std::string &token, uint32_t every_ms, const std::string &node,
               const std::atomic<bool> &stop, RestTimes &out) {
  const std::pair<std::string, std::vector<double> *> probes[] = {
      {"/nodes", &out.nodes_ms},
      {"/nodes?limit=100", &out.page_ms},
      {"/nodes/" + node, &out.node_ms},
      {"/metrics", &out.metrics_ms}};
  while (!stop.load()) {
    for (const auto &[path, times] : probes) {
      auto t0 = Clock::now();
      try {
        rfaas::http::Response a = rfaas::http::request(port, "GET", path, "", token, kRestTimeout);
        if (a.status != 200)
          ++out.errors;
      } catch (const std::exception &) {
        ++out.errors;
      }
      times->push_back(seconds_since(t0) * 1e3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(every_ms));
  }
}

// ---- the run -----------------------------------------------------------------

struct Run {
  FleetSetup fleet;
  uint32_t nodes = 100;
  uint32_t hosts = 1;
  uint32_t clients = 2;
  double rate = 0;
  double seconds = 5;
  double idle_seconds = 3;
  double register_timeout = 600;
  uint32_t heartbeat_ms = 1000;
  /// Pause between REST probes while leasing; 0: none.
  uint32_t rest_every_ms = 100;
  uint32_t retention_days = 0;
  uint16_t rest_port = 0;
  std::string token;
  pid_t rm_pid = 0;
  std::string database;
  std::string prefix = "fleet";
  std::string json;
};

double pct(std::vector<double> v, double p) {
  return v.empty() ? 0 : bench_stats::percentile(std::move(v), p);
}

std::string fmt(double v, int decimals = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

/// Nodes up by /metrics; -1 when the resource manager does not answer (out
/// of descriptors, or its loop too busy to answer within its deadline).
double nodes_up(const Run &r) {
  try {
    rfaas::http::Response m =
        rfaas::http::request(r.rest_port, "GET", "/metrics", "", r.token, kRestTimeout);
    return metric_value(m.body, "rfaas_rm_nodes{state=\"up\"}");
  } catch (const std::exception &) {
    return -1;
  }
}

/// A pass over the active peers looks at a node that sent a heartbeat when
/// it arrives and once more (it did something, more may follow): two visits
/// per message. What a pass looks at beyond that, per pass, is what grows
/// with the fleet when a pass looks at every peer (N less the heartbeats it
/// found); over the active peers it stays near zero (a link named ready
/// before its message is readable). Per pass rather than per message: on a
/// loaded host a late pass finds many heartbeats at once, which lowers the
/// visits per message of a pass over every peer but not its excess.
constexpr double kVisitsPerMessage = 2;
constexpr double kMaxExtraVisitsPerPass = 8;

/// The fabric loop's work counters (/metrics); all -1 when it does not
/// answer or is older than them.
struct LoopWork {
  double passes = -1, visits = -1, messages = -1, armed = -1, deferred = -1, largest = -1;
};

LoopWork loop_work(const Run &r) {
  LoopWork w;
  try {
    rfaas::http::Response m =
        rfaas::http::request(r.rest_port, "GET", "/metrics", "", r.token, kRestTimeout);
    w.passes = metric_value(m.body, "rfaas_rm_fabric_passes_total");
    w.visits = metric_value(m.body, "rfaas_rm_fabric_peer_visits_total");
    w.messages = metric_value(m.body, "rfaas_rm_fabric_messages_total");
    w.armed = metric_value(m.body, "rfaas_rm_fabric_links_armed_total");
    w.deferred = metric_value(m.body, "rfaas_rm_fabric_peers_deferred_total");
    w.largest = metric_value(m.body, "rfaas_rm_fabric_pass_peers_max");
  } catch (const std::exception &) {
  }
  return w;
}

/// Between two readings: peers looked at per message read, per pass, and
/// beyond kVisitsPerMessage per message, per pass; -1 where a reading lacks
/// them.
struct VisitRates {
  double per_message = -1, per_pass = -1, extra_per_pass = -1;
};

VisitRates visits_between(const LoopWork &a, const LoopWork &b) {
  VisitRates v;
  if (a.visits < 0 || b.visits < 0 || a.messages < 0 || b.messages < 0 || b.passes <= a.passes)
    return v;
  const double visits = b.visits - a.visits;
  const double messages = b.messages - a.messages;
  const double passes = b.passes - a.passes;
  v.per_message = messages > 0 ? visits / messages : -1;
  v.per_pass = visits / passes;
  v.extra_per_pass = std::max(0.0, visits - kVisitsPerMessage * messages) / passes;
  return v;
}

/// Final accounting records the resource manager stored for the fleet's
/// clients (0 when it does not answer).
uint64_t accounting_records(const Run &r) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < r.clients; ++i) {
    try {
      rfaas::http::Response a = rfaas::http::request(
          r.rest_port, "GET", "/accounting?client=fleet-client-" + std::to_string(i), "", r.token,
          kRestTimeout);
      for (size_t at = 0; (at = a.body.find("\"final\":true", at)) != std::string::npos; ++at)
        ++n;
    } catch (const std::exception &) {
    }
  }
  return n;
}

int run(const Run &r) {
  auto log = spdlog::default_logger();
  const std::string provider = r.fleet.device.provider;
  std::vector<std::pair<std::string, std::string>> out; // JSON fields, in order
  auto put = [&](const std::string &k, const std::string &v) { out.emplace_back(k, v); };
  put("benchmark", "\"rm_fleet\"");
  put("device", "\"" + r.fleet.device.name + "\"");
  put("provider", "\"" + provider + "\"");
  put("nodes", std::to_string(r.nodes));
  put("hosts", std::to_string(r.hosts));
  put("clients", std::to_string(r.clients));
  put("rate_per_client", fmt(r.rate));
  put("heartbeat_ms", std::to_string(r.heartbeat_ms));

  // 1. Add the nodes, each with its own secret, as an operator would.
  std::vector<NodeSpec> specs(r.nodes);
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  const ProcSample empty = sample(r.rm_pid);
  auto t_add = Clock::now();
  for (uint32_t i = 0; i < r.nodes; ++i) {
    specs[i].name = r.prefix + "-" + std::to_string(i);
    urandom.read(reinterpret_cast<char *>(specs[i].secret.data()), specs[i].secret.size());
    std::string body = "{\"name\":\"" + specs[i].name +
                       "\",\"address\":\"127.0.0.1:1\",\"cores\":" + std::to_string(r.fleet.cores) +
                       ",\"memory_mib\":" + std::to_string(r.fleet.memory_mib) + ",\"secret\":\"" +
                       hex(specs[i].secret.data(), specs[i].secret.size()) + "\"}";
    rfaas::http::Response a =
        rfaas::http::request(r.rest_port, "POST", "/nodes", body, r.token, kRestTimeout);
    if (a.status != 201)
      throw std::runtime_error("POST /nodes for " + specs[i].name + ": HTTP " +
                               std::to_string(a.status) + " " + a.body);
  }
  put("add_seconds", fmt(seconds_since(t_add), 2));
  const ProcSample added = sample(r.rm_pid);

  // 2. Start the hosts and wait until every node is up.
  std::vector<Child> hosts;
  auto t_reg = Clock::now();
  for (uint32_t h = 0; h < r.hosts; ++h) {
    std::vector<NodeSpec> mine;
    for (uint32_t i = h; i < r.nodes; i += r.hosts)
      mine.push_back(specs[i]);
    hosts.push_back(spawn([&, mine](int stop_fd, int result_fd) -> int {
      run_host(r.fleet, mine, stop_fd, result_fd);
    }));
  }
  double up = 0;
  while ((up = nodes_up(r)) < r.nodes && seconds_since(t_reg) < r.register_timeout) {
    for (const Child &c : hosts)
      if (waitpid(c.pid, nullptr, WNOHANG) == c.pid)
        throw std::runtime_error("a host process died while its nodes registered");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double register_s = seconds_since(t_reg);
  put("nodes_up", fmt(up, 0));
  put("register_seconds", fmt(register_s, 2));
  // Progress on stderr, so that a long registration is visibly alive.
  std::fprintf(stderr, "rm_fleet: %.0f of %u nodes up after %.1f s\n", up, r.nodes, register_s);

  // 3. Heartbeats only.
  // The hosts' CPU is taken from the cores the resource manager and the
  // clients are measured on.
  auto hosts_cpu = [&hosts] {
    double s = 0;
    for (const Child &c : hosts) {
      try {
        s += sample(c.pid).cpu_s;
      } catch (const std::exception &) {
      }
    }
    return s;
  };
  const LoopWork work0 = loop_work(r);
  const double hosts_idle0 = hosts_cpu();
  const ProcSample idle0 = sample(r.rm_pid);
  auto t_idle = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(r.idle_seconds));
  const ProcSample idle1 = sample(r.rm_pid);
  const double hosts_idle1 = hosts_cpu();
  const LoopWork work1 = loop_work(r);
  // With heartbeats only, a pass should look at the nodes that sent one
  // (and once more after), not at the fleet: peers visited per heartbeat
  // stays near 2 at any N, where a pass over every peer makes it grow with N.
  const VisitRates idle_visits = visits_between(work0, work1);
  put("rm_peer_visits_per_message_idle", fmt(idle_visits.per_message, 2));
  put("rm_peer_visits_per_pass_idle", fmt(idle_visits.per_pass, 2));
  put("rm_peer_extra_visits_per_pass_idle", fmt(idle_visits.extra_per_pass, 2));
  const double idle_s = seconds_since(t_idle);
  const double idle_cores = (idle1.cpu_s - idle0.cpu_s) / idle_s;
  const double heartbeats = up * idle_s * 1000.0 / r.heartbeat_ms;
  put("rm_cpu_idle_cores", fmt(idle_cores, 4));
  put("hosts_cpu_idle_cores", fmt((hosts_idle1 - hosts_idle0) / idle_s, 3));
  put("rm_cpu_per_heartbeat_us",
      fmt(heartbeats > 0 ? (idle1.cpu_s - idle0.cpu_s) * 1e6 / heartbeats : 0, 2));
  put("rm_rss_mib_empty", fmt(empty.rss_kib / 1024.0));
  put("rm_rss_mib_added", fmt(added.rss_kib / 1024.0));
  put("rm_rss_mib", fmt(idle1.rss_kib / 1024.0));
  put("rm_fds_empty", std::to_string(empty.fds));
  put("rm_fds", std::to_string(idle1.fds));
  put("rm_kib_per_link",
      fmt(up > 0 ? (static_cast<double>(idle1.rss_kib) - added.rss_kib) / up : 0));
  put("rm_fds_per_link", fmt(up > 0 ? (static_cast<double>(idle1.fds) - added.fds) / up : 0, 3));
  const uint64_t db_before = database_bytes(r.database);

  // 4. Leases from M clients, REST timed meanwhile.
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<Child> clients;
  for (uint32_t i = 0; i < r.clients; ++i)
    clients.push_back(spawn([&, i](int stop_fd, int result_fd) {
      close(ready[0]);
      return run_client(r.fleet, static_cast<int>(i), r.rate, stop_fd, result_fd, ready[1]);
    }));
  close(ready[1]);
  for (uint32_t i = 0; i < r.clients; ++i) {
    char c;
    if (!read_full(ready[0], &c, 1, 120000))
      break;
  }
  close(ready[0]);
  std::atomic<bool> rest_stop{false};
  RestTimes rest;
  const LoopWork work2 = loop_work(r);
  const ProcSample lease0 = sample(r.rm_pid);
  const double hosts_lease0 = hosts_cpu();
  auto t_lease = Clock::now();
  std::thread rest_thread;
  if (r.rest_every_ms > 0)
    rest_thread = std::thread([&] {
      time_rest(r.rest_port, r.token, r.rest_every_ms, r.prefix + "-" + std::to_string(r.nodes / 2),
                rest_stop, rest);
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(r.seconds));
  for (Child &c : clients) {
    close_end(c.stop);
  }
  std::vector<double> lease_us;
  uint64_t granted = 0, refused = 0, errors = 0;
  double longest = 0;
  for (Child &c : clients) {
    ClientHeader h;
    if (read_full(c.result, &h, sizeof h, 120000)) {
      std::vector<double> v(h.samples);
      if (read_full(c.result, v.data(), v.size() * sizeof(double), 60000))
        lease_us.insert(lease_us.end(), v.begin(), v.end());
      granted += h.granted;
      refused += h.refused;
      errors += h.errors;
      longest = std::max(longest, h.seconds);
      if (h.error[0])
        log->warn("client error: {}", h.error);
    } else {
      ++errors;
      kill(c.pid, SIGKILL);
    }
    close_end(c.result);
    waitpid(c.pid, nullptr, 0);
  }
  const ProcSample lease1 = sample(r.rm_pid);
  const double hosts_lease1 = hosts_cpu();
  const double lease_s = seconds_since(t_lease);
  rest_stop = true;
  if (rest_thread.joinable())
    rest_thread.join();
  const LoopWork work3 = loop_work(r);
  put("leases", std::to_string(granted));
  put("refused", std::to_string(refused));
  put("errors", std::to_string(errors));
  put("leases_per_s", fmt(longest > 0 ? granted / longest : 0));
  put("lease_p50_us", fmt(pct(lease_us, 0.5)));
  put("lease_p99_us", fmt(pct(lease_us, 0.99)));
  put("rm_cpu_lease_cores", fmt((lease1.cpu_s - lease0.cpu_s) / lease_s, 4));
  put("hosts_cpu_lease_cores", fmt((hosts_lease1 - hosts_lease0) / lease_s, 3));
  put("rm_cpu_per_lease_us",
      fmt(granted > 0 ? (lease1.cpu_s - lease0.cpu_s) * 1e6 / granted : 0, 1));
  put("rm_rss_mib_leasing", fmt(lease1.rss_kib / 1024.0));
  put("rm_fds_leasing", std::to_string(lease1.fds));
  const VisitRates lease_visits = visits_between(work2, work3);
  put("rm_peer_visits_per_message_leasing", fmt(lease_visits.per_message, 2));
  put("rm_peer_visits_per_pass_leasing", fmt(lease_visits.per_pass, 2));
  // Peers a pass left to the next (its budget of nodes spent), and the most
  // nodes one pass served since the start; -1: a resource manager without
  // the bound.
  put("rm_peers_deferred_leasing",
      fmt(work2.deferred < 0 || work3.deferred < 0 ? -1 : work3.deferred - work2.deferred, 0));
  put("rm_pass_peers_max", fmt(work3.largest, 0));
  put("rest_every_ms", std::to_string(r.rest_every_ms));
  put("rest_nodes_p50_ms", fmt(pct(rest.nodes_ms, 0.5), 2));
  put("rest_nodes_p99_ms", fmt(pct(rest.nodes_ms, 0.99), 2));
  put("rest_page_p50_ms", fmt(pct(rest.page_ms, 0.5), 2));
  put("rest_page_p99_ms", fmt(pct(rest.page_ms, 0.99), 2));
  put("rest_node_p50_ms", fmt(pct(rest.node_ms, 0.5), 2));
  put("rest_node_p99_ms", fmt(pct(rest.node_ms, 0.99), 2));
  put("rest_metrics_p50_ms", fmt(pct(rest.metrics_ms, 0.5), 2));
  put("rest_metrics_p99_ms", fmt(pct(rest.metrics_ms, 0.99), 2));
  put("rest_samples", std::to_string(rest.nodes_ms.size() + rest.page_ms.size() +
                                     rest.node_ms.size() + rest.metrics_ms.size()));
  put("rest_errors", std::to_string(rest.errors));

  // 5. Until the resource manager holds a final accounting record for every
  // lease (release -> notice to the node -> its report), 15 s at most; then
  // the hosts' figures.
  auto t_settle = Clock::now();
  uint64_t records = 0;
  while ((records = accounting_records(r)) < granted && seconds_since(t_settle) < 15)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  put("accounting_records", std::to_string(records));
  put("settle_seconds", fmt(seconds_since(t_settle), 2));
  HostResult total;
  uint64_t host_rss = 0, host_fds = 0, host_rss_before = 0, host_fds_before = 0;
  // All at once: the nodes go silent together, none waits for another's exit.
  for (Child &c : hosts)
    close_end(c.stop);
  for (Child &c : hosts) {
    HostResult h;
    if (read_full(c.result, &h, sizeof h, 30000)) {
      total.links += h.links;
      total.registered += h.registered;
      total.notices += h.notices;
      total.reports += h.reports;
      host_rss += h.rss_kib;
      host_fds += h.fds;
      host_rss_before += h.rss_kib_before;
      host_fds_before += h.fds_before;
    } else {
      kill(c.pid, SIGKILL);
    }
    close_end(c.result);
    waitpid(c.pid, nullptr, 0);
  }
  put("links_registered", std::to_string(total.registered));
  put("notices", std::to_string(total.notices));
  put("reports", std::to_string(total.reports));
  put("host_kib_per_link",
      fmt(total.links ? (static_cast<double>(host_rss) - host_rss_before) / total.links : 0));
  put("host_fds_per_link",
      fmt(total.links ? (static_cast<double>(host_fds) - host_fds_before) / total.links : 0, 3));
  const uint64_t db_after = database_bytes(r.database);
  const double per_lease =
      granted > 0 ? static_cast<double>(db_after > db_before ? db_after - db_before : 0) / granted
                  : 0;
  const double per_s = longest > 0 ? granted / longest : 0;
  put("db_bytes", std::to_string(db_after));
  put("db_bytes_per_lease", fmt(per_lease));
  put("db_bytes_hour_extrapolated", fmt(per_lease * per_s * 3600, 0));
  put("retention_days", std::to_string(r.retention_days));
  put("db_bytes_retention_extrapolated",
      r.retention_days ? fmt(per_lease * per_s * 86400.0 * r.retention_days, 0) : "null");

  // Failing is part of the job: the smoke test relies on it.
  bool ok = true;
  if (up < r.nodes || total.registered < r.nodes) {
    log->error("only {} of {} nodes registered (the hosts saw {})", up, r.nodes, total.registered);
    ok = false;
  }
  if (granted == 0) {
    log->error("no lease was granted");
    ok = false;
  }
  if (errors > 0) {
    log->error("{} lease errors", errors);
    ok = false;
  }
  if (records < granted) {
    log->error("{} leases released, {} final accounting records stored", granted, records);
    ok = false;
  }
  // Only where links share an endpoint (none is armed on its own): on a
  // connected provider a link that spoke is read at every pass until the
  // next sleep arms its descriptor, so passes without a sleep between them
  // look at it again.
  if (idle_visits.extra_per_pass > kMaxExtraVisitsPerPass && work1.armed == 0) {
    log->error("the resource manager's loop looked at {:.1f} peers per pass beyond the nodes "
               "that sent heartbeats (at most {} expected: a pass must look at the active peers, "
               "not every one)",
               idle_visits.extra_per_pass, kMaxExtraVisitsPerPass);
    ok = false;
  }
  // A failed run's figures are kept, marked: what a fleet size broke is a
  // result too.
  put("failed", ok ? "false" : "true");
  // A shared 2-CPU host: the load says how much of the latency is others'.
  double load[1] = {0};
  put("loadavg_1m", fmt(getloadavg(load, 1) == 1 ? load[0] : -1, 2));
  std::string line = "{";
  for (size_t i = 0; i < out.size(); ++i)
    line += (i ? ", \"" : "\"") + out[i].first + "\": " + out[i].second;
  line += "}";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (!r.json.empty()) {
    std::ofstream f(r.json, std::ios::app);
    f << line << "\n";
    if (!f)
      throw std::runtime_error("writing " + r.json + " failed");
  }
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rm_fleet",
                          "One real resource manager against N simulated executor managers "
                          "(real registrations, heartbeats, notices and accounting) and M "
                          "leasing clients; prints one JSON line of figures.");
  // clang-format off
  cli.add_options()
    ("devices", "device database", rfaas::cli::value<std::string>()->default_value("config/devices.json"))
    ("device", "device entry of the simulated managers and clients", rfaas::cli::value<std::string>()->default_value("lo-rxm"))
    ("resource-manager", "the resource manager's fabric host:port", rfaas::cli::value<std::string>())
    ("rest-port", "the resource manager's REST port (127.0.0.1)", rfaas::cli::value<int>())
    ("token-file", "file holding the REST bearer token", rfaas::cli::value<std::string>())
    ("rm-pid", "the resource manager's process id (its CPU, RSS and descriptors are read from /proc)", rfaas::cli::value<int>())
    ("database", "the resource manager's SQLite file (its size is reported)", rfaas::cli::value<std::string>())
    ("nodes", "simulated executor managers", rfaas::cli::value<uint32_t>()->default_value("100"))
    ("hosts", "processes the simulated managers are spread over", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("clients", "leasing client processes", rfaas::cli::value<uint32_t>()->default_value("2"))
    ("rate", "leases per second per client (0: as fast as it can)", rfaas::cli::value<double>()->default_value("0"))
    ("seconds", "seconds of leasing", rfaas::cli::value<double>()->default_value("5"))
    ("idle-seconds", "seconds of heartbeats only", rfaas::cli::value<double>()->default_value("3"))
    ("register-timeout", "seconds the nodes may take to register", rfaas::cli::value<double>()->default_value("600"))
    ("rest-every-ms", "pause between REST probes (GET /nodes, /nodes?limit=100, /nodes/NAME, /metrics) while leasing; 0: none", rfaas::cli::value<uint32_t>()->default_value("100"))
    ("heartbeat-ms", "the heartbeat period the resource manager asks (for the per-heartbeat figure)", rfaas::cli::value<uint32_t>()->default_value("1000"))
    ("retention-days", "the resource manager's retention_days (for the extrapolation)", rfaas::cli::value<uint32_t>()->default_value("0"))
    ("cores", "cores per simulated node", rfaas::cli::value<uint32_t>()->default_value("8"))
    ("prefix", "node name prefix", rfaas::cli::value<std::string>()->default_value("fleet"))
    ("json", "append the JSON line to this file", rfaas::cli::value<std::string>()->default_value(""));
  // clang-format on
  rfaas::cli::add_standard_options(cli);
  return rfaas::cli::run("rm_fleet", cli, argc, argv, [](const rfaas::cli::ParseResult &args) {
    rfaas::cli::apply_log_level(args);
    for (const char *need : {"resource-manager", "rest-port", "token-file", "rm-pid", "database"})
      if (!args.count(need))
        throw rfaas::cli::UsageError(std::string("--") + need + " is required");
    Run r;
    r.fleet.device = rfaas::device_database::load(args["devices"].as<std::string>())
                         .find(args["device"].as<std::string>());
    r.fleet.rm_address = args["resource-manager"].as<std::string>();
    r.fleet.cores = args["cores"].as<uint32_t>();
    r.nodes = args["nodes"].as<uint32_t>();
    r.hosts = std::max<uint32_t>(1, args["hosts"].as<uint32_t>());
    r.clients = args["clients"].as<uint32_t>();
    r.rate = args["rate"].as<double>();
    r.seconds = args["seconds"].as<double>();
    r.idle_seconds = args["idle-seconds"].as<double>();
    r.register_timeout = args["register-timeout"].as<double>();
    r.heartbeat_ms = args["heartbeat-ms"].as<uint32_t>();
    r.rest_every_ms = args["rest-every-ms"].as<uint32_t>();
    r.retention_days = args["retention-days"].as<uint32_t>();
    r.rest_port = static_cast<uint16_t>(args["rest-port"].as<int>());
    r.rm_pid = args["rm-pid"].as<int>();
    r.database = args["database"].as<std::string>();
    r.prefix = args["prefix"].as<std::string>();
    r.json = args["json"].as<std::string>();
    // The simulated links log through the default logger, as the manager
    // does: thousands of "registered" lines say nothing here.
    if (!args.count("log-level"))
      spdlog::default_logger()->set_level(spdlog::level::warn);
    std::ifstream tf(args["token-file"].as<std::string>());
    if (!std::getline(tf, r.token) || r.token.empty())
      throw rfaas::cli::UsageError("cannot read a token from --token-file");
    if (r.nodes == 0 || r.clients == 0)
      throw rfaas::cli::UsageError("--nodes and --clients must be > 0");
    return run(r);
  });
}
