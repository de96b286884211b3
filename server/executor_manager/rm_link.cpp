#include "executor_manager/rm_link.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// How long a NodeRegister may go unanswered.
constexpr milliseconds kRegisterAnswer{5000};
/// Rounds of read-confirm-post in one poll(): enough to drain a burst of
/// reports where completions come at once, bounded so that a long queue
/// does not hold the loop either.
constexpr int kRoundsPerPoll = 64;
/// Messages read in one poll(), whatever is in flight the other way (at
/// most a few hundred microseconds of decoding). While leases end back to
/// back the resource manager sends as soon as its last message left, often
/// one or two notices each: a node that stopped reading after 16 while a
/// report was in flight took 800 notices a second, one that read 64 per
/// look every 20 ms about 3,000 (lo-tcp). With notices_flowing() looks come
/// every 5 ms, with notices_backed_up() every millisecond.
constexpr int kReadsPerPoll = 256;

uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

long long ms_since(Clock::time_point t, Clock::time_point now) {
  return static_cast<long long>(std::chrono::duration_cast<milliseconds>(now - t).count());
}

} // namespace

/// One connection attempt on its own thread. The thread first closes the
/// link dropped before (its goodbye may wait), then connects; the loop
/// reads `done` and, once it is set, joins and takes `conn` or `error`.
struct RmLink::Attempt {
  std::thread thread;
  std::atomic<bool> done{false};
  volatile std::sig_atomic_t cancel = 0;
  rdmalib::Connection conn;
  std::string error;
  // Declared in this order so that the channel's buffer outlives the
  // connection also when the attempt is destroyed without having run.
  proto::ControlChannel old_channel;
  rdmalib::Connection old_conn;
};

RmLink::RmLink(rdmalib::Fabric &fabric, RmLinkOptions options)
    : fabric_(fabric), opt_(std::move(options)) {}

RmLink::~RmLink() { close(); }

void RmLink::join_attempt() {
  if (!attempt_)
    return;
  if (attempt_->thread.joinable())
    attempt_->thread.join();
  attempt_.reset();
}

void RmLink::close() {
  const bool first = !closed_;
  closed_ = true;
  if (first &&
      (counters_.reports_sent || counters_.stalls || counters_.reports_dropped || !outbox_.empty()))
    spdlog::info("resource manager link: {} accounting report(s) sent, {} dropped (queue full), {} "
                 "unsent; {} time(s) the resource manager stopped taking messages",
                 counters_.reports_sent, counters_.reports_dropped, outbox_.size(),
                 counters_.stalls);
  if (attempt_) {
    attempt_->cancel = 1;
    join_attempt();
    if (state_ == State::Connecting)
      state_ = State::Disconnected;
  }
  old_conn_.close();
  if (state_ == State::Disconnected)
    return;
  proto::Shutdown bye;
  bye.reason = proto::ErrorCode::ShuttingDown;
  // Bounded: a resource manager that does not take it is left behind.
  channel_.send(bye, Clock::now() + milliseconds(200));
  conn_.close();
  state_ = State::Disconnected;
}

void RmLink::disconnect(const std::string &why) {
  spdlog::warn("resource manager {}: {}; reconnecting (allocations keep running, {} accounting "
               "report(s) kept for it)",
               opt_.resource_manager.to_string(), why, outbox_.size());
  // Closed by the next attempt's thread, not here: closing says goodbye and
  // may wait for it to leave.
  if (old_conn_.is_open())
    old_conn_.close(); // not taken by an attempt yet (cannot happen today)
  old_conn_ = std::move(conn_);
  old_channel_ = std::move(channel_);
  state_ = State::Disconnected;
  in_flight_ = InFlight::None;
  stalled_ = false;
  next_attempt_ = Clock::now() + opt_.retry;
}

