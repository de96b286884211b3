#include "executor/executor.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "executor/crash_guard.hpp"
#include "executor/function_library.hpp"
#include "executor/output_area.hpp"
#include "executor/resource_limits.hpp"
#include "protocol/control_channel.hpp"

namespace rfaas::executor {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

/// Connection requests a peer refuses are made again this often (see
/// rdmalib::ConnectionOptions::refused_retries): the client's listener and the
/// manager are known to be there, so a refusal is more likely transient.
constexpr uint32_t kRefusedRetries = 3;

volatile sig_atomic_t g_terminate = 0;
void on_term(int) { g_terminate = 1; }

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

/// Counters one worker publishes for the accounting thread. Written only by
/// the worker (relaxed stores: a plain move on x86/arm64), read by the main
/// thread; a cache line each so workers never share one.
struct alignas(64) WorkerCounters {
  std::atomic<uint64_t> hot_ns{0};
  std::atomic<uint64_t> exec_ns{0};
  std::atomic<uint64_t> invocations{0};
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
  std::unique_ptr<WorkerCounters[]> counters;

  Shared(const server::LaunchSpec &s, rdmalib::Fabric &f) : spec(s), fabric(f) {}

  void end_all() {
    stop.store(true, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(m);
    cv.notify_all();
  }
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
rdmalib::Status wait_one(rdmalib::Operations &ops, rdmalib::Queue q, rdmalib::Completion &c,
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

  void run() noexcept {
    try {
      setup_and_serve();
    } catch (const std::exception &e) {
      spdlog::error("executor {:x}: worker {}: {}", s_.spec.allocation_id, index_, e.what());
      s_.setup_failed.store(true);
      s_.end_all(); // an allocation with a missing worker is of no use
    }
    if (index_ == 0) // nobody else can fetch the library: release the others
      s_.publish_library(proto::ErrorCode::Internal, "worker 0 failed");
    std::lock_guard<std::mutex> g(s_.m);
    ++s_.finished;
    s_.cv.notify_all();
  }

private:
  void pin() {
    std::string why;
    if (!pin_thread(s_.spec.cores[index_], why))
      spdlog::warn("executor {:x}: worker {}: {}", s_.spec.allocation_id, index_, why);
  }

  /// Send a control message and wait for its completion (result writes and
  /// probes completing meanwhile are accounted by the channel's data handler).
  template <class M> void send_control(const M &m) {
    proto::ChannelStatus st = ctrl_.send(m, Clock::now() + milliseconds(s_.spec.connect_ms));
    if (st != proto::ChannelStatus::Ok)
      throw std::runtime_error(std::string("send ") + M::kName + ": " + proto::to_string(st) +
                               " (" + ctrl_.last_error() + ")");
  }

  void setup_and_serve() {
    pin();
    CrashGuard::prepare_thread();
    const proto::AllocationRequest &req = s_.request;
    const rdmalib::Capabilities &caps = s_.fabric.capabilities();
    slots_ = req.input_slots;
    islot_ = req.input_slot_size;
    rdesc_ = s_.results[index_];
    rslot_ = rdesc_.slot_size;
    nrecv_ = slots_ + 8;

    proto::WorkerHello hello;
    hello.allocation_id = s_.spec.allocation_id;
    hello.worker = index_;
    hello.workers = req.cores;
    uint8_t hello_bytes[sizeof(proto::WorkerHello)];
    proto::encode(hello, hello_bytes, sizeof hello_bytes);
    rdmalib::ConnectionOptions opts;
    opts.send_depth = slots_ + 8;
    opts.recv_depth = nrecv_;
    opts.refused_retries = kRefusedRetries;
    rdmalib::Address client{std::string(proto::get_text(req.client_host)), req.client_port};
    conn_ = rdmalib::Connection::connect(s_.fabric, client, hello_bytes, sizeof hello_bytes,
                                         milliseconds(s_.spec.connect_ms), opts);
    proto::ConnectReply reply;
    const auto &pd = conn_.peer_private_data();
    proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
    if (!r)
      throw std::runtime_error("client's ConnectReply: " + proto::describe(r));
    if (reply.status != proto::ErrorCode::Ok)
      throw std::runtime_error(std::string("client refused the worker: ") +
                               proto::to_string(reply.status));

    input_ = rdmalib::Buffer<char>(s_.fabric, size_t(slots_) * islot_, rdmalib::AccessRemoteWrite);
    // The function writes straight into its result slot (no copy), so the
    // slots sit between guard pages: writing past the capacity faults.
    output_ = OutputArea(slots_, rslot_, static_cast<uint32_t>(proto::kResultHeaderSize));
    output_mr_ =
        rdmalib::MemoryRegion(s_.fabric, output_.base(), output_.length(), rdmalib::AccessLocal);
    output_.protect_guards();
    conn_.attach(input_.region());
    conn_.attach(output_mr_);
    // Reliable-datagram links report no disconnect: a client killed without
    // a goodbye would leave this worker waiting forever. serve() then reads a
    // few bytes of the client's result buffer when the link has been quiet,
    // and a read that fails says the client is gone.
    probe_peer_ = caps.endpoint == rdmalib::EndpointType::ReliableDatagram;
    if (probe_peer_) {
      probe_ = rdmalib::Buffer<char>(s_.fabric, kProbeBytes, rdmalib::AccessLocal);
      conn_.attach(probe_.region());
    }
    ops_ = conn_.ops();
    proto::ControlOptions copts;
    copts.receives = static_cast<uint32_t>(nrecv_);
    copts.send_context = kSendCtx;
    ctrl_ = proto::ControlChannel(s_.fabric, conn_, copts);
    // What the channel reads besides its own messages: completions of result
    // writes and probes (counted in outstanding_), and, on the receive side,
    // nothing it could lose: the client invokes only after every Ready, and
    // serve() reads the queues itself.
    ctrl_.on_data([this](const rdmalib::Completion &c) {
      if (c.kind == rdmalib::OpKind::Recv || c.kind == rdmalib::OpKind::RemoteWriteImm)
        return;
      if (c.context == kProbeCtx)
        probing_ = false;
      if (outstanding_ > 0)
        --outstanding_;
    });

    proto::BufferAdvertisement adv;
    adv.descriptor.buffer = input_.remote();
    adv.descriptor.worker = index_;
    adv.descriptor.slots = slots_;
    adv.descriptor.slot_size = islot_;
    send_control(adv);

    if (index_ == 0)
      fetch_library();
    proto::ErrorCode status;
    std::string message;
    {
      std::unique_lock<std::mutex> g(s_.m);
      auto deadline = Clock::now() + milliseconds(s_.spec.library_loaded_ms);
      if (!s_.cv.wait_until(g, deadline, [&] { return s_.library_done || s_.stop.load(); }))
        s_.library_message = "no CodeHeader in time";
      status = s_.library_done ? s_.library_status : proto::ErrorCode::Timeout;
      message = s_.library_done ? s_.library_message : "the library did not arrive in time";
      if (status == proto::ErrorCode::Ok)
        lib_ = &s_.library;
    }
    // The network is up and the library loaded, either of which may have
    // installed fatal-signal handlers of its own: a crash in a function must
    // reach ours first.
    if (int n = CrashGuard::install())
      spdlog::debug("executor {:x}: crash guard went in front of {} other signal handler(s)",
                    s_.spec.allocation_id, n);
    proto::Ready ready;
    ready.status = status;
    ready.worker = index_;
    ready.function_count = lib_ ? static_cast<uint32_t>(lib_->size()) : 0;
    proto::set_text_truncated(ready.message, message);
    send_control(ready);
    if (status != proto::ErrorCode::Ok) {
      s_.setup_failed.store(true);
      s_.end_all();
      return;
    }
    serve();
  }

  /// Worker 0: wait for the CodeHeader, RDMA-read the library, check, load.
  void fetch_library() {
    const auto deadline = Clock::now() + milliseconds(s_.spec.library_loaded_ms);
    proto::CodeHeader code;
    proto::WireResult r;
    switch (ctrl_.await(code, deadline, &r)) {
    case proto::ChannelStatus::Ok:
      break;
    case proto::ChannelStatus::Timeout:
      return s_.publish_library(proto::ErrorCode::Timeout, "no CodeHeader in time");
    case proto::ChannelStatus::Shutdown:
      s_.end_all();
      return s_.publish_library(proto::ErrorCode::ShuttingDown, "the client shut down");
    case proto::ChannelStatus::Closed:
      s_.end_all();
      return s_.publish_library(proto::ErrorCode::ShuttingDown, "the client left");
    default:
      return s_.publish_library(proto::ErrorCode::LibraryInvalid,
                                "bad CodeHeader: " + proto::describe(r));
    }
    const proto::AllocationRequest &req = s_.request;
    if (code.library_size != req.library_size || code.checksum != req.library_checksum)
      return s_.publish_library(proto::ErrorCode::LibraryInvalid,
                                "CodeHeader does not match the AllocationRequest's library");
    if (code.source.size < code.library_size)
      return s_.publish_library(proto::ErrorCode::LibraryInvalid,
                                "CodeHeader.source is smaller than the library");
    rdmalib::Buffer<char> bytes(s_.fabric, code.library_size, rdmalib::AccessLocal);
    conn_.attach(bytes.region());
    size_t chunk = s_.fabric.capabilities().max_message;
    if (chunk == 0 || chunk > (8u << 20))
      chunk = 8u << 20;
    for (uint64_t off = 0; off < code.library_size; off += chunk) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, code.library_size - off));
      rdmalib::Status st = ops_.read(bytes.local_bytes(off, len), code.source, off, kReadCtx);
      rdmalib::Completion c;
      if (st == rdmalib::Status::Ok)
        st = wait_one(ops_, rdmalib::Queue::Send, c, static_cast<int>(s_.spec.library_loaded_ms));
      if (st != rdmalib::Status::Ok)
        return s_.publish_library(proto::ErrorCode::LibraryInvalid,
                                  std::string("RDMA read of the library failed: ") +
                                      rdmalib::to_string(st));
    }
    if (proto::library_checksum(bytes.data(), code.library_size) != code.checksum)
      return s_.publish_library(proto::ErrorCode::LibraryInvalid, "library checksum mismatch");
    try {
      FunctionLibrary lib = FunctionLibrary::load(bytes.data(), code.library_size,
                                                  std::string(proto::get_text(code.name)));
      std::lock_guard<std::mutex> g(s_.m);
      spdlog::info("executor {:x}: loaded {} ({} bytes, {} functions)", s_.spec.allocation_id,
                   lib.name(), code.library_size, lib.size());
      s_.library = std::move(lib);
      s_.library_done = true;
      s_.library_status = proto::ErrorCode::Ok;
      s_.cv.notify_all();
    } catch (const std::exception &e) {
      // The client sees only the first 127 characters (Ready's message).
      spdlog::error("executor {:x}: library refused: {}", s_.spec.allocation_id, e.what());
      s_.publish_library(proto::ErrorCode::LibraryInvalid, e.what());
    }
  }

