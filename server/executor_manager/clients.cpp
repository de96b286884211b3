#include "executor_manager/manager_state.hpp"

#include <malloc.h>
#include <sched.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

using std::chrono::milliseconds;

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
    const size_t clients_before = clients_.size();
    try {
      accept_one(req);
    } catch (const std::exception &e) {
      admission_.setup_failed("a peer", e.what(), Clock::now());
    }
    if (clients_.size() > clients_before)
      await_request(clients_.back().get());
  }
}

void Manager::await_request(const Client *c) {
  // Looking for the next connection request costs up to ~1 ms when none is
  // pending (a zero timeout still reads once for 1 ms on tcp), and the loop
  // sleeps kBusyPollMs between looks at its connections, which have no fd:
  // either would delay the answer to the client just accepted, whose
  // LeaseProof and AllocationRequest follow its connection within a fraction
  // of a millisecond. A client that sends nothing in that time costs the
  // loop this much once (admission bounds how many can: admission.hpp).
  const auto until = Clock::now() + kAwaitRequest;
  auto present = [this, c] {
    return std::any_of(clients_.begin(), clients_.end(),
                       [c](const std::unique_ptr<Client> &p) { return p.get() == c; });
  };
  while (Clock::now() < until) {
    poll_clients();
    if (!present() || c->requested || c->closed)
      return;
    sched_yield();
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
    if (hello.allocation_id == proto::kPooledExecutor) {
      PooledLink *p = find_pooled_link(hello.secret);
      if (!p) {
        // The zygote's "pooled" line may still be in its pipe.
        zygote_.read(0);
        p = find_pooled_link(hello.secret);
      }
      if (!p)
        return refuse(proto::ErrorCode::LeaseInvalid,
                      "an executor presented an unknown or spent pooled secret");
      rdmalib::ConnectionOptions opts = executor_link_options(cfg_.connect_ms);
      // Reliable-datagram fabrics: the answer leaves in the background,
      // posted again by poll_pooled_links() until workers_connected, and
      // the loop polls every millisecond meanwhile (pooled_answer_pending)
      // so that the executor gets it as soon as the provider takes it. An
      // executor stopped or stuck in the middle of its connect (tcp;ofi_rxm
      // first connects back to it) held the whole loop for that long
      // otherwise: clients timed out and the refills' links failed. Nothing
      // is sent on the link before it is bound, and it is bound only once
      // the executor reported in, which it does after the answer reached it;
      // an answer that never leaves ends the link (discarded as any other).
      opts.accept_in_background = true;
      p->conn = req.accept(reply_bytes, sizeof reply_bytes, milliseconds(cfg_.workers_connected_ms),
                           opts);
      proto::ControlOptions copts;
      copts.receives = kExecutorRecvs;
      p->channel = proto::ControlChannel(fabric_, p->conn, copts);
      p->connected = true;
      spdlog::debug("pooled executor {}: accounting link connected ahead of its allocation",
                    p->pid);
      return;
    }
    auto it = allocations_.find(hello.allocation_id);
    // A pooled executor's link that ended after it was bound (its executor
    // found it dead and connects its own, with the allocation's secret) is
    // replaced; any other second link is refused.
    auto replaceable = [](const Allocation &a) {
      return a.pooled && a.exec_done && a.exec_channel.closed() && !a.exec_channel.shut_down();
    };
    auto refused = [&] {
      return it == allocations_.end() ||
             (it->second->exec_connected && !replaceable(*it->second)) ||
             !proto::equal(it->second->secret, hello.secret);
    };
    if (it != allocations_.end() && refused()) {
      // The executor that replaces one that died as it took the allocation
      // ("started" twice) may connect before its report is read here.
      zygote_.read(0);
      it = allocations_.find(hello.allocation_id);
    }
    if (refused())
      return refuse(proto::ErrorCode::LeaseInvalid,
                    "an executor presented an unknown allocation or a wrong secret");
    Allocation &a = *it->second;
    if (a.exec_connected) {
      spdlog::warn("allocation {:x}: its executor replaces the pooled accounting link that ended",
                   a.id);
      a.exec_conn.close();
      a.exec_done = false;
    }
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
    executor_linked(a);
    spdlog::debug("allocation {:x}: executor connected", a.id);
    return;
  }
  admission_.bad_input(std::string("rejecting a connection request with a ") +
                           proto::to_string(h.type) + " as private data",
                       Clock::now());
  req.reject();
}

