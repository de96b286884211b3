// rfaas::executor: allocation (docs/protocol.md steps 1-4), invocations (step
// 5) and deallocation (step 6), written against rdmalib's public API only.
//
// Per worker the client keeps three registered buffers:
//   results  slots x (32 + max_output)  remote-writable: the worker's results
//   staging  slots x (32 + max_input)   header + copied payload for inputs that
//                                       are not rfaas::allocator memory
//   control  (recvs + 1) x 256          a ControlChannel: receives for control
//                                       messages and write_imm notifications,
//                                       one send area
// An invocation occupies (worker, slot) from its post until its result and its
// write completion both arrived; results are matched by slot (the immediate)
// and checked against the invocation id in the ResultHeader.
#include <rfaas/executor.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "logging.hpp"
#include "protocol/control_channel.hpp"
#include "protocol/protocol.hpp"
#include "protocol/rm_messages.hpp"
#include "registry.hpp"

namespace rfaas {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr size_t kCtl = proto::kControlMessageMax;
/// Receives posted per worker beyond one per slot: Ready, Shutdown and the
/// BufferAdvertisement can arrive while every slot's notification is pending.
constexpr uint32_t kExtraRecvs = 8;
/// Manager connection: AllocationResponse, Shutdown, goodbye.
constexpr uint32_t kManagerRecvs = 4;

// Send-queue contexts: a slot write carries its slot index in the low bits.
constexpr uint64_t kWriteCtx = 1ull << 62;
constexpr uint64_t kControlCtx = 1ull << 61;

status from_wire(proto::ErrorCode c) { return static_cast<status>(c); }

/// The status a failed channel call stands for; `wire` explains a bad message.
status from_channel(proto::ChannelStatus s, const proto::WireResult &wire) {
  switch (s) {
  case proto::ChannelStatus::Ok:
    return status::ok;
  case proto::ChannelStatus::Timeout:
    return status::timeout;
  case proto::ChannelStatus::Closed:
  case proto::ChannelStatus::Shutdown:
    return status::closed;
  case proto::ChannelStatus::BadMessage:
  case proto::ChannelStatus::Unexpected:
    return from_wire(proto::reply_code(wire.error));
  case proto::ChannelStatus::SendFailed:
    break;
  }
  return status::network_error;
}

status from_rdmalib(const rdmalib::Error &e) {
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

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

size_t round8(size_t n) { return (n + 7) & ~size_t(7); }

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
};

struct Worker {
  // Buffers before the connection: members die in reverse order, and closing
  // the connection drains completions into posted receives.
  rdmalib::Buffer<char> results, staging;
  proto::ControlChannel control;
  rdmalib::Connection conn;
  rdmalib::Operations ops;
  /// The worker's input slots (its BufferAdvertisement).
  proto::BufferDescriptor input;
  bool advertised = false;
  bool ready = false;
  bool alive = false;
  status end_reason = status::closed;
  uint32_t writes_pending = 0;
  std::vector<Slot> slots;
};

} // namespace

struct executor::impl {
  impl(const device &dev, const timeouts &t)
      : deadlines(t), fabric(open_fabric(dev)), caps(fabric.capabilities()),
        listener(open_listener(fabric, dev)) {}

  static rdmalib::Fabric open_fabric(const device &dev) {
    try {
      return rdmalib::Fabric(dev);
    } catch (const rdmalib::Error &e) {
      throw Error(phase::configuration, "", from_rdmalib(e),
                  "cannot open device \"" + dev.name + "\": " + e.what());
    }
  }
  static rdmalib::Listener open_listener(rdmalib::Fabric &f, const device &dev) {
    try {
      return rdmalib::Listener(f, rdmalib::Address{dev.ip_address, dev.port});
    } catch (const rdmalib::Error &e) {
      throw Error(phase::configuration, "", from_rdmalib(e),
                  "cannot listen for workers on " + dev.ip_address + ":" +
                      std::to_string(dev.port) + ": " + e.what());
    }
  }

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
  uint32_t rr = 0;
  rdmalib::Completion comp_buf[16]; // progress()'s, see there
  cold_start cold;

  // ---- setup helpers ----------------------------------------------------------

  [[noreturn]] void fail(phase ph, status st, const std::string &what) {
    throw Error(ph, manager_name, st, what);
  }

  Clock::time_point in(milliseconds d) const { return Clock::now() + d; }

  /// Fail the setup phase `ph` after a channel call to worker `index` failed.
  [[noreturn]] void fail_worker(phase ph, uint32_t index, proto::ChannelStatus s,
                                const proto::WireResult &wire, const Worker &w) {
    std::string who = "worker " + std::to_string(index);
    switch (s) {
    case proto::ChannelStatus::Timeout:
      fail(ph, status::timeout, who + " sent nothing in time");
    case proto::ChannelStatus::Closed:
    case proto::ChannelStatus::Shutdown:
      fail(ph, status::closed, who + " closed its connection");
    case proto::ChannelStatus::SendFailed:
      fail(ph, status::network_error, who + ": " + w.control.last_error());
    default:
      fail(ph, from_channel(s, wire), who + ": " + proto::describe(wire));
    }
  }

