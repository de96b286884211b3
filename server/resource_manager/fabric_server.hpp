// The resource manager's fabric side: executor managers register, send
// heartbeats and accounting; clients lease, renew and release; lease-ended
// notices go out to the nodes. Written against rdmalib only, so it serves on
// every backend and provider.
//
// It runs on the Loop's thread as its LoopDriver: poll() makes one
// non-blocking pass (take the connections accepted meanwhile, read what
// the connections with something to read sent, answer, flush queued
// sends), and the loop
// alternates it with the HTTP threads' tasks, so the Registry is touched by
// one thread only. Between passes with nothing to do the loop sleeps on the
// connections' wait descriptors (rdmalib's Connection::wait_fd), so a
// request wakes it at once; links without one (shm 1.17 has no descriptor
// to sleep on) are polled, continuously for a while after they last spoke.
// A pass and the preparation of a sleep look only at the active peers: those
// with something to read (Fabric::ready_links on a shared endpoint, a fired
// descriptor otherwise), queued or unfinished sends, a close to carry out,
// or that did something at the last pass; so at 10,000 quiet nodes a
// request costs what it costs at 100. Timeouts of silent peers are checked
// by a sweep over every peer a few times a second, not per pass. (Links with
// a descriptor each, connected providers, are still armed one by one before
// a sleep: that is one call per link by nature.)
//
// Connection setup happens on a thread of its own (the acceptor), which
// hands finished connections to the loop: a handshake, however slow (an
// endpoint opened, an answer to a peer that is gone), never delays a
// request of a connected peer, and no call of the loop waits for a peer.
//
// The database writes of one pass are one transaction (Store::begin_batch),
// and the answers queued during the pass leave only after its commit: a
// client never holds a grant that a crash could forget.
// Answers are queued per connection and posted one at a time as the previous
// send completes; a connection whose queue overflows is dropped.
//
// A node's connection closing marks the node down (on reliable-datagram
// providers, which report no disconnect, the heartbeat timeout does).
// Lease-ended notices for a node that is not connected, or is down, wait
// until it registers again or its heartbeats resume. A connected node gets at
// most a window of notices in its send queue; the rest of a burst waits in
// its backlog and follows as the queue drains, and a post that finds no room
// at the provider (a node that does not read just now) is tried again at a
// later pass rather than holding the loop or failing the node.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include "protocol/control_channel.hpp"
#include "protocol/rm_messages.hpp"
#include "resource_manager/client_auth.hpp"
#include "resource_manager/config.hpp"
#include "resource_manager/loop.hpp"
#include "resource_manager/metrics.hpp"
#include "resource_manager/node_provider.hpp"

namespace rfaas::rm {

class FabricServer final : public LoopDriver {
public:
  /// Opens the fabric on `device` and listens on the configured address.
  /// Throws rdmalib::Error with the cause (bad device, address in use).
  FabricServer(const rdmalib::DeviceConfig &device, const FabricConfig &config);
  ~FabricServer() override;

  /// Where nodes and clients connect (real port).
  const rdmalib::Address &address() const { return listener_.address(); }
  const std::string &provider() const { return fabric_.provider(); }
  /// How lease requests are authenticated.
  const ClientAuth &auth() const { return auth_; }

  bool poll(Registry &registry) override;
  void deliver(const std::vector<LeaseEnded> &events, Registry &registry) override;
  int prepare_wait(std::vector<int> &fds) override;
  void ready(const std::vector<int> &fds) override;
  /// Starts the acceptor thread.
  void started(std::function<void()> wake) override;
  void stop(Registry &registry) override;

  /// Open connections (for tests and metrics).
  size_t connections() const { return peers_.size(); }

  /// Where the time to answer registrations and lease requests, and the
  /// loop's work per pass, are reported (the REST API's /metrics page). Set
  /// before the loop starts.
  void observe_latencies(RequestLatencies *latencies) { latencies_ = latencies; }
  /// Asked when a lease cannot be placed and when an unknown node registers
  /// (nodes.provider "slurm"). Set before the loop starts; not owned.
  void use_provider(NodeProvider *provider) { provider_ = provider; }

private:
  using Clock = std::chrono::steady_clock;
  struct Peer;

