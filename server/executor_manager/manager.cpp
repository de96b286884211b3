#include "executor_manager/manager.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "common/fd_io.hpp"
#include "common/launch_spec.hpp"
#include "protocol/control_channel.hpp"

namespace rfaas::manager {

namespace proto = rfaas::protocol;
using rfaas::server::write_all;
using std::chrono::milliseconds;

namespace {

constexpr size_t kClientRecv = proto::kMaxAllocationRequestSize;
constexpr uint64_t kClientRecvs = 2;
constexpr uint32_t kClientSends = 4;
constexpr uint64_t kExecutorRecvs = 8;

// The two kinds of link the manager accepts. A post on either waits at most
// connect_ms for room, as every other wait for one peer in the manager's
// loop: to a peer that died a reliable-datagram provider may answer "try
// again" for the whole default post deadline (5 s) while it reconnects.
rdmalib::ConnectionOptions client_link_options(uint32_t connect_ms) {
  rdmalib::ConnectionOptions opts;
  opts.post_deadline = std::chrono::milliseconds(connect_ms);
  opts.recv_depth = kClientRecvs + 2;
  // The manager sends one answer per request: a small send queue keeps an
  // idle connection cheap (queues are sized by these depths).
  opts.send_depth = kClientSends;
  return opts;
}

rdmalib::ConnectionOptions executor_link_options(uint32_t connect_ms) {
  rdmalib::ConnectionOptions opts;
  opts.post_deadline = std::chrono::milliseconds(connect_ms);
  opts.recv_depth = kExecutorRecvs + 2;
  opts.check_peer_before_poll = true;
  return opts;
}

void random_bytes(void *out, size_t n) {
  auto *p = static_cast<uint8_t *>(out);
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::string describe_exit(long code) {
  if (code < 0)
    return std::string("killed by signal ") + std::to_string(-code) + " (" +
           strsignal(static_cast<int>(-code)) + ")";
  switch (code) {
  case server::ExitOk:
    return "exited normally";
  case server::ExitSetupFailed:
    return "exited: setup failed (see its log)";
  case server::ExitFunctionCrashed:
    return "exited after a function crashed";
  case server::ExitTerminated:
    return "exited on SIGTERM";
  case server::ExitClientLost:
    return "exited: its client was unreachable";
  default:
    return "exited with code " + std::to_string(code);
  }
}

} // namespace

struct Manager::Client {
  // The channel before the connection: its buffers outlive the close.
  proto::ControlChannel channel; // kClientRecvs receives + a send area
  rdmalib::Connection conn;
  std::string peer;
  uint64_t allocation = 0;
  // The lease it presented (resource-manager mode).
  uint64_t lease_id = 0;
  proto::Token token;
  bool lease_ok = false;
  // Why its lease ended before it asked for an allocation (empty while live).
  std::string lease_ended;
  uint32_t lease_cores = 0;
  uint64_t lease_memory_mib = 0;
  Admission::Ticket ticket = 0; // pending until granted (admission.hpp)
  bool requested = false;
  bool closed = false;
};

struct Manager::Allocation {
  uint64_t id = 0;
  uint64_t lease_id = 0; // 0 in standalone mode
  proto::Token secret;
  std::vector<size_t> core_slots; // indices into cfg_.cores
  uint32_t memory_mib = 0;
  uint32_t workers = 0;
  pid_t pid = -1;
  bool exited = false;
  long exit_code = 0;
  Clock::time_point started, exited_at;
  /// When the client said goodbye or vanished; the executor gets a grace
  /// period after a goodbye, none after a disconnect.
  bool client_gone = false;
  Clock::time_point term_at, kill_at;
  bool term_sent = false, kill_sent = false;
  std::string client_peer;

  rdmalib::Buffer<uint64_t> record; // accounting words (remote atomics)
  bool has_record = false;
  AllocationAccounting accounting;
  proto::ControlChannel exec_channel; // before exec_conn: outlives its close
  rdmalib::Connection exec_conn;
  bool exec_connected = false;
  bool exec_done = false; // goodbye or close seen on the accounting link
};

namespace {
/// Blocks SIGINT, SIGTERM and SIGCHLD in this thread (and so in every thread
/// started later) and returns a signalfd that receives them.
int block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0)
    throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  return fd;
}
} // namespace

Manager::Manager(ManagerConfig config, rdmalib::DeviceConfig device, std::string executor)
    : cfg_(std::move(config)), device_(std::move(device)), executor_path_(std::move(executor)),
      signal_fd_(block_signals()), fabric_(device_),
      listener_(fabric_,
                rdmalib::Address{cfg_.listen_host.empty() ? device_.ip_address : cfg_.listen_host,
                                 cfg_.listen_port}),
      admission_(cfg_.admission) {
  core_used_.assign(cfg_.cores.size(), false);
  signal(SIGPIPE, SIG_IGN);
  if (cfg_.resource_manager_enabled) {
    RmLinkOptions o;
    o.resource_manager = rdmalib::Address::parse(cfg_.resource_manager_address);
    o.node = cfg_.resource_manager_node;
    if (o.node.empty()) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      o.node = host;
    }
    o.address = listener_.address().to_string();
    o.cores = static_cast<uint32_t>(cfg_.cores.size());
    o.memory_mib = cfg_.memory_mib;
    o.secret = rm::read_secret_file(cfg_.resource_manager_secret_file);
    // A connection attempt holds the loop (rdmalib has no asynchronous
    // connect); tcp;ofi_rxm needed over a second on a loaded machine.
    o.connect_timeout = milliseconds(cfg_.resource_manager_connect_ms);
    verifier_ = std::make_unique<rm::TokenVerifier>(o.node, o.secret);
    spdlog::info("resource-manager mode: node {}, resource manager {}; clients need a lease",
                 o.node, o.resource_manager.to_string());
    rm_ = std::make_unique<RmLink>(fabric_, std::move(o));
  }
  // Providers allocate a few hundred KiB per endpoint. A fixed threshold keeps
  // such blocks in mmap (glibc raises a dynamic one after the first frees,
  // moving them onto the heap, where a flood's worth stays after it ended).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // Each connection costs about a dozen descriptors (queues, wait objects,
  // socket): admission.max_pending of them must fit next to the allocations.
  rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  start_zygote();
  // Where opening an endpoint is slow (shm), each kind of link finds one
  // opened ahead, off the clients' cold start; elsewhere this does nothing.
  // After the zygote started: its fork must not copy a half-opened endpoint.
  fabric_.prepare(client_link_options(cfg_.connect_ms));
  fabric_.prepare(executor_link_options(cfg_.connect_ms));
}

