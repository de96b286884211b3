// A worker thread of the executor process: connect to the client, advertise
// the input slots, (worker 0) fetch and load the library, Ready, then serve
// invocations on the hot path until the client leaves.
#include "executor/executor.hpp"
#include "executor/process.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "executor/crash_guard.hpp"
#include "executor/resource_limits.hpp"

namespace rfaas::executor_process {

void Worker::run() noexcept {
  try {
    setup_and_serve();
  } catch (const std::exception &e) {
    if (!settled_)
      s_.link_settled();
    // After SIGTERM a setup step gives up on purpose (ConnectionOptions::cancel).
    if (g_terminate)
      spdlog::debug("executor {:x}: worker {}: ended by SIGTERM: {}", s_.spec.allocation_id, index_,
                    e.what());
    else
      spdlog::error("executor {:x}: worker {}: {}", s_.spec.allocation_id, index_, e.what());
    s_.setup_failed.store(true);
    s_.end_all(); // an allocation with a missing worker is of no use
  }
  if (index_ == 0) // nobody else can fetch the library: release the others
    s_.publish_library(proto::ErrorCode::Internal, "worker 0 failed");
  s_.gates[index_].state.store(WorkerGate::Done, std::memory_order_release);
  std::lock_guard<std::mutex> g(s_.m);
  ++s_.finished;
  s_.cv.notify_all();
}

void WorkerGate::leave_function() noexcept {
  int s = Function;
  if (state.compare_exchange_strong(s, Network, std::memory_order_acq_rel))
    return;
  // Frozen: the main thread is ending the process (_exit) and counts on this
  // thread staying out of the provider.
  for (;;)
    ::pause();
}

void Worker::pin() {
  std::string why;
  if (!pin_thread(s_.spec.cores[index_], why))
    spdlog::warn("executor {:x}: worker {}: {}", s_.spec.allocation_id, index_, why);
}

template <class M> void Worker::send_control(const M &m) {
  proto::ChannelStatus st = ctrl_.send(m, Clock::now() + milliseconds(s_.spec.connect_ms));
  if (st != proto::ChannelStatus::Ok)
    throw std::runtime_error(std::string("send ") + M::kName + ": " + proto::to_string(st) + " (" +
                             ctrl_.last_error() + ")");
}

void Worker::setup_and_serve() {
  pin();
  CrashGuard::prepare_thread();
  const proto::AllocationRequest &req = s_.request;
  const rdmalib::Capabilities &caps = s_.fabric.capabilities();
  slots_ = req.input_slots;
  // Rounded up to 8 bytes: the payload ends at a guard page, and an in-place
  // function's output (its payload) must start 8-byte aligned.
  islot_ = (req.input_slot_size + 7u) & ~7u;
  rdesc_ = s_.results[index_];
  rslot_ = rdesc_.slot_size;
  nrecv_ = worker_link_options(slots_).recv_depth;
  targets_.assign(slots_, SlotTarget{});

  // The link's set-up mostly waits (for the client, which accepts once the
  // manager has answered it): that wait hides registering the library's
  // buffer.
  if (index_ == 0)
    prepare_library();
  proto::WorkerHello hello;
  hello.allocation_id = s_.spec.allocation_id;
  hello.worker = index_;
  hello.workers = req.cores;
  uint8_t hello_bytes[sizeof(proto::WorkerHello)];
  proto::encode(hello, hello_bytes, sizeof hello_bytes);
  rdmalib::ConnectionOptions opts = worker_link_options(slots_);
  rdmalib::Address client = rdmalib::Address::from_host_text(
      std::string(proto::get_text(req.client_host)), req.client_port);
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

  // A function writes straight into its result slot, or an in-place one over
  // its input slot (no copy either way), so both kinds of slots sit between
  // guard pages: writing past the capacity faults.
  input_ = SlotArea(slots_, islot_, static_cast<uint32_t>(proto::kSlotPrefix));
  const size_t input_span = size_t(slots_ - 1) * input_.stride() + islot_;
  input_mr_ =
      rdmalib::MemoryRegion(s_.fabric, input_.slot(0), input_span, rdmalib::AccessRemoteWrite);
  input_.protect_guards();
  // shm carries out a small write-with-immediate by copying into this
  // memory itself (inline or injected data, smr_progress_cmd_rma): a write
  // aimed at a guard page between the slots faults inside the provider.
  input_watch_ =
      CrashGuard::RemoteWriteArea(input_.slot(0), input_span, server::ExitRemoteWriteFault);
  output_ = SlotArea(slots_, rslot_, static_cast<uint32_t>(proto::kSlotPrefix));
  output_mr_ =
      rdmalib::MemoryRegion(s_.fabric, output_.base(), output_.length(), rdmalib::AccessLocal);
  output_.protect_guards();
  conn_.attach(input_mr_);
  conn_.attach(output_mr_);
  // A client killed without a goodbye is not always reported: reliable-
  // datagram links report no disconnect at all, and on verbs the dying
  // process's disconnect request is sent once, never again if it is lost.
  // Either would leave this worker waiting forever, so serve() reads a few
  // bytes of the client's result buffer when the link has been quiet, and a
  // read that fails says the client is gone.
  probe_ = rdmalib::Buffer<char>(s_.fabric, kProbeBytes, rdmalib::AccessLocal);
  conn_.attach(probe_.region());
  // On connected links a client that leaves sends Shutdown first, and its
  // send completed before it closed: a link that ends without one ended
  // because the client died or was cut off. Reliable-datagram links may
  // report a dead peer process before its last messages were read (shm).
  end_means_lost_ = caps.endpoint == rdmalib::EndpointType::Connected;
  ops_ = conn_.ops();
  // Every post of this link goes to its client, and the protocol keeps the
  // send queue from filling while the client lives (one result per
  // invocation it sent, one probe at a time): a queue that stays full means
  // the client is gone (tcp;ofi_rxm refuses posts while it reconnects to a
  // dead peer). Bounded like the probe's answer, a lease whose client was
  // killed ends within about 4 s, not 1 s plus the default 5 s.
  ops_.set_post_deadline(kProbeDeadline);
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
  adv.descriptor.buffer = input_mr_.remote();
  adv.descriptor.worker = index_;
  adv.descriptor.slots = slots_;
  adv.descriptor.slot_size = islot_;
  adv.descriptor.slot_stride = static_cast<uint32_t>(input_.stride());
  send_control(adv);
  settled_ = true;
  s_.link_settled();

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
    await_client_close(milliseconds(std::min<int64_t>(s_.spec.connect_ms, 1000)));
    s_.end_all();
    return;
  }
  serve();
}

