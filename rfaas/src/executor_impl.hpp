// Internal to librfaas: rfaas::executor's shared state (executor::impl), split
// by phase over executor_allocation.cpp (docs/protocol.md steps 1-4 and 6),
// executor_invocation.cpp (step 5) and executor_memory.cpp (the registered
// blocks of rfaas::allocator), written against rdmalib's public API only.
//
// Per worker the client keeps three registered buffers:
//   results  slots x (64 + max_output)  remote-writable: the worker's results,
//                                       unless written in place (a result
//                                       target in rfaas::allocator memory)
//   staging  slots x (64 + max_input)   headers (at the end of the 64-byte
//                                       prefix) + copied payload for inputs
//                                       that are not rfaas::allocator memory
//   control  (recvs + 1) x 256          a ControlChannel: receives for control
//                                       messages and write_imm notifications,
//                                       one send area
// An invocation occupies (worker, slot) from its post until its result and its
// write completion both arrived; results are matched by slot (the immediate)
// and checked against the invocation id in the ResultHeader.
#pragma once

#include <rfaas/executor.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "channel_status.hpp"
#include "logging.hpp"
#include "protocol/control_channel.hpp"
#include "protocol/protocol.hpp"
#include "protocol/rm_messages.hpp"
#include "registry.hpp"

namespace rfaas {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// What the executor's phases share; not part of the public API.
namespace detail {

constexpr size_t kCtl = proto::kControlMessageMax;
/// Receives posted per worker beyond one per slot: Ready, Shutdown and the
/// BufferAdvertisement can arrive while every slot's notification is pending.
constexpr uint32_t kExtraRecvs = 8;
/// Manager connection: AllocationResponse, Shutdown, goodbye.
constexpr uint32_t kManagerRecvs = 4;
/// While the workers connect, how often the manager's notice that the
/// allocation ended is looked for (ms): well under a second, and a few polls
/// of an idle link per second cost nothing measurable.
constexpr int kEndedPollMs = 20;

// Send-queue contexts: a slot write carries its slot index in the low bits.
constexpr uint64_t kWriteCtx = 1ull << 62;
constexpr uint64_t kControlCtx = 1ull << 61;

inline status from_wire(proto::ErrorCode c) { return static_cast<status>(c); }

inline status from_rdmalib(const rdmalib::Error &e) {
  switch (e.kind()) {
  case rdmalib::ErrorKind::Timeout:
    return status::timeout;
  case rdmalib::ErrorKind::Closed:
  case rdmalib::ErrorKind::Refused:
    return status::closed;
  default:
    return status::network_error;
  }
}

inline int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

inline size_t round8(size_t n) { return (n + 7) & ~size_t(7); }

enum class SlotState : uint8_t {
  Free,
  /// Posted; result and/or write completion outstanding.
  InFlight,
  /// Result and write completion in; an async future has not claimed it yet.
  Done,
};

struct Slot {
  SlotState state = SlotState::Free;
  bool result_in = false;
  bool write_done = true;
  /// The caller gave up (timeout): drop the result when it comes.
  bool abandoned = false;
  uint64_t id = 0;
  mutable_buffer out;
  result res;
  /// Zero-copy source whose prefix holds this invocation's header.
  detail::Registration *source = nullptr;
  /// Registered block the result may be written into in place (its prefix
  /// receives the ResultHeader); nullptr when results come to the slot.
  detail::Registration *target = nullptr;
  /// The ResultTarget the worker keeps for this slot: the last one an
  /// invocation here sent (kWithTarget). An invocation naming the same one
  /// sends only kSameTarget. Unset until the first one was posted.
  proto::ResultTarget sent_target;
  bool target_sent = false;
};

struct Worker {
  // Buffers before the connection: members die in reverse order, and closing
  // the connection drains completions into posted receives.
  rdmalib::Buffer<char> results, staging;
  proto::ControlChannel control;
  rdmalib::Connection conn;
  rdmalib::Operations ops;
  /// The connection's own post deadline (ops.post_deadline()), read once: an
  /// invocation with a shorter deadline lowers it around its post.
  std::chrono::milliseconds post_deadline{0};
  /// The worker's input slots (its BufferAdvertisement).
  proto::BufferDescriptor input;
  bool advertised = false;
  bool ready = false;
  bool alive = false;
  status end_reason = status::closed;
  uint32_t writes_pending = 0;
  std::vector<Slot> slots;
};

} // namespace detail

struct executor::impl {
  using Worker = detail::Worker;
  using Slot = detail::Slot;
  using SlotState = detail::SlotState;

