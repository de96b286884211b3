// Internal to the executor process: the state its threads share, the worker
// threads (worker.cpp) and the main thread's accounting link to the manager
// (accounting_link.cpp); run_executor() (executor.cpp) starts and joins them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include "common/launch_spec.hpp"
#include "executor/arrival_clock.hpp"
#include "executor/crash_guard.hpp"
#include "executor/function_library.hpp"
#include "executor/seccomp_filter.hpp"
#include "executor/slot_area.hpp"
#include "protocol/control_channel.hpp"

namespace rfaas::executor_process {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// Connection requests a peer refuses are made again this often (see
/// rdmalib::ConnectionOptions::refused_retries): the client's listener and the
/// manager are known to be there, so a refusal is more likely transient.
constexpr uint32_t kRefusedRetries = 3;

/// Set by SIGTERM/SIGINT (run_executor installs the handler); workers stop
/// serving when they see it.
extern volatile sig_atomic_t g_terminate;

/// b - a in nanoseconds; 0 when b is not after a (an arrival dated from the
/// TSC may lie a few nanoseconds off the steady_clock reading beside it).
inline uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(
                     std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count())
               : 0;
}

/// Counters one worker publishes for the accounting thread. Written only by
/// the worker (relaxed stores: a plain move on x86/arm64), read by the main
/// thread; a cache line each so workers never share one.
struct alignas(64) WorkerCounters {
  std::atomic<uint64_t> hot_ns{0};
  std::atomic<uint64_t> exec_ns{0};
  std::atomic<uint64_t> invocations{0};
};

/// Where one worker thread is, for the main thread's forced exit (a function
/// that outlives the termination grace). A process that ends while one of
/// its threads is inside a provider call can leave a lock held in a peer's
/// memory for good (shm delivers under the receiver's region lock, and
/// progresses under its own: a client then spins for ever on the region of
/// an executor that died in a worker's goodbye). So the process ends early
/// only once every worker is out of the network library: finished, or
/// inside the client's function and frozen there. A cache line each, like
/// WorkerCounters.
struct alignas(64) WorkerGate {
  enum : int {
    /// In rdmalib or the provider, or may enter them without asking.
    Network = 0,
    /// Running the client's function: enters the network library only after
    /// taking the gate back (leave_function()).
    Function = 1,
    /// The main thread ends the process: the worker must not touch the
    /// network library again (set only over Function).
    Frozen = 2,
    /// run() returned.
    Done = 3,
  };
  std::atomic<int> state{Network};

  /// Worker: about to run the client's function (a plain store on x86).
  void enter_function() noexcept { state.store(Function, std::memory_order_release); }
  /// Worker: the function returned. When the main thread froze this worker
  /// meanwhile the process is ending: never return into the network library.
  void leave_function() noexcept;
  /// Main thread: true when this worker will not enter the network library
  /// again (done, or frozen in its function now).
  bool freeze() noexcept {
    int s = Function;
    return state.compare_exchange_strong(s, Frozen, std::memory_order_acq_rel) || s == Frozen ||
           s == Done;
  }
};

/// WorkerGate::enter_function() for a scope (one that may throw).
class InFunction {
public:
  explicit InFunction(WorkerGate &g) noexcept : g_(g) { g_.enter_function(); }
  ~InFunction() { g_.leave_function(); }
  InFunction(const InFunction &) = delete;
  InFunction &operator=(const InFunction &) = delete;

private:
  WorkerGate &g_;
};

struct Shared {
  const server::LaunchSpec &spec;
  rdmalib::Fabric &fabric;
  proto::AllocationRequest request;
  std::vector<proto::BufferDescriptor> results;

  std::mutex m;
  std::condition_variable cv;
  bool library_done = false;
  proto::ErrorCode library_status = proto::ErrorCode::Internal;
  std::string library_message;
  FunctionLibrary library;
  unsigned finished = 0;