  /// The hot path: no allocation, no logging, no exception per invocation.
  void serve() {
    const bool repost = s_.fabric.capabilities().write_consumes_receive;
    // Hot polling spins on the completion queue; where the provider's own
    // threads move the data that only takes their core away (milliseconds per
    // call on a small machine), so such workers always sleep between calls.
    const int32_t hot_ms = s_.fabric.capabilities().progress == rdmalib::Progress::Thread
                               ? 0
                               : s_.request.hot_timeout_ms;
    const auto hot_budget = std::chrono::milliseconds(hot_ms < 0 ? 0 : hot_ms);
    WorkerCounters &pub = s_.counters[index_];
    uint64_t hot_ns = 0, exec_ns = 0, invocations = 0;
    rdmalib::Completion comps[16], scomps[16];
    bool warm = hot_ms == 0;
    Clock::time_point idle_start = Clock::now();
    bool ending = false;
    bool stopped = false; // ended by this executor, not by the client

    while (!ending) {
      size_t n = ops_.poll(rdmalib::Queue::Recv, comps, 16);
      if (outstanding_ > 0) {
        size_t m = ops_.poll(rdmalib::Queue::Send, scomps, 16);
        for (size_t i = 0; i < m; ++i) {
          if (scomps[i].status != rdmalib::Status::Ok)
            ending = true; // the client is gone
          else if (scomps[i].context == kProbeCtx)
            probing_ = false;
        }
        outstanding_ -= static_cast<uint32_t>(m);
      }
      if (n == 0) {
        if (s_.stop.load(std::memory_order_relaxed) || g_terminate) {
          stopped = true;
          break;
        }
        // Reading the clock (~40 ns in a VM) lengthens the poll loop, whose
        // length adds to the latency: the probe and the hot-polling deadline
        // look at it only every kClockSpins idle polls.
        if (++idle_spins_ < kClockSpins)
          continue;
        idle_spins_ = 0;
        if (probe_peer_ && !probe_client(idle_start)) {
          ending = true;
          break;
        }
        if (hot_ms < 0)
          continue;
        if (!warm) {
          Clock::time_point now = Clock::now();
          if (now - idle_start < hot_budget)
            continue;
          hot_ns += ns_between(idle_start, now);
          pub.hot_ns.store(hot_ns, std::memory_order_relaxed);
          warm = true;
        }
        // Warm: sleep on the completion fd; wake up now and then to notice a
        // stop request from another worker or the main thread.
        rdmalib::WaitResult w = ops_.wait(rdmalib::Queue::Recv, comps, 16, 200);
        if (w.status == rdmalib::Status::Timeout)
          continue;
        if (w.status != rdmalib::Status::Ok)
          break;
        n = w.count;
      }
      for (size_t i = 0; i < n && !ending; ++i) {
        const rdmalib::Completion &c = comps[i];
        if (c.status != rdmalib::Status::Ok || c.kind == rdmalib::OpKind::PeerClosed) {
          ending = true;
          break;
        }
        if (c.kind == rdmalib::OpKind::Recv) {
          // A control message on the hot path can only be a goodbye; take()
          // reposts its receive (Closed when that fails).
          proto::ChannelStatus cs = ctrl_.take(c).status;
          if (cs == proto::ChannelStatus::Shutdown || cs == proto::ChannelStatus::Closed) {
            ending = true;
            break;
          }
          continue;
        }
        if (c.kind != rdmalib::OpKind::RemoteWriteImm)
          continue;
        // Two clock reads per invocation: arrival (ends hot polling, starts
        // execution) and once the result is posted (ends execution, starts the
        // next hot-polling period). Reading the second one after the post keeps
        // it off the client's round trip; execution time includes the post.
        Clock::time_point t0 = Clock::now();
        if (!warm)
          hot_ns += ns_between(idle_start, t0);
        Clock::time_point t1 = t0;
        int crashed = invoke(c.imm, t1);
        exec_ns += ns_between(t0, t1);
        ++invocations;
        pub.hot_ns.store(hot_ns, std::memory_order_relaxed);
        pub.exec_ns.store(exec_ns, std::memory_order_relaxed);
        pub.invocations.store(invocations, std::memory_order_relaxed);
        if (repost && !ctrl_.recycle(c))
          ending = true;
        if (crashed < 0) // the result could not be posted: the client is gone
          ending = true;
        if (crashed > 0) {
          end_after_crash(crashed);
          return;
        }
        idle_start = t1;
        warm = hot_ms == 0;
      }
    }
    if (!warm && hot_ms != 0) {
      hot_ns += ns_between(idle_start, Clock::now());
      pub.hot_ns.store(hot_ns, std::memory_order_relaxed);
    }
    if (stopped) {
      // Tell the client why its worker goes away (manager stopping, lease
      // ended, another worker failed), rather than just closing.
      proto::Shutdown bye;
      bye.allocation_id = s_.spec.allocation_id;
      bye.reason = proto::ErrorCode::ShuttingDown;
      try {
        send_control(bye);
      } catch (const std::exception &) {
        // The client may be gone already.
      }
    }
  }