Manager::~Manager() {
  stop_zygote();
  if (signal_fd_ >= 0)
    ::close(signal_fd_);
}

const rdmalib::Address &Manager::address() const { return listener_.address(); }
const std::string &Manager::provider() const { return fabric_.provider(); }

void Manager::start_zygote() {
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::string dev = rdmalib::DeviceDatabase({device_}).to_json();
  std::string hex = server::to_hex(dev.data(), dev.size());
  pid_t pid = fork();
  if (pid < 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    const char *mode = cfg_.zygote ? nullptr : "--exec-each";
    execl(executor_path_.c_str(), "executor", "--zygote", "--device", hex.c_str(), mode,
          static_cast<char *>(nullptr));
    std::fprintf(stderr, "executor_manager: cannot execute %s: %s\n", executor_path_.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  zygote_pid_ = pid;
  zygote_in_ = to_child[1];
  zygote_out_ = from_child[0];
  zygote_buf_.clear();
  zygote_ready_ = false;
  // Wait for the zygote to have loaded the backend, so that the first
  // allocation's cold start is the one every later allocation sees.
  auto deadline = Clock::now() + milliseconds(cfg_.executor_start_ms);
  while (!zygote_ready_ && zygote_pid_ > 0 && Clock::now() < deadline)
    read_zygote(100);
  if (!zygote_ready_)
    throw std::runtime_error("the executor zygote (" + executor_path_ +
                             " --zygote) did not become ready within " +
                             std::to_string(cfg_.executor_start_ms) + " ms");
  spdlog::info("zygote {} ready ({})", zygote_pid_,
               cfg_.zygote ? "forks pre-initialised executors" : "executes each executor");
}

void Manager::stop_zygote() {
  if (zygote_pid_ <= 0)
    return;
  // Closing its command pipe makes the zygote kill and reap its executors.
  if (zygote_in_ >= 0)
    ::close(zygote_in_);
  zygote_in_ = -1;
  int status;
  auto deadline = Clock::now() + milliseconds(cfg_.shutdown_grace_ms);
  while (waitpid(zygote_pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(zygote_pid_, SIGKILL);
      waitpid(zygote_pid_, &status, 0);
      break;
    }
    read_zygote(20);
  }
  if (zygote_out_ >= 0)
    ::close(zygote_out_);
  zygote_out_ = -1;
  zygote_pid_ = -1;
}

bool Manager::read_zygote(int timeout_ms) {
  if (zygote_out_ < 0)
    return false;
  pollfd p{zygote_out_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0)
    return false;
  char buf[4096];
  ssize_t n = ::read(zygote_out_, buf, sizeof buf);
  ++events_;
  if (n <= 0) {
    if (n < 0 && errno == EINTR)
      return false;
    if (zygote_in_ < 0)
      return false; // stop_zygote() closed its commands: this EOF is expected
    // The zygote died: its executors died with it (PR_SET_PDEATHSIG).
    spdlog::error("the executor zygote {} died; restarting it", zygote_pid_);
    int status;
    kill(zygote_pid_, SIGKILL);
    waitpid(zygote_pid_, &status, 0);
    ::close(zygote_out_);
    ::close(zygote_in_);
    zygote_out_ = zygote_in_ = -1;
    zygote_pid_ = -1;
    for (auto &kv : allocations_)
      if (!kv.second->exited && kv.second->pid > 0) {
        kv.second->exited = true;
        kv.second->exit_code = -SIGKILL;
        kv.second->exited_at = Clock::now();
      }
    try {
      start_zygote();
    } catch (const std::exception &e) {
      spdlog::error("{}", e.what());
    }
    return false;
  }
  zygote_buf_.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = zygote_buf_.find('\n')) != std::string::npos) {
    std::string line = zygote_buf_.substr(0, nl);
    zygote_buf_.erase(0, nl + 1);
    zygote_event(line);
  }
  return true;
}