void RmLink::start_attempt() {
  // Back off while the resource manager stays away.
  auto pause = opt_.retry * (1 << std::min(failures_, 3));
  next_attempt_ = Clock::now() + pause;
  proto::ClientHello hello;
  std::vector<uint8_t> pd(sizeof hello);
  proto::encode(hello, pd.data(), pd.size());
  auto a = std::make_unique<Attempt>();
  a->old_conn = std::move(old_conn_);
  a->old_channel = std::move(old_channel_);
  rdmalib::ConnectionOptions copts;
  copts.recv_depth = 10;
  copts.check_peer_before_poll = true; // polled by the manager's one loop
  copts.cancel = &a->cancel;
  Attempt *p = a.get();
  rdmalib::Fabric *fabric = &fabric_;
  const rdmalib::Address to = opt_.resource_manager;
  const milliseconds timeout = opt_.connect_timeout;
  try {
    a->thread = std::thread([p, fabric, to, timeout, copts, pd = std::move(pd)] {
      p->old_conn.close();
      p->old_channel = proto::ControlChannel();
      try {
        if (!p->cancel)
          p->conn = rdmalib::Connection::connect(*fabric, to, pd.data(), pd.size(), timeout, copts);
      } catch (const std::exception &e) {
        p->error = e.what();
      }
      p->done.store(true, std::memory_order_release);
    });
  } catch (const std::exception &e) {
    // No thread: the dropped link stays with `a` and closes with it.
    spdlog::warn("cannot start a connection attempt to the resource manager: {}", e.what());
    ++failures_;
    return;
  }
  attempt_ = std::move(a);
  attempt_started_ = Clock::now();
  attempt_warned_ = false;
  state_ = State::Connecting;
}

void RmLink::finish_attempt() {
  std::unique_ptr<Attempt> a = std::move(attempt_);
  a->thread.join();
  state_ = State::Disconnected;
  if (!a->conn.is_open()) {
    if (!warned_)
      spdlog::warn("cannot reach the resource manager at {}: {}; retrying (every {} to {} ms)",
                   opt_.resource_manager.to_string(),
                   a->error.empty() ? std::string("no connection") : a->error, opt_.retry.count(),
                   (opt_.retry * 8).count());
    warned_ = true;
    ++failures_;
    return;
  }
  conn_ = std::move(a->conn);
  try {
    proto::ControlOptions o;
    o.receives = 8;
    o.receive_size = proto::kMaxLeasesEndedSize;
    channel_ = proto::ControlChannel(fabric_, conn_, o);
  } catch (const std::exception &e) {
    spdlog::warn("resource manager {}: {}", opt_.resource_manager.to_string(), e.what());
    ++failures_;
    conn_.close();
    return;
  }
  // From here on a post that finds no room returns at once (the message
  // stays queued): the loop never waits in a send.
  conn_.set_post_deadline(milliseconds(0));
  state_ = State::Registering;
  register_deadline_ = Clock::now() + kRegisterAnswer;
  in_flight_ = InFlight::None;
  stalled_ = false;
  register_node();
}

void RmLink::register_node() {
  proto::NodeRegister reg;
  reg.cores = opt_.cores;
  reg.memory_mib = opt_.memory_mib;
  // Strictly newer than the last registration: the resource manager refuses
  // a timestamp it has seen (a replay).
  reg.timestamp_ms = std::max(wall_ms(), last_timestamp_ + 1);
  last_timestamp_ = reg.timestamp_ms;
  proto::set_text(reg.node, opt_.node);
  proto::set_text(reg.address, opt_.address);
  rm::LeaseToken proof = rm::registration_proof(
      rm::RegistrationClaim{opt_.node, opt_.address, opt_.cores, opt_.memory_mib, reg.timestamp_ms},
      opt_.secret);
  std::memcpy(reg.proof.bytes, proof.data(), proof.size());
  proto::WireResult w = proto::encode(reg, channel_.send_area(), channel_.options().send_size);
  if (!w)
    return disconnect("cannot encode NodeRegister: " + proto::describe(w));
  post(w.size, InFlight::Register, "NodeRegister");
}

