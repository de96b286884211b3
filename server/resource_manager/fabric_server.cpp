#include "resource_manager/fabric_server.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace proto = rfaas::protocol;
using std::chrono::milliseconds;
static_assert(kLeaseSecretSize == proto::kTokenSize, "a lease secret travels in a Token field");

namespace {

/// Receives kept posted per connection: requests are answered one by one,
/// heartbeats and accounting are small and drained every pass.
constexpr uint32_t kReceives = 8;
/// Queued answers per connection before it is dropped as not reading.
constexpr size_t kMaxQueued = 256;
/// Notices kept per node (backlog or disconnected) before the oldest are
/// dropped: 32 bytes each. A node that reads takes 128 per message, one
/// message per round trip, so only a node that stopped reading (or is
/// away while its leases end) comes near it.
constexpr size_t kMaxBacklog = 65536;
/// At most one message of notices per node in this time, unless 128 wait:
/// a client releasing leases back to back would otherwise cost a send (a
/// system call on tcp) and a read at the node per lease, and the node's
/// manager a wake-up per message, all on the cores that serve the next
/// request (lo-tcp lease p99 9-10x its median instead of 5x).
constexpr auto kNoticeGap = std::chrono::milliseconds(1);
/// Dropped notices are said in the log at most this often, per node with
/// drops since the last lines.
constexpr auto kDropLineEvery = std::chrono::seconds(1);
/// Messages handled per connection per pass, so one chatty peer cannot
/// starve the others or the REST tasks.
constexpr int kMessagesPerPass = 16;
/// After a link without a wait descriptor (shm) last spoke, the loop polls
/// instead of sleeping for this long: a client's next request usually
/// follows within microseconds, and a sleep would add a scheduler wake-up
/// (or, without a descriptor, a whole timeout) to it. Past it, such links
/// are looked at every millisecond.
constexpr auto kPollWindow = std::chrono::milliseconds(10);
/// Within that window a quiet node's link without a descriptor is read at
/// most this often. Nodes are not on a lease's path (the client takes its
/// token to the node), and their messages (heartbeats, accounting, notice
/// acknowledgements) can wait this long; each read costs a pass a check of
/// the node's process and a provider call, and a pass's answers leave only
/// after every peer of the pass was read (lo-shm: two idle nodes added
/// about a microsecond to each lease).
constexpr auto kQuietNodeEvery = std::chrono::microseconds(50);
/// How often every peer is looked at for its idle timeout (at least
/// 100 ms, the smallest configurable). At 10,000 peers a sweep is a fraction
/// of a millisecond; per pass it would be the whole cost of a pass.
constexpr auto kSweepEvery = std::chrono::milliseconds(100);
/// Peers other than clients (nodes, and connections not yet registered)
/// served per pass; the rest wait for the next pass, first in line. A
/// pass's answers leave after its commit, so a lease request waited for
/// every heartbeat read in the same pass: at 10,000 nodes a pass that
/// followed a few milliseconds without the CPU read hundreds of them, and
/// lease latency grew with the fleet. Clients are served first and in
/// full; at about 7 us a heartbeat, 64 of them bound a pass to half a
/// millisecond, and passes follow each other until every peer was read.
constexpr size_t kNodePeersPerPass = 64;

std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}

proto::ErrorCode wire_code(Outcome o) {
  switch (o) {
  case Outcome::Ok:
    return proto::ErrorCode::Ok;
  case Outcome::Invalid:
    return proto::ErrorCode::BadRequest;
  case Outcome::NotFound:
  case Outcome::Forbidden:
  case Outcome::Conflict:
    return proto::ErrorCode::LeaseInvalid;
  case Outcome::Unavailable:
  case Outcome::QuotaExceeded: // the message names the quota
    return proto::ErrorCode::ResourcesUnavailable;
  case Outcome::StoreFailed:
    return proto::ErrorCode::Internal;
  }
  return proto::ErrorCode::Internal;
}

proto::LeaseEndReason end_reason(LeaseState s) {
  switch (s) {
  case LeaseState::Expired:
    return proto::LeaseEndReason::Expired;
  case LeaseState::Revoked:
    return proto::LeaseEndReason::Revoked;
  case LeaseState::NodeDown:
    return proto::LeaseEndReason::NodeDown;
  case LeaseState::Active: // a renewal (Registry::renew)
    return proto::LeaseEndReason::Renewed;
  default:
    return proto::LeaseEndReason::Released;
  }
}

template <class M> bool decode_message(const proto::ControlMessage &m, M &out, std::string &why) {
  proto::WireResult r = proto::decode(m.data, m.size, out);
  if (!r)
    why = proto::describe(r);
  return r.ok();
}

} // namespace

struct FabricServer::Peer {
  enum class Kind { Unknown, Node, Client };
  // The channel before the connection: its buffers outlive the close.
  proto::ControlChannel channel;
  rdmalib::Connection conn;
  Kind kind = Kind::Unknown;
  std::string node; // a registered node's name
  std::string remote;
  std::deque<std::vector<uint8_t>> outbox;
  Clock::time_point since = Clock::now();
  /// When it last sent a message (idle clients are closed).
  Clock::time_point heard = Clock::now();
  /// Connection::wait_fd() once asked (-2 before), and how many times in a
  /// row arm() found something pending.
  int wait_fd = -2;
  int arm_failures = 0;
  /// wait_fd, asking the connection the first time.
  int descriptor() {
    if (wait_fd == -2)
      wait_fd = conn.wait_fd();
    return wait_fd;
  }
  /// The loop slept on wait_fd for this link: it is read again only once
  /// the descriptor fired (ready), so a pass touches the links that have
  /// something rather than every link (a provider call, often a system
  /// call, each).
  bool armed = false;
  bool ready = false;
  /// Shared endpoint: its tag (ready_links), and whether it did something
  /// at the last pass (then it is read again at the next, whatever
  /// ready_links says: more may wait, or an answer may be owed).
  uint64_t tag = 0;
  bool busy = true;
  /// ready_links named it at the last pass and a read found nothing (an
  /// answer the provider cannot take yet): looked at every millisecond.
  bool ready_idle = false;
  /// On FabricServer::active_: the next pass looks at it.
  bool listed = false;
  /// Set when the connection must go at the end of this pass.
  bool closing = false;
  /// Set when it must go once its queued answers have left (a refused
  /// registration); closing_why says why.
  bool close_after_send = false;
  std::string closing_why;
  /// A node: when its last message of notices was queued, and whether
  /// notices wait for the gap after it to pass (kNoticeGap).
  Clock::time_point notices_sent{};
  bool notices_held = false;
  /// A quiet node without a wait descriptor: not read before this
  /// (kQuietNodeEvery).
  Clock::time_point next_quiet_read{};
};