  std::atomic<bool> stop{false};
  std::atomic<bool> setup_failed{false};
  std::atomic<int> crash_signal{0};
  /// A worker found that its client wrote outside its input slots
  /// (ExitRemoteWriteFault).
  std::atomic<bool> remote_write{false};
  /// A worker found the client unreachable (ExitClientLost).
  std::atomic<bool> client_lost{false};
  /// What the workers' Shutdown tells the client when the executor stops:
  /// ShuttingDown, or LeaseInvalid when the manager ended the allocation
  /// because its lease ended (AccountingLink::manager_left). Written before
  /// end_all(), read once a worker saw `stop`.
  std::atomic<uint16_t> stop_reason{static_cast<uint16_t>(proto::ErrorCode::ShuttingDown)};
  std::unique_ptr<WorkerCounters[]> counters;
  std::unique_ptr<WorkerGate[]> gates;

  Shared(const server::LaunchSpec &s, rdmalib::Fabric &f) : spec(s), fabric(f) {}

  void end_all() {
    stop.store(true, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(m);
    cv.notify_all();
  }
  /// Links still being set up: one per worker and the accounting link. The
  /// seccomp filter goes in once none is left (seal()): it refuses new
  /// sockets, which connecting may need.
  unsigned links_pending = 0;
  /// The seccomp filter compiled ahead (a pooled executor), if any.
  const SeccompProgram *filter_ahead = nullptr;
  /// A link is up, or gave up.
  void link_settled() {
    std::lock_guard<std::mutex> g(m);
    if (links_pending > 0)
      --links_pending;
    cv.notify_all();
  }
  /// Wait (until `deadline`, or until the executor stops) for every link to
  /// settle, then install the seccomp filter on every thread. False with the
  /// reason in `error`: the library must not be loaded then.
  bool seal(Clock::time_point deadline, std::string &error);

  /// First outcome wins (worker 0's exit path publishes a failure that must
  /// not overwrite a success).
  void publish_library(proto::ErrorCode st, std::string msg) {
    std::lock_guard<std::mutex> g(m);
    if (library_done)
      return;
    library_done = true;
    library_status = st;
    library_message = std::move(msg);
    cv.notify_all();
  }
};

/// Wait for one completion of queue `q` (its status is returned through `c`).
inline rdmalib::Status wait_one(rdmalib::Operations &ops, rdmalib::Queue q, rdmalib::Completion &c,
                                int timeout_ms) {
  rdmalib::WaitResult w = ops.wait(q, &c, 1, timeout_ms);
  if (w.status != rdmalib::Status::Ok)
    return w.status;
  return c.status;
}

/// One worker thread: connect, advertise, (worker 0) fetch the library, Ready,
/// serve until the client leaves.
class Worker {
public:
  Worker(Shared &s, uint32_t index) : s_(s), index_(index) {}

  void run() noexcept;

private:
  void pin();

  /// Send a control message and wait for its completion (result writes and
  /// probes completing meanwhile are accounted by the channel's data handler).
  template <class M> void send_control(const M &m);

  void setup_and_serve();

  /// Worker 0, before its link: allocate and register the library's buffer
  /// for the size the AllocationRequest names (left empty on failure).
  void prepare_library();
  /// Worker 0: wait for the CodeHeader, RDMA-read the library, check, load.
  void fetch_library();
  /// After a refusal: wait (at most `most`, or until the executor stops) for
  /// the client to close the link, so that the Ready that says why reaches it
  /// before this process is gone.
  void await_client_close(std::chrono::milliseconds most);

  /// The hot path: no allocation, no logging, no exception per invocation.
  void serve();

  /// Liveness check for links without disconnect events, called when idle:
  /// every kProbeInterval of silence, one small read from the client's result
  /// buffer (the client does not see reads). False when the client is
  /// unreachable: the read cannot be posted, or is still pending after
  /// kProbeDeadline. A failed read completion is handled with the others.
  bool probe_client(Clock::time_point now, Clock::time_point last_activity) noexcept;