  // ---- allocate ---------------------------------------------------------------

  void allocate(const server &m, const allocation_options &o) {
    if (allocated)
      throw Error(phase::usage, m.endpoint(), status::invalid_argument,
                  "this executor already holds an allocation; deallocate() first");
    manager_name = m.endpoint();
    const Clock::time_point t0 = Clock::now();
    cold = cold_start{};

    if (o.cores == 0 || o.cores > proto::kMaxWorkers)
      fail(phase::configuration, status::invalid_argument, "cores must be 1..256");
    if (o.slots == 0 || o.slots > proto::kMaxSlots)
      fail(phase::configuration, status::invalid_argument, "slots must be 1..256");
    if (o.max_input_size > proto::kMaxSlotSize - 64 || o.max_output_size > proto::kMaxSlotSize - 64)
      fail(phase::configuration, status::invalid_argument, "max input/output size exceeds 1 GiB");

    // The library, registered for the worker's RDMA read.
    std::ifstream f(o.library, std::ios::binary);
    if (!f)
      fail(phase::configuration, status::invalid_argument,
           "cannot read the function library \"" + o.library + "\"");
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() > proto::kMaxLibrarySize)
      fail(phase::configuration, status::invalid_argument,
           "the function library \"" + o.library + "\" is empty or larger than 1 GiB");
    rdmalib::Buffer<char> library(fabric, bytes.size(), rdmalib::AccessRemoteRead);
    std::memcpy(library.data(), bytes.data(), bytes.size());
    const uint64_t checksum = proto::library_checksum(bytes.data(), bytes.size());
    std::string libname = o.library.substr(o.library.find_last_of('/') + 1);
    if (libname.size() >= proto::kNameCapacity)
      libname.resize(proto::kNameCapacity - 1);

    nworkers = o.cores;
    nslots = o.slots;
    max_input = o.max_input_size;
    max_output = o.max_output_size;
    input_slot = static_cast<uint32_t>(proto::kInvocationHeaderSize + round8(max_input));
    result_slot = static_cast<uint32_t>(proto::kResultHeaderSize + round8(max_output));
    nrecv = nslots + kExtraRecvs;

    // Clean up whatever exists if any step below throws.
    struct Guard {
      impl *self;
      bool armed = true;
      ~Guard() {
        if (armed)
          self->teardown(false);
      }
    } guard{this};

    workers.clear();
    workers.resize(nworkers);
    std::vector<proto::BufferDescriptor> descriptors(nworkers);
    try {
      for (uint32_t i = 0; i < nworkers; ++i) {
        Worker &w = workers[i];
        w.results = rdmalib::Buffer<char>(fabric, size_t(nslots) * result_slot,
                                          rdmalib::AccessRemoteWrite | rdmalib::AccessRemoteRead);
        w.staging =
            rdmalib::Buffer<char>(fabric, size_t(nslots) * input_slot, rdmalib::AccessLocal);
        w.slots.assign(nslots, Slot{});
        descriptors[i].buffer = w.results.remote();
        descriptors[i].worker = i;
        descriptors[i].slots = nslots;
        descriptors[i].slot_size = result_slot;
      }
    } catch (const rdmalib::Error &e) {
      fail(phase::configuration, status::network_error,
           std::string("cannot register client buffers: ") + e.what());
    }

