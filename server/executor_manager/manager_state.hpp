// Internal to the executor manager: what it keeps per client and per
// allocation, and the options of the two kinds of link it accepts. Shared by
// the files that implement Manager (manager.hpp lists them).
#pragma once

#include <rdmalib/rdmalib.hpp>

#include "executor_manager/manager.hpp"
#include "protocol/control_channel.hpp"

namespace rfaas::manager {

namespace proto = rfaas::protocol;

constexpr size_t kClientRecv = proto::kMaxAllocationRequestSize;
constexpr uint64_t kClientRecvs = 2;
constexpr uint32_t kClientSends = 4;
constexpr uint64_t kExecutorRecvs = 8;

// The two kinds of link the manager accepts. A post on either waits at most
// connect_ms for room, as every other wait for one peer in the manager's
// loop: to a peer that died a reliable-datagram provider may answer "try
// again" for the whole default post deadline (5 s) while it reconnects.
inline rdmalib::ConnectionOptions client_link_options(uint32_t connect_ms) {
  rdmalib::ConnectionOptions opts;
  opts.post_deadline = std::chrono::milliseconds(connect_ms);
  opts.recv_depth = kClientRecvs + 2;
  // The manager sends one answer per request: a small send queue keeps an
  // idle connection cheap (queues are sized by these depths).
  opts.send_depth = kClientSends;
  return opts;
}

inline rdmalib::ConnectionOptions executor_link_options(uint32_t connect_ms) {
  rdmalib::ConnectionOptions opts;
  opts.post_deadline = std::chrono::milliseconds(connect_ms);
  opts.recv_depth = kExecutorRecvs + 2;
  opts.check_peer_before_poll = true;
  return opts;
}

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
  /// The lease's owner as its verified token says (kAnonymousUid: none).
  uint32_t lease_owner_uid = proto::kAnonymousUid;
  Admission::Ticket ticket = 0; // pending until granted (admission.hpp)
  bool requested = false;
  bool closed = false;
};

/// A pooled executor's accounting link, before it has an allocation.
struct Manager::PooledLink {
  pid_t pid = -1;
  /// What its ExecutorHello (kPooledExecutor) must present, once.
  proto::Token secret;
  /// When the zygote reported it: its link must be up within
  /// executor_start_ms of that (poll_pooled_links).
  Clock::time_point since;
  bool connected = false;
  /// Polled while pooled, so that a link that ends is seen before the
  /// executor is given an allocation; the allocation then takes it over.
  /// Before conn: its buffers outlive the close.
  proto::ControlChannel channel;
  rdmalib::Connection conn;
};

struct Manager::Allocation {
  uint64_t id = 0;
  uint64_t lease_id = 0; // 0 in standalone mode
  proto::Token secret;
  std::vector<size_t> core_slots; // indices into cfg_.cores
  uint32_t memory_mib = 0;
  uint32_t workers = 0;
  pid_t pid = -1;
  /// Its executor was pre-started (the zygote's pool), not forked for it.
  bool pooled = false;
  /// The client has its answer (Ok): a pooled executor that replaces the
  /// first one is bound at its report, not after the answer.
  bool answered = false;
  bool exited = false;
  long exit_code = 0;
  /// Its client was sent the notice of its end (tell_client_ended).
  bool client_told = false;
  Clock::time_point started, exited_at;
  /// When the client said goodbye or vanished; the executor gets a grace
  /// period after a goodbye, none after a disconnect.
  bool client_gone = false;
  /// Its lease ended and the executor was told so (Shutdown, LeaseInvalid):
  /// its schedule (term_at, kill_at) stands when the client then leaves.
  bool lease_told = false;
  /// Its lease ended and the Shutdown (LeaseInvalid) has not gone out yet:
  /// the executor's accounting link was not up, or its send area was busy.
  bool lease_end_untold = false;
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

} // namespace rfaas::manager