void Manager::zygote_event(const std::string &line) {
  std::istringstream in(line);
  std::string what;
  uint64_t id = 0;
  in >> what;
  if (what == "ready") {
    zygote_ready_ = true;
    return;
  }
  in >> id;
  auto it = allocations_.find(id);
  if (what == "started") {
    long pid = -1;
    in >> pid;
    if (it != allocations_.end())
      it->second->pid = static_cast<pid_t>(pid);
  } else if (what == "failed") {
    std::string reason;
    std::getline(in, reason);
    spdlog::error("zygote could not start the executor of allocation {:x}:{}", id, reason);
    if (it != allocations_.end()) {
      it->second->exited = true;
      it->second->exit_code = 1;
      it->second->exited_at = Clock::now();
      it->second->pid = 0;
    }
  } else if (what == "exited") {
    long pid = 0, code = 0;
    in >> pid >> code;
    if (it != allocations_.end()) {
      it->second->exited = true;
      it->second->exit_code = code;
      it->second->exited_at = Clock::now();
    }
  } else {
    spdlog::warn("zygote said something unexpected: \"{}\"", line);
  }
}

void Manager::signal_executor(Allocation &a, int sig) {
  if (a.exited || zygote_in_ < 0)
    return;
  write_all(zygote_in_, "signal " + std::to_string(a.id) + " " + std::to_string(sig) + "\n");
}

namespace {
/// The longest a connection request waits when its sender could not wake
/// the loop through the listener's fd; the idle loop's poll timeout.
constexpr int kAcceptLookMs = 200;
/// Connections have no fd of their own, so while any exist the loop wakes up
/// to poll them (and to drive progress for the executors' remote atomics):
/// every kBusyPollMs while something happens or is about to (a client
/// without its allocation yet, an executor starting or ending), every
/// kSettledPollMs once all allocations have been serving quietly for
/// kSettleAfter. Each wake-up takes a core from a busy-polling worker or
/// client for ~10 us: at 2 ms that was ~1 % of a 2-us invocation stream
/// delayed by it (p99 14 us on lo-shm).
constexpr int kBusyPollMs = 2;
constexpr int kSettledPollMs = 20;
constexpr auto kSettleAfter = std::chrono::milliseconds(50);
} // namespace

bool Manager::settled() const {
  for (const auto &kv : allocations_) {
    const Allocation &a = *kv.second;
    if (!a.exec_connected || a.exited || a.exec_done || a.client_gone)
      return false;
  }
  for (const auto &c : clients_)
    if (!c->closed && c->allocation == 0)
      return false;
  return true;
}

