#include "executor_manager/manager_state.hpp"

#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

using std::chrono::milliseconds;

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
      zygote_(executor_path_, device_, cfg_.zygote, cfg_.sandbox, cfg_.executor_pool,
              [this](const ZygoteEvent &e) { executor_event(e); }),
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
    // Attempts run on the link's own thread (rdmalib has no asynchronous
    // connect); tcp;ofi_rxm needed over a second on a loaded machine.
    o.connect_timeout = milliseconds(cfg_.resource_manager_connect_ms);
    verifier_ = std::make_unique<rm::TokenVerifier>(o.node, o.secret);
    spdlog::info("resource-manager mode: node {}, resource manager {}; clients need a lease",
                 o.node, o.resource_manager.to_string());
    rm_ = std::make_unique<RmLink>(fabric_, std::move(o));
    // Before any client is accepted: tokens of leases that ended before a
    // restart stay refused, whether or not the resource manager is reachable.
    load_ended_leases();
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
  // Pooled executors connect their accounting links while they wait: off
  // the cold start's critical path (docs/runtime.md, "The executor pool").
  zygote_.pool_links_to(listener_.address().host_text(), listener_.address().port,
                        cfg_.workers_connected_ms);
  zygote_.start(milliseconds(cfg_.executor_start_ms));
  if (cfg_.sandbox.kind == server::SandboxKind::Process)
    spdlog::warn("executor.sandbox is \"process\": every client's functions run as this "
                 "manager's user with its view of the node (its configuration and secret "
                 "included); serve a single trusted user only");
  // Where opening an endpoint is slow (shm), each kind of link finds one
  // opened ahead, off the clients' cold start; elsewhere this does nothing.
  // After the zygote started: its fork must not copy a half-opened endpoint.
  fabric_.prepare(client_link_options(cfg_.connect_ms));
  fabric_.prepare(executor_link_options(cfg_.connect_ms));
}

Manager::~Manager() {
  zygote_.stop(milliseconds(cfg_.shutdown_grace_ms));
  if (signal_fd_ >= 0)
    ::close(signal_fd_);
}

const rdmalib::Address &Manager::address() const { return listener_.address(); }
const std::string &Manager::provider() const { return fabric_.provider(); }

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
    pollfd p[3] = {{listener_.fd(), POLLIN, 0}, {zygote_.fd(), POLLIN, 0}, {signal_fd_, POLLIN, 0}};
    const bool quiet = Clock::now() - last_activity_ >= kSettleAfter;
    int timeout =
        busy ? (quiet ? kSettledPollMs : kBusyPollMs) : (listener_.fd() < 0 ? 10 : kAcceptLookMs);
    // Heartbeats and lease-ended notices. While notices flow, a look every
    // 5 ms takes them (the resource manager sends what ended meanwhile in
    // one message); every millisecond only while they come in full
    // messages. Each look is a wake-up that takes a core from whatever runs
    // there: with looks every millisecond, the two managers of the
    // resource-manager benchmark woke 950 times a second on its 2 CPUs and
    // set its lease p99 (benchmarks/README.md).
    if (rm_)
      timeout = std::min(timeout, rm_->notices_backed_up() ? 1 : rm_->notices_flowing() ? 5 : 20);
    if (pooled_answer_pending())
      timeout = std::min(timeout, 1);
    ::poll(p, 3, timeout);
    if (p[2].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(signal_fd_, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)
          stopping = true;
        // SIGCHLD: the zygote is our only child; its death shows as EOF on
        // its pipe, handled in zygote_.read().
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP))
      zygote_.read(0);
    // A listener's fd may be a doorbell that only rdmalib peers able to
    // reach it ring (docs/rdmalib.md): look now and then regardless.
    const bool woken = listener_.fd() < 0 || (p[0].revents & POLLIN);
    if (woken || Clock::now() - last_accept_look_ >= milliseconds(kAcceptLookMs)) {
      last_accept_look_ = Clock::now();
      accept_requests(woken ? milliseconds(5) : milliseconds(0));
    }
    poll_clients();
    poll_executors();
    poll_pooled_links();
    restart_zygote();
    tick();
    if (rm_ && cfg_.accounting_interval_ms &&
        Clock::now() - last_periodic_report_ > milliseconds(cfg_.accounting_interval_ms)) {
      last_periodic_report_ = Clock::now();
      report_live_leases();
    }
    if (rm_) {
      std::vector<proto::LeaseEnded> ended;
      rm_->poll(ended, static_cast<uint32_t>(allocations_.size()));
      for (const proto::LeaseEnded &e : ended) {
        if (e.why == proto::LeaseEndReason::Renewed)
          lease_renewed(e);
        else
          lease_ended(e);
      }
      expire_leases();
      flush_ended();
    }
    if (events_ != events_seen_ || !settled())
      last_activity_ = Clock::now();
    events_seen_ = events_;
  }
  if (rm_)
    rm_->close();
  spdlog::info("stopping: ending {} allocation(s); {} of {} executor(s) came from the pool, {} "
               "with their accounting link connected ahead",
               allocations_.size(), executors_pooled_, executors_started_, links_ahead_);
  for (auto &kv : allocations_)
    signal_executor(*kv.second, SIGTERM);
  auto deadline = Clock::now() + milliseconds(cfg_.shutdown_grace_ms);
  // Without a zygote (it died, its restart pending) no executor is left.
  while (Clock::now() < deadline && zygote_.running() &&
         std::any_of(allocations_.begin(), allocations_.end(),
                     [](const auto &kv) { return !kv.second->exited; })) {
    zygote_.read(10);
    poll_executors();
  }
  zygote_.stop(milliseconds(cfg_.shutdown_grace_ms));
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
} // namespace rfaas::manager