namespace {
rdmalib::ConnectionOptions accept_options() {
  rdmalib::ConnectionOptions opts;
  opts.recv_depth = kReceives + 2;
  // Every peer speaks first (NodeRegister, LeaseRequest, ...), so on
  // reliable-datagram fabrics the answer to its hello may leave in the
  // background, posted again by the loop's polls until accept_timeout_ms.
  // Waiting for it held the acceptor for a second per connection on
  // tcp;ofi_rxm (it first connects back to the peer), and for the whole
  // timeout when the peer had given up.
  opts.accept_in_background = true;
  // One loop polls every peer: a peer that died must not hang it.
  opts.check_peer_before_poll = true;
  return opts;
}
} // namespace

FabricServer::FabricServer(const rdmalib::DeviceConfig &device, const FabricConfig &config)
    : cfg_(config), auth_(cfg_.auth, cfg_.munge_socket), device_(device), fabric_(device_),
      listener_(fabric_,
                rdmalib::Address{cfg_.host.empty() ? device_.ip_address : cfg_.host, cfg_.port}) {
  acceptor_stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (acceptor_stop_fd_ < 0)
    throw std::runtime_error(std::string("fabric: eventfd: ") + std::strerror(errno));
  // Where opening an endpoint is slow (shm), one waits ready for the next
  // connection; elsewhere this does nothing.
  fabric_.prepare(accept_options());
  shared_ = fabric_.capabilities().shared_endpoint;
}

FabricServer::~FabricServer() {
  stop_acceptor();
  nodes_.clear();
  peers_.clear();
  accepted_.clear();
  ::close(acceptor_stop_fd_);
}

void FabricServer::started(std::function<void()> wake) {
  wake_ = std::move(wake);
  if (accepting_.exchange(true))
    return;
  acceptor_ = std::thread([this] { accept_loop(); });
}

void FabricServer::stop_acceptor() {
  if (!accepting_.exchange(false))
    return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(acceptor_stop_fd_, &one, sizeof one);
  if (acceptor_.joinable())
    acceptor_.join();
}

void FabricServer::accept_loop() {
  // A readable descriptor means a request may be pending; the listener's
  // contract asks for a look every few hundred milliseconds regardless (a
  // peer in another network namespace cannot ring shm's doorbell).
  const int lfd = listener_.fd();
  while (accepting_.load()) {
    if (lfd >= 0) {
      pollfd pfds[2] = {{lfd, POLLIN, 0}, {acceptor_stop_fd_, POLLIN, 0}};
      ::poll(pfds, 2, 200);
      if (!accepting_.load())
        return;
    }
    for (int i = 0; i < 64 && accepting_.load(); ++i) {
      rdmalib::ConnectionRequest req;
      try {
        req = listener_.next_request(milliseconds(lfd >= 0 ? 0 : 100));
      } catch (const rdmalib::Error &e) {
        if (e.kind() != rdmalib::ErrorKind::Timeout)
          log()->warn("fabric listener: {}", e.what());
        break;
      }
      try {
        std::unique_ptr<Peer> p = accept_one(req);
        if (!p)
          continue;
        ++open_count_;
        {
          std::lock_guard<std::mutex> g(accepted_mutex_);
          accepted_.push_back(std::move(p));
        }
        if (wake_)
          wake_();
      } catch (const std::exception &e) {
        log()->warn("fabric: connection setup failed: {}", e.what());
      }
    }
  }
}

bool FabricServer::take_accepted() {
  std::lock_guard<std::mutex> g(accepted_mutex_);
  if (accepted_.empty())
    return false;
  for (auto &p : accepted_) {
    // A new peer is read at once (busy): it speaks first.
    activate(*p);
    const uint64_t tag = p->tag;
    peers_.emplace(tag, std::move(p));
  }
  accepted_.clear();
  if (latencies_)
    latencies_->fabric_work.connections = peers_.size();
  return true;
}

void FabricServer::activate(Peer &p) {
  if (p.listed)
    return;
  p.listed = true;
  active_.push_back(&p);
}

bool FabricServer::needs_pass(Peer &p) {
  // A link of its own that is not armed is read at every pass until a sleep
  // arms it: its descriptor would not tell.
  return p.closing || p.busy || p.ready || !p.outbox.empty() || !p.channel.send_idle() ||
         p.notices_held || (!shared_ && !p.armed);
}

bool FabricServer::quiet_unarmed(Peer &p) {
  return !shared_ && p.kind != Peer::Kind::Client && !p.armed && !p.closing && !p.busy &&
         !p.ready && p.outbox.empty() && !p.notices_held && p.channel.send_idle();
}

void FabricServer::count_visits(size_t peers) {
  if (!latencies_)
    return;
  FabricWork &w = latencies_->fabric_work;
  w.passes.fetch_add(1, std::memory_order_relaxed);
  w.peer_visits.fetch_add(peers, std::memory_order_relaxed);
}

void FabricServer::sweep(Clock::time_point now) {
  swept_ = now;
  // Drops after the last line would otherwise be said only by the next
  // drop, which may never come (the burst ended, the node caught up).
  if (!drops_unsaid_.empty() && now - drops_said_ >= kDropLineEvery)
    say_drops(now);
  for (auto &entry : peers_) {
    Peer &p = *entry.second;
    if (p.closing)
      continue;
    if (p.kind == Peer::Kind::Unknown && now - p.since > milliseconds(cfg_.idle_timeout_ms)) {
      p.closing = true;
      p.closing_why = "said nothing within fabric.idle_timeout_ms";
    }
    // An idle client holds a slot others may need; its leases stay.
    if (p.kind == Peer::Kind::Client && p.outbox.empty() &&
        now - p.heard > milliseconds(cfg_.client_idle_timeout_ms)) {
      p.closing = true;
      p.closing_why = "sent nothing within fabric.client_idle_timeout_ms";
    }
    if (p.closing)
      activate(p);
  }
  if (latencies_)
    latencies_->fabric_work.sweep_visits.fetch_add(peers_.size(), std::memory_order_relaxed);
}