  /// Liveness check for links without disconnect events, called when idle:
  /// every kProbeInterval of silence, one small read from the client's result
  /// buffer (the client does not see reads). False when the client is
  /// unreachable: the read cannot be posted, or is still pending after
  /// kProbeDeadline. A failed read completion is handled with the others.
  bool probe_client(Clock::time_point last_activity) noexcept {
    Clock::time_point now = Clock::now();
    if (probing_)
      return now - probe_sent_ < kProbeDeadline;
    Clock::time_point since = std::max(last_activity, probe_sent_);
    if (now - since < kProbeInterval)
      return true;
    rdmalib::Status st = ops_.read(probe_.local_bytes(0, kProbeBytes), rdesc_.buffer, 0, kProbeCtx);
    if (st != rdmalib::Status::Ok)
      return false;
    ++outstanding_;
    probing_ = true;
    probe_sent_ = Clock::now();
    return true;
  }

  /// Serve the invocation announced by `imm`; `done` is set to when the
  /// function's result was posted (left unchanged when no function ran).
  /// Returns 0, the signal number if the function crashed, or -1 if the result
  /// could not be posted.
  int invoke(uint32_t imm, Clock::time_point &done) noexcept {
    const proto::Immediate im = proto::parse_immediate(imm);
    const uint32_t s = im.slot;
    if (s >= slots_)
      return 0; // outside the input buffer: nothing to answer into
    char *in = input_.data() + size_t(s) * islot_;
    char *out = output_.slot(s);
    proto::InvocationHeader h;
    proto::WireResult r = proto::decode(in, islot_, h);
    proto::ResultHeader res;
    res.slot = static_cast<uint16_t>(s);
    uint64_t id = im.sequence;
    int crashed = 0;
    bool ran = false;
    if (!r) {
      if (r.error == proto::WireError::TooLarge) {
        res.status = proto::ErrorCode::PayloadTooLarge;
        res.detail = islot_ - static_cast<uint32_t>(proto::kInvocationHeaderSize);
        id = h.invocation_id;
      } else {
        res.status = proto::reply_code(r.error);
      }
    } else {
      id = h.invocation_id;
      Function fn = h.slot == s ? lib_->find_hash(h.function) : nullptr;
      if (h.slot != s) {
        res.status = proto::ErrorCode::BadRequest;
      } else if (!fn) {
        res.status = proto::ErrorCode::UnknownFunction;
        res.detail = h.function;
      } else {
        uint32_t produced = 0;
        crashed = CrashGuard::run(fn, in + proto::kInvocationHeaderSize, h.payload_size,
                                  output_.output(s), output_.capacity(), produced);
        ran = true;
        if (crashed) {
          res.status = proto::ErrorCode::FunctionCrashed;
          res.detail = static_cast<uint32_t>(crashed);
          if (crashed_off_its_slot(crashed, s, h.function))
            crashed = 0; // nothing outside the slot was touched: keep serving
        } else if (produced > output_.capacity()) {
          res.status = proto::ErrorCode::OutputTooLarge;
          res.detail = produced;
        } else {
          res.output_size = produced;
        }
      }
    }
    res.invocation_id = id;
    proto::encode(res, out, rslot_);
    uint32_t rimm = proto::make_immediate(s, id, res.status);
    rdmalib::Status st = ops_.write_imm(
        output_mr_.local(output_.offset(s), proto::kResultHeaderSize + res.output_size),
        rdesc_.buffer, uint64_t(s) * rslot_, rimm, kResultCtx);
    if (ran)
      done = Clock::now();
    if (st != rdmalib::Status::Ok)
      return -1;
    ++outstanding_;
    return crashed;
  }