void Worker::await_client_close(milliseconds most) {
  // A client on shm stops reading a link once it sees the peer process gone
  // (the peer may have died holding a lock of the provider's), so a Ready
  // still unread when this process exits was lost: the client reported
  // "worker 0 closed its connection" instead of why its library was refused.
  // It closes the link once it has read the Ready.
  const auto until = Clock::now() + most;
  proto::Ready ignored;
  while (!s_.stop.load() && Clock::now() < until) {
    proto::ChannelStatus st = ctrl_.await(ignored, until);
    if (st == proto::ChannelStatus::Closed || st == proto::ChannelStatus::Shutdown ||
        st == proto::ChannelStatus::Timeout)
      return;
  }
}

void Worker::prepare_library() {
  // The AllocationRequest names the library's size (the manager checked it
  // against its limit). Where registering pins pages (verbs, efa), a large
  // library's registration costs milliseconds, now spent before the
  // CodeHeader arrives. Should it fail here, fetch_library() tries again and
  // reports why.
  try {
    library_ = rdmalib::Buffer<char>(s_.fabric, s_.request.library_size, rdmalib::AccessLocal);
  } catch (const std::exception &) {
    library_ = rdmalib::Buffer<char>();
  }
}

void Worker::fetch_library() {
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
  if (library_.size() != code.library_size)
    library_ = rdmalib::Buffer<char>(s_.fabric, code.library_size, rdmalib::AccessLocal);
  rdmalib::Buffer<char> bytes = std::move(library_);
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
  // The library's constructors run when it loads: the filter must be there.
  std::string why;
  if (s_.spec.seccomp && !s_.seal(deadline, why)) {
    spdlog::error("executor {:x}: sandbox: {}", s_.spec.allocation_id, why);
    return s_.publish_library(proto::ErrorCode::Internal, "sandbox: " + why);
  }
  try {
    // The library's constructors are the client's code too (WorkerGate).
    FunctionLibrary lib = [&] {
      InFunction in_function(s_.gates[index_]);
      return FunctionLibrary::load(bytes.data(), code.library_size,
                                   std::string(proto::get_text(code.name)));
    }();
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

void Worker::serve() {
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
  arrival_.note(idle_start);
  bool ending = false;
  bool stopped = false; // ended by this executor, not by the client

  while (!ending) {
    size_t n = ops_.poll(rdmalib::Queue::Recv, comps, 16);
    if (outstanding_ > 0) {
      size_t m = ops_.poll(rdmalib::Queue::Send, scomps, 16);
      for (size_t i = 0; i < m; ++i) {
        if (scomps[i].status != rdmalib::Status::Ok) {
          if ((scomps[i].context & kCtxKindMask) != kTargetCtx ||
              !target_refused(static_cast<uint32_t>(scomps[i].context & 0xFFFFu))) {
            client_unreachable((scomps[i].context & kCtxKindMask) == kProbeCtx
                                   ? "a liveness probe failed"
                                   : "a transfer to it failed");
            ending = true;
          }
        } else if (scomps[i].context == kProbeCtx)
          probing_ = false;
      }
      outstanding_ -= static_cast<uint32_t>(m);
    }
    // Both polls progress the provider, which may have carried out a write
    // into a guard page: nothing of this batch runs then.
    if (input_watch_.faults() != 0) {
      end_after_remote_write();
      return;
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
      const Clock::time_point now = Clock::now();
      arrival_.note(now);
      if (!probe_client(now, idle_start)) {
        client_unreachable(probing_ ? "a liveness probe got no answer in time"
                                    : "a liveness probe could not be posted");
        ending = true;
        break;
      }
      if (hot_ms < 0)
        continue;
      if (!warm) {
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
      if (w.status != rdmalib::Status::Ok) {
        link_ended();
        break;
      }
      if (input_watch_.faults() != 0) {
        end_after_remote_write();
        return;
      }
      n = w.count;
      // Asleep for up to a wait slice: date the arrival from a fresh reading.
      arrival_.note(Clock::now());
    }
    // Set when the previous completion of this batch was an invocation that
    // ran: its end (a clock read after its result was posted) is the next
    // one's start.
    bool chained = false;
    Clock::time_point last_end{};
    for (size_t i = 0; i < n && !ending; ++i) {
      const rdmalib::Completion &c = comps[i];
      if (c.status != rdmalib::Status::Ok || c.kind == rdmalib::OpKind::PeerClosed) {
        link_ended();
        ending = true;
        break;
      }
      if (c.kind == rdmalib::OpKind::Recv) {
        // A control message on the hot path can only be a goodbye; take()
        // reposts its receive (Closed when that fails).
        proto::ChannelStatus cs = ctrl_.take(c).status;
        if (cs == proto::ChannelStatus::Shutdown || cs == proto::ChannelStatus::Closed) {
          if (cs == proto::ChannelStatus::Closed)
            link_ended();
          ending = true;
          break;
        }
        continue;
      }
      if (c.kind != rdmalib::OpKind::RemoteWriteImm)
        continue;
      // Two times: the arrival (ends hot polling, starts execution), dated
      // by arrival_ from the TSC because it lies on the client's round trip,
      // and a steady_clock reading once the result is posted (ends
      // execution, starts the next hot-polling period, anchors arrival_),
      // after the post and so off the round trip; execution time includes
      // the post. Invocations that arrived together run back to back: the
      // end of one is the start of the next.
      Clock::time_point t0 = chained ? last_end : arrival_.now();
      if (!warm)
        hot_ns += ns_between(idle_start, t0);
      Clock::time_point t1 = t0;
      int crashed = invoke(c.imm, t1);
      exec_ns += ns_between(t0, t1);
      // invoke() reads the clock only for a function that ran.
      chained = t1 != t0;
      last_end = t1;
      if (chained)
        arrival_.note(t1);
      ++invocations;
      pub.hot_ns.store(hot_ns, std::memory_order_relaxed);
      pub.exec_ns.store(exec_ns, std::memory_order_relaxed);
      pub.invocations.store(invocations, std::memory_order_relaxed);
      if (repost && !ctrl_.recycle(c))
        ending = true;
      if (crashed < 0) { // the result could not be posted: the client is gone
        client_unreachable("a result could not be posted");
        ending = true;
      }
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
  // Tell the client why its worker goes away (manager stopping, lease
  // ended, another worker failed), rather than just closing; but not while
  // a liveness probe is unanswered: the client has not progressed since,
  // and a provider may hold every later send to it until it does (shm
  // without CMA carries a read in pieces and answers each send to that peer
  // "try again" meanwhile, taking the client's region lock on every try; an
  // executor ended during those tries left that lock held, and the client
  // spun on it for good: docs/BACKEND-BUGS.md). The client learns the
  // worker is gone from the link's end instead.
  if (stopped && probing_)
    spdlog::debug("executor {:x}: worker {}: no Shutdown to a client that has not answered "
                  "the liveness probe",
                  s_.spec.allocation_id, index_);
  if (stopped && !probing_) {
    proto::Shutdown bye;
    bye.allocation_id = s_.spec.allocation_id;
    bye.reason = static_cast<proto::ErrorCode>(s_.stop_reason.load());
    try {
      send_control(bye);
    } catch (const std::exception &) {
      // The client may be gone already.
    }
  }
}

void Worker::link_ended() noexcept {
  if (end_means_lost_)
    client_unreachable("its link ended without a Shutdown");
}

void Worker::client_unreachable(const char *why) noexcept {
  if (!s_.client_lost.exchange(true))
    spdlog::warn("executor {:x}: worker {}: the client is unreachable ({}); ending",
                 s_.spec.allocation_id, index_, why);
}

bool Worker::probe_client(Clock::time_point now, Clock::time_point last_activity) noexcept {
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

static_assert(proto::kInvocationHeaderSize >= proto::kResultHeaderSize,
              "an in-place result header goes over the invocation header");

// Expanded into serve(), its only caller: one call less per invocation.
[[gnu::always_inline]] inline int Worker::invoke(uint32_t imm, Clock::time_point &done) noexcept {
  const proto::Immediate im = proto::parse_immediate(imm);
  const uint32_t s = im.slot;
  if (s >= slots_)
    return 0; // outside the input buffer: nothing to answer into
  proto::InvocationHeader h;
  SlotTarget &slot_target = targets_[s];
  proto::WireResult r = proto::decode_input_slot(input_.slot(s), islot_, h, slot_target.target);
  // The result target: a new one is kept for the slot (a malformed one
  // forgets the old), kSameTarget names it again.
  if (h.flags & proto::kWithTarget)
    slot_target.known = r.ok();
  if (r && (h.flags & proto::kSameTarget) && !slot_target.known)
    r = {proto::WireError::Inconsistent, 0,
         "InvocationHeader.flags names the slot's previous result target, but it has none"};
  const proto::ResultTarget *target = r && h.has_target() ? &slot_target.target : nullptr;
  char *in = input_.output(s); // the payload, kSlotPrefix into the slot
  proto::ResultHeader res;
  res.slot = static_cast<uint16_t>(s);
  uint32_t id = im.sequence;
  int crashed = 0;
  bool ran = false, over_input = false;
  if (!r) {
    if (r.error == proto::WireError::TooLarge) {
      res.status = proto::ErrorCode::PayloadTooLarge;
      res.detail = islot_ - static_cast<uint32_t>(proto::kSlotPrefix);
      id = h.invocation_id;
    } else {
      res.status = proto::reply_code(r.error);
    }
  } else {
    id = h.invocation_id;
    const FunctionEntry *fn = h.slot == s ? function_entry(h.function) : nullptr;
    if (h.slot != s) {
      res.status = proto::ErrorCode::BadRequest;
    } else if (!fn) {
      res.status = proto::ErrorCode::UnknownFunction;
      res.detail = h.function;
    } else {
      // An in-place function gets its input slot as its output, so that
      // nothing is copied; the others get the result slot.
      over_input = fn->in_place;
      char *dst = over_input ? in : output_.output(s);
      const uint32_t cap = over_input ? input_.capacity() : output_.capacity();
      uint32_t produced = 0;
      WorkerGate &gate = s_.gates[index_];
      gate.enter_function();
      crashed = CrashGuard::run(fn->function, in, h.payload_size, dst, cap, produced);
      gate.leave_function();
      ran = true;
      if (crashed) {
        res.status = proto::ErrorCode::FunctionCrashed;
        res.detail = static_cast<uint32_t>(crashed);
        if (crashed_off_its_slot(crashed, s, h.function))
          crashed = 0; // nothing outside the slot was touched: keep serving
      } else if (produced > cap) {
        res.status = proto::ErrorCode::OutputTooLarge;
        res.detail = produced;
      } else {
        res.output_size = produced;
      }
    }
  }
  res.invocation_id = id;
  // The client's result target (validated by decode(); its key and address
  // only the client's provider can check: a refusal comes back as a failed
  // completion, see target_refused). The output was written into a guarded
  // slot and goes out from there either way.
  const uint64_t room = target && res.status == proto::ErrorCode::Ok
                            ? target->capacity - proto::kResultHeaderSize
                            : rslot_ - proto::kSlotPrefix;
  if (res.status == proto::ErrorCode::Ok && res.output_size > room) {
    res.status = proto::ErrorCode::OutputTooLarge; // only an in-place output can exceed the slot
    res.detail = res.output_size;
    res.output_size = 0;
  }
  const bool to_target = target && res.status == proto::ErrorCode::Ok;
  // The result header goes right before the output: at the end of the result
  // slot's prefix, or over the invocation header in the input slot (read
  // already). The write starts slot_write_lead() before the output, where a
  // target leaves room for that.
  const bool from_input = over_input && res.status == proto::ErrorCode::Ok;
  char *data = from_input ? in : output_.output(s);
  proto::encode(res, data - proto::kResultHeaderSize,
                proto::kResultHeaderSize + size_t(res.output_size));
  size_t lead = proto::slot_write_lead(proto::kResultHeaderSize, res.output_size);
  if (to_target && lead > proto::kResultHeaderSize + target->offset)
    lead = proto::kResultHeaderSize;
  const size_t len = lead + res.output_size;
  // Offsets from where each region's registration starts (input_: slot 0).
  const rdmalib::LocalRef src = from_input
                                    ? input_mr_.local(size_t(data - lead - input_.slot(0)), len)
                                    : output_mr_.local(size_t(data - lead - output_.base()), len);
  rdmalib::Status st;
  if (to_target) {
    targets_[s].last_id = id;
    st = ops_.write_imm(src, target->target, target->offset + proto::kResultHeaderSize - lead,
                        proto::make_in_place_immediate(s, id), kTargetCtx | s);
  } else {
    st = ops_.write_imm(src, rdesc_.buffer, uint64_t(s) * rslot_ + proto::kSlotPrefix - lead,
                        proto::make_immediate(s, id, res.status), kResultCtx);
  }
  if (ran)
    done = Clock::now();
  if (st != rdmalib::Status::Ok)
    return -1;
  ++outstanding_;
  return crashed;
}

bool Worker::crashed_off_its_slot(int sig, uint32_t s, uint32_t hash) noexcept {
  const FunctionEntry *e = lib_->entry_hash(hash);
  const char *name = e ? e->name.c_str() : "?";
  const void *at = CrashGuard::fault_address();
  const bool in_place = e && e->in_place;
  const SlotArea &area = in_place ? input_ : output_;
  if ((sig == SIGSEGV || sig == SIGBUS) && area.guard_hit(s, at)) {
    const char *o = area.output(s);
    const char *a = static_cast<const char *>(at);
    spdlog::warn("executor {:x}: worker {}: function `{}` wrote {} its {}output area (capacity "
                 "{} bytes, fault at output{:+d}); answered function_crashed, the worker goes on",
                 s_.spec.allocation_id, index_, name, a < o ? "before the start of" : "past",
                 in_place ? "in-place " : "", area.capacity(), static_cast<long long>(a - o));
    return true;
  }
  spdlog::error("executor {:x}: worker {}: function `{}` crashed with signal {} ({}) at {}",
                s_.spec.allocation_id, index_, name, sig, strsignal(sig), at);
  return false;
}

bool Worker::target_refused(uint32_t s) noexcept {
  if (s >= slots_)
    return false;
  spdlog::debug("executor {:x}: worker {}: the client refused the result target of slot {}",
                s_.spec.allocation_id, index_, s);
  proto::ResultHeader res;
  res.slot = static_cast<uint16_t>(s);
  res.invocation_id = targets_[s].last_id;
  res.status = proto::ErrorCode::BadRequest;
  char *out = output_.output(s) - proto::kResultHeaderSize;
  proto::encode(res, out, proto::kResultHeaderSize);
  rdmalib::Status st = ops_.write_imm(
      output_mr_.local(size_t(out - output_.base()), proto::kResultHeaderSize), rdesc_.buffer,
      uint64_t(s) * rslot_ + proto::kSlotPrefix - proto::kResultHeaderSize,
      proto::make_immediate(s, res.invocation_id, res.status), kResultCtx);
  if (st != rdmalib::Status::Ok)
    return false;
  ++outstanding_;
  return true;
}

void Worker::end_after_crash(int sig) {
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

void Worker::end_after_remote_write() {
  try {
    input_.protect_guards();
  } catch (const std::exception &e) {
    spdlog::error("executor {:x}: worker {}: {}", s_.spec.allocation_id, index_, e.what());
  }
  s_.remote_write.store(true);
  spdlog::error("executor {:x}: worker {}: the client wrote outside its input slots (into the "
                "guard page at byte {} of the input buffer it was given); refused, and the "
                "allocation ends",
                s_.spec.allocation_id, index_, input_watch_.last_fault_offset());
  rdmalib::Completion c;
  while (outstanding_ > 0 && wait_one(ops_, rdmalib::Queue::Send, c, 1000) == rdmalib::Status::Ok)
    --outstanding_;
  proto::Shutdown bye;
  bye.allocation_id = s_.spec.allocation_id;
  bye.reason = proto::ErrorCode::BadRequest;
  try {
    send_control(bye);
  } catch (const std::exception &) {
    // The client may already be gone; ending is all that is left to do.
  }
  s_.end_all();
}

} // namespace rfaas::executor_process