bool FabricServer::mark_ready_links() {
  ready_tags_.clear();
  if (!shared_ || !fabric_.ready_links(ready_tags_))
    return false;
  bool fresh = false;
  for (uint64_t t : ready_tags_) {
    auto it = peers_.find(t);
    // A link the acceptor has not handed over yet: taken at the next pass.
    if (it == peers_.end())
      continue;
    Peer &p = *it->second;
    p.ready = true;
    activate(p);
    fresh = fresh || !p.ready_idle;
  }
  return fresh;
}

int FabricServer::prepare_wait(std::vector<int> &fds) {
  int limit = -1;
  // Peers a pass had no budget left for are read without a sleep.
  bool now = !deferred_.empty();
  bool fdless = false;
  if (shared_) {
    // Only the active peers can owe work: the others wait for ready_links.
    count_visits(active_.size());
    for (Peer *p : active_) {
      if (p->closing) {
        now = true; // goes at the next pass
        continue;
      }
      // Read again at once after it did something; an answer that found
      // no room at the provider, or a send not yet complete, within 1 ms.
      if (p->busy || (p->ready && !p->ready_idle))
        now = true;
      else if (p->ready || !p->outbox.empty() || !p->channel.send_idle() || p->notices_held)
        limit = 1;
    }
  } else {
    // Each link has a descriptor of its own, armed one by one (counted
    // apart: it is the provider's model, not a pass's work).
    count_visits(0);
    if (latencies_)
      latencies_->fabric_work.links_armed.fetch_add(peers_.size(), std::memory_order_relaxed);
    for (auto &entry : peers_) {
      Peer *p = entry.second.get();
      p->armed = false;
      if (p->closing) {
        now = true;
        activate(*p);
        continue;
      }
      if (p->descriptor() < 0) {
        fdless = true;
        activate(*p);
        continue;
      }
      // An answer that found no room at the provider moves only when polled;
      // notices held for kNoticeGap leave at the pass after it.
      if ((!p->outbox.empty() && p->channel.send_idle()) || p->notices_held) {
        limit = 1;
        activate(*p);
      }
      if (p->conn.ops().arm()) {
        p->arm_failures = 0;
        p->armed = true;
        fds.push_back(p->wait_fd);
        continue;
      }
      activate(*p);
      // Something may be pending: poll again at once, twice; a link that
      // stays so (a handshake answer the provider cannot take yet) is looked
      // at every millisecond rather than spun on.
      if (++p->arm_failures <= 2)
        now = true;
      else
        limit = 1;
    }
  }
  if (fdless) {
    if (Clock::now() - fdless_active_ < kPollWindow)
      now = true;
    else
      limit = 1;
  }
  if (shared_ && !now && !peers_.empty()) {
    // Every link sleeps on the same descriptor, armed through any of them;
    // what was read for other links meanwhile waits in rdmalib.
    if (mark_ready_links())
      return 0;
    for (Peer *p : active_)
      if (p->ready)
        limit = 1; // owes work that found no room yet
    Peer *any = nullptr;
    for (auto &entry : peers_)
      if (!entry.second->closing) {
        any = entry.second.get();
        break;
      }
    if (any) {
      if (any->descriptor() >= 0 && any->conn.ops().arm()) {
        shared_arm_failures_ = 0;
        fds.push_back(any->wait_fd);
      } else if (++shared_arm_failures_ <= 2) {
        now = true;
      } else {
        limit = 1;
      }
    }
  }
  return now ? 0 : limit;
}

void FabricServer::ready(const std::vector<int> &fds) {
  // On a shared endpoint ready_links says which links have something.
  if (fds.empty() || shared_)
    return;
  std::vector<int> sorted(fds);
  std::sort(sorted.begin(), sorted.end());
  for (auto &entry : peers_) {
    Peer &p = *entry.second;
    if (p.armed && std::binary_search(sorted.begin(), sorted.end(), p.wait_fd)) {
      p.ready = true;
      activate(p);
    }
  }
}

void FabricServer::take_pass() {
  // Every client, then at most kNodePeersPerPass others: the oldest
  // deferred first, then those active since the last pass; the rest wait at
  // the back of deferred_, still listed. Costs O(newly active + budget),
  // never O(backlog): a backlog walked at every pass grew itself.
  pass_.clear();
  others_.clear();
  for (Peer *p : active_)
    (p->kind == Peer::Kind::Client ? pass_ : others_).push_back(p);
  active_.clear();
  const size_t clients = pass_.size();
  size_t budget = kNodePeersPerPass;
  for (; budget > 0 && !deferred_.empty(); --budget) {
    pass_.push_back(deferred_.front());
    deferred_.pop_front();
  }
  size_t i = 0;
  for (; i < others_.size() && budget > 0; ++i, --budget)
    pass_.push_back(others_[i]);
  const size_t newly_deferred = others_.size() - i;
  for (; i < others_.size(); ++i)
    deferred_.push_back(others_[i]);
  if (latencies_) {
    FabricWork &w = latencies_->fabric_work;
    w.deferred.fetch_add(newly_deferred, std::memory_order_relaxed);
    const uint64_t served = pass_.size() - clients;
    if (served > w.largest_pass.load(std::memory_order_relaxed))
      w.largest_pass.store(served, std::memory_order_relaxed);
  }
}