  /// Log a crash of the function with name hash `hash` in slot `s`, and say
  /// whether it was a write that ran off the slot into a guard page. Such a
  /// crash stopped at the first byte past the slot (or before it): no memory
  /// but the slot's own was written, so the worker may go on serving. Any
  /// other crash may have damaged the process. Off the hot path.
  bool crashed_off_its_slot(int sig, uint32_t s, uint32_t hash) noexcept {
    const FunctionEntry *e = lib_->entry_hash(hash);
    const char *name = e ? e->name.c_str() : "?";
    const void *at = CrashGuard::fault_address();
    if ((sig == SIGSEGV || sig == SIGBUS) && output_.guard_hit(s, at)) {
      const char *o = output_.output(s);
      const char *a = static_cast<const char *>(at);
      spdlog::warn("executor {:x}: worker {}: function `{}` wrote {} its output area (capacity {} "
                   "bytes, fault at output{:+d}); answered function_crashed, the worker goes on",
                   s_.spec.allocation_id, index_, name, a < o ? "before the start of" : "past",
                   output_.capacity(), static_cast<long long>(a - o));
      return true;
    }
    spdlog::error("executor {:x}: worker {}: function `{}` crashed with signal {} ({}) at {}",
                  s_.spec.allocation_id, index_, name, sig, strsignal(sig), at);
    return false;
  }