  /// The acceptor thread: waits for connection requests and sets them up.
  void accept_loop();
  /// Sets one request up; the connection, or null when it was refused.
  std::unique_ptr<Peer> accept_one(rdmalib::ConnectionRequest &req);
  /// Moves what the acceptor finished into peers_ (loop thread).
  bool take_accepted();
  /// After the batch's commit failed for `leases`: their answers say so,
  /// and the registry forgets those of them that were grants.
  void fail_held(const std::vector<uint64_t> &leases, Registry &registry);
  void stop_acceptor();
  /// Reads and handles what `p` sent: the messages read, or -1 when the
  /// connection ended.
  int serve(Peer &p, Registry &registry);
  void handle(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  void dispatch(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  void on_register(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  /// Makes `p` a client if a client slot is free (max_connections less the
  /// slots reserved for nodes); false: refused, closed after the answer.
  bool admit_client(Peer &p);
  std::string client_slots_full() const;
  void on_lease_request(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  void on_renew(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  void on_release(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  void on_accounting(Peer &p, const protocol::ControlMessage &m, Registry &registry);
  /// When nothing else waits to be sent to node `p`, queues the lease-ended
  /// notices that wait for it, up to 128 in one message; true if any moved.
  bool send_pending(Peer &p);
  /// Queues again the notices of every ended lease of node `p` whose token
  /// has not expired (the node or this process may have restarted).
  void resend_ended(Peer &p, Registry &registry);
  /// Keeps a notice for `node` until its connection takes it (counted; the
  /// oldest is dropped beyond kMaxBacklog).
  void hold(const std::string &node, const protocol::LeaseEnded &notice);
  /// Logs drops_unsaid_, a line per node, and clears it.
  void say_drops(Clock::time_point now);
  void grant_reply(Peer &p, const Status &status, const Grant *grant, uint64_t lease_id);
  template <class M> void queue(Peer &p, const M &m);
  void queue_bytes(Peer &p, std::vector<uint8_t> bytes);
  /// Posts the next queued message if the send area is free.
  bool flush(Peer &p);
  /// Ends a connection; a registered node's own connection marks it down.
  void drop(Peer &p, Registry &registry, const std::string &why);
  /// Links share one endpoint: marks the peers that have something to read
  /// (Fabric::ready_links) and makes them active; true if any is newly so.
  bool mark_ready_links();
  /// Puts `p` on the list the next pass looks at (once).
  void activate(Peer &p);
  /// Whether `p` must be looked at again at the next pass.
  bool needs_pass(Peer &p);
  /// A node's (or an unregistered peer's) link of its own with nothing to
  /// do that only needs arming.
  bool quiet_unarmed(Peer &p);
  /// Every peer: closes those silent beyond their idle timeout.
  void sweep(Clock::time_point now);
  /// Adds to the /metrics counters of the loop's work.
  void count_visits(size_t peers);

  FabricConfig cfg_;
  /// Checks lease requests' credentials (on the loop's thread only).
  ClientAuth auth_;
  rdmalib::DeviceConfig device_;
  rdmalib::Fabric fabric_;
  rdmalib::Listener listener_;
  /// Every connection, by its tag (Connection::set_tag, for ready_links).
  std::unordered_map<uint64_t, std::unique_ptr<Peer>> peers_;
  /// Capabilities::shared_endpoint: the loop reads only the peers that
  /// Fabric::ready_links names (or that were busy at the last pass), and
  /// sleeps on the shared endpoint's one descriptor, instead of polling and
  /// arming each of thousands of links (a provider call each) per pass.
  bool shared_ = false;
  /// The active peers: what the next pass looks at (Peer::listed says
  /// whether a peer is here), and the list the current pass works through.
  std::vector<Peer *> active_;
  std::vector<Peer *> pass_;
  /// Active peers a pass had no budget left for (kNodePeersPerPass), oldest
  /// first; still listed, so activate() leaves them here.
  std::deque<Peer *> deferred_;
  std::vector<Peer *> others_;
  /// Fills pass_ from active_ and deferred_: every client, then the
  /// budget's worth of other peers, the oldest first.
  void take_pass();
  /// When sweep() last ran.
  Clock::time_point swept_{};
  std::atomic<uint64_t> next_tag_{1};
  std::vector<uint64_t> ready_tags_;
  int shared_arm_failures_ = 0;
  /// Peers that are clients (at most max_connections - reserved_for_nodes).
  size_t clients_ = 0;
  /// Node name -> its registered connection.
  std::map<std::string, Peer *> nodes_;
  /// Notices waiting per node: for nodes that were not connected (sent when
  /// they register or beat again), and for a connected node, those that
  /// ended while its last message was on its way (sent together next).
  std::map<std::string, std::deque<protocol::LeaseEnded>> pending_;
  /// Per node, notices dropped (its backlog full) since the last lines that
  /// said so, and when those were written: a line per node with drops, at
  /// most once a second for all of them.
  struct Drops {
    uint64_t count = 0;
    /// The lease of the last notice dropped.
    uint64_t last_lease = 0;
  };
  std::map<std::string, Drops> drops_unsaid_;
  Clock::time_point drops_said_{};
  RequestLatencies *latencies_ = nullptr;
  NodeProvider *provider_ = nullptr;

  // The acceptor thread and what it hands over (under accepted_mutex_).
  std::thread acceptor_;
  std::atomic<bool> accepting_{false};
  int acceptor_stop_fd_ = -1; // an eventfd that ends the acceptor's sleep
  std::function<void()> wake_;
  std::mutex accepted_mutex_;
  std::vector<std::unique_ptr<Peer>> accepted_;
  /// Connections open or handed over (the acceptor's max_connections check).
  std::atomic<size_t> open_count_{0};

  /// True during a pass: answers wait in the outboxes for the batch's commit.
  bool holding_ = false;
  /// Grant answers queued during the pass: (peer, outbox index, lease id).
  struct Held {
    Peer *peer;
    size_t index;
    uint64_t lease;
    /// A new lease's grant (not a renewal or a release).
    bool grant;
  };
  std::vector<Held> held_;
  /// When a link without a wait descriptor last had work: until kPollWindow
  /// after it, the loop keeps polling instead of sleeping.
  Clock::time_point fdless_active_{};
};

} // namespace rfaas::rm