  impl(const device &dev, const timeouts &t)
      : deadlines(t), fabric(open_fabric(dev)), caps(fabric.capabilities()),
        listener(open_listener(fabric, dev)) {
    // Where opening an endpoint is slow (shm), the link to a manager finds
    // one opened ahead (rdmalib::Fabric::prepare; nothing elsewhere), and so
    // does the first allocation's worker link when it has the default slots.
    // Prepared only by allocate(), that endpoint was opened while the first
    // allocation connected to its manager, by a thread on the client's core:
    // ~10 ms of page faults on the critical path of every process's first
    // cold start (its slowest, the p99 of a short run).
    fabric.prepare(manager_link_options());
    fabric.prepare(worker_link_options(allocation_options{}.slots));
  }

  static rdmalib::Fabric open_fabric(const device &dev);

  static rdmalib::Listener open_listener(rdmalib::Fabric &f, const device &dev);
  /// The depths of the link to the manager, and of this allocation's links
  /// to its workers (after allocate() sized the slots).
  static rdmalib::ConnectionOptions manager_link_options();
  rdmalib::ConnectionOptions worker_link_options() const;
  /// The depths of worker links for `slots` input slots per worker.
  static rdmalib::ConnectionOptions worker_link_options(uint32_t slots);

  timeouts deadlines;
  rdmalib::Fabric fabric;
  rdmalib::Capabilities caps;
  rdmalib::Listener listener;
  detail::Registry registry;

  // ---- the allocation ----
  bool allocated = false;
  /// Bumped by every deallocate(): futures of an older allocation yield closed.
  uint64_t generation = 0;
  std::string manager_name;
  proto::ControlChannel manager_channel; // before manager: outlives its close
  rdmalib::Connection manager;
  uint64_t allocation_id = 0;
  uint32_t nworkers = 0, nslots = 0, max_input = 0, max_output = 0;
  uint32_t input_slot = 0, result_slot = 0, nrecv = 0;
  std::vector<Worker> workers;
  uint64_t next_id = 0;
  uint32_t rr_worker = 0, rr_slot = 0; // find_free()'s cursor
  rdmalib::Completion comp_buf[16];    // progress()'s, see there
  cold_start cold;
  copy_counters counters;

  // ---- setup helpers ----------------------------------------------------------

  [[noreturn]] void fail(phase ph, status st, const std::string &what) {
    throw Error(ph, manager_name, st, what);
  }

  Clock::time_point in(milliseconds d) const { return Clock::now() + d; }

  /// Fail the setup phase `ph` after a channel call to worker `index` failed.
  [[noreturn]] void fail_worker(phase ph, uint32_t index, proto::ChannelStatus s,
                                const proto::WireResult &wire, const Worker &w);

  // ---- allocation and deallocation (executor_allocation.cpp) ---------------

  void allocate(const server &m, const allocation_options &o);

  /// A call on the manager's connection failed with `st`: the manager may
  /// have refused the lease or the request and hung up before this side saw
  /// its send complete or read the answer (a LeaseProof is refused that way:
  /// it has no answer of its own, so the refusal precedes the
  /// AllocationRequest's). The refusal is then waiting in the receive ring
  /// and names the cause: fail with it, or else with `fallback` and `what`.
  [[noreturn]] void fail_unless_refused(proto::ChannelStatus st, status fallback,
                                        const std::string &what);