  /// A function crashed: the result is posted; make sure it left, tell the
  /// client we are ending, and stop the whole executor (its memory can no
  /// longer be trusted).
  void end_after_crash(int sig) {
    s_.crash_signal.store(sig);
    rdmalib::Completion c;
    while (outstanding_ > 0 && wait_one(ops_, rdmalib::Queue::Send, c, 1000) == rdmalib::Status::Ok)
      --outstanding_;
    proto::Shutdown bye;
    bye.allocation_id = s_.spec.allocation_id;
    bye.reason = proto::ErrorCode::FunctionCrashed;
    try {
      send_control(bye);
    } catch (const std::exception &) {
      // The client may already be gone; ending is all that is left to do.
    }
    s_.end_all();
  }

  static constexpr uint64_t kSendCtx = 1ull << 40;
  static constexpr uint64_t kReadCtx = 2ull << 40;
  static constexpr uint64_t kResultCtx = 3ull << 40;
  static constexpr uint64_t kProbeCtx = 4ull << 40;
  static constexpr size_t kProbeBytes = 8;
  static constexpr std::chrono::milliseconds kProbeInterval{1000};
  static constexpr std::chrono::milliseconds kProbeDeadline{3000};
  static constexpr uint32_t kClockSpins = 64;

  Shared &s_;
  uint32_t index_;
  uint32_t slots_ = 0, islot_ = 0, rslot_ = 0;
  uint64_t nrecv_ = 0;
  uint32_t outstanding_ = 0;
  proto::BufferDescriptor rdesc_;
  // Buffers before the connection: members die in reverse order, and closing
  // the connection drains completions into posted receives (ASan caught the
  // goodbye landing in a freed receive buffer).
  rdmalib::Buffer<char> input_, probe_;
  OutputArea output_;
  rdmalib::MemoryRegion output_mr_; // after output_: deregistered before it unmaps
  proto::ControlChannel ctrl_;
  rdmalib::Connection conn_;
  rdmalib::Operations ops_;
  const FunctionLibrary *lib_ = nullptr;
  bool probe_peer_ = false, probing_ = false;
  uint32_t idle_spins_ = 0;
  Clock::time_point probe_sent_{};
};