int Manager::run() {
  bool stopping = false;
  while (!stopping) {
    bool busy = !allocations_.empty() || !clients_.empty();
    pollfd p[3] = {{listener_.fd(), POLLIN, 0}, {zygote_out_, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
    const bool quiet = Clock::now() - last_activity_ >= kSettleAfter;
    int timeout =
        busy ? (quiet ? kSettledPollMs : kBusyPollMs) : (listener_.fd() < 0 ? 10 : kAcceptLookMs);
    if (rm_) // heartbeats and lease-ended notices
      timeout = std::min(timeout, 20);
    ::poll(p, 3, timeout);
    if (p[2].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(signal_fd_, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)
          stopping = true;
        // SIGCHLD: the zygote is our only child; its death shows as EOF on
        // its pipe, handled in read_zygote().
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP))
      read_zygote(0);
    // A listener's fd may be a doorbell that only rdmalib peers able to
    // reach it ring (docs/rdmalib.md): look now and then regardless.
    const bool woken = listener_.fd() < 0 || (p[0].revents & POLLIN);
    if (woken || Clock::now() - last_accept_look_ >= milliseconds(kAcceptLookMs)) {
      last_accept_look_ = Clock::now();
      accept_requests(woken ? milliseconds(5) : milliseconds(0));
    }
    poll_clients();
    poll_executors();
    tick();
    if (rm_ && cfg_.accounting_interval_ms &&
        Clock::now() - last_periodic_report_ > milliseconds(cfg_.accounting_interval_ms)) {
      last_periodic_report_ = Clock::now();
      report_live_leases();
    }
    if (rm_) {
      std::vector<proto::LeaseEnded> ended;
      rm_->poll(ended, static_cast<uint32_t>(allocations_.size()));
      for (const proto::LeaseEnded &e : ended)
        lease_ended(e);
    }
    if (events_ != events_seen_ || !settled())
      last_activity_ = Clock::now();
    events_seen_ = events_;
  }
  if (rm_)
    rm_->close();
  spdlog::info("stopping: ending {} allocation(s)", allocations_.size());
  for (auto &kv : allocations_)
    signal_executor(*kv.second, SIGTERM);
  auto deadline = Clock::now() + milliseconds(cfg_.shutdown_grace_ms);
  while (Clock::now() < deadline &&
         std::any_of(allocations_.begin(), allocations_.end(),
                     [](const auto &kv) { return !kv.second->exited; })) {
    read_zygote(10);
    poll_executors();
  }
  stop_zygote();
  admission_.flush(Clock::now());
  spdlog::info("{}", admission_.describe());
  for (auto &kv : allocations_) {
    if (!kv.second->exited) {
      kv.second->exited = true;
      kv.second->exit_code = -SIGKILL;
    }
    finish(*kv.second);
  }
  allocations_.clear();
  clients_.clear();
  return 0;
}

void Manager::accept_requests(milliseconds first_wait) {
  // Take pending requests, but never hold the loop for long: the signalfd and
  // the open connections wait for this round to end. Each accept waits at
  // most connect_ms (<= 1 s) on top of this budget.
  const auto budget = Clock::now() + milliseconds(100);
  for (int i = 0; i < 16 && Clock::now() < budget; ++i) {
    rdmalib::ConnectionRequest req;
    try {
      // poll() said a request is pending (or the listener has no fd and this
      // is where the loop looks for requests): a short wait (`first_wait`)
      // takes it, and a wake-up with nothing pending costs at most that.
      // After one request, only those already pending: a wait here would
      // delay the answer to the peer just accepted (its first message is on
      // its way).
      req = listener_.next_request(i == 0 ? first_wait : milliseconds(0));
    } catch (const rdmalib::Error &e) {
      if (e.kind() != rdmalib::ErrorKind::Timeout)
        spdlog::warn("listener: {}", e.what());
      return;
    }
    try {
      accept_one(req);
    } catch (const std::exception &e) {
      admission_.setup_failed("a peer", e.what(), Clock::now());
    }
  }
}

void Manager::accept_one(rdmalib::ConnectionRequest &req) {
  ++events_;
  const std::vector<uint8_t> &pd = req.private_data();
  proto::Header h;
  proto::WireResult r = proto::peek(pd.data(), pd.size(), h);
  proto::ConnectReply reply;
  uint8_t reply_bytes[sizeof reply];
  auto refuse = [&](proto::ErrorCode status, const std::string &why) {
    // Accept and answer with the status, then close: a bare reject would leave
    // the peer with "refused" and no reason.
    admission_.bad_input("refusing a connection: " + why, Clock::now());
    reply.status = status;
    proto::encode(reply, reply_bytes, sizeof reply_bytes);
    // The answer must have left before the close. Reliable-datagram fabrics
    // may need up to a second to reach the client (tcp;ofi_rxm connects back
    // first): waited for here, within the request deadline.
    bool rdm = fabric_.capabilities().endpoint != rdmalib::EndpointType::Connected;
    rdmalib::Connection c =
        req.accept(reply_bytes, sizeof reply_bytes,
                   milliseconds(rdm ? cfg_.admission.request_ms : cfg_.connect_ms));
    c.close();
  };
  if (!r) {
    if (r.error == proto::WireError::VersionMismatch)
      return refuse(proto::ErrorCode::VersionMismatch,
                    "peer speaks protocol version " + std::to_string(h.version));
    admission_.bad_input("rejecting a connection request: " + proto::describe(r), Clock::now());
    req.reject();
    return;
  }
  proto::encode(reply, reply_bytes, sizeof reply_bytes);
  if (h.type == proto::MessageType::ClientHello) {
    proto::ClientHello hello;
    r = proto::decode(pd.data(), pd.size(), hello);
    if (!r)
      return refuse(proto::reply_code(r.error), "bad ClientHello: " + proto::describe(r));
    // Admission (admission.hpp): a peer over its limit is rejected before
    // any endpoint is spent on it (a bare reject: a flood must stay cheap);
    // at the total limit the oldest pending connection makes room.
    auto now = Clock::now();
    // A host, or a whole opaque endpoint name where addresses are not IP.
    std::string from = req.remote_address().host_text();
    if (from.empty())
      from = "?";
    if (!admission_.may_admit(from, now)) {
      req.reject();
      return;
    }
    if (Admission::Ticket victim = admission_.victim(now))
      close_pending(victim);
    // Standalone mode: every lease is accepted (lease id 0 and any token).
    // With a resource manager the lease is checked when the client sends
    // its LeaseProof, before any allocation.
    if (rm_ && hello.lease_id == 0)
      return refuse(proto::ErrorCode::LeaseInvalid,
                    "lease_invalid: a client without a lease (this executor manager serves "
                    "leases of the resource manager " +
                        cfg_.resource_manager_address + ")");
    auto c = std::make_unique<Client>();
    c->lease_id = hello.lease_id;
    c->token = hello.token;
    rdmalib::ConnectionOptions opts = client_link_options(cfg_.connect_ms);
    // Nothing is sent before the client's request: the answer may leave
    // later (tcp;ofi_rxm connects back first, about a second), posted again
    // by the channel's polls without holding the loop, until the request
    // deadline. Connected fabrics complete accept in the provider's
    // connection manager, which the loop waits for: connect_ms.
    opts.accept_in_background = true;
    // One thread polls every link: a client that died must not hang it.
    opts.check_peer_before_poll = true;
    const bool background = fabric_.capabilities().endpoint != rdmalib::EndpointType::Connected;
    c->conn =
        req.accept(reply_bytes, sizeof reply_bytes,
                   milliseconds(background ? cfg_.admission.request_ms : cfg_.connect_ms), opts);
    proto::ControlOptions copts;
    copts.receives = kClientRecvs;
    copts.receive_size = kClientRecv;
    c->channel = proto::ControlChannel(fabric_, c->conn, copts);
    try {
      c->peer = c->conn.remote_address().to_string();
    } catch (const std::exception &) {
      c->peer = "?";
    }
    spdlog::debug("client {} connected (lease {})", c->peer, hello.lease_id);
    c->ticket = admission_.admitted(from, now);
    clients_.push_back(std::move(c));
    return;
  }
  if (h.type == proto::MessageType::ExecutorHello) {
    proto::ExecutorHello hello;
    r = proto::decode(pd.data(), pd.size(), hello);
    if (!r)
      return refuse(proto::reply_code(r.error), "bad ExecutorHello: " + proto::describe(r));
    auto it = allocations_.find(hello.allocation_id);
    if (it == allocations_.end() || it->second->exec_connected ||
        !proto::equal(it->second->secret, hello.secret))
      return refuse(proto::ErrorCode::LeaseInvalid,
                    "an executor presented an unknown allocation or a wrong secret");
    Allocation &a = *it->second;
    rdmalib::ConnectionOptions opts = executor_link_options(cfg_.connect_ms);
    // Our own child, which connects right after it started: its answer is
    // waited for (the advertisement follows it at once), within the
    // executor's own deadline (tcp;ofi_rxm takes up to a second).
    a.exec_conn =
        req.accept(reply_bytes, sizeof reply_bytes, milliseconds(cfg_.workers_connected_ms), opts);
    proto::ControlOptions copts;
    copts.receives = kExecutorRecvs;
    a.exec_channel = proto::ControlChannel(fabric_, a.exec_conn, copts);
    a.exec_connected = true;
    if (a.has_record) {
      a.exec_conn.attach(a.record.region());
      proto::BufferAdvertisement adv;
      adv.descriptor.buffer = a.record.remote();
      adv.descriptor.worker = proto::kAllWorkers;
      adv.descriptor.slots = 1;
      adv.descriptor.slot_size = sizeof(proto::AccountingCounters);
      // Posted, not waited for: a link whose peer never reads would stall
      // the whole loop. poll_executors() reaps the completion (and reports a
      // failure).
      if (a.exec_channel.post(adv) != proto::ChannelStatus::Ok)
        spdlog::warn("allocation {:x}: cannot advertise the accounting record: {}", a.id,
                     a.exec_channel.last_error());
    }
    spdlog::debug("allocation {:x}: executor connected", a.id);
    return;
  }
  admission_.bad_input(std::string("rejecting a connection request with a ") +
                           proto::to_string(h.type) + " as private data",
                       Clock::now());
  req.reject();
}

void Manager::reply(Client &c, proto::ErrorCode status, uint64_t id, uint32_t workers,
                    const std::string &message) {
  proto::AllocationResponse resp;
  resp.allocation_id = id;
  resp.status = status;
  resp.workers = workers;
  proto::set_text_truncated(resp.message, message);
  proto::ChannelStatus st = c.channel.send(resp, Clock::now() + milliseconds(cfg_.connect_ms));
  // Refusals go through the admission's rate limit: a client may send
  // requests (good or bad) as fast as it likes.
  if (st != proto::ChannelStatus::Ok)
    admission_.setup_failed(c.peer,
                            std::string("cannot send the AllocationResponse: ") +
                                proto::to_string(st) + " (" + c.channel.last_error() + ")",
                            Clock::now());
  if (status != proto::ErrorCode::Ok)
    admission_.peer_event("client " + c.peer + ": allocation refused: " + proto::to_string(status) +
                              ": " + message,
                          Clock::now());
}

void Manager::handle_allocation_request(Client &c, const uint8_t *msg, size_t len) {
  using E = proto::ErrorCode;
  proto::AllocationRequest req;
  std::vector<proto::BufferDescriptor> results;
  proto::WireResult r = proto::decode(msg, len, req, results);
  if (!r)
    return reply(c, proto::reply_code(r.error), 0, 0, proto::describe(r));
  if (c.requested)
    return reply(c, E::BadRequest, 0, 0, "one allocation per connection");
  if (proto::get_text(req.client_host).empty())
    return reply(c, E::BadRequest, 0, 0, "AllocationRequest names no client listener");
  try {
    // host + port, or an opaque endpoint name (port 0) where addresses are not IP.
    rdmalib::Address client = rdmalib::Address::from_host_text(
        std::string(proto::get_text(req.client_host)), req.client_port);
    if (!client.opaque() && client.port == 0)
      return reply(c, E::BadRequest, 0, 0, "AllocationRequest names no client listener port");
  } catch (const rdmalib::Error &e) {
    return reply(c, E::BadRequest, 0, 0, std::string("AllocationRequest.client_host: ") + e.what());
  }
  if (req.input_slots > cfg_.max_input_slots)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "input_slots above this manager's limit of " +
                     std::to_string(cfg_.max_input_slots));
  if (req.input_slot_size <= proto::kSlotPrefix || req.input_slot_size > cfg_.max_slot_size)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "input_slot_size must be " + std::to_string(proto::kSlotPrefix + 1) + ".." +
                     std::to_string(cfg_.max_slot_size));
  for (const auto &d : results)
    if (d.slot_size > cfg_.max_slot_size)
      return reply(c, E::ResourcesUnavailable, 0, 0,
                   "result slot_size above this manager's limit of " +
                       std::to_string(cfg_.max_slot_size));
  if (req.library_size == 0 || req.library_size > cfg_.max_library_size)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "library_size must be 1.." + std::to_string(cfg_.max_library_size));
  if (allocations_.size() >= cfg_.max_allocations)
    return reply(c, E::ResourcesUnavailable, 0, 0, "too many allocations on this node");
  uint32_t memory = req.memory_mib ? req.memory_mib : cfg_.default_memory_mib;
  if (rm_) {
    // The lease bounds what its allocations on this node hold together. An
    // allocation whose client left is ending: its cores come back with its
    // executor (until then the free-core check below answers
    // resources_unavailable, which clients wait out).
    uint64_t cores_held = 0, memory_held = 0;
    for (const auto &kv : allocations_)
      if (kv.second->lease_id == c.lease_id && !kv.second->exited && !kv.second->client_gone) {
        cores_held += kv.second->workers;
        memory_held += kv.second->memory_mib;
      }
    if (cores_held + req.cores > c.lease_cores)
      return reply(c, E::LeaseInvalid, 0, 0,
                   "lease_invalid: lease " + std::to_string(c.lease_id) + " holds " +
                       std::to_string(c.lease_cores) + " core(s) here, " +
                       std::to_string(cores_held) + " in use, " + std::to_string(req.cores) +
                       " requested");
    if (c.lease_memory_mib && memory_held + memory > c.lease_memory_mib)
      return reply(c, E::LeaseInvalid, 0, 0,
                   "lease_invalid: lease " + std::to_string(c.lease_id) + " holds " +
                       std::to_string(c.lease_memory_mib) + " MiB here, " +
                       std::to_string(memory_held) + " in use, " + std::to_string(memory) +
                       " requested");
  }
  if (memory_used_ + static_cast<uint64_t>(memory) > cfg_.memory_mib)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 std::to_string(memory) + " MiB requested, " +
                     std::to_string(cfg_.memory_mib - memory_used_) + " MiB free");
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < core_used_.size() && free_slots.size() < req.cores; ++i)
    if (!core_used_[i])
      free_slots.push_back(i);
  if (free_slots.size() < req.cores)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 std::to_string(req.cores) + " cores requested, " +
                     std::to_string(std::count(core_used_.begin(), core_used_.end(), false)) +
                     " free");
  if (zygote_in_ < 0)
    return reply(c, E::Internal, 0, 0, "the executor zygote is not running");

  auto a = std::make_unique<Allocation>();
  do
    random_bytes(&a->id, sizeof a->id);
  while (a->id == 0 || allocations_.count(a->id));
  random_bytes(a->secret.bytes, sizeof a->secret.bytes);
  a->core_slots = free_slots;
  a->lease_id = rm_ ? c.lease_id : 0;
  a->memory_mib = memory;
  a->workers = req.cores;
  a->started = Clock::now();
  a->client_peer = c.peer;
  if (fabric_.capabilities().atomics) {
    a->record = rdmalib::Buffer<uint64_t>(fabric_, 4, rdmalib::AccessAll);
    a->has_record = true;
  }
  server::LaunchSpec spec;
  spec.allocation_id = a->id;
  spec.secret = a->secret;
  for (size_t s : free_slots)
    spec.cores.push_back(cfg_.cores[s]);
  spec.memory_mib = memory;
  spec.device = device_;
  spec.manager_host = listener_.address().host_text();
  spec.manager_port = listener_.address().port;
  spec.connect_ms = cfg_.workers_connected_ms;
  spec.library_loaded_ms = cfg_.library_loaded_ms;
  spec.request.assign(msg, msg + r.size);
  std::string text = spec.serialize();
  uint64_t id = a->id;
  Allocation &ref = *a;
  allocations_[id] = std::move(a);
  for (size_t s : free_slots)
    core_used_[s] = true;
  memory_used_ += memory;
  c.requested = true;
  c.allocation = id;

  if (!write_all(zygote_in_, "spawn " + std::to_string(text.size()) + "\n" + text)) {
    ref.exited = true;
    ref.exit_code = 1;
    ref.client_gone = true;
    return reply(c, E::Internal, 0, 0, "cannot reach the executor zygote");
  }
  auto deadline = Clock::now() + milliseconds(cfg_.executor_start_ms);
  while (ref.pid < 0 && !ref.exited && Clock::now() < deadline)
    read_zygote(10);
  if (ref.pid <= 0) {
    ref.client_gone = true;
    if (!ref.exited) {
      ref.exited = true;
      ref.exit_code = 1;
    }
    return reply(c, E::Internal, 0, 0, "the executor did not start");
  }
  spdlog::info("allocation {:x}: {} core(s), {} MiB, hot {} ms, client {}, executor pid {}", id,
               req.cores, memory, req.hot_timeout_ms, c.peer, ref.pid);
  reply(c, E::Ok, id, req.cores, "");
}