  /// The client cannot be reached (`why`): log it once and end serving.
  void client_unreachable(const char *why) noexcept;
  /// The client's link ended before its Shutdown arrived: where that means
  /// the client is gone (end_means_lost_), say so (the executor then exits
  /// with ExitClientLost and the manager drops the client's own link).
  void link_ended() noexcept;

  /// Serve the invocation announced by `imm`; `done` is set to when the
  /// function's result was posted (left unchanged when no function ran).
  /// Returns 0, the signal number if the function crashed, or -1 if the result
  /// could not be posted.
  int invoke(uint32_t imm, Clock::time_point &done) noexcept;

  /// The library's entry for name hash `hash`, or nullptr. The last one
  /// found is kept: calls mostly repeat a function, and the library's binary
  /// search cost ~50 instructions on the critical path of every call.
  const FunctionEntry *function_entry(uint32_t hash) noexcept {
    if (last_entry_ && hash == last_hash_)
      return last_entry_;
    const FunctionEntry *e = lib_->entry_hash(hash);
    if (e) {
      last_hash_ = hash;
      last_entry_ = e;
    }
    return e;
  }

  /// Log a crash of the function with name hash `hash` in slot `s`, and say
  /// whether it was a write that ran off the slot into a guard page. Such a
  /// crash stopped at the first byte past the slot (or before it): no memory
  /// but the slot's own was written, so the worker may go on serving. Any
  /// other crash may have damaged the process. Off the hot path.
  bool crashed_off_its_slot(int sig, uint32_t s, uint32_t hash) noexcept;

  /// A function crashed: the result is posted; make sure it left, tell the
  /// client we are ending, and stop the whole executor (its memory can no
  /// longer be trusted).
  void end_after_crash(int sig);
  /// The client wrote into a guard page between its input slots (the crash
  /// guard let the provider finish the write there): put the guards back,
  /// tell the client (Shutdown, bad_request) and end the allocation.
  void end_after_remote_write();

  /// A result written in place failed (the client's provider refused the
  /// target: a revoked or malformed key, an address outside the region):
  /// answer invocation `slot` in its result slot with BadRequest instead.
  /// False when that cannot be posted either (the client is gone).
  bool target_refused(uint32_t slot) noexcept;

  static constexpr uint64_t kSendCtx = 1ull << 40;
  static constexpr uint64_t kReadCtx = 2ull << 40;
  static constexpr uint64_t kResultCtx = 3ull << 40;
  static constexpr uint64_t kProbeCtx = 4ull << 40;
  /// A result written at the client's result target; the low bits hold the slot.
  static constexpr uint64_t kTargetCtx = 5ull << 40;
  static constexpr uint64_t kCtxKindMask = 0xFFull << 40;
  static constexpr size_t kProbeBytes = 8;
  static constexpr std::chrono::milliseconds kProbeInterval{1000};
  static constexpr std::chrono::milliseconds kProbeDeadline{3000};
  static constexpr uint32_t kClockSpins = 64;