/// The main thread's link to the manager: accounting increments.
class AccountingLink {
public:
  AccountingLink(Shared &s) : s_(s) {}

  void connect() {
    const server::LaunchSpec &spec = s_.spec;
    proto::ExecutorHello hello;
    hello.allocation_id = spec.allocation_id;
    hello.secret = spec.secret;
    uint8_t bytes[sizeof hello];
    proto::encode(hello, bytes, sizeof bytes);
    rdmalib::ConnectionOptions opts;
    opts.refused_retries = kRefusedRetries;
    conn_ = rdmalib::Connection::connect(s_.fabric, {spec.manager_host, spec.manager_port}, bytes,
                                         sizeof bytes, milliseconds(spec.connect_ms), opts);
    proto::ConnectReply reply;
    const auto &pd = conn_.peer_private_data();
    proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
    if (!r || reply.status != proto::ErrorCode::Ok)
      throw std::runtime_error("the manager refused the executor");
    results_ = rdmalib::Buffer<char>(s_.fabric, 64, rdmalib::AccessLocal);
    conn_.attach(results_.region());
    ops_ = conn_.ops();
    proto::ControlOptions copts;
    copts.receives = kRecvs;
    copts.send_context = kSendCtx;
    ch_ = proto::ControlChannel(s_.fabric, conn_, copts);
    if (!s_.fabric.capabilities().atomics)
      return;
    // The manager advertises its accounting record right after accepting.
    proto::BufferAdvertisement adv;
    proto::ChannelStatus st = ch_.await(adv, Clock::now() + milliseconds(spec.connect_ms), &r);
    if (st == proto::ChannelStatus::BadMessage || st == proto::ChannelStatus::Unexpected)
      throw std::runtime_error("accounting record: " + proto::describe(r));
    if (st != proto::ChannelStatus::Ok)
      throw std::runtime_error(std::string("no accounting record from the manager: ") +
                               proto::to_string(st));
    record_ = adv.descriptor.buffer;
    have_record_ = true;
  }