  void accept_workers(Clock::time_point deadline);
  /// Fails (phase workers, with the manager's cause) when the manager sent
  /// its notice that this allocation ended: a second AllocationResponse, not
  /// Ok, for allocation_id (its executor died before the workers connected).
  void check_allocation_ended(uint32_t connected);

  void collect_ready(Clock::time_point deadline);

  /// Close everything; with `polite`, tell workers and manager first.
  void teardown(bool polite) noexcept;

  // ---- the data path (executor_invocation.cpp) ------------------------------

  /// A worker ended (closed, Shutdown, failed completion): every invocation on
  /// it fails with `why`, later posts fail with `closed`.
  void worker_lost(Worker &w, status why) noexcept;

  void finish(Slot &s) noexcept;

  /// The caller gave up on the invocation in `s` (timeout): its result is
  /// dropped when it comes, the slot lets go of its registered blocks (the
  /// caller may free them now), and a result target's key is revoked so that
  /// a late result cannot land in memory the caller already uses again.
  void abandon(Slot &s) noexcept;

  /// Replace the block's registration by a new one (new key): writes naming
  /// the old key fail in the network instead of landing (executor_memory.cpp).
  void revoke_target(detail::Registration &r) noexcept;

  void on_write_done(Worker &w, const rdmalib::Completion &c) noexcept;

  void on_result(Worker &w, uint32_t imm) noexcept;

  /// A result or a write completion that a control channel read while it
  /// awaited a message: on_result() or on_write_done(). The data path's own
  /// functions are expanded in executor_invocation.cpp, the only file that
  /// calls them; this is the way in for the others.
  void on_slot_completion(Worker &w, const rdmalib::Completion &c) noexcept;

  /// Reap what arrived on one worker's connection. No allocation, no lock.
  /// With `block_ms` > 0, sleeps up to that long in the provider for the next
  /// completion on the queue `block_on` instead of polling it (for providers
  /// whose own threads move the data; see complete()).
  void progress(Worker &w, int block_ms = 0,
                rdmalib::Queue block_on = rdmalib::Queue::Recv) noexcept;

  /// Post `input` for `function` into (w, s); the post waits for room at
  /// most `within` (the call's deadline). On failure the slot stays free and
  /// the status is returned.
  result post(uint32_t wi, uint32_t s, uint32_t function, const_buffer input, mutable_buffer output,
              milliseconds within) noexcept;

  /// Busy-poll (or wait, see below) until (w, s) is Done or `timeout` has
  /// passed; frees the slot. The timeout counts from the first clock check
  /// (after 64 polls, or the first wait), not from the call: a pipelined
  /// caller whose result is already in reads no clock at all, and the
  /// difference is a few microseconds against a timeout of milliseconds.
  result complete(uint32_t wi, uint32_t s, milliseconds timeout) noexcept;

  /// An async_result dropped before its get(): nobody reads (w, s)'s result;
  /// the slot is free now, or once the late result is in.
  void discard(uint32_t wi, uint32_t s) noexcept;

  /// A free (worker, slot), round robin over workers first. False if none.
  bool find_free(uint32_t &wi, uint32_t &s) noexcept;

  void require_allocated() const {
    if (!allocated)
      throw Error(phase::usage, manager_name, status::invalid_argument,
                  "the executor holds no allocation; call allocate() first");
  }

  result execute(const function_name &fn, const_buffer in, mutable_buffer out,
                 milliseconds timeout);

  /// The wire carries a hash of the name; the caller needs the name itself.
  static void warn_unknown_function(const function_name &fn);

  std::vector<result> execute_parallel(const function_name &fn, const std::vector<const_buffer> &in,
                                       const std::vector<mutable_buffer> &out);
};

} // namespace rfaas