  Shared &s_;
  uint32_t index_;
  /// This worker's link counted in Shared::links_pending already.
  bool settled_ = false;
  uint32_t slots_ = 0, islot_ = 0, rslot_ = 0;
  uint64_t nrecv_ = 0;
  uint32_t outstanding_ = 0;
  proto::BufferDescriptor rdesc_;
  /// Per input slot: the result target the client last sent there
  /// (kWithTarget), which later invocations name again with kSameTarget, and
  /// the id of the result last written in place from the slot.
  struct SlotTarget {
    proto::ResultTarget target;
    bool known = false;
    uint32_t last_id = 0;
  };
  std::vector<SlotTarget> targets_;
  // Buffers before the connection: members die in reverse order, and closing
  // the connection drains completions into posted receives (ASan caught the
  // goodbye landing in a freed receive buffer).
  rdmalib::Buffer<char> probe_;
  /// Worker 0: the library's bytes, registered before the link is up
  /// (prepare_library()); fetch_library() takes them over.
  rdmalib::Buffer<char> library_;
  /// The client writes invocation s into input slot s; an in-place function
  /// writes its output over it, so these slots are guarded like the result
  /// slots. input_mr_ starts at slot 0, so slot s is at input_.stride() * s.
  SlotArea input_;
  rdmalib::MemoryRegion input_mr_; // after input_: deregistered before it unmaps
  /// input_mr_'s span (slots and the guard pages between them): a fault the
  /// provider raises there is a client's write outside its slots.
  CrashGuard::RemoteWriteArea input_watch_; // after input_: unwatched before it unmaps
  SlotArea output_;
  rdmalib::MemoryRegion output_mr_; // after output_: deregistered before it unmaps
  proto::ControlChannel ctrl_;
  rdmalib::Connection conn_;
  rdmalib::Operations ops_;
  const FunctionLibrary *lib_ = nullptr;
  const FunctionEntry *last_entry_ = nullptr; // function_entry()'s
  uint32_t last_hash_ = 0;
  bool end_means_lost_ = false, probing_ = false;
  uint32_t idle_spins_ = 0;
  Clock::time_point probe_sent_{};
  /// Dates an invocation's arrival (see arrival_clock.hpp).
  ArrivalClock arrival_;
};

/// The main thread's link to the manager: accounting increments.
class AccountingLink {
public:
  /// An allocation's link, connected by connect().
  explicit AccountingLink(Shared &s) : s_(&s), fabric_(&s.fabric) {}
  /// A pooled executor's link, connected by connect_pooled() before it has an
  /// allocation, and handed to the allocation's Shared by adopt().
  explicit AccountingLink(rdmalib::Fabric &fabric) : fabric_(&fabric) {}
  AccountingLink(const AccountingLink &) = delete;
  AccountingLink &operator=(const AccountingLink &) = delete;

  /// Connect to the manager (ExecutorHello). Throws when it cannot or the
  /// manager refuses.
  void connect();
  /// Connect while pooled, with the pooled executor's `secret`
  /// (proto::kPooledExecutor): the manager binds the link to the allocation
  /// the executor takes later, so that the link's set-up is off the cold
  /// start's critical path. Throws when it cannot or the manager refuses.
  void connect_pooled(const std::string &host, uint16_t port, uint32_t connect_ms,
                      const proto::Token &secret);
  /// The allocation this pooled link now serves (it must be on the same
  /// fabric).
  void adopt(Shared &s) { s_ = &s; }
  /// Where the fabric has atomics, wait for the manager's accounting record
  /// (its BufferAdvertisement, sent right after it accepted, or, for a pooled
  /// link, when it bound it). Apart from connect(): it needs no new socket,
  /// so the seccomp filter need not wait for it. Throws when it does not
  /// come.
  void await_record();

  /// Send what accumulated since the last flush. Returns false if the manager
  /// is gone.
  bool flush(Clock::time_point start);

  /// True when the manager closed or said goodbye. A Shutdown with reason
  /// LeaseInvalid (the allocation's lease ended) is not a goodbye: it stops
  /// the workers with that reason for their clients and returns false, so
  /// that the final accounting still reaches the manager.
  bool manager_left();

  void say_goodbye(proto::ErrorCode reason);

private:
  void open(const std::string &host, uint16_t port, uint32_t connect_ms,
            const proto::ExecutorHello &hello);

  static constexpr uint32_t kRecvs = 4;
  static constexpr uint64_t kSendCtx = 99;
  Shared *s_ = nullptr;
  rdmalib::Fabric *fabric_;
  // Before conn_: they outlive the connection's close.
  rdmalib::Buffer<char> results_; // fetch_add results
  proto::ControlChannel ch_;
  rdmalib::Connection conn_;
  rdmalib::Operations ops_;
  rdmalib::RemoteBuffer record_;
  bool have_record_ = false;
  bool lease_ended_ = false;
  proto::AccountingCounters sent_;
};

} // namespace rfaas::executor_process