void Manager::poll_clients() {
  for (auto &cp : clients_) {
    Client &c = *cp;
    if (c.closed)
      continue;
    // A few messages per client and round, so one client cannot hold the loop.
    for (int i = 0; i < 4 && !c.closed; ++i) {
      proto::ControlMessage m = c.channel.poll();
      if (m.status == proto::ChannelStatus::Timeout)
        break;
      ++events_;
      if (m.status == proto::ChannelStatus::Closed) {
        if (c.channel.failed() && c.allocation == 0)
          admission_.peer_event(
              "client " + c.peer + ": " + c.channel.last_error() + "; dropping it", Clock::now());
        else if (c.channel.failed())
          spdlog::warn("client {}: {}; dropping it", c.peer, c.channel.last_error());
        client_left(c, false);
        break;
      }
      if (m.status == proto::ChannelStatus::Shutdown) {
        client_left(c, true);
        break;
      }
      if (m.status == proto::ChannelStatus::Ok && rm_ &&
          m.header.type == proto::MessageType::LeaseProof) {
        check_lease(c, m.data, m.size);
      } else if (m.status == proto::ChannelStatus::Ok &&
                 m.header.type == proto::MessageType::AllocationRequest) {
        if (rm_ && !c.lease_ok) {
          reply(c, proto::ErrorCode::LeaseInvalid, 0, 0,
                !c.lease_ended.empty() ? c.lease_ended
                                       : "lease_invalid: present the lease (LeaseProof) before the "
                                         "AllocationRequest");
          client_left(c, false);
          break;
        }
        handle_allocation_request(c, m.data, m.size);
        if (c.requested)
          admission_.granted(c.ticket);
      } else if (m.status == proto::ChannelStatus::Ok ||
                 m.status == proto::ChannelStatus::BadMessage) {
        admission_.bad_input("client " + c.peer + ": ignoring a message: " +
                                 (m.wire
                                      ? std::string("unexpected ") + proto::to_string(m.header.type)
                                      : proto::describe(m.wire)),
                             Clock::now());
        if (!m.wire)
          reply(c, proto::reply_code(m.wire.error), 0, 0, proto::describe(m.wire));
      }
    }
  }
  for (auto &c : clients_)
    if (c->closed)
      admission_.released(c->ticket);
  clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                [](const std::unique_ptr<Client> &c) { return c->closed; }),
                 clients_.end());
}