bool RmLink::post(size_t size, InFlight what, const char *name) {
  const auto now = Clock::now();
  proto::ChannelStatus s = channel_.post_encoded(size);
  if (s == proto::ChannelStatus::Ok) {
    in_flight_ = what;
    waiting_since_ = now;
    stalled_ = false;
    return true;
  }
  if (s == proto::ChannelStatus::Timeout) {
    // No room now: the message stays queued (a registration is encoded
    // again) and goes on a later poll.
    if (!stalled_) {
      stalled_ = true;
      waiting_since_ = now;
    }
    return true;
  }
  disconnect(std::string("cannot send ") + name + ": " + channel_.last_error());
  return false;
}

void RmLink::report(const proto::AccountingReport &r) {
  // The report in flight stays as it is: its completion pops it.
  const size_t first = in_flight_ == InFlight::Report ? 1 : 0;
  // Cumulative: the newer one says all the older one did.
  if (outbox_.replace(r, first))
    return;
  if (outbox_.size() >= kMaxQueuedReports) {
    if (outbox_.drop_oldest_periodic(first)) {
      ++counters_.reports_dropped;
    } else if (!r.final) {
      ++counters_.reports_dropped;
      return;
    }
    // A final report is kept whatever the bound: one per lease, ever.
    if (!drop_warned_)
      spdlog::warn("resource manager {}: {} accounting reports queued; dropping the oldest "
                   "periodic ones (final reports are kept)",
                   opt_.resource_manager.to_string(), outbox_.size());
    drop_warned_ = true;
  }
  outbox_.push_back(r);
}

bool RmLink::handle(const proto::ControlMessage &m, std::vector<proto::LeaseEnded> &ended) {
  const auto now = Clock::now();
  if (m.header.type == proto::MessageType::NodeRegistered) {
    proto::NodeRegistered r;
    if (!proto::decode(m.data, m.size, r)) {
      disconnect("malformed NodeRegistered");
      return false;
    }
    if (r.status != proto::ErrorCode::Ok) {
      spdlog::error("the resource manager refused this node's registration: {}: {}",
                    proto::to_string(r.status), proto::get_text(r.message));
      disconnect("registration refused");
      next_attempt_ = now + std::max(opt_.retry, milliseconds(5000));
      return false;
    }
    heartbeat_ = milliseconds(std::max<uint32_t>(r.heartbeat_ms, 1));
    next_heartbeat_ = now + heartbeat_;
    state_ = State::Registered;
    warned_ = false;
    drop_warned_ = false;
    failures_ = 0;
    int64_t skew = static_cast<int64_t>(r.now_ms) - static_cast<int64_t>(wall_ms());
    spdlog::info("registered with the resource manager {} as node {} (clock skew {} ms, {} "
                 "accounting report(s) to send)",
                 opt_.resource_manager.to_string(), opt_.node, skew, outbox_.size());
  } else if (m.header.type == proto::MessageType::LeasesEnded) {
    last_notice_ = now;
    proto::LeasesEnded head;
    if (proto::WireResult r = proto::decode(m.data, m.size, head, ended); !r)
      spdlog::warn("dropping a malformed LeasesEnded from the resource manager: {}",
                   proto::describe(r));
    else if (head.count >= proto::kMaxLeasesEndedEntries)
      last_full_notices_ = now;
  } else if (m.header.type == proto::MessageType::LeaseEnded) {
    last_notice_ = now;
    proto::LeaseEnded e;
    if (proto::decode(m.data, m.size, e))
      ended.push_back(e);
    else
      spdlog::warn("dropping a malformed LeaseEnded from the resource manager");
  } else {
    spdlog::warn("the resource manager sent an unexpected {}", proto::to_string(m.header.type));
  }
  return true;
}