    // 1. Connect to the manager with our lease.
    proto::ClientHello hello;
    hello.lease_id = o.lease_id;
    std::memcpy(hello.token.bytes, o.token.data(), proto::kTokenSize);
    uint8_t hello_bytes[sizeof(proto::ClientHello)];
    proto::encode(hello, hello_bytes, sizeof hello_bytes);
    rdmalib::ConnectionOptions mopts;
    mopts.recv_depth = kManagerRecvs;
    mopts.send_depth = 4;
    // A refusal can be transient (see ConnectionOptions::refused_retries); a
    // manager that is really absent still fails within ~150 ms.
    mopts.refused_retries = 3;
    try {
      manager =
          rdmalib::Connection::connect(fabric, rdmalib::Address{m.address, m.port}, hello_bytes,
                                       sizeof hello_bytes, deadlines.connect, mopts);
    } catch (const rdmalib::Error &e) {
      fail(phase::connect, from_rdmalib(e), e.what());
    }
    {
      proto::ConnectReply reply;
      const std::vector<uint8_t> &pd = manager.peer_private_data();
      proto::WireResult r = proto::decode(pd.data(), pd.size(), reply);
      if (!r)
        fail(phase::connect, from_wire(proto::reply_code(r.error)),
             "unreadable ConnectReply: " + proto::describe(r));
      if (reply.status != proto::ErrorCode::Ok)
        fail(phase::connect, from_wire(reply.status), "the executor manager refused the client");
    }
    cold.connected = Clock::now() - t0;
    rfaas::logger().debug(
        "allocate: connected to the executor manager after {} ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(cold.connected).count());

    // 2. AllocationRequest + our result descriptors; AllocationResponse.
    const size_t req_size = proto::allocation_request_size(nworkers);
    try {
      proto::ControlOptions copts;
      copts.receives = kManagerRecvs;
      copts.send_size = std::max(req_size, kCtl);
      copts.send_context = kControlCtx;
      manager_channel = proto::ControlChannel(fabric, manager, copts);
    } catch (const std::exception &e) {
      fail(phase::allocation, status::network_error, e.what());
    }
    if (o.lease_cores != 0) {
      // A node that works with a resource manager checks the lease first.
      proto::LeaseProof proof;
      proof.lease_id = o.lease_id;
      proof.expiry_ms = o.lease_expiry_ms;
      proof.memory_mib = o.lease_memory_mib;
      proof.cores = o.lease_cores;
      std::memcpy(proof.token.bytes, o.token.data(), proto::kTokenSize);
      if (!proto::set_text(proof.client, o.lease_client) ||
          manager_channel.send(proof, Clock::now() + deadlines.connect) != proto::ChannelStatus::Ok)
        fail(phase::allocation, status::network_error, "cannot present the lease (LeaseProof)");
    }
    proto::AllocationRequest req;
    req.cores = nworkers;
    req.memory_mib = o.memory_mib;
    req.hot_timeout_ms = o.hot_timeout_ms;
    req.input_slots = nslots;
    req.input_slot_size = input_slot;
    req.client_port = listener.address().port;
    req.library_size = bytes.size();
    req.library_checksum = checksum;
    if (!proto::set_text(req.client_host, listener.address().host))
      fail(phase::allocation, status::invalid_argument, "client host name too long");
    proto::WireResult wr = proto::encode(req, descriptors, manager_channel.send_area(),
                                         manager_channel.options().send_size);
    if (!wr)
      fail(phase::allocation, status::invalid_argument,
           "cannot encode the AllocationRequest: " + proto::describe(wr));
    proto::AllocationResponse resp;
    proto::WireResult rw;
    switch (proto::ChannelStatus cs = manager_channel.send_encoded_and_await(
                wr.size, resp, in(deadlines.allocation), &rw)) {
    case proto::ChannelStatus::Ok:
      break;
    case proto::ChannelStatus::Timeout:
      fail(phase::allocation, status::timeout, "no AllocationResponse in time");
    case proto::ChannelStatus::Closed:
    case proto::ChannelStatus::Shutdown:
      fail(phase::allocation, status::closed,
           "the executor manager closed the connection before answering");
    case proto::ChannelStatus::SendFailed:
      fail(phase::allocation, status::network_error,
           std::string("the AllocationRequest could not be sent: ") + manager_channel.last_error());
    default:
      fail(phase::allocation, from_channel(cs, rw),
           "unreadable AllocationResponse: " + proto::describe(rw));
    }
    if (resp.status != proto::ErrorCode::Ok)
      fail(phase::allocation, from_wire(resp.status), std::string(proto::get_text(resp.message)));
    if (resp.workers != nworkers)
      fail(phase::allocation, status::bad_request,
           "the manager granted " + std::to_string(resp.workers) + " workers, not " +
               std::to_string(nworkers));
    allocation_id = resp.allocation_id;
    cold.allocated = Clock::now() - t0;
    rfaas::logger().debug(
        "allocate: allocation granted after {} ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(cold.allocated).count());

    // 3. Workers connect back and advertise their input slots.
    accept_workers(Clock::now() + deadlines.workers);
    cold.workers_connected = Clock::now() - t0;
    rfaas::logger().debug(
        "allocate: {} worker(s) connected after {} ms", workers.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(cold.workers_connected).count());

    // 4. Code: worker 0 reads the library from `library`; everyone says Ready.
    Worker &w0 = workers[0];
    try {
      w0.conn.attach(library.region());
    } catch (const rdmalib::Error &e) {
      fail(phase::code, status::network_error, e.what());
    }
    proto::CodeHeader code;
    code.library_size = bytes.size();
    code.checksum = checksum;
    code.source = library.remote();
    proto::set_text(code.name, libname);
    proto::ChannelStatus cs = w0.control.send(code, in(deadlines.ready));
    if (cs != proto::ChannelStatus::Ok)
      fail(phase::code, from_channel(cs, {}), "the CodeHeader could not be sent to worker 0");
    cold.code_shipped = Clock::now() - t0;
    rfaas::logger().debug(
        "allocate: library {} ({} bytes) offered after {} ms", libname, bytes.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(cold.code_shipped).count());
    collect_ready(Clock::now() + deadlines.ready);
    cold.ready = Clock::now() - t0;
    rfaas::logger().debug(
        "allocate: ready after {} ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(cold.ready).count());

    for (Worker &w : workers)
      w.alive = true;
    allocated = true;
    guard.armed = false;
  }

  void accept_workers(Clock::time_point deadline) {
    uint32_t connected = 0;
    rdmalib::ConnectionOptions opts;
    opts.send_depth = nslots + kExtraRecvs;
    opts.recv_depth = nrecv;
    while (connected < nworkers) {
      int left = ms_left(deadline);
      rdmalib::ConnectionRequest request;
      try {
        if (left == 0)
          throw rdmalib::Error(rdmalib::ErrorKind::Timeout, "deadline");
        request = listener.next_request(milliseconds(left));
      } catch (const rdmalib::Error &e) {
        fail(phase::workers, from_rdmalib(e),
             std::to_string(connected) + " of " + std::to_string(nworkers) +
                 " workers connected in time (" + e.what() + ")");
      }
      proto::WorkerHello hello;
      const std::vector<uint8_t> &pd = request.private_data();
      proto::WireResult r = proto::decode(pd.data(), pd.size(), hello);
      proto::ConnectReply reply;
      if (!r)
        reply.status = proto::reply_code(r.error);
      else if (hello.allocation_id != allocation_id || hello.workers != nworkers ||
               workers[hello.worker].conn.is_open())
        reply.status = proto::ErrorCode::LeaseInvalid; // a stranger or a duplicate
      uint8_t reply_bytes[sizeof(proto::ConnectReply)];
      proto::encode(reply, reply_bytes, sizeof reply_bytes);
      if (reply.status != proto::ErrorCode::Ok) {
        // Accept to deliver the status (a bare reject says nothing), then close.
        try {
          request.accept(reply_bytes, sizeof reply_bytes, milliseconds(std::max(left, 1))).close();
        } catch (const rdmalib::Error &) {
        }
        rfaas::logger().warn("refused a worker connection: {}", proto::to_string(reply.status));
        continue;
      }
      Worker &w = workers[hello.worker];
      try {
        w.conn =
            request.accept(reply_bytes, sizeof reply_bytes, milliseconds(std::max(left, 1)), opts);
        w.conn.attach(w.results.region());
        w.conn.attach(w.staging.region());
        proto::ControlOptions copts;
        copts.receives = nrecv;
        copts.send_context = kControlCtx;
        w.control = proto::ControlChannel(fabric, w.conn, copts);
        // Slot traffic seen while a control message is awaited (results and
        // write completions at deallocation) is accounted, not lost.
        w.control.on_data([this, &w](const rdmalib::Completion &c) {
          if (c.kind == rdmalib::OpKind::RemoteWriteImm)
            on_result(w, c.imm);
          else if (c.context & kWriteCtx)
            on_write_done(w, c);
        });
      } catch (const rdmalib::Error &e) {
        fail(phase::workers, from_rdmalib(e),
             "accepting worker " + std::to_string(hello.worker) + ": " + e.what());
      } catch (const std::exception &e) { // the channel's receives could not be posted
        fail(phase::workers, status::network_error,
             "accepting worker " + std::to_string(hello.worker) + ": " + e.what());
      }
      w.ops = w.conn.ops();
      ++connected;
    }
    // Every worker sends its BufferAdvertisement right after connecting.
    for (uint32_t i = 0; i < nworkers; ++i) {
      Worker &w = workers[i];
      proto::BufferAdvertisement adv;
      proto::WireResult r;
      if (proto::ChannelStatus cs = w.control.await(adv, deadline, &r);
          cs != proto::ChannelStatus::Ok)
        fail_worker(phase::workers, i, cs, r, w);
      if (adv.descriptor.slots < nslots || adv.descriptor.slot_size < input_slot)
        fail(phase::workers, status::bad_request,
             "worker " + std::to_string(i) + " advertised fewer or smaller input slots than asked");
      w.input = adv.descriptor;
      w.advertised = true;
    }
  }

  void collect_ready(Clock::time_point deadline) {
    // Worker 0 reads the library from us: on manual-progress fabrics that read
    // only moves while we poll its connection, so wait on worker 0 first.
    for (uint32_t i = 0; i < nworkers; ++i) {
      Worker &w = workers[i];
      proto::Ready ready;
      proto::WireResult r;
      if (proto::ChannelStatus cs = w.control.await(ready, deadline, &r);
          cs != proto::ChannelStatus::Ok)
        fail_worker(phase::code, i, cs, r, w);
      if (ready.status != proto::ErrorCode::Ok)
        fail(phase::code, from_wire(ready.status),
             "worker " + std::to_string(i) + ": " + std::string(proto::get_text(ready.message)));
      w.ready = true;
    }
  }

  // ---- deallocate ---------------------------------------------------------------

  /// Close everything; with `polite`, tell workers and manager first.
  void teardown(bool polite) noexcept {
    proto::Shutdown bye;
    bye.allocation_id = allocation_id;
    bye.reason = proto::ErrorCode::Ok;
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker &w = workers[i];
      if (polite && w.alive && w.conn.is_open()) {
        proto::ChannelStatus cs = w.control.send(bye, in(deadlines.shutdown));
        if (cs != proto::ChannelStatus::Ok)
          rfaas::logger().warn("deallocate: Shutdown to worker {} of {}: {}", i, manager_name,
                               proto::to_string(cs));
      }
      for (Slot &s : w.slots)
        if (s.state == SlotState::InFlight && s.source)
          --s.source->in_flight;
      w.conn.close();
    }
    if (polite && manager.is_open()) {
      proto::ChannelStatus cs = manager_channel.send(bye, in(deadlines.shutdown));
      if (cs != proto::ChannelStatus::Ok)
        rfaas::logger().warn("deallocate: Shutdown to the manager {}: {}", manager_name,
                             proto::to_string(cs));
    }
    manager.close();
    workers.clear();
    manager = rdmalib::Connection();
    manager_channel = proto::ControlChannel();
    allocated = false;
    nworkers = 0;
    ++generation;
  }

  // ---- the data path ------------------------------------------------------------

  /// A worker ended (closed, Shutdown, failed completion): every invocation on
  /// it fails with `why`, later posts fail with `closed`.
  void worker_lost(Worker &w, status why) noexcept {
    if (!w.alive)
      return;
    w.alive = false;
    w.end_reason = why;
    for (Slot &s : w.slots) {
      if (s.state != SlotState::InFlight)
        continue;
      if (!s.result_in)
        s.res = result{status::closed, 0, 0};
      s.result_in = true;
      s.write_done = true;
      finish(s);
    }
  }

  void finish(Slot &s) noexcept {
    if (s.source) {
      --s.source->in_flight;
      s.source = nullptr;
    }
    s.state = s.abandoned ? SlotState::Free : SlotState::Done;
    s.abandoned = false;
  }

  void on_write_done(Worker &w, const rdmalib::Completion &c) noexcept {
    uint32_t s = static_cast<uint32_t>(c.context & 0xFFFF);
    if (s >= w.slots.size())
      return;
    --w.writes_pending;
    Slot &sl = w.slots[s];
    sl.write_done = true;
    if (c.status != rdmalib::Status::Ok && !sl.result_in) {
      sl.res = result{status::network_error, 0, 0};
      sl.result_in = true;
    }
    if (sl.state == SlotState::InFlight && sl.result_in)
      finish(sl);
  }

  void on_result(Worker &w, uint32_t imm) noexcept {
    proto::Immediate im = proto::parse_immediate(imm);
    if (im.slot >= w.slots.size())
      return;
    Slot &sl = w.slots[im.slot];
    if (sl.state != SlotState::InFlight || sl.result_in || !proto::immediate_matches(imm, sl.id))
      return; // stale or foreign: nothing waits for it
    const char *at = w.results.data() + size_t(im.slot) * result_slot;
    proto::ResultHeader h;
    proto::WireResult r = proto::decode(at, result_slot, h);
    result res;
    if (!r) {
      // The header is unusable; the immediate still says what happened.
      res.status = im.status != proto::ErrorCode::Ok ? from_wire(im.status) : status::bad_request;
    } else if (h.invocation_id != sl.id && !proto::immediate_matches(imm, h.invocation_id)) {
      res.status = status::bad_request;
    } else {
      res.status = from_wire(h.status);
      res.detail = h.detail;
      if (h.status == proto::ErrorCode::Ok) {
        if (sl.abandoned) {
          // Nobody reads the output any more.
        } else if (h.output_size > sl.out.size) {
          res.status = status::output_too_large;
          res.detail = h.output_size;
        } else {
          if (h.output_size)
            std::memcpy(sl.out.data, at + proto::kResultHeaderSize, h.output_size);
          res.output_size = h.output_size;
        }
      }
    }
    sl.res = res;
    sl.result_in = true;
    if (sl.write_done)
      finish(sl);
  }

  /// Reap what arrived on one worker's connection. No allocation, no lock.
  /// With `block_ms` > 0, sleeps up to that long in the provider for the next
  /// completion on the queue `block_on` instead of polling it (for providers
  /// whose own threads move the data; see complete()).
  void progress(Worker &w, int block_ms = 0,
                rdmalib::Queue block_on = rdmalib::Queue::Recv) noexcept {
    // A member, not a local: a local array of Completion is value-initialised
    // on every call, and this runs once per spin of the busy-poll loop.
    rdmalib::Completion *c = comp_buf;
    // What queue `q` holds: polled, or waited for when it is the one to block on.
    auto fetch = [&](rdmalib::Queue q) -> rdmalib::WaitResult {
      if (block_ms > 0 && block_on == q)
        return w.ops.wait(q, c, 16, block_ms);
      return {w.ops.poll(q, c, 16), rdmalib::Status::Ok};
    };
    rdmalib::WaitResult got = fetch(rdmalib::Queue::Recv);
    if (got.status == rdmalib::Status::Closed) {
      worker_lost(w, status::closed);
      return;
    }
    size_t n = got.count;
    for (size_t i = 0; i < n; ++i) {
      if (c[i].status != rdmalib::Status::Ok || c[i].kind == rdmalib::OpKind::PeerClosed) {
        worker_lost(w, status::closed);
        return;
      }
      if (c[i].kind == rdmalib::OpKind::RemoteWriteImm) {
        on_result(w, c[i].imm);
        if (caps.write_consumes_receive)
          w.control.recycle(c[i]);
      } else if (c[i].kind == rdmalib::OpKind::Recv && w.control.owns(c[i])) {
        proto::ChannelStatus cs = w.control.take(c[i]).status;
        if (cs == proto::ChannelStatus::Shutdown || cs == proto::ChannelStatus::Closed) {
          // Results sent before the Shutdown have been processed already
          // (same connection, in order): what is still in flight is lost.
          worker_lost(w, status::closed);
          return;
        }
      }
    }
    if (w.writes_pending) {
      n = fetch(rdmalib::Queue::Send).count;
      for (size_t i = 0; i < n; ++i)
        if (c[i].context & kWriteCtx)
          on_write_done(w, c[i]);
    }
  }

  /// Post `input` for `function` into (w, s). On failure the slot stays free
  /// and the status is returned.
  result post(uint32_t wi, uint32_t s, uint32_t function, const_buffer input,
              mutable_buffer output) noexcept {
    Worker &w = workers[wi];
    if (!w.alive)
      return result{w.end_reason == status::ok ? status::closed : w.end_reason, 0, 0};
    if (input.size > max_input)
      return result{status::payload_too_large, 0, max_input};
    Slot &sl = w.slots[s];
    const uint64_t id = ++next_id;

    // Zero copy when the input is the start of one of our registered blocks
    // and its header room is not in use by another invocation.
    detail::Registration *reg = registry.find(input.data);
    rdmalib::LocalRef src;
    char *header_at;
    if (reg && reg->in_flight == 0 && input.size <= reg->user_bytes) {
      header_at =
          static_cast<char *>(const_cast<void *>(input.data)) - proto::kInvocationHeaderSize;
      src = reg->region.local(detail::Registration::kPrefix - proto::kInvocationHeaderSize,
                              proto::kInvocationHeaderSize + input.size);
      ++reg->in_flight;
    } else {
      reg = nullptr;
      header_at = w.staging.data() + size_t(s) * input_slot;
      if (input.size)
        std::memcpy(header_at + proto::kInvocationHeaderSize, input.data, input.size);
      src =
          w.staging.local_bytes(size_t(s) * input_slot, proto::kInvocationHeaderSize + input.size);
    }
    proto::InvocationHeader h;
    h.invocation_id = id;
    h.function = function;
    h.payload_size = static_cast<uint32_t>(input.size);
    h.slot = static_cast<uint16_t>(s);
    proto::encode(h, header_at, input_slot);

    rdmalib::Status st = w.ops.write_imm(src, w.input.buffer, uint64_t(s) * w.input.slot_size,
                                         proto::make_immediate(s, id), kWriteCtx | s);
    if (st != rdmalib::Status::Ok) {
      if (reg)
        --reg->in_flight;
      if (st == rdmalib::Status::Closed) {
        worker_lost(w, status::closed);
        return result{status::closed, 0, 0};
      }
      return result{st == rdmalib::Status::Timeout ? status::timeout : status::network_error, 0, 0};
    }
    ++w.writes_pending;
    sl.state = SlotState::InFlight;
    sl.result_in = false;
    sl.write_done = false;
    sl.abandoned = false;
    sl.id = id;
    sl.out = output;
    sl.source = reg;
    sl.res = result{};
    return sl.res;
  }

  /// Busy-poll (or wait, see below) until (w, s) is Done or the deadline
  /// passes; frees the slot.
  result complete(uint32_t wi, uint32_t s, Clock::time_point deadline) noexcept {
    Worker &w = workers[wi];
    Slot &sl = w.slots[s];
    uint32_t spins = 0;
    // Where the provider's own threads move the data, a spinning caller takes
    // their core: sleep in the provider for what is still missing instead.
    const bool block = caps.progress == rdmalib::Progress::Thread;
    while (sl.state == SlotState::InFlight) {
      if (block)
        progress(w, 10, sl.result_in ? rdmalib::Queue::Send : rdmalib::Queue::Recv);
      else
        progress(w);
      // Reading the clock costs more than a poll: look at it now and then
      // (after every wait when blocking: each may take 10 ms).
      if (block || ++spins == 64) {
        spins = 0;
        if (Clock::now() > deadline && sl.state == SlotState::InFlight) {
          // The slot stays busy until the late result arrives, but nobody
          // reads it: the caller's output buffer may be gone by then.
          sl.abandoned = true;
          sl.out = mutable_buffer{};
          return result{status::timeout, 0, 0};
        }
      }
    }
    sl.state = SlotState::Free;
    return sl.res;
  }

  /// A free (worker, slot), round robin over workers first. False if none.
  bool find_free(uint32_t &wi, uint32_t &s) noexcept {
    const uint32_t total = nworkers * nslots;
    for (uint32_t k = 0; k < total; ++k) {
      uint32_t g = (rr + k) % total;
      uint32_t w = g % nworkers, slot = g / nworkers;
      if (workers[w].slots[slot].state == SlotState::Free) {
        wi = w;
        s = slot;
        rr = (g + 1) % total;
        return true;
      }
    }
    return false;
  }

  void require_allocated() const {
    if (!allocated)
      throw Error(phase::usage, manager_name, status::invalid_argument,
                  "the executor holds no allocation; call allocate() first");
  }

  result execute(std::string_view fn, const_buffer in, mutable_buffer out, milliseconds timeout) {
    require_allocated();
    uint32_t wi, s;
    if (!find_free(wi, s)) {
      for (Worker &w : workers)
        progress(w);
      if (!find_free(wi, s))
        return result{status::busy, 0, 0};
    }
    // The clock is read after posting: the invocation is on its way meanwhile
    // (a clock read costs ~40 ns in a VM, a sizeable part of a shm round trip).
    result r = post(wi, s, proto::function_hash(fn), in, out);
    if (workers[wi].slots[s].state == SlotState::InFlight)
      r = complete(wi, s, Clock::now() + timeout);
    if (r.status == status::unknown_function)
      warn_unknown_function(fn);
    return r;
  }

  /// The wire carries a hash of the name; the caller needs the name itself.
  static void warn_unknown_function(std::string_view fn) {
    rfaas::logger().warn("unknown_function: \"{}\" is not a function of the shipped library "
                         "(name hash {:08x}); check the name against the library's exports "
                         "(nm -D --defined-only LIBRARY)",
                         fn, proto::function_hash(fn));
  }

  std::vector<result> execute_parallel(std::string_view fn, const std::vector<const_buffer> &in,
                                       const std::vector<mutable_buffer> &out) {
    require_allocated();
    std::vector<result> results(in.size());
    if (in.size() != out.size() || in.empty()) {
      for (result &r : results)
        r.status = status::invalid_argument;
      return results;
    }
    const uint32_t hash = proto::function_hash(fn);
    const Clock::time_point deadline = Clock::now() + deadlines.invocation;
    // Which input each (worker, slot) currently runs; SIZE_MAX = none of ours.
    std::vector<size_t> owner(size_t(nworkers) * nslots, SIZE_MAX);
    size_t next = 0, outstanding = 0;
    bool expired = false;
    uint32_t spins = 0;
    while (next < in.size() || outstanding > 0) {
      // Fill free slots.
      uint32_t wi, s;
      while (next < in.size() && !expired && find_free(wi, s)) {
        result r = post(wi, s, hash, in[next], out[next]);
        if (workers[wi].slots[s].state == SlotState::InFlight) {
          owner[size_t(s) * nworkers + wi] = next;
          ++outstanding;
        } else {
          results[next] = r;
        }
        ++next;
      }
      if (outstanding == 0 && (next == in.size() || expired))
        break;
      for (uint32_t w = 0; w < nworkers; ++w) {
        progress(workers[w]);
        for (uint32_t k = 0; k < nslots; ++k) {
          size_t &o = owner[size_t(k) * nworkers + w];
          if (o != SIZE_MAX && workers[w].slots[k].state == SlotState::Done) {
            results[o] = workers[w].slots[k].res;
            workers[w].slots[k].state = SlotState::Free;
            o = SIZE_MAX;
            --outstanding;
          }
        }
      }
      if (++spins == 64) {
        spins = 0;
        if (Clock::now() > deadline) {
          expired = true;
          for (uint32_t w = 0; w < nworkers; ++w)
            for (uint32_t k = 0; k < nslots; ++k) {
              size_t &o = owner[size_t(k) * nworkers + w];
              if (o == SIZE_MAX)
                continue;
              Slot &sl = workers[w].slots[k];
              sl.abandoned = true;
              sl.out = mutable_buffer{};
              results[o] = result{status::timeout, 0, 0};
              o = SIZE_MAX;
              --outstanding;
            }
          for (; next < in.size(); ++next)
            results[next] = result{status::timeout, 0, 0};
        }
      }
    }
    if (std::any_of(results.begin(), results.end(),
                    [](const result &r) { return r.status == status::unknown_function; }))
      warn_unknown_function(fn);
    return results;
  }
};

// ---- executor -----------------------------------------------------------------------

executor::executor(const device &dev, const timeouts &deadlines)
    : impl_(std::make_shared<impl>(dev, deadlines)) {}

executor::~executor() { deallocate(); }
executor::executor(executor &&) noexcept = default;
executor &executor::operator=(executor &&o) noexcept {
  if (this != &o) {
    deallocate();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

void executor::allocate(const server &manager, const allocation_options &options) {
  impl_->allocate(manager, options);
}

void executor::allocate(const server &manager, uint32_t cores, uint32_t memory_mib,
                        const std::string &library, int32_t hot_timeout_ms) {
  allocation_options o;
  o.cores = cores;
  o.memory_mib = memory_mib;
  o.library = library;
  o.hot_timeout_ms = hot_timeout_ms;
  allocate(manager, o);
}

void executor::deallocate() noexcept {
  if (impl_ && impl_->allocated)
    impl_->teardown(true);
}

bool executor::allocated() const noexcept { return impl_ && impl_->allocated; }
uint32_t executor::workers() const noexcept { return impl_ ? impl_->nworkers : 0; }
uint32_t executor::slots() const noexcept { return impl_ ? impl_->nslots : 0; }
uint64_t executor::allocation_id() const noexcept { return impl_ ? impl_->allocation_id : 0; }
uint32_t executor::max_input_size() const noexcept { return impl_ ? impl_->max_input : 0; }
uint32_t executor::max_output_size() const noexcept { return impl_ ? impl_->max_output : 0; }
const cold_start &executor::cold_start_times() const noexcept { return impl_->cold; }
std::string executor::describe_network() const { return impl_->fabric.describe(); }

result executor::execute(std::string_view function, const_buffer input, mutable_buffer output) {
  return impl_->execute(function, input, output, impl_->deadlines.invocation);
}

result executor::execute(std::string_view function, const_buffer input, mutable_buffer output,
                         std::chrono::milliseconds timeout) {
  return impl_->execute(function, input, output, timeout);
}

std::future<result> executor::async(std::string_view function, const_buffer input,
                                    mutable_buffer output) {
  impl_->require_allocated();
  auto ready = [](result r) {
    std::promise<result> p;
    p.set_value(r);
    return p.get_future();
  };
  impl &self = *impl_;
  uint32_t wi, s;
  if (!self.find_free(wi, s)) {
    for (Worker &w : self.workers)
      self.progress(w);
    if (!self.find_free(wi, s))
      return ready(result{status::busy, 0, 0});
  }
  result r = self.post(wi, s, protocol::function_hash(function), input, output);
  if (self.workers[wi].slots[s].state != SlotState::InFlight)
    return ready(r);
  // Deferred: get() polls on the caller's thread. The weak pointer and the
  // generation make a future outliving its allocation (or executor) harmless.
  std::weak_ptr<impl> weak = impl_;
  const uint64_t gen = self.generation;
  const milliseconds timeout = self.deadlines.invocation;
  return std::async(std::launch::deferred, [weak, gen, wi, s, timeout]() {
    std::shared_ptr<impl> p = weak.lock();
    if (!p || p->generation != gen)
      return result{status::closed, 0, 0};
    return p->complete(wi, s, Clock::now() + timeout);
  });
}

std::vector<result> executor::execute_parallel(std::string_view function,
                                               const std::vector<const_buffer> &inputs,
                                               const std::vector<mutable_buffer> &outputs) {
  return impl_->execute_parallel(function, inputs, outputs);
}

void *executor::allocate_registered(size_t bytes) {
  using detail::Registration;
  if (bytes > (size_t(1) << 40))
    throw std::bad_alloc();
  size_t total = (Registration::kPrefix + bytes + 4095) & ~size_t(4095);
  void *base = std::aligned_alloc(4096, total);
  if (!base)
    throw std::bad_alloc();
  auto *r = new (std::nothrow) Registration;
  if (!r) {
    std::free(base);
    throw std::bad_alloc();
  }
  try {
    r->region = rdmalib::MemoryRegion(impl_->fabric, base, total, rdmalib::AccessLocal);
  } catch (const rdmalib::Error &e) {
    rfaas::logger().error("allocator: {}", e.what());
    delete r;
    std::free(base);
    throw std::bad_alloc();
  }
  r->base = base;
  r->user_bytes = bytes;
  void *user = static_cast<char *>(base) + Registration::kPrefix;
  if (!impl_->registry.insert(user, r)) {
    delete r;
    std::free(base);
    throw std::bad_alloc();
  }
  return user;
}

void executor::free_registered(void *p) noexcept {
  if (!p || !impl_)
    return;
  detail::Registration *r = impl_->registry.erase(p);
  if (!r)
    return;
  void *base = r->base;
  delete r; // deregisters before the memory goes
  std::free(base);
}

} // namespace rfaas