void Manager::executor_linked(Allocation &a) {
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
  if (a.lease_end_untold && !tell_lease_ended(a)) {
    // It cannot be told: end it now rather than after its grace period.
    a.term_at = Clock::now();
    a.kill_at = a.term_at + milliseconds(cfg_.shutdown_grace_ms);
  }
}

Manager::PooledLink *Manager::find_pooled_link(const proto::Token &secret) {
  // Every entry is compared, in constant time each: the time taken says
  // nothing of which secret came close.
  PooledLink *found = nullptr;
  for (auto &kv : pooled_links_)
    if (proto::equal(kv.second->secret, secret) && !kv.second->connected)
      found = kv.second.get();
  return found;
}

void Manager::bind_pooled_link(Allocation &a, pid_t pid) {
  auto it = pooled_links_.find(pid);
  if (it == pooled_links_.end())
    return;
  // Out of the table first: whatever happens next, the secret is spent.
  std::unique_ptr<PooledLink> p = std::move(it->second);
  pooled_links_.erase(it);
  // Not connected (the executor's attempt failed): it connects as any
  // executor does, with the allocation's secret.
  if (!p->connected || a.exec_connected)
    return;
  // Ended since the last look (the zygote had handed the executor over
  // already): not bound, so that the executor, which finds it dead too,
  // connects its own.
  proto::ChannelStatus st = p->channel.poll().status;
  if (st == proto::ChannelStatus::Closed || st == proto::ChannelStatus::Shutdown) {
    // Info, not warn: the executor warns when it finds its link dead, and
    // where the executor itself died the zygote has (once).
    spdlog::info("allocation {:x}: the accounting link of its pooled executor {} ended before it "
                 "was bound; the executor connects its own",
                 a.id, pid);
    return;
  }
  // The channel, its receives posted while pooled, goes with the link.
  a.exec_channel = std::move(p->channel);
  a.exec_conn = std::move(p->conn);
  a.exec_connected = true;
  ++links_ahead_;
  executor_linked(a);
  spdlog::debug("allocation {:x}: bound the accounting link its pooled executor {} connected "
                "ahead",
                a.id, pid);
}

void Manager::poll_pooled_links() {
  if (pooled_links_.empty())
    return;
  const auto now = Clock::now();
  for (auto it = pooled_links_.begin(); it != pooled_links_.end();) {
    PooledLink &p = *it->second;
    std::string why;
    if (p.connected) {
      // A pooled executor sends nothing; its link ending (the executor
      // died, or the link failed) is all there is to see.
      proto::ControlMessage m = p.channel.poll();
      if (m.status == proto::ChannelStatus::Closed || m.status == proto::ChannelStatus::Shutdown)
        why = std::string("its accounting link ended while it waited") +
              (p.channel.failed() ? std::string(" (") + p.channel.last_error() + ")" : "");
    } else if (now - p.since > milliseconds(cfg_.executor_start_ms)) {
      why = "its accounting link did not come up within " + std::to_string(cfg_.executor_start_ms) +
            " ms";
    }
    if (why.empty()) {
      ++it;
      continue;
    }
    ++events_;
    // The warning is the zygote's, once: it discards the executor on this
    // request, or (the executor died, which also ends its link) reports its
    // death, whichever it sees first.
    spdlog::debug("pooled executor {}: {}; asking the zygote to discard it", p.pid, why);
    zygote_.unpool(p.pid, why);
    it = pooled_links_.erase(it);
  }
}

bool Manager::pooled_answer_pending() const {
  for (const auto &kv : pooled_links_)
    if (kv.second->connected && kv.second->conn.answer_pending())
      return true;
  return false;
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
  // Its lease ended: the executor was told and ends by itself (its workers
  // tell the client why); SIGTERM is already scheduled.
  if (a.lease_told)
    return;
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
} // namespace rfaas::manager