  /// Send what accumulated since the last flush. Returns false if the manager
  /// is gone.
  bool flush(Clock::time_point start) {
    proto::AccountingCounters now;
    now.allocation_ns = ns_between(start, Clock::now());
    for (uint32_t i = 0; i < s_.request.cores; ++i) {
      now.hot_polling_ns += s_.counters[i].hot_ns.load(std::memory_order_relaxed);
      now.execution_ns += s_.counters[i].exec_ns.load(std::memory_order_relaxed);
      now.invocations += s_.counters[i].invocations.load(std::memory_order_relaxed);
    }
    uint64_t delta[4] = {
        now.allocation_ns - sent_.allocation_ns, now.hot_polling_ns - sent_.hot_polling_ns,
        now.execution_ns - sent_.execution_ns, now.invocations - sent_.invocations};
    sent_ = now;
    if (have_record_) {
      uint32_t posted = 0;
      for (int i = 0; i < 4; ++i) {
        if (delta[i] == 0)
          continue;
        rdmalib::LocalRef result = results_.local_bytes(8 * i, 8);
        if (ops_.fetch_add(result, record_, 8 * i, delta[i], i) != rdmalib::Status::Ok)
          return false;
        ++posted;
      }
      for (; posted > 0; --posted) {
        rdmalib::Completion c;
        if (wait_one(ops_, rdmalib::Queue::Send, c, 2000) != rdmalib::Status::Ok)
          return false;
      }
      return true;
    }
    proto::Accounting msg;
    msg.allocation_id = s_.spec.allocation_id;
    msg.worker = proto::kAllWorkers;
    msg.counters = {delta[0], delta[1], delta[2], delta[3]};
    return ch_.send(msg, Clock::now() + milliseconds(2000)) == proto::ChannelStatus::Ok;
  }

  /// True when the manager closed or told us to stop.
  bool manager_left() {
    for (;;) {
      proto::ChannelStatus st = ch_.poll().status;
      if (st == proto::ChannelStatus::Closed || st == proto::ChannelStatus::Shutdown)
        return true;
      if (st == proto::ChannelStatus::Timeout)
        return false; // nothing more now; other messages are ignored
    }
  }

  void say_goodbye(proto::ErrorCode reason) {
    proto::Shutdown bye;
    bye.allocation_id = s_.spec.allocation_id;
    bye.reason = reason;
    ch_.send(bye, Clock::now() + milliseconds(1000));
  }

private:
  static constexpr uint32_t kRecvs = 4;
  static constexpr uint64_t kSendCtx = 99;
  Shared &s_;
  // Before conn_: they outlive the connection's close.
  rdmalib::Buffer<char> results_; // fetch_add results
  proto::ControlChannel ch_;
  rdmalib::Connection conn_;
  rdmalib::Operations ops_;
  rdmalib::RemoteBuffer record_;
  bool have_record_ = false;
  proto::AccountingCounters sent_;
};

} // namespace