void Manager::client_left(Client &c, bool graceful) {
  c.closed = true;
  c.conn.close();
  auto it = allocations_.find(c.allocation);
  if (it == allocations_.end()) {
    // Clients without an allocation come and go in floods: not worth a line.
    spdlog::debug("client {} {}", c.peer, graceful ? "said goodbye" : "disconnected");
    return;
  }
  spdlog::info("client {} {}", c.peer, graceful ? "deallocated" : "disconnected");
  Allocation &a = *it->second;
  a.client_gone = true;
  auto now = Clock::now();
  // After a goodbye the executor ends by itself (its workers got Shutdown
  // too); give it a grace period. After a disconnect, terminate it now.
  a.term_at = graceful ? now + milliseconds(cfg_.shutdown_grace_ms) : now;
  a.kill_at = a.term_at + milliseconds(cfg_.shutdown_grace_ms);
}

void Manager::close_pending(Admission::Ticket t) {
  admission_.released(t);
  for (auto &c : clients_)
    if (c->ticket == t && !c->closed) {
      c->closed = true;
      c->conn.close();
      return;
    }
}

void Manager::admission_tick(Clock::time_point now) {
  // A client that connects and never obtains an allocation must not hold a
  // connection for long.
  for (Admission::Ticket t : admission_.expired(now))
    close_pending(t);
  // A flood that went away leaves free heap pages behind: hand them back.
  if (admission_.pending() == 0 && pending_peak_since_trim_ > 0)
    malloc_trim(0);
  if (admission_.pending() == 0 || admission_.pending() > pending_peak_since_trim_)
    pending_peak_since_trim_ = admission_.pending();
  std::string line = admission_.periodic(now);
  if (!line.empty())
    spdlog::info("{}", line);
}