bool FabricServer::poll(Registry &registry) {
  bool worked = take_accepted();
  const auto now = Clock::now();
  // The pass's writes are one transaction, and its answers wait for its
  // commit (queue_bytes holds them), whatever ends the pass.
  Store &store = registry.store();
  store.begin_batch();
  holding_ = true;
  struct EndBatch {
    FabricServer &self;
    Store &store;
    Registry &registry;
    ~EndBatch() {
      std::vector<uint64_t> failed = store.commit_batch();
      self.holding_ = false;
      if (!failed.empty())
        self.fail_held(failed, registry);
      self.held_.clear();
    }
  };
  mark_ready_links();
  // This pass works through the peers active now; what becomes active
  // during it (a notice queued, a connection replaced) is on active_ for
  // the next one.
  take_pass();
  for (Peer *p : pass_)
    p->listed = false;
  count_visits(pass_.size());
  uint64_t messages = 0;
  {
    EndBatch end{*this, store, registry};
    for (Peer *p : pass_) {
      if (p->closing)
        continue;
      // A link the loop slept on is read once its descriptor fired; until
      // it is armed again, at every pass. On a shared endpoint: once
      // ready_links named it, or after it did something.
      bool spoke = false;
      if (!shared_ && p->kind == Peer::Kind::Node && !p->busy && !p->ready &&
          now < p->next_quiet_read) {
        // Paced (kQuietNodeEvery): listed still, read at a later pass.
      } else if (shared_ ? p->ready || p->busy : !p->armed || p->ready) {
        const bool named = p->ready;
        p->armed = p->ready = false;
        const int read = serve(*p, registry);
        messages += static_cast<uint64_t>(std::max(read, 0));
        spoke = read != 0;
        p->ready_idle = named && !spoke;
        if (!spoke && p->kind == Peer::Kind::Node) {
          if (p->descriptor() < 0)
            p->next_quiet_read = now + kQuietNodeEvery;
        }
      }
      p->busy = spoke;
      worked |= spoke;
      if (spoke && p->wait_fd < 0)
        fdless_active_ = now;
      if (p->kind == Peer::Kind::Node && !p->closing && !pending_.empty() &&
          pending_.count(p->node)) {
        std::optional<NodeView> view = registry.node(p->node);
        if (!view || view->node.state != NodeState::Up) {
          p->notices_held = false; // they wait for its next heartbeat
        } else if (send_pending(*p)) {
          worked = true;
          p->busy = true;
        }
      }
    }
  }
  if (latencies_)
    latencies_->fabric_work.messages.fetch_add(messages, std::memory_order_relaxed);
  // After the reads, not before: a loop that stood still longer than a
  // timeout (stopped, starved of CPU) first reads what its peers sent
  // meanwhile, so a peer whose first request waits is served, not closed as
  // silent. A peer closed here has no answer queued (sweep() spares those).
  if (now - swept_ >= kSweepEvery)
    sweep(now);
  // Peers left for the next pass: it must follow at once.
  worked |= !deferred_.empty();
  // Answers leave after the commit: those of this pass's peers, and of any
  // peer a notice was queued for meanwhile.
  auto send = [&](Peer *p) {
    if (!p->closing && flush(*p)) {
      worked = true;
      p->busy = true;
    }
  };
  for (Peer *p : pass_)
    send(p);
  for (size_t i = 0; i < active_.size(); ++i)
    send(active_[i]);
  for (Peer *p : pass_) {
    if (!needs_pass(*p))
      continue;
    // A quiet node's link of its own is read at every pass until a sleep
    // arms it, and no sleep comes while peers wait for their turn
    // (deferred_): with more such links than a pass serves, the loop went
    // on passing over them for good, never sleeping (seen after a burst of
    // 100 heartbeats). Armed now, it leaves the list; the sleep arms it
    // again, which finds whatever came meanwhile. One without a descriptor
    // (shm) is looked at again when the next sleep is prepared, with every
    // such link. Clients are in every pass and stay as they are.
    if (!deferred_.empty() && quiet_unarmed(*p)) {
      if (p->descriptor() < 0)
        continue;
      if (p->conn.ops().arm()) {
        p->armed = true;
        continue;
      }
    }
    activate(*p);
  }
  pass_.clear();
  // Every peer closing is active now (needs_pass, or listed when it was
  // marked): drop them, after taking them off the list.
  const auto kept =
      std::partition(active_.begin(), active_.end(), [](const Peer *p) { return !p->closing; });
  if (kept != active_.end()) {
    std::vector<Peer *> closing(kept, active_.end());
    active_.erase(kept, active_.end());
    for (Peer *p : closing) {
      drop(*p, registry, p->closing_why);
      peers_.erase(p->tag);
    }
    worked = true;
    if (latencies_)
      latencies_->fabric_work.connections = peers_.size();
  }
  return worked;
}

std::unique_ptr<FabricServer::Peer> FabricServer::accept_one(rdmalib::ConnectionRequest &req) {
  const std::vector<uint8_t> &pd = req.private_data();
  proto::ClientHello hello;
  proto::WireResult r = proto::decode(pd.data(), pd.size(), hello);
  proto::ConnectReply reply;
  if (!r) {
    if (r.error != proto::WireError::VersionMismatch) {
      log()->warn("fabric: rejecting a connection request: {}", proto::describe(r));
      req.reject();
      return nullptr;
    }
    reply.status = proto::ErrorCode::VersionMismatch;
  } else if (open_count_.load() >= cfg_.max_connections) {
    reply.status = proto::ErrorCode::ResourcesUnavailable;
  }
  uint8_t reply_bytes[sizeof reply];
  proto::encode(reply, reply_bytes, sizeof reply_bytes);
  const rdmalib::ConnectionOptions opts = accept_options();
  auto p = std::make_unique<Peer>();
  p->conn = req.accept(reply_bytes, sizeof reply_bytes, milliseconds(cfg_.accept_timeout_ms), opts);
  // One loop serves every peer: a post finds room at once or waits in the
  // peer's queue (flush()), instead of holding the loop for the default
  // post deadline (5 s) while a peer does not read.
  p->conn.set_post_deadline(milliseconds(0));
  p->tag = next_tag_++;
  p->conn.set_tag(p->tag);
  if (reply.status != proto::ErrorCode::Ok) {
    log()->warn("fabric: refused a connection: {}", proto::to_string(reply.status));
    p->conn.close();
    return nullptr;
  }
  proto::ControlOptions copts;
  copts.receives = kReceives;
  copts.receive_size = proto::kMaxResourceManagerRequest;
  copts.send_size = proto::kMaxLeaseGrantSize;
  p->channel = proto::ControlChannel(fabric_, p->conn, copts);
  try {
    p->remote = p->conn.remote_address().to_string();
  } catch (const std::exception &) {
    p->remote = "?";
  }
  log()->debug("fabric: {} connected", p->remote);
  return p;
}