bool RmLink::exchange(std::vector<proto::LeaseEnded> &ended, uint32_t allocations) {
  const milliseconds stall = std::max(opt_.stall_timeout, heartbeat_ * 3);
  int reads = 0;
  for (int round = 0; round < kRoundsPerPoll; ++round) {
    // Before reading: a send that failed shows as SendFailed from poll().
    const bool idle = channel_.send_idle();
    for (; reads < kReadsPerPoll; ++reads) {
      proto::ControlMessage m = channel_.poll();
      if (m.status == proto::ChannelStatus::Timeout)
        break;
      if (m.status != proto::ChannelStatus::Ok) {
        disconnect(std::string("link ended (") + proto::to_string(m.status) + ")");
        return false;
      }
      if (!handle(m, ended))
        return false;
    }
    const auto now = Clock::now();
    if (!idle) {
      if (ms_since(waiting_since_, now) > stall.count()) {
        ++counters_.stalls;
        disconnect("a message waited " + std::to_string(ms_since(waiting_since_, now)) +
                   " ms for the resource manager to take it");
        return false;
      }
      return true;
    }
    // What was in flight completed without an error.
    if (in_flight_ == InFlight::Report) {
      outbox_.pop_front();
      ++counters_.reports_sent;
    }
    in_flight_ = InFlight::None;
    if (stalled_ && ms_since(waiting_since_, now) > stall.count()) {
      ++counters_.stalls;
      disconnect("no room for a message for " + std::to_string(ms_since(waiting_since_, now)) +
                 " ms");
      return false;
    }
    if (state_ == State::Registering) {
      // NodeRegister went out (or is encoded again below after no room);
      // its answer is awaited in poll().
      if (!stalled_)
        return true;
      register_node();
      return state_ != State::Disconnected;
    }
    const size_t cap = channel_.options().send_size;
    if (now >= next_heartbeat_) {
      proto::Heartbeat hb;
      hb.sequence = sequence_ + 1;
      hb.allocations = allocations;
      proto::WireResult w = proto::encode(hb, channel_.send_area(), cap);
      if (!w) {
        disconnect("cannot encode a heartbeat: " + proto::describe(w));
        return false;
      }
      if (!post(w.size, InFlight::Heartbeat, "a heartbeat"))
        return false;
      if (in_flight_ == InFlight::None)
        return true; // no room: again on the next poll
      ++sequence_;
      next_heartbeat_ = now + heartbeat_;
      continue;
    }
    if (outbox_.empty())
      return true;
    proto::WireResult w = proto::encode(outbox_.front(), channel_.send_area(), cap);
    if (!w) {
      spdlog::warn("dropping an accounting report that does not encode: {}", proto::describe(w));
      outbox_.pop_front();
      continue;
    }
    if (!post(w.size, InFlight::Report, "an accounting report"))
      return false;
    if (in_flight_ == InFlight::None)
      return true;
  }
  return true;
}

void RmLink::poll(std::vector<proto::LeaseEnded> &ended, uint32_t allocations) {
  if (state_ == State::Connecting) {
    if (!attempt_->done.load(std::memory_order_acquire)) {
      const auto late = opt_.connect_timeout + milliseconds(10000);
      if (!attempt_warned_ && Clock::now() - attempt_started_ > late) {
        // The loop goes on; only this link is stuck (no reports, no
        // notices) until the attempt returns.
        spdlog::error("a connection attempt to the resource manager {} has not returned for {} "
                      "ms (its deadline is {} ms): the network provider is stuck in it",
                      opt_.resource_manager.to_string(), ms_since(attempt_started_, Clock::now()),
                      opt_.connect_timeout.count());
        attempt_warned_ = true;
      }
      return;
    }
    finish_attempt();
    if (state_ != State::Registering)
      return;
  }
  if (state_ == State::Disconnected) {
    if (Clock::now() >= next_attempt_)
      start_attempt();
    return;
  }
  if (!exchange(ended, allocations))
    return;
  if (state_ == State::Registering && Clock::now() > register_deadline_)
    disconnect("no answer to NodeRegister within " + std::to_string(kRegisterAnswer.count()) +
               " ms");
}

} // namespace rfaas::manager