void Manager::poll_executors() {
  for (auto &kv : allocations_) {
    Allocation &a = *kv.second;
    if (!a.exec_connected || a.exec_done)
      continue;
    for (int i = 0; i < 8 && !a.exec_done; ++i) {
      proto::ControlMessage m = a.exec_channel.poll();
      if (m.status == proto::ChannelStatus::Timeout)
        break;
      ++events_;
      if (m.status == proto::ChannelStatus::SendFailed) {
        spdlog::warn("allocation {:x}: cannot advertise the accounting record: {}", a.id,
                     a.exec_channel.last_error());
        continue;
      }
      if (m.status == proto::ChannelStatus::Closed || m.status == proto::ChannelStatus::Shutdown) {
        a.exec_done = true;
        break;
      }
      proto::Accounting acc;
      if (m.status == proto::ChannelStatus::Ok && m.header.type == proto::MessageType::Accounting) {
        if (proto::decode(m.data, m.size, acc) && acc.allocation_id == a.id)
          a.accounting.add(acc.counters);
        else
          spdlog::warn("allocation {:x}: dropping a bad Accounting message", a.id);
      } else {
        spdlog::warn("allocation {:x}: executor sent something unexpected", a.id);
      }
    }
  }
}

void Manager::tick() {
  auto now = Clock::now();
  admission_tick(now);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    Allocation &a = *it->second;
    if (!a.exited && a.client_gone) {
      if (!a.term_sent && now >= a.term_at) {
        signal_executor(a, SIGTERM);
        a.term_sent = true;
      } else if (a.term_sent && !a.kill_sent && now >= a.kill_at) {
        spdlog::warn("allocation {:x}: executor ignored SIGTERM; killing it", a.id);
        signal_executor(a, SIGKILL);
        a.kill_sent = true;
      }
    }
    // An executor that ended on its own (crash, setup failure): its client
    // learns it from the worker connections; the allocation ends here.
    bool drained = !a.exec_connected || a.exec_done || now - a.exited_at > milliseconds(500);
    if (a.exited && drained) {
      finish(a);
      for (auto &c : clients_) {
        if (c->allocation != a.id)
          continue;
        c->allocation = 0;
        // Where the fabric reports no dead peer, the client's link to us
        // would stay open for ever; its executor could not reach it, so it
        // is gone (or cut off, and its allocation is over anyway).
        if (a.exit_code == server::ExitClientLost && !c->closed) {
          spdlog::warn("client {}: its executor could not reach it; dropping it", c->peer);
          c->closed = true;
          c->conn.close();
        }
      }
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
}

void Manager::finish(Allocation &a) {
  for (size_t s : a.core_slots)
    core_used_[s] = false;
  memory_used_ -= std::min(memory_used_, a.memory_mib);
  proto::AccountingCounters t = a.accounting.totals(a.has_record ? a.record.data() : nullptr);
  if (cfg_.log_accounting)
    spdlog::info("allocation {:x} ended: executor {}; {}", a.id, describe_exit(a.exit_code),
                 AllocationAccounting::describe(t));
  if (rm_ && a.lease_id) {
    LeaseUse &u = lease_use_[a.lease_id];
    u.totals.allocation_ns += t.allocation_ns;
    u.totals.hot_polling_ns += t.hot_polling_ns;
    u.totals.execution_ns += t.execution_ns;
    u.totals.invocations += t.invocations;
    u.memory_mib = std::max<uint64_t>(u.memory_mib, a.memory_mib);
    bool others = std::any_of(allocations_.begin(), allocations_.end(), [&](const auto &kv) {
      return kv.second.get() != &a && kv.second->lease_id == a.lease_id;
    });
    report_lease(a.lease_id, u.ended && !others);
  }
}

void Manager::check_lease(Client &c, const uint8_t *msg, size_t len) {
  proto::LeaseProof proof;
  proto::WireResult r = proto::decode(msg, len, proof);
  std::string why;
  if (!r) {
    why = "bad LeaseProof: " + proto::describe(r);
  } else if (proof.lease_id != c.lease_id) {
    why = "lease_invalid: the LeaseProof names another lease than the ClientHello";
  } else {
    rm::LeaseClaim claim{proof.lease_id,  verifier_->node(),
                         proof.cores,     proof.memory_mib,
                         proof.expiry_ms, std::string(proto::get_text(proof.client))};
    rm::LeaseToken token;
    std::memcpy(token.data(), c.token.bytes, token.size());
    const uint64_t now_ms =
        static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    rm::TokenVerdict v = verifier_->verify(claim, token, now_ms);
    if (v == rm::TokenVerdict::Ok) {
      c.lease_ok = true;
      c.lease_cores = proof.cores;
      c.lease_memory_mib = proof.memory_mib;
      spdlog::info("client {}: lease {} of {} verified ({} core(s), {} MiB)", c.peer,
                   proof.lease_id, claim.client, proof.cores, proof.memory_mib);
      return;
    }
    why = rm::reason_text(v);
  }
  spdlog::warn("client {}: refusing lease {}: {}", c.peer, c.lease_id, why);
  reply(c, r ? proto::ErrorCode::LeaseInvalid : proto::reply_code(r.error), 0, 0, why);
  client_left(c, false);
}

void Manager::lease_ended(const proto::LeaseEnded &e) {
  const uint64_t now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  verifier_->mark_ended(e.lease_id, e.expiry_ms, now_ms);
  lease_use_[e.lease_id].ended = true;
  auto now = Clock::now();
  bool live = false;
  for (auto &kv : allocations_) {
    Allocation &a = *kv.second;
    if (a.lease_id != e.lease_id)
      continue;
    live = true;
    if (!a.client_gone) {
      spdlog::info("lease {} {}: ending allocation {:x}", e.lease_id, proto::to_string(e.why),
                   a.id);
      a.client_gone = true;
      a.term_at = now;
      a.kill_at = now + milliseconds(cfg_.shutdown_grace_ms);
    }
  }
  // A client of this lease that has not asked for an allocation yet learns
  // why in the answer to its request. Nothing is sent unasked: the client
  // posts its receives only once its connect() returned, so a message sent
  // right after our accept may find none, and a close right after it would
  // leave the client with nothing but the close. A client that never asks is
  // closed at the admission request deadline.
  for (auto &c : clients_)
    if (!c->closed && c->lease_id == e.lease_id) {
      if (c->requested) {
        client_left(*c, false);
        continue;
      }
      c->lease_ok = false;
      c->lease_ended = "lease_invalid: lease " + std::to_string(e.lease_id) + " ended (" +
                       proto::to_string(e.why) + ")";
    }
  if (!live)
    report_lease(e.lease_id, true);
}

void Manager::report_lease(uint64_t lease_id, bool final) {
  auto it = lease_use_.find(lease_id);
  if (it == lease_use_.end())
    return;
  proto::AccountingReport r;
  r.lease_id = lease_id;
  r.allocation_us = it->second.totals.allocation_ns / 1000;
  r.hot_polling_us = it->second.totals.hot_polling_ns / 1000;
  r.execution_us = it->second.totals.execution_ns / 1000;
  r.memory_mib = it->second.memory_mib;
  r.final = final ? 1 : 0;
  rm_->report(r);
  if (final)
    lease_use_.erase(it);
}

// The resource manager keeps the latest report per lease and node: each one
// is cumulative, the ended allocations' totals plus the live ones' so far.
void Manager::report_live_leases() {
  std::map<uint64_t, LeaseUse> live;
  for (const auto &kv : allocations_) {
    const Allocation &a = *kv.second;
    if (!a.lease_id || a.exited)
      continue;
    proto::AccountingCounters t = a.accounting.totals(a.has_record ? a.record.data() : nullptr);
    LeaseUse &u = live[a.lease_id];
    u.totals.allocation_ns += t.allocation_ns;
    u.totals.hot_polling_ns += t.hot_polling_ns;
    u.totals.execution_ns += t.execution_ns;
    u.memory_mib = std::max<uint64_t>(u.memory_mib, a.memory_mib);
  }
  for (const auto &kv : live) {
    auto done = lease_use_.find(kv.first);
    proto::AccountingReport r;
    r.lease_id = kv.first;
    uint64_t alloc = kv.second.totals.allocation_ns, hot = kv.second.totals.hot_polling_ns,
             exec = kv.second.totals.execution_ns, mem = kv.second.memory_mib;
    if (done != lease_use_.end()) {
      alloc += done->second.totals.allocation_ns;
      hot += done->second.totals.hot_polling_ns;
      exec += done->second.totals.execution_ns;
      mem = std::max(mem, done->second.memory_mib);
    }
    r.allocation_us = alloc / 1000;
    r.hot_polling_us = hot / 1000;
    r.execution_us = exec / 1000;
    r.memory_mib = mem;
    r.final = 0;
    rm_->report(r);
  }
}

} // namespace rfaas::manager