int run_executor(const server::LaunchSpec &spec) noexcept {
  const Clock::time_point start = Clock::now();
  try {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::string why;
    if (!limit_memory(spec.memory_mib, why))
      spdlog::warn("executor {:x}: {}", spec.allocation_id, why);
    CrashGuard::install();

    spdlog::debug("executor {:x}: {} core(s), {} MiB, provider {}, manager {}:{}",
                  spec.allocation_id, spec.cores.size(), spec.memory_mib, spec.device.provider,
                  spec.manager_host, spec.manager_port);
    rdmalib::Fabric fabric(spec.device);
    spdlog::debug(
        "executor {:x}: fabric open after {} ms", spec.allocation_id,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    Shared shared(spec, fabric);
    proto::WireResult r =
        proto::decode(spec.request.data(), spec.request.size(), shared.request, shared.results);
    if (!r)
      throw std::runtime_error("allocation request: " + proto::describe(r));
    if (shared.request.cores != spec.cores.size())
      throw std::runtime_error("launch spec: core count does not match the request");
    shared.counters.reset(new WorkerCounters[shared.request.cores]);

    // Workers first: their connections to the client are on the critical path
    // of the cold start, the accounting link is not (connection setup costs a
    // round trip on tcp and ~1 s on tcp;ofi_rxm, so they overlap).
    std::vector<std::unique_ptr<Worker>> workers;
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < shared.request.cores; ++i) {
      workers.emplace_back(new Worker(shared, i));
      threads.emplace_back([w = workers.back().get()] { w->run(); });
    }
    AccountingLink link(shared);
    bool manager_gone = false;
    try {
      link.connect();
    } catch (const std::exception &e) {
      // Serving the client matters more than accounting: keep going.
      spdlog::error("executor {:x}: no accounting link to the manager: {}", spec.allocation_id,
                    e.what());
      manager_gone = true;
    }
    // This endpoint may be the process's first on some providers: keep the
    // crash guard in front of whatever handler the network installed.
    CrashGuard::install();
    auto last_flush = Clock::now();
    Clock::time_point terminate_at{};
    for (;;) {
      {
        std::unique_lock<std::mutex> g(shared.m);
        shared.cv.wait_for(g, milliseconds(100),
                           [&] { return shared.finished == shared.request.cores; });
        if (shared.finished == shared.request.cores)
          break;
      }
      if (g_terminate && terminate_at == Clock::time_point{}) {
        shared.end_all();
        terminate_at = Clock::now();
      }
      // A worker stuck inside a long function cannot see the stop request:
      // report what we have and end without it rather than wait for SIGKILL.
      if (terminate_at != Clock::time_point{} && Clock::now() - terminate_at > milliseconds(500)) {
        if (!manager_gone)
          link.flush(start);
        spdlog::warn("executor {:x}: terminated while a function was running", spec.allocation_id);
        std::fflush(nullptr);
        _exit(ExitTerminated);
      }
      if (!manager_gone && link.manager_left()) {
        manager_gone = true;
        shared.end_all();
      }
      if (!manager_gone && Clock::now() - last_flush > std::chrono::seconds(1)) {
        if (!link.flush(start))
          manager_gone = true;
        last_flush = Clock::now();
      }
    }
    for (auto &t : threads)
      t.join();
    int sig = shared.crash_signal.load();
    if (!manager_gone) {
      link.flush(start);
      link.say_goodbye(sig ? proto::ErrorCode::FunctionCrashed : proto::ErrorCode::Ok);
    }
    if (sig) {
      spdlog::error("executor {:x}: a function crashed with signal {} ({}); executor ends",
                    spec.allocation_id, sig, strsignal(sig));
      return ExitFunctionCrashed;
    }
    if (g_terminate)
      return ExitTerminated;
    return shared.setup_failed.load() ? ExitSetupFailed : ExitOk;
  } catch (const std::exception &e) {
    spdlog::error("executor {:x}: {}", spec.allocation_id, e.what());
    return ExitSetupFailed;
  }
}

} // namespace rfaas::executor