int FabricServer::serve(Peer &p, Registry &registry) {
  int read = 0;
  for (int i = 0; i < kMessagesPerPass && !p.closing; ++i) {
    proto::ControlMessage m = p.channel.poll();
    switch (m.status) {
    case proto::ChannelStatus::Timeout:
      return read;
    case proto::ChannelStatus::Ok:
      ++read;
      p.heard = Clock::now();
      handle(p, m, registry);
      // A client waits for this answer before it asks again: looking for
      // its next request now would only cost the answer a provider poll
      // (two on tcp). The pass after this one reads it again.
      if (p.kind == Peer::Kind::Client && !p.outbox.empty())
        return read;
      break;
    case proto::ChannelStatus::Shutdown:
      p.closing = true;
      p.closing_why = "said goodbye";
      return -1;
    case proto::ChannelStatus::Closed:
      p.closing = true;
      p.closing_why = p.channel.failed() ? std::string("receive failed: ") + p.channel.last_error()
                                         : "closed the connection";
      return -1;
    case proto::ChannelStatus::SendFailed:
      p.closing = true;
      p.closing_why = std::string("a send failed: ") + p.channel.last_error();
      return -1;
    default:
      p.closing = true;
      p.closing_why = "sent a malformed message: " + proto::describe(m.wire);
      return -1;
    }
  }
  return read;
}

void FabricServer::handle(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  using T = proto::MessageType;
  // Requests that get an answer are timed for /metrics.
  LatencyHistogram *timed = nullptr;
  if (latencies_) {
    switch (m.header.type) {
    case T::NodeRegister:
      timed = &latencies_->fabric_register;
      break;
    case T::LeaseRequest:
      timed = &latencies_->fabric_lease;
      break;
    case T::LeaseRenew:
      timed = &latencies_->fabric_renew;
      break;
    case T::LeaseRelease:
      timed = &latencies_->fabric_release;
      break;
    default:
      break;
    }
  }
  if (!timed)
    return dispatch(p, m, registry);
  const auto t0 = Clock::now();
  dispatch(p, m, registry);
  timed->observe(std::chrono::duration<double>(Clock::now() - t0).count());
}

void FabricServer::dispatch(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  using T = proto::MessageType;
  switch (m.header.type) {
  case T::NodeRegister:
    return on_register(p, m, registry);
  case T::Heartbeat:
    if (p.kind != Peer::Kind::Node) {
      p.closing = true;
      p.closing_why = "sent a heartbeat before registering";
      return;
    }
    if (Status s = registry.heartbeat(p.node); !s.ok())
      log()->warn("fabric: heartbeat of node {}: {}", p.node, s.message);
    else
      send_pending(p);
    return;
  case T::AccountingReport:
    return on_accounting(p, m, registry);
  case T::LeaseRequest:
    return on_lease_request(p, m, registry);
  case T::LeaseRenew:
    return on_renew(p, m, registry);
  case T::LeaseRelease:
    return on_release(p, m, registry);
  default:
    p.closing = true;
    p.closing_why = std::string("sent a ") + proto::to_string(m.header.type) +
                    ", which the resource manager does not take";
  }
}

void FabricServer::on_register(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  proto::NodeRegister reg;
  std::string why;
  proto::NodeRegistered answer;
  answer.now_ms = registry.now();
  auto refuse = [&](proto::ErrorCode code, const std::string &text) {
    log()->warn("fabric: refused the registration from {}: {}", p.remote, text);
    answer.status = code;
    proto::set_text_truncated(answer.message, text);
    queue(p, answer);
    // Closed once the answer left (or at the next pass if it cannot). A
    // connection that had registered keeps its kind: its close marks the
    // node down and forgets it (drop()), so nothing points at it afterwards.
    p.close_after_send = true;
    p.closing_why = "registration refused";
  };
  if (p.kind == Peer::Kind::Client) {
    p.closing = true;
    p.closing_why = "a client connection sent NodeRegister";
    return;
  }
  if (!decode_message(m, reg, why))
    return refuse(proto::ErrorCode::BadRequest, "bad NodeRegister: " + why);
  RegistrationClaim claim{std::string(proto::get_text(reg.node)),
                          std::string(proto::get_text(reg.address)), reg.cores, reg.memory_mib,
                          reg.timestamp_ms};
  // One connection speaks for one node: a second name on it would leave the
  // first registered with no connection of its own.
  if (p.kind == Peer::Kind::Node && claim.node != p.node)
    return refuse(proto::ErrorCode::BadRequest, "this connection is registered as node " + p.node +
                                                    "; node " + claim.node +
                                                    " registers on its own connection");
  LeaseToken proof;
  std::memcpy(proof.data(), reg.proof.bytes, proof.size());
  std::optional<NodeView> known = registry.node(claim.node);
  // A pilot job's node is known to its provider only (node_provider.hpp).
  if (!known && provider_ && provider_->admit(claim, proof, registry))
    known = registry.node(claim.node);
  if (!known)
    return refuse(proto::ErrorCode::LeaseInvalid,
                  "unknown node " + claim.node +
                      ": an operator adds it first (POST /nodes with its secret)");
  if (!verify_registration(claim, proof, known->node.secret))
    return refuse(proto::ErrorCode::LeaseInvalid,
                  "node " + claim.node + ": wrong registration proof (check its secret file)");
  const uint64_t now = registry.now();
  const uint64_t skew =
      now > claim.timestamp_ms ? now - claim.timestamp_ms : claim.timestamp_ms - now;
  if (skew > cfg_.registration_window_ms)
    return refuse(proto::ErrorCode::LeaseInvalid,
                  "node " + claim.node + ": registration timestamp is " + std::to_string(skew) +
                      " ms away from this clock (synchronise the clocks)");
  // The registry refuses a replay: its last accepted signed time is stored,
  // so a recorded registration stays refused after a restart.
  Result<Node> r = registry.register_node(claim.node, claim.address, claim.cores, claim.memory_mib,
                                          known->node.secret, claim.timestamp_ms);
  if (!r.ok())
    return refuse(wire_code(r.outcome), r.message);
  // A node that reconnects replaces its old connection, whose close must
  // not mark it down again.
  if (auto old = nodes_.find(claim.node); old != nodes_.end() && old->second != &p) {
    old->second->kind = Peer::Kind::Unknown;
    old->second->closing = true;
    old->second->closing_why = "replaced by a new registration of node " + claim.node;
    activate(*old->second);
  }
  p.kind = Peer::Kind::Node;
  p.node = claim.node;
  nodes_[claim.node] = &p;
  answer.heartbeat_ms = cfg_.heartbeat_ms;
  queue(p, answer);
  resend_ended(p, registry);
  send_pending(p);
}

void FabricServer::resend_ended(Peer &p, Registry &registry) {
  // A node that registers may have restarted and forgotten which leases
  // ended on it, and this process may have restarted and lost the notices it
  // held: every ended lease of the node whose token has not expired is told
  // again (a node takes a notice it knew as a no-op). Expired tokens are
  // refused by the node's own clock anyway.
  std::vector<Lease> ended;
  try {
    ended = registry.store().ended_unexpired_on(p.node, registry.now());
  } catch (const StoreError &e) {
    log()->error("fabric: cannot read the ended leases of node {}: {}", p.node, e.what());
    return;
  }
  // Held notices for the node are in pending_; skip those it will get.
  std::set<uint64_t> held;
  if (auto it = pending_.find(p.node); it != pending_.end())
    for (const proto::LeaseEnded &e : it->second)
      held.insert(e.lease_id);
  for (const Lease &l : ended) {
    if (held.count(l.id))
      continue;
    proto::LeaseEnded notice;
    notice.lease_id = l.id;
    notice.expiry_ms = l.tokens_until_ms;
    notice.why = end_reason(l.state);
    hold(p.node, notice);
  }
  if (!ended.empty())
    log()->info("fabric: node {} registered; {} ended lease(s) whose tokens have not expired are "
                "told again",
                p.node, ended.size());
}

bool FabricServer::send_pending(Peer &p) {
  auto it = pending_.find(p.node);
  if (it == pending_.end())
    return false;
  // One message of notices in flight per node: what ends meanwhile waits
  // here and leaves together in the next, so the node takes thousands of
  // ends a second in a few messages per pass of its loop, and a burst never
  // counts against kMaxQueued.
  if (p.closing || !p.outbox.empty() || !p.channel.send_idle())
    return false;
  std::deque<proto::LeaseEnded> &backlog = it->second;
  const auto now = Clock::now();
  if (backlog.size() < proto::kMaxLeasesEndedEntries && now - p.notices_sent < kNoticeGap) {
    p.notices_held = true; // needs_pass() and prepare_wait() come back for it
    return false;
  }
  p.notices_held = false;
  p.notices_sent = now;
  const size_t n = std::min<size_t>(backlog.size(), proto::kMaxLeasesEndedEntries);
  if (n == 1) {
    queue(p, backlog.front());
  } else {
    std::vector<proto::LeaseEnded> batch(backlog.begin(),
                                         backlog.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<uint8_t> bytes(proto::leases_ended_size(static_cast<uint32_t>(n)));
    proto::LeasesEnded head;
    proto::WireResult r = proto::encode(batch.data(), n, head, bytes.data(), bytes.size());
    if (r)
      queue_bytes(p, std::move(bytes));
    else // cannot happen: every notice is made from a valid lease
      log()->error("fabric: cannot encode {} notices for node {}: {}", n, p.node,
                   proto::describe(r));
  }
  backlog.erase(backlog.begin(), backlog.begin() + static_cast<std::ptrdiff_t>(n));
  if (backlog.empty())
    pending_.erase(it);
  return true;
}

void FabricServer::hold(const std::string &node, const proto::LeaseEnded &notice) {
  if (latencies_)
    latencies_->fabric_work.notices.fetch_add(1, std::memory_order_relaxed);
  std::deque<proto::LeaseEnded> &backlog = pending_[node];
  backlog.push_back(notice);
  if (backlog.size() <= kMaxBacklog)
    return;
  // A dropped notice leaves that lease's tokens valid on the node until
  // they expire: counted, and said at most once a second (a line per lease
  // cost this loop a fifth of its time when a node fell behind).
  Drops &d = drops_unsaid_[node];
  ++d.count;
  d.last_lease = backlog.front().lease_id;
  backlog.pop_front();
  if (latencies_)
    latencies_->fabric_work.notices_dropped.fetch_add(1, std::memory_order_relaxed);
  const auto now = Clock::now();
  if (now - drops_said_ >= kDropLineEvery)
    say_drops(now);
}

void FabricServer::say_drops(Clock::time_point now) {
  for (const auto &[node, d] : drops_unsaid_) {
    auto waiting = pending_.find(node);
    log()->error("fabric: node {}: {} lease-ended notice(s) dropped since the last such line, the "
                 "oldest of its full backlog (the last: lease {}; {} waiting): their tokens stay "
                 "valid on the node until they expire",
                 node, d.count, d.last_lease,
                 waiting == pending_.end() ? 0 : waiting->second.size());
  }
  drops_unsaid_.clear();
  drops_said_ = now;
}

void FabricServer::grant_reply(Peer &p, const Status &status, const Grant *grant,
                               uint64_t lease_id) {
  proto::LeaseGrant g;
  g.status = wire_code(status.outcome);
  g.lease_id = lease_id;
  std::vector<proto::LeaseGrantPart> parts;
  if (!status.ok()) {
    proto::set_text_truncated(g.message, status.message);
  } else if (grant) {
    g.lease_id = grant->lease.id;
    g.expiry_ms = grant->lease.expiry_ms;
    std::memcpy(g.secret.bytes, grant->secret.data(), proto::kTokenSize);
    for (size_t i = 0; i < grant->lease.parts.size(); ++i) {
      const LeasePart &lp = grant->lease.parts[i];
      proto::LeaseGrantPart part;
      part.cores = static_cast<uint32_t>(lp.cores.size());
      part.owner_uid = grant->lease.owner_uid;
      part.memory_mib = lp.memory_mib;
      std::memcpy(part.token.bytes, grant->tokens[i].data(), proto::kTokenSize);
      if (!proto::set_text(part.node, lp.node) ||
          !proto::set_text(part.address, grant->addresses[i])) {
        g = proto::LeaseGrant{};
        g.status = proto::ErrorCode::Internal;
        proto::set_text_truncated(g.message, "node name or address too long for the wire");
        parts.clear();
        break;
      }
      parts.push_back(part);
    }
    g.parts = static_cast<uint32_t>(parts.size());
  }
  std::vector<uint8_t> bytes(proto::lease_grant_size(g.parts));
  proto::WireResult w = proto::encode(g, parts, bytes.data(), bytes.size());
  if (!w) {
    log()->error("fabric: cannot encode a LeaseGrant: {}", proto::describe(w));
    p.closing = true;
    p.closing_why = "internal error";
    return;
  }
  const size_t before = p.outbox.size();
  queue_bytes(p, std::move(bytes));
  // A success that the batch's commit must confirm.
  if (holding_ && status.ok() && g.lease_id != 0 && p.outbox.size() > before)
    held_.push_back(Held{&p, p.outbox.size() - 1, g.lease_id, grant != nullptr && lease_id == 0});
}

void FabricServer::fail_held(const std::vector<uint64_t> &leases, Registry &registry) {
  for (const Held &h : held_) {
    if (std::find(leases.begin(), leases.end(), h.lease) == leases.end())
      continue;
    // Refused: the store kept no record of it either (Store::commit_batch).
    if (h.grant)
      registry.withdraw_grant(h.lease);
    if (h.peer->closing || h.index >= h.peer->outbox.size())
      continue;
    proto::LeaseGrant g;
    g.status = proto::ErrorCode::Internal;
    g.lease_id = h.lease;
    proto::set_text_truncated(
        g.message, h.grant ? "the resource manager could not record this lease in its database "
                             "(see its log); it was not granted, ask again"
                           : "the resource manager could not record this change in its database "
                             "or its grant journal (see its log); it is in effect until the "
                             "resource manager restarts");
    std::vector<uint8_t> bytes(proto::lease_grant_size(0));
    if (proto::encode(g, {}, bytes.data(), bytes.size()))
      h.peer->outbox[h.index] = std::move(bytes);
  }
}

bool FabricServer::admit_client(Peer &p) {
  if (p.kind == Peer::Kind::Client)
    return true;
  if (clients_ + cfg_.reserved_for_nodes >= cfg_.max_connections) {
    // Answered, then closed: the slot stays free for a node.
    p.close_after_send = true;
    p.closing_why = "refused: the client connections are full";
    return false;
  }
  p.kind = Peer::Kind::Client;
  ++clients_;
  return true;
}

std::string FabricServer::client_slots_full() const {
  return "too many client connections (" + std::to_string(clients_) + " of " +
         std::to_string(cfg_.max_connections) + "; " + std::to_string(cfg_.reserved_for_nodes) +
         " are kept for nodes); try again later";
}

void FabricServer::on_lease_request(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  proto::LeaseRequest req;
  std::string why;
  if (p.kind == Peer::Kind::Node) {
    p.closing = true;
    p.closing_why = "a node connection asked for a lease";
    return;
  }
  if (!admit_client(p))
    return grant_reply(p, Status{Outcome::Unavailable, client_slots_full()}, nullptr, 0);
  if (!decode_message(m, req, why))
    return grant_reply(p, Status{Outcome::Invalid, "bad LeaseRequest: " + why}, nullptr, 0);
  LeaseRequest lr;
  lr.client = std::string(proto::get_text(req.client));
  ClientIdentity who;
  if (!auth_.verify(req, who, why)) {
    log()->warn("fabric: lease for {} refused: {}", lr.client, why);
    return grant_reply(p, Status{Outcome::Forbidden, why}, nullptr, 0);
  }
  lr.owner_uid = who.owner_uid;
  lr.job_id = who.job_id;
  lr.cores = req.cores;
  lr.memory_mib = req.memory_mib;
  lr.duration_ms = req.duration_ms;
  lr.max_nodes = req.max_nodes;
  Result<Grant> r = registry.grant(lr);
  if (r.outcome == Outcome::Unavailable && provider_) {
    if (std::optional<Provisioning> wait = provider_->unplaceable(lr, registry)) {
      proto::LeaseGrant g;
      g.status = proto::ErrorCode::Provisioning;
      g.expiry_ms = wait->retry_after_ms; // the retry hint, for this status
      proto::set_text_truncated(g.message, wait->message);
      std::vector<uint8_t> bytes(proto::lease_grant_size(0));
      if (proto::encode(g, {}, bytes.data(), bytes.size()))
        return queue_bytes(p, std::move(bytes));
    }
  }
  if (!r.ok())
    log()->info("fabric: lease for {} ({} cores) refused: {}", lr.client, lr.cores, r.message);
  grant_reply(p, r, r.ok() ? &r.value : nullptr, 0);
}

void FabricServer::on_renew(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  proto::LeaseRenew req;
  std::string why;
  if (p.kind == Peer::Kind::Node) {
    p.closing = true;
    p.closing_why = "a node connection sent LeaseRenew";
    return;
  }
  if (!admit_client(p))
    return grant_reply(p, Status{Outcome::Unavailable, client_slots_full()}, nullptr, 0);
  if (!decode_message(m, req, why))
    return grant_reply(p, Status{Outcome::Invalid, "bad LeaseRenew: " + why}, nullptr, 0);
  LeaseSecret secret;
  std::memcpy(secret.data(), req.secret.bytes, secret.size());
  Result<Grant> r = registry.renew(req.lease_id, std::string(proto::get_text(req.client)), secret,
                                   req.duration_ms);
  grant_reply(p, r, r.ok() ? &r.value : nullptr, req.lease_id);
}

void FabricServer::on_release(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  proto::LeaseRelease req;
  std::string why;
  if (p.kind == Peer::Kind::Node) {
    p.closing = true;
    p.closing_why = "a node connection sent LeaseRelease";
    return;
  }
  if (!admit_client(p))
    return grant_reply(p, Status{Outcome::Unavailable, client_slots_full()}, nullptr, 0);
  if (!decode_message(m, req, why))
    return grant_reply(p, Status{Outcome::Invalid, "bad LeaseRelease: " + why}, nullptr, 0);
  LeaseSecret secret;
  std::memcpy(secret.data(), req.secret.bytes, secret.size());
  Status s = registry.release(req.lease_id, std::string(proto::get_text(req.client)), secret);
  grant_reply(p, s, nullptr, req.lease_id);
}

void FabricServer::on_accounting(Peer &p, const proto::ControlMessage &m, Registry &registry) {
  if (p.kind != Peer::Kind::Node) {
    p.closing = true;
    p.closing_why = "sent accounting before registering";
    return;
  }
  proto::AccountingReport rep;
  std::string why;
  if (!decode_message(m, rep, why)) {
    log()->warn("fabric: node {} sent a bad AccountingReport: {}", p.node, why);
    return;
  }
  AccountingRecord rec;
  rec.lease_id = rep.lease_id;
  rec.node = p.node;
  rec.allocation_us = rep.allocation_us;
  rec.hot_polling_us = rep.hot_polling_us;
  rec.execution_us = rep.execution_us;
  rec.memory_mib = rep.memory_mib;
  rec.final = rep.final != 0;
  if (Status s = registry.record_accounting(rec); !s.ok())
    log()->warn("fabric: accounting from node {} refused: {}", p.node, s.message);
}

void FabricServer::deliver(const std::vector<LeaseEnded> &events, Registry &registry) {
  // Up nodes with a connection, each once per run of its notices.
  std::vector<Peer *> up;
  for (const LeaseEnded &e : events) {
    proto::LeaseEnded notice;
    notice.lease_id = e.lease_id;
    notice.expiry_ms = e.expiry_ms;
    notice.why = end_reason(e.why);
    hold(e.node, notice);
    auto it = nodes_.find(e.node);
    if (it == nodes_.end() || it->second->closing || (!up.empty() && up.back() == it->second))
      continue;
    // A node found silent may still have its connection, to a peer that is
    // gone: on reliable-datagram providers a send to it holds this loop
    // until the provider gives up (seconds). Its notices wait until it
    // speaks again (a heartbeat or a new registration).
    std::optional<NodeView> view = registry.node(e.node);
    if (view && view->node.state == NodeState::Up)
      up.push_back(it->second);
  }
  // What ended in this call leaves in one message per node when its link
  // is free, else with what follows once it is (passes look at it).
  for (Peer *p : up) {
    activate(*p);
    send_pending(*p);
  }
}

template <class M> void FabricServer::queue(Peer &p, const M &m) {
  proto::WireResult r;
  std::vector<uint8_t> bytes = proto::to_bytes(m, &r);
  if (!r) {
    log()->error("fabric: cannot encode a {}: {}", M::kName, proto::describe(r));
    return;
  }
  queue_bytes(p, std::move(bytes));
}

void FabricServer::queue_bytes(Peer &p, std::vector<uint8_t> bytes) {
  // Sent (or dropped, when it does not read) by the passes that look at it.
  activate(p);
  if (p.outbox.size() >= kMaxQueued) {
    p.closing = true;
    p.closing_why = "does not take its messages (send queue full)";
    return;
  }
  p.outbox.push_back(std::move(bytes));
  if (!holding_)
    flush(p);
}

bool FabricServer::flush(Peer &p) {
  bool worked = false;
  while (!p.outbox.empty() && p.channel.send_idle()) {
    const std::vector<uint8_t> &next = p.outbox.front();
    std::memcpy(p.channel.send_area(), next.data(), next.size());
    proto::ChannelStatus s = p.channel.post_encoded(next.size());
    // No room at the provider (a peer that does not read just now, e.g. a
    // node busy with a burst of notices on shm): the message stays first in
    // line and goes at a later pass. kMaxQueued still drops a peer whose
    // queue keeps growing.
    if (s == proto::ChannelStatus::Timeout)
      return worked;
    p.outbox.pop_front();
    worked = true;
    if (s != proto::ChannelStatus::Ok) {
      p.closing = true;
      p.closing_why = std::string("a send failed: ") + proto::to_string(s);
      return worked;
    }
  }
  // A refused registration closes once its answer has left.
  if (p.outbox.empty() && p.close_after_send && p.channel.send_idle())
    p.closing = true;
  return worked;
}

void FabricServer::drop(Peer &p, Registry &registry, const std::string &why) {
  // Whatever its kind, no entry may keep pointing at a connection that goes:
  // the next notice or registration for that node would use freed memory.
  // on_register() is the only place that makes an entry, always under the
  // connection's own p.node, which never changes once set (a second name is
  // refused): that one key is all there is to look at, whatever the fleet.
  bool was_node = false;
  if (!p.node.empty()) {
    if (auto it = nodes_.find(p.node); it != nodes_.end() && it->second == &p) {
      was_node = true;
      nodes_.erase(it);
    }
  }
  if (was_node && p.kind == Peer::Kind::Node) {
    log()->warn("fabric: node {} {}; marking it down", p.node, why);
    if (Status s = registry.mark_down(p.node); !s.ok())
      log()->warn("fabric: marking node {} down: {}", p.node, s.message);
  } else {
    log()->debug("fabric: {} {}", p.remote, why);
  }
  if (p.kind == Peer::Kind::Client && clients_ > 0)
    --clients_;
  if (open_count_.load() > 0)
    --open_count_;
  p.conn.close();
}

void FabricServer::stop(Registry &) {
  // Whatever the once-a-second bound held back: the log is the operator's
  // record of which node lost which notices, and the counter dies with us.
  if (!drops_unsaid_.empty())
    say_drops(Clock::now());
  stop_acceptor();
  take_accepted();
  // The nodes stay up in the registry: a restarted resource manager gives
  // them a full heartbeat timeout to register again.
  for (auto &entry : peers_)
    entry.second->conn.close();
  nodes_.clear();
  active_.clear();
  pass_.clear();
  deferred_.clear();
  peers_.clear();
  clients_ = 0;
  open_count_ = 0;
}

} // namespace rfaas::rm
